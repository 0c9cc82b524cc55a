"""The interface every modality object provides to the audit's stages (DESIGN.md, "Modalities: a value, not a
branch").

A stage asks the modality of its data (:func:`fedleak.modality.of` by data name, :func:`fedleak.modality.named` by
:attr:`fedleak.types.DataSpec.modality` or a result's ``"modality"``) and calls it; it never compares kinds. The
hooks are grouped by stage: plan (the attacks that fit), data and model, execute (metrics, examples, summaries,
what one recovered item is for the verdict), report (table, sentences, plots) and the Flower integration.
Images and text walk the shared stages of :mod:`fedleak.audit.run` (:meth:`Modality.audit`'s default); tables
walk their own (:mod:`fedleak.modality.tabular`).
"""

from __future__ import annotations

from typing import Callable, Optional

#: the attack a Flower reply gets for each imprint structure of a shipped model (:meth:`Modality.flower_attack`)
IMPRINT_ATTACKS = {"cumulative": "imprint", "sparse": "imprint-sparse", "one-shot": "imprint-one-shot", "cah": "cah"}


class Modality:
    """One kind of data: its names, data loading, default model, attacks, metrics, report section, verdict."""

    #: the modality's name, as :attr:`fedleak.types.DataSpec.modality` says it
    name: str = ""
    #: what one item of a client's data is called in sentences ("images", "sequences", "records")
    items: str = "inputs"
    #: the zoo model an audit builds when the user names none
    default_model: str = ""

    #: the verdict rule in words, and what counts as one recovered item
    rule: str = ""
    recovered_item: str = ""
    #: audit options (AuditConfig names) this modality takes besides the common ones
    options: tuple = ()
    #: the package of this modality's own attacks (:func:`fedleak.modality.attack_owner`)
    attack_package: str = "fedleak.attacks"
    #: whether the malicious server's imprint is fitted to auxiliary (public) data of this modality
    malicious_uses_auxiliary: bool = False

    def matches(self, data) -> bool:
        """Whether the data name or path ``data`` is this modality's."""
        raise NotImplementedError

    def audit(self, cfg, out, log: Callable, progress, sweep, values, plans, device, staged: Callable) -> dict:
        """Plan → execute → judge → report for this modality: ``staged``, the shared stages
        (:func:`fedleak.audit.run.staged`, handed in by the stage that calls, so that no modality imports a stage)."""
        return staged(self, cfg, out, log, progress, sweep, values, plans, device)

    # -- plan ---------------------------------------------------------------------------------------
    def honest_attacks(self, algorithm: str) -> list:
        """The honest server's default attack names for ``algorithm``."""
        raise NotImplementedError

    def required_exact(self, model, protocol, samples: int) -> list:
        """The exact attacks that apply to this model and protocol (run whatever ``--attacks`` says)."""
        return []

    def required_optimization(self, algorithm: str) -> list:
        """The default optimization attacks ``low`` needs to have run."""
        return []

    def default_attack(self, algorithm: str) -> str:
        """``fedleak attack``'s attack when none is named: the first honest attack of the audit."""
        return self.honest_attacks(algorithm)[0]

    def accepts_attack(self, module: str) -> bool:
        """Whether an attack class defined in ``module`` attacks this modality's data."""
        return not module.startswith("fedleak.attacks.text")

    def check_attack_name(self, name: str, text_names: set) -> None:
        """Refuse an honest ``--attacks`` name of another modality (``text_names``: the text attacks)."""

    # -- data and model -----------------------------------------------------------------------------
    def prepare(self, cfg, needed: int, samples: int):
        """``(model name, DataSpec, clients)``: the data cut for ``needed`` clients of ``samples`` items."""
        raise NotImplementedError

    def models(self, cfg, model_name: str, spec, pool: list, plans: list, device, show) -> Callable:
        """The model each setting runs (``plan -> model``), checked against the data before any attack."""
        raise NotImplementedError

    def outside_pool(self, cfg, model_name: str, needed: int, samples: int):
        """Items held back from every audited client (membership candidates), or ``None``."""
        return None

    def surrogates(self, cfg, pool: list, samples: int, model_name: str) -> list:
        """The tuner's candidate surrogate clients (``--tune``), none of them an audited one."""
        raise NotImplementedError

    # -- execute ------------------------------------------------------------------------------------
    def score(self, rec, client, spec, *, tokenizer=None, **options) -> dict:
        """:func:`fedleak.metrics.evaluate` for this modality's data (``options``: its image keywords)."""
        from ..errors import FedleakError

        raise FedleakError(f"fedleak.metrics.evaluate scores images, text and records; {self.name} reconstructions "
                           f"are scored by their modality's own metrics")

    def picture(self, rec, truth, spec, scores: dict, count: int):
        """Up to ``count`` originals above their matched reconstructions as a PIL image, or None where the data
        are not pictures (records and token ids are scored, not drawn): ``fedleak run``'s per-job PNG."""
        return None

    def attack_outputs(self, attack: str, rec, truth, spec, scores: dict, folder) -> str:
        """``fedleak attack`` with the update's truth file: the comparison it writes into ``folder`` beside the
        reconstruction (the modality's own picture of originals and reconstructions) and its one-line summary."""
        raise NotImplementedError

    def measure(self, rec, truth, spec, tokenizer=None) -> dict:
        """:func:`fedleak.metrics.evaluate` at its defaults for this modality's data: the same checks
        (:func:`fedleak.metrics.images.check_pair`), then :meth:`score` (the entry point asks the spec's modality;
        a modality scoring its own data calls this instead)."""
        from ..metrics.images import check_pair

        check_pair(rec, truth)
        return self.score(rec, truth, spec, tokenizer=tokenizer)

    def evaluate(self, rec, truth, spec, model=None, default_model=None) -> dict:
        """The reconstruction's scores against ``truth`` (``model``: the attacked model, else ``default_model``)."""
        raise NotImplementedError

    def example(self, rec, truth, spec, scores: dict, model):
        """What the report shows of the first target."""
        raise NotImplementedError

    def summarize(self, per_target: list, seconds: float, choice, rec=None) -> dict:
        """One attack's summary over the targets (``metrics.json``'s keys for the modality)."""
        raise NotImplementedError

    def judge_base(self, scores: dict) -> Optional[dict]:
        """The verdict's base record when the modality judges by its own item (``None``: the image rule)."""
        return None

    def scenario_text(self, text: str, spec) -> str:
        """A scenario's description with this modality's items named."""
        return text

    def imprint_placement(self, model, spec) -> dict:
        """Where the malicious server's imprint block goes in ``model`` (keywords of ``models.imprint``)."""
        return {}

    def verbatim(self, scores: dict) -> int:
        """How many items of one target were read back verbatim (the malicious verdict's recovered item)."""
        raise NotImplementedError

    def tuning_score(self, rec, truth, spec, model) -> float:
        """A tuning trial's score on one surrogate client."""
        raise NotImplementedError

    tuning_metric: str = ""

    def tuning_record(self, record: dict) -> dict:
        """The tuning record's modality-specific keys."""
        return record

    # -- run results --------------------------------------------------------------------------------
    def point_extras(self, cfg, model, spec, pool, outside, plan, show, data: dict) -> None:
        """Add this modality's settings and findings to one point's ``data``."""

    def weights_note(self, cfg, model_name: str) -> Optional[str]:
        """What the result says of the model's weights when the user gave none."""
        return None

    def result_entries(self, cfg, points: list) -> dict:
        """Top-level ``metrics.json`` entries of this modality."""
        return {}

    def cautions(self, points: list, sweep, plans: list) -> list:
        """Sentences added to "what to change"."""
        return []

    # -- report -------------------------------------------------------------------------------------
    table = None  # an audit.report.tables.Table
    css: str = ""
    how_to_read: str = ""

    def verdict_sentence(self, title: str, tm: dict, head: str, quick: bool) -> str:
        """A threat model's verdict in one sentence (``head``: the title and level, or empty)."""
        raise NotImplementedError

    def imprint_sentence(self, mal: dict) -> str:
        raise NotImplementedError

    def results_body(self, point: dict, examples: dict) -> list:
        """The report's results section of one point (HTML pieces)."""
        raise NotImplementedError

    def make_plots(self, result: dict, examples: list, threat_titles: dict) -> dict:
        raise NotImplementedError

    # -- outside the audit --------------------------------------------------------------------------
    def truth_shape_ok(self, inputs, spec) -> bool:
        """Whether client-shared ``inputs`` have this modality's shape for ``spec``."""
        return tuple(inputs.shape[1:]) == tuple(spec.shape)

    #: what :meth:`truth_dtype_ok` accepts, in words (the error line of a saved truth file)
    truth_dtype = "floating-point"

    def truth_dtype_ok(self, inputs) -> bool:
        """Whether saved or client-shared ``inputs`` have this modality's dtype (pixels, records: floating point)."""
        return inputs.is_floating_point()

    def labels_are_classes(self) -> bool:
        """Whether labels must be class indices below ``spec.num_classes``."""
        return True

    def truth_scores(self, rec, truth, spec, tokenizer=None) -> dict:
        """The scores a Flower reply's client-shared batch gives (evaluation mode)."""
        raise NotImplementedError

    def app_spec(self, data: str, folder, settings: dict):
        """``fedleak audit --flower-app``: the :class:`~fedleak.types.DataSpec` the app's ``[tool.fedleak] data``
        (or ``--data``) names (``folder``: the app's; ``settings``: its ``[tool.fedleak]``)."""
        from ..data import spec_for

        return spec_for(data)

    def app_threat_model(self, summaries: dict, records: list, knowledge: dict) -> Optional[dict]:
        """``fedleak audit --flower-app``: a threat model's verdict over its attacked replies by this modality's rule
        (``None``: the app report's own, :func:`fedleak.integrations.flower.app_report.threat_model`: the image
        rule where clients shared their batch, else what the attacker itself shows)."""
        return None

    def app_examples(self, records: list, spec) -> Optional[dict]:
        """``fedleak audit --flower-app``: what the report shows of the latest round's replies, as this modality's
        :meth:`results_body` takes it (``None``: originals beside reconstructions, scored by
        :func:`fedleak.metrics.evaluate`, as for images and text)."""
        return None

    #: ``fedleak audit --flower-app``: the verdict rule its report states (``None``: the image rule)
    app_rule: Optional[str] = None

    def recovered_text(self, records: list) -> str:
        """The Flower dashboard's recovered items as text ('' when the modality shows none)."""
        return ""

    def flower_attack(self, model, protocol, samples: Optional[int] = None) -> str:
        """The attack a Flower reply gets when none is named (:func:`fedleak.integrations.flower.scoring.
        choose_attack`): the imprint readout for a model carrying an imprint block, DAGER for a language model, else
        Inverting Gradients (FedSGD gradients, and FedAvg updates via its local-step simulation)."""
        if hasattr(model, "imprint_secrets"):
            return IMPRINT_ATTACKS[model.imprint_secrets()["structure"]]
        if getattr(model, "task", None) in ("causal-lm", "classification"):  # a language model (models/hf)
            return "dager"
        return "inverting-gradients"

    def dashboard_sections(self, records: list, spec) -> list:
        """The Flower dashboard's sections showing what the latest round's attacks recovered."""
        from .recovered import latest_reconstructions

        images = latest_reconstructions(records, spec)
        sections = [{"title": "Latest reconstructions", "images": images}] if images else []
        texts = self.recovered_text(records)
        if texts:
            sections.append({"title": "Latest recovered text", "text": texts})
        return sections
