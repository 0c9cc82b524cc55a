"""TabLeak (Vero, Balunović, Dimitrov, Vechev, ICML 2023) on FedSGD and FedAvg updates of tabular models.

A composition of the existing parts (research notes §2, constants read off the reference code):

* **structural prior** (§2 step 2): the optimized variable holds, per categorical column, logits that are
  de-standardized, softmaxed (τ = 1) and re-standardized, and per continuous column a pre-sigmoid value mapped
  into the column's standardized [min, max];
* **target**: 1 − cosine between the simulated and the observed update over all parameters concatenated; the
  simulation is the one local-SGD function (one step for FedSGD; for FedAvg the whole local training with one
  set of records per local epoch, Dimitrov et al.'s SimUpdate, plus the epoch-matching prior λ·Σ‖x̄_e − x̄_e'‖²/(E²d));
* **optimizer**: the one loop (:func:`fedleak.attacks.optimize.optimize`), Adam lr 0.06 on the sign of the
  gradient, 1500 iterations;
* **restarts** (30 FedSGD, 15 FedAvg) batched into one tensor (:mod:`.restarts`); each projected (argmax,
  rounding) and scored by its own recomputed distance; the best is the anchor, every restart's rows are matched
  to the anchor's by the Hungarian algorithm on the share of wrong cells, then **pooled**: categorical blocks
  softmaxed and the element-wise median taken (the pooled category is the median probabilities' argmax),
  continuous values by their median ("median+softmax"; FedAvg: the plain median of each restart's epoch-averaged
  probabilities, as the reference — its ``soft_avg+softmax`` runs for one epoch too);
* **entropy** per cell (§2): a categorical cell's normalized entropy of the mean softmaxed restarts, a
  continuous cell's Gaussian entropy ½ + ½·log(2πσ²) of its spread over restarts; low entropy = confident.

Labels: those the server was told, else the label stack's estimate (Geng et al.'s counts). Options
``pooling=False`` (one restart, no pooling: the ablation "no pooling") and ``softmax=False`` ("no softmax")
give the paper's ablations; ``inverting-gradients-tabular`` is the Inverting Gradients baseline in the same loop.

``precision="bfloat16"`` (opt-in; FedSGD updates of the ReLU MLP only, whose cosine is written by hand in
:mod:`.mlp_gradient`) runs that cosine and its backward in bfloat16: the records, the weights, every matrix product
and element-wise pass of it, with float32 accumulation inside the products (the CPU's AMX tiles where it has them;
without bfloat16 hardware it is slower, not wrong). The prior, Adam, the scoring of restarts and the pooling stay
float32. It changes the arithmetic (about 3 significant digits per product; with the sign trick only the signs of the
record gradient's entries reach Adam), so its accuracy is measured beside the reference's
(``benchmarks/bench_tableak_reference.py --implementations fedleak-bfloat16``), not assumed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import nn

from ...data.tabular.compare import hungarian, row_cost
from ...errors import FedleakError
from ...fl.client import sequential_schedule
from ...types import DataSpec, Reconstruction, Update
from ..base import Attack, AttackOptions, auto_label_strategy, register
from ..labels import resolve_labels
from ..optimize import OptimizerConfig, optimize
from .prior import StructuralPrior as _StructuralPrior
from .restarts import Restarts, closed_form, distances as restart_distances, grouped_target


@dataclass(frozen=True)
class TabLeakOptions(AttackOptions):
    """Defaults are the reference's FedSGD configuration; ``restarts`` 0 means 30 (FedSGD) / 15 (FedAvg)."""

    restarts: int = 0
    iterations: int = 1500
    lr: float = 0.06
    softmax: bool = True
    sigmoid: bool = True  # continuous columns through a sigmoid into their range (off only for the IG baseline)
    pooling: bool = True
    epoch_prior: float = 0.01  # λ of the FedAvg epoch-matching prior (the reference tunes it by an oracle)
    labels: str = "auto"
    log_every: int = 50
    precision: str = "float32"  # "bfloat16": the hand-written FedSGD cosine in bfloat16 (module docstring)


