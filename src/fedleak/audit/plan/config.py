"""What the user brings to an audit: model, checkpoint, data, protocol, defenses, sweep.

One :class:`AuditConfig` is filled from CLI flags, from ``--config audit.yaml`` (the same keys, with
``_`` or ``-``), or from keyword arguments of :func:`fedleak.audit`; :meth:`AuditConfig.resolve`
checks every value once, at the boundary, and returns the :class:`Plan` the audit runs. Keys left
unset mean the embedded default (``fedleak audit`` with no argument): digits, ``femnist-cnn``, a
FedSGD client of 4 images and a FedAvg client of 10 images (5 epochs × 2 batches, lr 0.004).

Defense specs (``--defense``, repeatable; ``defense:`` a string or a list):
``gaussian:σ``, ``laplacian:b``, ``pruning:p`` (and the paper names ``dp_gaussian_σ`` …; optional
``,clip=C``), ``dp-sgd:clip=C,noise=σ`` (optionally ``,rounds=R,sample_rate=q,delta=δ``, the
federation's accounting parameters, also top-level keys) and ``secagg:K``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Optional

from ...config.boundary import MAX_CLIENTS, MAX_RATE, MAX_SAMPLES, MAX_SEED, finite_float, settings_model, validate
from ...config.specs import names_tuple, parse_spec, split_names, split_sweep
from ...errors import FedleakError, check_options, unknown_choice
from ...fl.accounting import check_privacy
from ...fl.defenses import Defense
from ...types import Protocol
from .default import DEFAULT_BINS, DEFAULT_DATA, DEFAULT_MODEL, DEFAULT_PROTOCOLS

#: knob -> (type, what it changes)
KNOBS = {
    "epochs": (int, "local epochs E (FedAvg)"),
    "batch_size": (int, "local batch size m (FedAvg)"),
    "lr": (float, "client learning rate η"),
    "samples": (int, "samples per client N"),
    "defense": (float, "strength of the defense: DP-SGD σ, Gaussian σ, Laplacian b, pruning p (0 = off)"),
    "secagg": (int, "clients K summed by secure aggregation (1 = off)"),
    "lora": (int, "LoRA rank R of a language model's adapters (--data text)"),
}
#: the largest value of each sweep knob (beyond it later arithmetic overflows or memory runs out)
SWEEP_MAX = {"epochs": 10_000, "batch_size": 1_000_000, "lr": 1e6, "samples": 1_000_000, "defense": 1e6,
             "secagg": 100_000, "lora": 4096}
SHORT_LABELS = {"epochs": "local epochs E", "batch_size": "local batch size m", "lr": "client learning rate η",
                "samples": "samples per client N", "secagg": "clients per secure aggregate K", "lora": "LoRA rank R"}
DEFENSE_LABELS = {"dp-sgd": "DP-SGD noise multiplier σ", "gaussian": "Gaussian noise σ", "laplacian": "Laplacian noise b",
                  "pruning": "pruning probability p"}


@dataclass(frozen=True)
class Sweep:
    """One knob and the values it takes; the audit runs once per value."""

    knob: str
    values: tuple

    @classmethod
    def parse(cls, text: Any) -> Optional["Sweep"]:
        """``"KNOB=V1,V2,..."`` or ``{"knob": ..., "values": [...]}`` (YAML)."""
        if text is None:
            return None
        if isinstance(text, str) and not text.strip():
            raise FedleakError("--sweep is empty; give KNOB=V1,V2,... (e.g. defense=0,0.5,1) or leave it out")
        if isinstance(text, dict):
            check_options("sweep", text, ("knob", "values", "meaning", "label"))  # metrics.json's form too
            knob, raw = text.get("knob"), text.get("values")
            if not isinstance(raw, (list, tuple)):
                raise FedleakError(f"sweep values must be a list of numbers, got {raw!r}")
        elif isinstance(text, str):
            knob, raw = split_sweep(text, KNOBS)  # the one reader of typed short forms (config/specs.py)
        else:
            raise FedleakError(f"sweep must be KNOB=V1,V2,... or a mapping with knob and values, got {text!r}")
        if not isinstance(knob, str):
            raise FedleakError(f"sweep knob must be a name, got {knob!r}")
        knob = knob.strip().replace("-", "_")
        if knob not in KNOBS:
            raise unknown_choice("sweep knob", knob, KNOBS)
        cast = KNOBS[knob][0]
        items = list(raw)
        if not items:
            raise FedleakError(f"--sweep {knob}= has an empty value list; give e.g. {knob}=1,2,4")
        if len(items) > 1000:
            raise FedleakError(f"--sweep {knob}= has {len(items)} values; at most 1000")
        values = []
        for item in items:
            number = finite_float(item, f"sweep value for {knob}", low=0.0, high=SWEEP_MAX[knob])
            if cast is int:
                if not number.is_integer() or number < 1:
                    raise FedleakError(f"sweep values for {knob} must be positive integers, got {item!r}")
                number = int(number)
            elif knob == "lr" and number <= 0:
                raise FedleakError(f"sweep values for lr must be positive, got {item!r}")
            values.append(number)
        if len(set(values)) != len(values):
            raise FedleakError(f"sweep values for {knob} repeat: {items}")
        return cls(knob, tuple(values))

    def label(self, defense: Defense) -> str:
        """A short axis label: the knob in words, the defense's own parameter for ``defense``."""
        if self.knob == "defense":
            return DEFENSE_LABELS.get(defense.kind, "defense strength")
        return SHORT_LABELS[self.knob]

    def to_json(self, defense: Optional[Defense] = None) -> dict:
        return {"knob": self.knob, "values": list(self.values), "meaning": KNOBS[self.knob][1],
                "label": self.label(defense or Defense())}


