"""Where the span tests read a transformer: its first attention projections and the next linear layer.

Per architecture (``config.model_type``) two probes (DAGER §4, "layer 1" and "layer 2"):

* ``first``: the projections of the first attention block (GPT-2 ``c_attn``, BERT
  ``query/key/value``, LLaMA ``q/k/v_proj``); their input is the model's own embedding
  computation (LN(E[v] + P[p]) for GPT-2 / BERT, RMSNorm(E[v]) with RoPE — no added position — for
  LLaMA), captured with a forward pre-hook, never re-implemented;
* ``second``: the first linear layer whose input depends on the whole (causal) context and whose
  gradient sees every token: block 0's MLP (GPT-2 ``c_fc``, BERT ``intermediate.dense``, LLaMA
  ``gate_proj/up_proj``) when it is trainable, else block 1's attention projections (LoRA on the
  attention only). Block 0's MLP also keeps the test valid under a sequence-classification loss,
  where the last block's attention gradient is rank-deficient (only the read-out token queries).

A probe's span matrix comes from the update's gradient of its weights (Conv1D: columns; Linear:
rows; LoRA: A's rows in input space, or B's rows in A-space when A has no gradient yet — PEFT's
B = 0 first round, DAGER §5.3).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn
from torch.func import functional_call

from ...errors import FedleakError
from .spans import Span

#: model_type -> (first probe modules, second probe candidates in order of preference), relative to the base model
ARCHITECTURES = {
    "gpt2": (("transformer.h.0.attn.c_attn",),
             (("transformer.h.0.mlp.c_fc",), ("transformer.h.1.attn.c_attn",))),
    "bert": (("bert.encoder.layer.0.attention.self.query", "bert.encoder.layer.0.attention.self.key",
              "bert.encoder.layer.0.attention.self.value"),
             (("bert.encoder.layer.0.intermediate.dense",),
              ("bert.encoder.layer.1.attention.self.query", "bert.encoder.layer.1.attention.self.key",
               "bert.encoder.layer.1.attention.self.value"))),
    "llama": (("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
               "model.layers.0.self_attn.v_proj"),
              (("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"),
               ("model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.k_proj",
                "model.layers.1.self_attn.v_proj"))),
}
CAUSAL_TYPES = ("gpt2", "llama")
#: query projections (a separate module only in LLaMA's layout; GPT-2's c_attn is q, k and v in one)
QUERY_NAMES = ("q_proj",)


class _Stop(Exception):
    pass


def hf_of(model: nn.Module) -> nn.Module:
    """The transformers model inside a fedleak text wrapper (``.hf``), or the model itself."""
    return getattr(model, "hf", model)


def base_of(model: nn.Module) -> nn.Module:
    hf = hf_of(model)
    return hf.get_base_model() if hasattr(hf, "get_base_model") else hf


def model_type(model: nn.Module) -> str:
    kind = getattr(getattr(base_of(model), "config", None), "model_type", None)
    if kind not in ARCHITECTURES:
        raise FedleakError(f"text attacks support model types {sorted(ARCHITECTURES)}, got {kind!r}")
    return kind


def is_causal(model: nn.Module) -> bool:
    return model_type(model) in CAUSAL_TYPES


def _module(model: nn.Module, path: str) -> Optional[nn.Module]:
    base = base_of(model)
    alternatives = [path, path.split(".", 1)[1]]  # with and without the task head's prefix (bert.)
    for candidate in alternatives:
        try:
            return base.get_submodule(candidate)
        except AttributeError:
            continue
    return None


@dataclass
class Probe:
    """One probe: the modules whose common input is tested, and their spans."""

    modules: tuple[nn.Module, ...]
    names: tuple[str, ...]
    spans: list[Span]
    #: a causal model's query-adapter spans, left out of the exact test (position 0's query has no gradient) but
    #: evidence for every other position's token (:meth:`pooled_distance`)
    query_spans: tuple[Span, ...] = ()

    @property
    def rank(self) -> int:
        return max(s.rank for s in self.spans)

    @property
    def width(self) -> int:
        return min(s.width for s in self.spans)

    @property
    def proper(self) -> bool:
        return all(s.proper for s in self.spans)

    def distance(self, x: torch.Tensor, fast: bool = False) -> torch.Tensor:
        out = None
        for span in self.spans:
            d = span.distance(x, fast)
            out = d if out is None else torch.maximum(out, d)
        return out

    def pooled_distance(self, x: torch.Tensor, fast: bool = False) -> torch.Tensor:
        """The geometric mean of the distances over every span, the query spans included: under dropout the tests
        are statistical and each adapter masks its input independently, so their evidence adds up where the
        largest distance would reject a token one mask moved (measured on SmolLM2 LoRA r 32, dropout 0.075,
        1 × 16, four held-out clients: the true tokens' worst rank in the vocabulary went from 2785, 39684, 96
        and 21170 to 12, 25, 14 and 64 with both of block 0's adapters)."""
        spans = list(self.spans) + list(self.query_spans)
        logs = [span.distance(x, fast).clamp_min(1e-30).log() for span in spans]
        return torch.stack(logs).mean(0).exp()

    @property
    def masked(self) -> bool:
        """Whether a span of this probe holds dropout-masked copies of its inputs (:func:`mark_masked_inputs`)."""
        return any(s.mask_rate > 0 and s.transform is None for s in self.spans)

    def masked_distance(self, x: torch.Tensor) -> torch.Tensor:
        """The largest :meth:`~.spans.Span.masked_distance` over the spans (float64; shortlists only)."""
        out = None
        for span in self.spans:
            d = span.masked_distance(x)
            out = d if out is None else torch.maximum(out, d)
        return out

    def describe(self) -> dict:
        out = {"modules": list(self.names), "spans": [s.describe() for s in self.spans]}
        rates = sorted({s.mask_rate for s in self.spans if s.mask_rate > 0})
        if rates:
            out["masked_inputs"] = rates
        return out


def _param_names(model: nn.Module) -> dict[int, str]:
    return {id(p): name for name, p in model.named_parameters()}


def _lora_parts(module: nn.Module):
    a, b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
    if isinstance(a, nn.ModuleDict) and len(a):
        key = next(iter(a.keys()))
        return a[key], b[key]
    return None


def _lora_dropout(module: nn.Module) -> float:
    drop = getattr(module, "lora_dropout", None)
    if isinstance(drop, nn.ModuleDict) and len(drop):
        inner = drop[next(iter(drop.keys()))]
        return float(inner.p) if isinstance(inner, nn.Dropout) else 0.0
    return 0.0


def mark_masked_inputs(model: nn.Module, params: dict, probe: Probe, ids: torch.Tensor) -> float:
    """Measure whether the client's train-mode step feeds ``probe``'s dense span masked copies of its inputs.

    One train-mode and one eval-mode forward on the same ids (the global random state restored): where every
    entry of the train-mode input is either 0 or the eval-mode entry times one common factor c > 1, a dropout
    of rate p = 1 − 1/c acts right before the layer (BERT's embedding dropout after its LayerNorm); the dense
    spans get ``mask_rate`` p. A dropout anywhere else (GPT-2's before ``ln_1``) mixes the masks into the
    inputs, the test finds no such factor and the span stays plain. Returns p (0 when none)."""
    dense = [s for s in probe.spans if s.transform is None and not s.name.endswith(".lora_A")]
    if not dense:
        return 0.0
    was_training = model.training
    try:
        device = device_of(model, params)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(0)
            model.train()
            noisy = capture(model, params, ids, probe.modules[0]).double()
        model.eval()
        clean = capture(model, params, ids, probe.modules[0]).double()
    finally:
        model.train(was_training)
    live = clean.abs() > 1e-6 * float(clean.abs().max().clamp_min(1e-30))
    ratio = (noisy[live] / clean[live])
    kept = ratio.abs() > 1e-6
    if not bool(kept.any()) or bool(kept.all()):
        return 0.0
    factor = float(ratio[kept].median())
    if factor <= 1.0 or float((ratio[kept] - factor).abs().max()) > 1e-4 * factor:
        return 0.0
    rate = 1.0 - 1.0 / factor
    for span in dense:
        span.mask_rate = rate
    return rate


def build_probe(model: nn.Module, paths: tuple[str, ...], gradient: dict, params: dict,
                causal: bool = False, noise: Optional[dict] = None) -> Optional[Probe]:
    """The probe over those of ``paths`` whose update has a gradient (they share one input; e.g. PEFT's
    default LoRA targets on LLaMA adapt q_proj and v_proj, not k_proj); None if none has.

    LoRA adapters give one span each (their A differs), tested together (a token must lie in every one).
    In a causal decoder the query at position 0 attends to itself alone — a softmax over one key is
    constant — so the query projection's gradient never holds position 0's input: its adapter's span
    is left out when the key or value projection's is there (a dense q/k/v gradient is one matrix,
    the union of the three, and keeps it). ``noise``: per parameter name the std of the known rounding noise
    of its pseudo-gradient entries (:func:`~.spans.rounding_noise`, FedAvg), used by each span's rank gap."""
    names = _param_names(model)
    noise = noise or {}
    modules, dense, spans, used = [], [], [], []
    queries, dense_noise = [], 0.0
    for path in paths:
        module = _module(model, path)
        if module is None:
            return None
        lora = _lora_parts(module)
        if lora is not None:
            a, b = lora
            ga, gb = gradient.get(names.get(id(a.weight))), gradient.get(names.get(id(b.weight)))
            if ga is None or gb is None:
                continue
            b_sent = params.get(names.get(id(b.weight)), b.weight)
            if float(ga.abs().max()) > 0 and float(b_sent.abs().max()) > 0:
                # B ≠ 0 in the weights sent (round ≥ 2): ∇A = s·BᵀG·Xᵀ, its rows span the inputs X
                # directly, but BᵀG has r rows: at most r directions, the whole span of X only for ≤ r inputs
                spans.append(Span.from_matrix(ga.T, f"{path}.lora_A", cap=int(ga.shape[0]),
                                              noise=noise.get(names.get(id(a.weight)), 0.0)))
                spans[-1].mask_rate = _lora_dropout(module)  # PEFT: lora_A(dropout(x)), A's gradient spans x̃
            else:  # PEFT's first round (B = 0 sent): ∇B = s·G·(AX)ᵀ spans A·x (DAGER §5.3); A moves only by the
                # client's own later local steps, by little more than the float32 rounding of the weights it sends
                a_weight = params.get(names.get(id(a.weight)), a.weight)
                spans.append(Span.from_matrix(gb.T, f"{path}.lora_B", transform=a_weight.detach(),
                                              noise=noise.get(names.get(id(b.weight)), 0.0)))
                spans[-1].mask_rate = _lora_dropout(module)  # A·x̃: a few large dropped coordinates forgiven
            if causal and path.rsplit(".", 1)[-1] in QUERY_NAMES:
                queries.append(spans[-1])
        else:
            weight = getattr(module, "weight", None)
            g = gradient.get(names.get(id(weight))) if weight is not None else None
            if g is None:
                continue
            conv1d = type(module).__name__ == "Conv1D"  # transformers' GPT-2 layer: weight (in, out)
            dense.append(g if conv1d else g.T)
            dense_noise = max(dense_noise, noise.get(names.get(id(weight)), 0.0))
        modules.append(module)
        used.append(path)
    if not modules:
        return None
    held: tuple[Span, ...] = ()
    if queries and len(queries) < len(spans):  # position 0's query has no gradient (see above)
        held = tuple(queries)
        spans = [sp for sp in spans if all(sp is not q for q in queries)]
    if dense:
        spans.insert(0, Span.from_matrix(torch.cat(dense, dim=1), "+".join(used), noise=dense_noise))
    return Probe(tuple(modules), tuple(used), spans, held)


def probes(model: nn.Module, gradient: dict, params: dict, noise: Optional[dict] = None) -> tuple[Probe, Probe]:
    """(first, second) probes of ``model`` for this update; an error naming what is missing. ``noise``: see
    :func:`build_probe`."""
    first_paths, seconds = ARCHITECTURES[model_type(model)]
    causal = model_type(model) in CAUSAL_TYPES
    first = build_probe(model, first_paths, gradient, params, causal, noise)
    if first is None:
        raise FedleakError(f"the update has no gradient for the first attention projections {list(first_paths)}; "
                           "dager/tiger need them trainable (full fine-tuning or LoRA on the attention)")
    for paths in seconds:
        second = build_probe(model, paths, gradient, params, causal, noise)
        if second is not None and second.rank > 0:
            return first, second
    raise FedleakError("the update has no usable gradient for a second layer "
                       f"(tried {[list(p) for p in seconds]})")


@contextmanager
def _hook(module: nn.Module, store: list, stop: bool):
    def pre(_module, args, kwargs):
        x = args[0] if args else next(iter(kwargs.values()))
        store.append(x)
        if stop:
            raise _Stop

    handle = module.register_forward_pre_hook(pre, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def device_of(model: nn.Module, params: Optional[dict] = None) -> torch.device:
    """Where the model's computation runs: the device of ``params`` (θ of the update), else of its weights.

    The text attacks keep their bookkeeping (token ids, candidate sets, distances) on the host and run the
    model's forwards on this device: ids go there at each forward, distances come back."""
    for value in (params or {}).values():
        return value.device
    for value in model.parameters():
        return value.device
    return torch.device("cpu")


def run_model(model: nn.Module, params: dict, ids: torch.Tensor):
    """The model's forward on token ids with ``params`` (θ of the update) in place of its weights."""
    ids = ids.to(device_of(model, params))
    if params:
        return functional_call(model, params, (ids,), strict=False)
    return model(ids)


def capture(model: nn.Module, params: dict, ids: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """The input of ``module`` for token ids (B, L): (B, L, d); stops the forward there."""
    store: list = []
    with torch.no_grad(), _hook(module, store, stop=True):
        try:
            run_model(model, params, ids)
        except _Stop:
            pass
    if not store:
        raise FedleakError("the probed module was not reached by the model's forward")
    return store[0]