class TabLeak(Attack):
    """TabLeak and its ablations on a tabular :class:`DataSpec` (see the module docstring)."""

    Options = TabLeakOptions
    name = "tableak"
    choices = {"labels": ("auto", "known", "yin", "reclabels"), "precision": ("float32", "bfloat16")}
    non_negative = ("restarts", "epoch_prior")

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        o = self.options
        schema = spec.schema
        if schema is None:
            raise FedleakError(f"attack {self.name!r} needs a tabular DataSpec, got {spec.modality} data {spec.name!r}")
        started = time.perf_counter()
        strategy = auto_label_strategy(o.labels, update, spec.num_classes)
        labels = resolve_labels(strategy, update, model, spec, seed=o.seed)
        first = next(iter(update.server_params.values()))
        fedsgd = update.is_fedsgd
        restarts = 1 if not o.pooling else (o.restarts or (30 if fedsgd else 15))
        n, epochs = update.num_samples, (1 if fedsgd else update.protocol.local_epochs())
        schedule = [[torch.arange(n)]] if fedsgd else sequential_schedule(n, update.protocol, per_epoch_inputs=True)
        ensemble = Restarts(model, update.server_params, restarts)
        observed = update.pseudo_gradient()
        generator = torch.Generator().manual_seed(int(o.seed))
        forward = _StructuralPrior(schema, first, o.softmax, o.sigmoid)
        z = (torch.rand(restarts, epochs * n, schema.width, generator=generator) * 2 - 1).to(first)
        z = z.index_select(-1, forward.perm.to(z.device))  # optimized with grouped columns (see _StructuralPrior)

        tiled = labels.repeat(epochs)  # one block of records per local epoch, each with the n labels

        def distances(x: torch.Tensor, graph: bool = True) -> torch.Tensor:
            return restart_distances(ensemble, update.server_params, x, tiled, schedule, update.protocol.lr, observed,
                                     create_graph=graph, train_mode=update.protocol.train_mode)

        grouped = grouped_target(ensemble, update.server_params, observed, forward.perm, distances)
        low = _low_precision(o.precision, fedsgd, closed_form(ensemble, tiled, observed), self.name)

        def objective(step: int) -> torch.Tensor:
            x = forward.grouped(z)
            loss = grouped(x.to(low) if low else x, tiled, schedule, update.protocol.lr,
                           update.protocol.train_mode).float().sum()
            if epochs > 1 and o.epoch_prior > 0:
                means = x.view(restarts, epochs, n, -1).mean(dim=2)  # (R, E, d)
                gaps = (means[:, :, None, :] - means[:, None, :, :]).pow(2).sum(dim=(1, 2, 3))
                loss = loss + o.epoch_prior * gaps.sum() / (epochs ** 2 * schema.width)
            return loss

        config = OptimizerConfig(optimizer="adam", lr=o.lr, iterations=o.iterations, signed=True,
                                 log_every=o.log_every, fused=True)
        result = optimize([z], objective, config, description=f"{self.name} ({restarts} restarts)")
        z = z.detach().index_select(-1, forward.inverse.to(z.device))  # schema column order again
        with torch.no_grad():
            x = forward.restart_output(z).view(restarts, epochs, n, -1)
            candidates = _epoch_average(schema, x, o.softmax)  # (R, n, d) per restart
            projected = torch.stack([schema.standardize(_project(schema, schema.destandardize(c))) for c in candidates])
        scores = distances(projected if epochs == 1 else projected.repeat(1, epochs, 1), graph=False).detach()
        anchor = int(torch.argmin(torch.nan_to_num(scores, nan=math.inf)))
        aligned = _align(schema, candidates, anchor)
        # FedAvg over several epochs: each restart's candidate is already its epochs' averaged probabilities
        pooled, entropy = _pool(schema, aligned, softmax=o.softmax, averaged=epochs > 1 and o.softmax)
        extras = {"attack": getattr(self, "variant", self.name), "label_strategy": strategy, "restarts": restarts,
                  "anchor": anchor, "restart_scores": [float(s) for s in scores], "loss": result.final_loss,
                  "loss_history": result.losses, "stopped_on_nan": result.stopped_on_nan,
                  "entropy": entropy.tolist(), "seconds": round(time.perf_counter() - started, 2),
                  "target": "gradient" if fedsgd else "simulation", "precision": o.precision}
        return Reconstruction(pooled, labels, candidates=aligned, extras=extras)


def _low_precision(precision: str, fedsgd: bool, closed: bool, name: str):
    """The dtype the cosine runs in when ``precision`` asks for bfloat16 (None: float32 as the model). Only the
    hand-written FedSGD cosine of the ReLU MLP takes it; elsewhere (FedAvg's simulation, whose small local steps
    bfloat16 would round away; another model on autograd) the request is refused, not quietly ignored."""
    if precision != "bfloat16":
        return None
    if not (fedsgd and closed):
        raise FedleakError(f"attack {name!r}: precision='bfloat16' applies to a FedSGD update of the zoo's ReLU MLP "
                           "with class-index labels (the hand-written cosine); this update is "
                           f"{'FedAvg' if not fedsgd else 'of another model or with soft labels'}: use 'float32'")
    return torch.bfloat16