@dataclass(frozen=True)
class Scenario:
    """One protocol the audited clients run, with their number of samples."""

    key: str
    protocol: Protocol
    samples: int


@dataclass(frozen=True)
class Plan:
    """A validated audit configuration at one sweep value."""

    scenarios: tuple[Scenario, ...]
    defense: Defense
    secagg: int
    rounds: int
    sample_rate: Optional[float]
    delta: float
    lora: Optional[int] = None  # LoRA rank of a language model at this setting (None: full fine-tuning)

    @property
    def dp(self) -> bool:
        return self.defense.kind == "dp-sgd"


@dataclass
class AuditConfig:
    """Every audit setting; ``None`` means "the embedded default" where that has a meaning."""

    model: str = DEFAULT_MODEL
    weights: Optional[str] = None
    model_seed: int = 0
    data: str = DEFAULT_DATA
    data_root: Optional[str] = None
    samples: Optional[int] = None
    clients: int = 1
    algorithm: Optional[str] = None
    epochs: Optional[int] = None
    batch_size: Optional[int] = None
    lr: Optional[float] = None
    static_batches: bool = False
    defense: tuple = ()
    rounds: int = 1
    sample_rate: Optional[float] = None
    delta: float = 1e-5
    sweep: Any = None
    attacks: Optional[tuple] = None
    malicious: bool = True
    bins: int = DEFAULT_BINS
    iterations: Optional[int] = None
    quick: bool = False
    budget: Optional[str] = None  # wall-clock budget "90s", "5m", "1h30m" (audit/plan/time_budget.py)
    seed: int = 0
    device: str = "cpu"
    # text audits (--data text): sequence length, LoRA rank and warm-up steps, .jsonl field names
    seq_len: Optional[int] = None
    lora: Optional[int] = None
    lora_warmup: int = 0
    text_field: str = "text"
    label_field: str = "label"
    # clients train as deployments do: dropout as the model's config says ("shipped") or "off" on request;
    # PEFT's adapter dropout; the FlowerTune preset (audit/plan/flowertune.py); membership of candidate documents
    dropout: str = "shipped"
    lora_dropout: Optional[float] = None
    flowertune: bool = False
    membership: Optional[int] = None  # None: unset (0 given explicitly turns the test off, even under --flowertune)
    candidates: Optional[str] = None
    # the clients' local optimizer: Alg. 1's plain SGD (None), or AdamW as FlowerTune's Trainer (types/protocol.py)
    optimizer: Optional[str] = None
    tune: int = 0
    tune_clients: int = 2
    extra: dict = field(default_factory=dict, repr=False)

    #: bounds of numeric keys (``fedleak.config.boundary``); a new key needs only its field above
    #: (typed: ``Optional[int]``, ``bool``, ``str``, ...) and, for a number, its bounds here
    BOUNDS: ClassVar[dict] = {
        "model_seed": {"le": MAX_SEED}, "seed": {"le": MAX_SEED},
        "samples": {"ge": 1, "le": MAX_SAMPLES}, "clients": {"ge": 1, "le": MAX_CLIENTS},
        "epochs": {"ge": 1, "le": 10_000}, "batch_size": {"ge": 1, "le": 1_000_000},
        "lr": {"gt": 0, "le": MAX_RATE}, "rounds": {"ge": 1, "le": 10_000_000},
        "sample_rate": {"gt": 0, "le": 1}, "delta": {"gt": 0, "lt": 1},
        "bins": {"ge": 1, "le": 100_000}, "iterations": {"ge": 1, "le": 10_000_000},
        "seq_len": {"ge": 2, "le": 65_536}, "lora": {"ge": 1, "le": 4096}, "lora_warmup": {"ge": 0, "le": 1_000_000},
        "lora_dropout": {"ge": 0, "lt": 1}, "membership": {"ge": 0, "le": 100_000},
        "tune": {"ge": 0, "le": 100_000}, "tune_clients": {"ge": 1, "le": 10_000},
    }

    def __post_init__(self) -> None:
        """Every key checked by the strict model of :mod:`fedleak.config.boundary` (one line naming it)."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        checked = validate(settings_model(type(self)), values)
        for name in values:
            object.__setattr__(self, name, getattr(checked, name))
        if not isinstance(self.extra, dict):
            raise FedleakError(f"extra must be a mapping, got {type(self.extra).__name__}")
        if self.attacks is not None:
            object.__setattr__(self, "attacks", names_tuple(self.attacks, "attacks"))
        for spec in self.defense:
            if not spec.strip():
                raise FedleakError("defense has an empty spec; give e.g. gaussian:0.01 (or none)")
        from .time_budget import parse_budget

        parse_budget(self.budget)
        if self.budget is not None and self.iterations is not None:
            raise FedleakError("budget and iterations (--budget, --iterations) both set the attacks' iterations; give one")
        sweep = Sweep.parse(self.sweep)  # specs are checked when the config is made, not when the run reaches them
        parse_defenses(self.defense)
        from .combinations import check_combinations

        check_combinations(self, sweep)

    # -- sources ----------------------------------------------------------------------------
    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "extra"]

    @classmethod
    def from_mapping(cls, values: dict, where: str = "audit config") -> "AuditConfig":
        """Keys as in the CLI (``batch-size`` or ``batch_size``); unknown keys are named."""
        if not isinstance(values, dict):
            raise FedleakError(f"{where} must be a mapping of keys to values, got {type(values).__name__}")
        clean = {str(k).replace("-", "_"): v for k, v in values.items()}
        if "no_malicious" in clean:
            if not isinstance(clean["no_malicious"], bool):
                raise FedleakError(f"{where}: no_malicious must be true or false, got {clean['no_malicious']!r}")
            clean["malicious"] = not clean.pop("no_malicious")
        check_options(where, clean, cls.keys())
        if isinstance(clean.get("defense"), str):
            clean["defense"] = tuple(x.strip() for x in clean["defense"].split(";"))
        if isinstance(clean.get("attacks"), str):
            clean["attacks"] = split_names(clean["attacks"], "attacks")
        for key in ("defense", "attacks"):
            if isinstance(clean.get(key), list):
                clean[key] = tuple(clean[key])
        try:
            return cls(**clean)
        except FedleakError as exc:
            raise FedleakError(f"{where}: {exc}") from None

    @classmethod
    def from_yaml(cls, path) -> "AuditConfig":
        from ...config.yaml_safe import read_yaml_file

        values = read_yaml_file(path, "audit config")
        return cls.from_mapping({} if values is None else values, f"audit config {path}")

    def merged(self, overrides: dict) -> "AuditConfig":
        """This config with ``overrides`` (keys explicitly given on the command line) replacing its values."""
        return replace(self, **{k: v for k, v in overrides.items()})

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("extra")
        if out["optimizer"] is None:  # the default stays out: earlier audits' config hashes are unchanged
            del out["optimizer"]
        if out["budget"] is None:  # likewise
            del out["budget"]
        out["defense"] = list(self.defense)
        out["attacks"] = list(self.attacks) if self.attacks else None
        sweep = Sweep.parse(self.sweep)
        out["sweep"] = sweep.to_json(parse_defenses(self.defense)[0]) if sweep else None
        return out

    # -- validation -------------------------------------------------------------------------
    def sweep_plan(self) -> Optional[Sweep]:
        return Sweep.parse(self.sweep)

    def resolve(self, **at) -> Plan:
        """The :class:`Plan` with sweep knob values ``at`` (e.g. ``epochs=2``) applied."""
        _integer("clients", self.clients, 1)
        _integer("seed", self.seed, 0)
        _integer("bins", self.bins, 1)
        if self.iterations is not None:
            _integer("iterations", self.iterations, 1)
        _integer("tune", self.tune, 0)
        _integer("tune_clients", self.tune_clients, 1)
        defense, secagg, privacy = parse_defenses(self.defense)
        rounds = _integer("rounds", privacy.get("rounds", self.rounds), 1)
        sample_rate = privacy.get("sample_rate", self.sample_rate)
        delta = privacy.get("delta", self.delta)
        if "defense" in at:
            defense = _at_strength(defense, at["defense"])
        if "secagg" in at:
            secagg = int(at["secagg"])
        if self.algorithm is None:
            algorithms = list(DEFAULT_PROTOCOLS)
        elif self.algorithm in DEFAULT_PROTOCOLS:
            algorithms = [self.algorithm]
        else:
            raise unknown_choice("algorithm", self.algorithm, DEFAULT_PROTOCOLS)
        scenarios = []
        for algorithm in algorithms:
            samples, epochs, batch, lr = DEFAULT_PROTOCOLS[algorithm]
            samples = _integer("samples", at.get("samples", self.samples if self.samples is not None else samples), 1)
            epochs = at.get("epochs", self.epochs if self.epochs is not None else epochs)
            batch = at.get("batch_size", self.batch_size if self.batch_size is not None else batch)
            lr = at.get("lr", self.lr if self.lr is not None else lr)
            if isinstance(lr, bool) or not isinstance(lr, (int, float)):
                raise FedleakError(f"lr must be a number, got {lr!r}")
            protocol = Protocol(algorithm, _integer("epochs", epochs, 1), batch, float(lr), not self.static_batches,
                                optimizer=self.optimizer or "sgd")
            scenarios.append(Scenario(algorithm, protocol, samples))
        if defense.kind == "dp-sgd":  # σ = 0 is clipping only: no guarantee to account (ε = ∞)
            if sample_rate is not None:
                check_privacy(defense.scale or 1.0, _number("sample_rate", sample_rate), _number("delta", delta))
            else:
                check_privacy(defense.scale or 1.0, 1.0, _number("delta", delta))
        lora = at.get("lora", self.lora)
        if lora is not None:
            lora = _integer("lora", lora, 1)
        _integer("lora_warmup", self.lora_warmup, 0)
        if self.seq_len is not None:
            _integer("seq_len", self.seq_len, 2)
        if self.dropout not in ("shipped", "off"):
            raise FedleakError(f"dropout must be 'shipped' (as the model's config says) or 'off', got {self.dropout!r}")
        return Plan(tuple(scenarios), defense, secagg, rounds, sample_rate, float(delta), lora)


def _integer(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < minimum:
        raise FedleakError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _number(name: str, value) -> float:
    return finite_float(value, name)


def _at_strength(defense: Defense, strength: float) -> Defense:
    """The defense at a sweep strength; 0 switches it off (the undefended baseline of the curve)."""
    if defense.kind == "none":
        raise FedleakError("--sweep defense=... needs a defense to vary: add e.g. --defense dp-sgd:clip=1,noise=1")
    if strength == 0:
        return Defense()
    return defense.with_strength(strength)


def parse_defenses(specs) -> tuple[Defense, int, dict]:
    """``(per-example defense, secure-aggregation K, DP accounting keys)`` from the defense specs."""
    if isinstance(specs, str):
        specs = [specs]
    defense, secagg, privacy = Defense(), 1, {}
    for spec in specs or ():
        if isinstance(spec, dict):
            spec = ",".join(f"{k}={v}" for k, v in spec.items())  # not reached from YAML lists of strings
        text = str(spec).strip()
        kind, _, rest = text.partition(":")
        kind = kind.strip().lower()
        if kind == "secagg":
            _, values = parse_spec(text, "defense", keys=("k",), positional="k", integers=("k",))
            if "k" not in values:
                raise FedleakError(f"defense {text!r} needs K, the clients per aggregate: e.g. 'secagg:10'")
            secagg = _integer("secagg K (clients per aggregate)", values["k"], 1)
            if secagg > 100_000:
                raise FedleakError(f"defense {text!r}: secagg K must be at most 100000")
            continue
        if kind == "dp-sgd":
            _, values = parse_spec(text, "defense", keys=("clip", "noise", "rounds", "sample_rate", "delta"),
                                   positional="noise", integers=("rounds",), aliases={"sigma": "noise"})
            for key in ("rounds", "sample_rate", "delta"):
                if key in values:
                    privacy[key] = values.pop(key)
            text = "dp-sgd:" + ",".join(f"{k}={v!r}" for k, v in values.items())
        parsed = Defense.parse(text)
        if _is_filter(parsed) or _is_filter(defense):  # update-level filters (NVFlare, Flower): one defense at a time
            if (_is_filter(parsed) and (defense.active or _is_filter(defense))) or (_is_filter(defense) and parsed.active):
                raise FedleakError(f"one defense at a time: got {defense.to_text()!r} and {text!r}")
            defense = parsed if _is_filter(parsed) else defense
            continue
        if parsed.active and defense.active:
            raise FedleakError(f"one per-example defense at a time: got {defense.to_text()!r} and {text!r}")
        defense = parsed if parsed.active else defense
    if "rounds" in privacy:
        privacy["rounds"] = _integer("dp-sgd rounds", privacy["rounds"], 1)
    return defense, secagg, privacy


def _is_filter(defense) -> bool:
    from ...fl.update_filters import UpdateFilter

    return isinstance(defense, UpdateFilter)
