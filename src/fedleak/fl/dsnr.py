"""D-SNR, the disaggregation signal-to-noise ratio (Garov et al., "Hiding in Plain Sight", ICLR 2024, SEER §3).

A malicious model leaks an input when the update of some layer is *dominated* by that one
input: the aggregate over the batch (or over clients) then carries it nearly alone. SEER measures
this on the client's own batch B with per-example gradients:

    D-SNR(θ, B) = max_{W ∈ θ} max_{i ∈ B} ‖∂L(xᵢ)/∂W‖ / Σ_{j ≠ i} ‖∂L(xⱼ)/∂W‖

(as we apply it: W ranges over the weight tensors — parameters with ≥ 2 dimensions — and L is the
client's training loss). D-SNR > 1 means one example's gradient outweighs all the others' together
in some layer; an honest model on a batch of B examples spreads each layer's gradient over the
batch and stays below (the threshold 1 and its margin on honest models are measured by
``benchmarks/bench_inspect_malicious.py``, results in ``benchmarks/results/inspect-malicious.json``:
``false_positives.per_family.<family>.max_dsnr``: at most 0.93 on the honest models measured there, a
user checkpoint after 10 FedAvg rounds — a margin of under 10%, not a wide one).

Next to it, :func:`measure` reports a *row* variant (our addition, not SEER's): per output unit
(row) of each weight the same ratio, and per layer the share of the layer's per-example gradient
mass that lies in rows dominated by one example (row D-SNR > 1). Attacks whose single rows fire
for one input (sparse imprint bins, trap weights, LOKI's slice rows) raise it even where the whole
layer is not dominated.

The row variant misses cumulative imprint bins (a ReLU row fires for every input above its
threshold; only the *difference* of two rows isolates one input, Fowl et al. Eq. 4). The *pair*
variant (also ours) therefore pairs every row with the row whose per-example gradients are closest
without being equal, and asks the same question of their difference: the share of the layer's
gradient mass in rows whose difference is dominated by one example (a ±1 combination of two rows —
the server's readout of cumulative bins, LOKI's slices and channel-mixed blocks alike). Computed on
2-D weights of at most 2,048 rows, with per-example row gradients randomly projected to 32
dimensions.

The row and pair variants leave out the classifier (the last linear layer): its rows are per class,
and a class with one example in the batch has a row dominated by that example in every honest
model (measured: up to 97% of the classifier's gradient mass after 10 FedAvg rounds on 62 classes).
SEER's whole-layer D-SNR keeps it (class fishing is caught there).

Per-example gradients come from the one per-example path of the client update
(:func:`fedleak.fl.client.per_example_gradients`, ``torch.func.vmap(grad(...))``), with the model's
training loss and the model in train mode (BatchNorm sees a batch of one, as it would in a client
step of batch size 1, on copies of its buffers: the model's own running statistics are not touched).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Optional

import torch
from torch import nn

from ..errors import FedleakError
from .client import model_loss
from .per_example import per_example_gradients
from .findings import Finding

#: one example outweighs all the others of the batch in a layer (SEER's principled threshold)
DSNR_THRESHOLD = 1.0
#: share of a layer's gradient mass in rows dominated by one example above which rows are flagged
ROW_SHARE_THRESHOLD = 0.5
#: random projection size and the most rows of a 2-D weight for the pair test
PROJECTION, MAX_PAIR_ROWS = 32, 2048


def per_example_norms(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor,
                      projected: Optional[dict] = None) -> dict[str, torch.Tensor]:
    """name -> (B, rows) per-example gradient norms of each weight's rows (rows = first dimension).

    With a dict ``projected``, it also receives, for every 2-D weight of at most :data:`MAX_PAIR_ROWS`
    rows, the per-example row gradients randomly projected to :data:`PROJECTION` dimensions
    (Johnson–Lindenstrauss; for the pair test of :func:`measure`)."""
    if not isinstance(model, nn.Module):
        raise FedleakError(f"D-SNR needs a torch.nn.Module, got {type(model).__name__}")
    if inputs.shape[0] < 2 or inputs.shape[0] != labels.shape[0]:
        raise FedleakError(f"D-SNR needs a batch of at least 2 labelled examples, got {inputs.shape[0]}")
    first = next(model.parameters())
    inputs = inputs.to(device=first.device, dtype=first.dtype)
    labels = labels.to(device=first.device)
    names = [n for n, p in model.named_parameters() if p.requires_grad and p.dim() >= 2]
    params = dict(model.named_parameters())
    buffers = {k: v.detach().clone() for k, v in model.named_buffers()}  # the model's own statistics untouched
    with _train_mode(model):
        grads = per_example_gradients(model, params, buffers, inputs, labels, model_loss(model))
    generator = torch.Generator().manual_seed(0)
    out = {}
    for n in names:
        g = grads[n].detach().double()  # (B, rows, ...)
        out[n] = g.flatten(2).norm(dim=2)
        if projected is not None and g.dim() == 3 and g.shape[1] <= MAX_PAIR_ROWS:
            pairs = torch.randn(g.shape[2], PROJECTION, generator=generator, dtype=torch.float64) / math.sqrt(PROJECTION)
            projected[n] = g @ pairs.to(g.device)
    return out


@contextmanager
def _train_mode(model: nn.Module):
    previous = model.training
    model.train()
    try:
        yield
    finally:
        model.train(previous)


def pair_ratio(projected: torch.Tensor) -> torch.Tensor:
    """Per row r: the dominance ratio (max_i / Σ_{j≠i}) of the per-example norms of G[r] − G[r*],
    r* the row whose per-example gradients are closest to r's without being equal to them (a ±1
    combination of two rows, the
    readout of cumulative imprint bins, Fowl et al. Eq. 4). ``projected``: (B, rows, d)."""
    b, k, _ = projected.shape
    rows = projected.transpose(0, 1)  # (k, B, d)
    ratios = torch.zeros(k, dtype=torch.float64)
    if k < 2:
        return ratios
    flat = rows.reshape(k, -1)
    distance = torch.cdist(flat, flat)
    scale = flat.norm(dim=1)
    # rows with the same per-example gradients are one row for this test (no information in their difference)
    same = distance <= 1e-6 * torch.maximum(scale[:, None], scale[None, :])
    distance[same] = float("inf")
    partner = distance.argmin(1)
    diff = (rows - rows[partner]).norm(dim=2)  # (k, B)
    return _ratio(diff.T)


def _ratio(norms: torch.Tensor) -> torch.Tensor:
    """max_i nᵢ / Σ_{j≠i} nⱼ along dim 0 (0 where nothing moves; inf where one example moves alone)."""
    total = norms.sum(0)
    top = norms.max(0).values
    rest = total - top
    ratio = torch.where(rest > 0, top / rest.clamp_min(1e-300), torch.full_like(top, float("inf")))
    return torch.where(top > 0, ratio, torch.zeros_like(top))


def _classifier(model: nn.Module) -> Optional[str]:
    """The weight of the last linear layer (the classifier), or None."""
    from ..types.params import last_linear, weight_and_bias

    try:
        return weight_and_bias(last_linear(model))[0]
    except FedleakError:
        return None


def measure(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> dict:
    """Per layer: SEER's D-SNR of the whole weight, and the row variant's dominated gradient share."""
    layers, projected = {}, {}
    for name, norms in per_example_norms(model, inputs, labels, projected).items():
        whole = float(_ratio(norms.pow(2).sum(1).sqrt()[:, None])[0])
        rows = _ratio(norms)
        mass = norms.sum(0)
        total = float(mass.sum())
        share = float(mass[rows > DSNR_THRESHOLD].sum()) / total if total > 0 else 0.0
        layers[name] = {"dsnr": whole, "dominated_row_share": share, "rows": int(norms.shape[1]),
                        "dominated_rows": int((rows > DSNR_THRESHOLD).sum()), "dominated_pair_share": 0.0}
        if name in projected and total > 0:
            pairs = pair_ratio(projected[name]) > DSNR_THRESHOLD
            layers[name]["dominated_pair_share"] = float(mass[pairs].sum()) / total
    classifier = _classifier(model)
    if classifier in layers:
        layers[classifier]["classifier"] = True
    rowwise = {k: v for k, v in layers.items() if k != classifier} or layers
    worst = max(layers.items(), key=lambda kv: kv[1]["dsnr"])
    rowworst = max(rowwise.items(), key=lambda kv: kv[1]["dominated_row_share"])
    pairworst = max(rowwise.items(), key=lambda kv: kv[1]["dominated_pair_share"])
    return {"batch": int(inputs.shape[0]), "dsnr": worst[1]["dsnr"], "dsnr_layer": worst[0],
            "dominated_row_share": rowworst[1]["dominated_row_share"], "row_layer": rowworst[0],
            "dominated_pair_share": pairworst[1]["dominated_pair_share"], "pair_layer": pairworst[0],
            "layers": layers}


def dsnr_findings(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, *,
                  threshold: float = DSNR_THRESHOLD, row_share: Optional[float] = ROW_SHARE_THRESHOLD) -> list[Finding]:
    """Findings (confidence 1) for layers above SEER's D-SNR threshold and, unless ``row_share`` is
    None, layers whose dominated-row or dominated-pair share exceeds ``row_share``."""
    result = measure(model, inputs, labels)
    findings = []
    for name, layer in result["layers"].items():
        if layer["dsnr"] > threshold:
            findings.append(Finding(name, "d-snr", 1.0,
                                    f"one example of the client's batch of {result['batch']} outweighs all the others "
                                    f"in this layer's gradient (D-SNR {layer['dsnr']:.3g} > {threshold:g}; SEER)",
                                    {"dsnr": layer["dsnr"], "batch": result["batch"]}))
        if row_share is not None and not layer.get("classifier") and layer["dominated_pair_share"] > row_share:
            findings.append(Finding(name, "d-snr-pairs", 1.0,
                                    f"{100 * layer['dominated_pair_share']:.0f}% of this layer's gradient mass lies in "
                                    f"rows whose difference with their nearest row carries one example's gradient "
                                    f"(above {100 * row_share:.0f}%; how cumulative imprint bins are read)",
                                    {"dominated_pair_share": layer["dominated_pair_share"], "batch": result["batch"]}))
        if row_share is not None and not layer.get("classifier") and layer["dominated_row_share"] > row_share:
            findings.append(Finding(name, "d-snr-rows", 1.0,
                                    f"{layer['dominated_rows']} of {layer['rows']} rows each carry one example's "
                                    f"gradient ({100 * layer['dominated_row_share']:.0f}% of the layer's gradient "
                                    f"mass, above {100 * row_share:.0f}%)",
                                    {"dominated_row_share": layer["dominated_row_share"],
                                     "dominated_rows": layer["dominated_rows"], "batch": result["batch"]}))
    return findings


__all__ = ["DSNR_THRESHOLD", "ROW_SHARE_THRESHOLD", "dsnr_findings", "measure", "per_example_norms"]