def _project(schema, raw: torch.Tensor) -> torch.Tensor:
    """Raw records → one-hot argmax categories and clamped (rounded where whole-number) continuous values; the
    rounding is the reference's ``to_categorical``: ⌊x + 0.5⌋ (halves up, where torch's round goes to even)."""
    out = raw.clone()
    for column, where in schema.blocks():
        if column.kind == "categorical":
            block = torch.zeros_like(raw[..., where])
            block.scatter_(-1, raw[..., where].argmax(-1, keepdim=True), 1.0)
            out[..., where] = block
        else:
            value = raw[..., where.start].clamp(column.low, column.high)
            out[..., where.start] = torch.floor(value + 0.5) if column.integer else value
    return out


def _softmaxed(schema, records: torch.Tensor) -> torch.Tensor:
    """Standardized records with every categorical block replaced by its softmax probabilities (raw space)."""
    raw = schema.destandardize(records)
    for block in schema.categorical_blocks():
        raw[..., block] = torch.softmax(raw[..., block], dim=-1)
    return raw


def _epoch_average(schema, x: torch.Tensor, softmax: bool) -> torch.Tensor:
    """(R, E, n, d) → (R, n, d): each epoch's copy matched to the first and the softmaxed copies averaged."""
    if x.shape[1] == 1:
        return x[:, 0]
    out = []
    for per_restart in x:
        copies = [per_restart[0]]
        for copy in per_restart[1:]:
            rows, cols = hungarian(row_cost(schema, per_restart[0], copy))
            copies.append(copy[torch.tensor(cols)[torch.argsort(torch.tensor(rows))]])
        stacked = torch.stack(copies)
        raw = _softmaxed(schema, stacked) if softmax else schema.destandardize(stacked)
        out.append(schema.standardize(raw.mean(0)))
    return torch.stack(out)


def _align(schema, candidates: torch.Tensor, anchor: int) -> torch.Tensor:
    """Every restart's rows reordered to match the anchor's rows (Hungarian on the share of wrong cells)."""
    out = []
    for r, candidate in enumerate(candidates):
        if r == anchor:
            out.append(candidate)
            continue
        rows, cols = hungarian(row_cost(schema, candidates[anchor], candidate))
        order = torch.empty(len(rows), dtype=torch.long)
        order[torch.tensor(rows)] = torch.tensor(cols)
        out.append(candidate[order])
    return torch.stack(out)


def _pool(schema, aligned: torch.Tensor, softmax: bool, averaged: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Median pooling of aligned restarts (R, n, d) → records (n, d), and the per-cell entropy (n, columns).

    A restart's categorical blocks are its logits (FedSGD, FedAvg over one epoch): with ``softmax`` they are
    softmaxed once before the median (the reference's ``median+softmax``; for FedAvg its per-restart epoch pooling
    ``soft_avg+softmax`` does the same over one epoch, ``fed_avg_inversion_attack.py`` l. 281–286). Or they are
    already probabilities (``averaged``: FedAvg over several epochs, :func:`_epoch_average`): then neither the
    median nor the entropy softmaxes them again (a second softmax flattens every distribution towards uniform)."""
    raw = _softmaxed(schema, aligned) if softmax and not averaged else schema.destandardize(aligned)
    median = raw.median(dim=0).values  # torch's median: the lower middle value for an even count (the reference)
    probabilities = (schema.destandardize(aligned) if averaged else _softmaxed(schema, aligned)).mean(0)
    # the reference's ``pooled_ensemble(..., return_std=True)``: torch's std over restarts, n − 1 in the denominator
    spread = aligned.std(0) if aligned.shape[0] > 1 else torch.zeros_like(aligned[0])
    entropy = torch.zeros(aligned.shape[1], len(schema.columns), dtype=torch.float64)
    for j, (column, where) in enumerate(schema.blocks()):
        if column.kind == "categorical":
            p = probabilities[:, where].double()
            p = p / p.sum(-1, keepdim=True)
            k = max(column.width, 2)
            entropy[:, j] = -(p * torch.log(p + 1e-7)).sum(-1) / math.log(k)
        else:
            sigma = spread[:, where.start].double().clamp_min(1e-6)
            entropy[:, j] = 0.5 + 0.5 * torch.log(2 * math.pi * sigma ** 2)
    pooled = schema.standardize(_project(schema, median))
    return pooled.to(aligned.dtype), entropy


register("tableak", TabLeak, "TabLeak (Vero et al. 2023): softmax structural prior, pooled restarts batched into "
                             "one tensor, per-cell entropy; FedSGD and FedAvg (per-epoch simulation)")
register("tableak-no-pooling", TabLeak, "TabLeak ablation: one restart, no pooling", pooling=False)
register("tableak-no-softmax", TabLeak, "TabLeak ablation: pooled restarts without the softmax prior",
         softmax=False)
register("inverting-gradients-tabular", TabLeak, "Inverting Gradients on records (TabLeak's baseline): the same "
         "cosine loop, one restart, no softmax/sigmoid prior", softmax=False, sigmoid=False, pooling=False)
