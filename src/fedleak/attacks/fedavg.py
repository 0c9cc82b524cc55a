"""Data Leakage in Federated Averaging (Dimitrov, Balunović, Konstantinov, Vechev; TMLR 2022).

The attack (Alg. 2) as one class, :class:`FedAvgLeakage`, composed of the shared parts:

* **labels** — known counts / labels / per-batch labels from the update's metadata (the threat
  model of Tables 1 and 8), or RecLabels (§4.5, :func:`fedleak.attacks.labels.reclabels`; Table 3);
  the label sequence is split into batches once by RandOrder (Alg. 2 line 4) and kept for every
  epoch;
* **target** (:mod:`fedleak.attacks.targets`) — ``simulation``:

  - ``per-epoch`` — SimUpdate (§4.3) with one set of N dummy images per epoch (E·N variables),
    simulated through the one client update with ``create_graph`` (``full_many`` in the code);
  - ``shared`` — the same simulation with one shared set of N images (Geiping et al. 2020 §6,
    ``full``);
  - ``epoch-gradient`` — E full-batch steps, each gradient × ⌈N/m⌉ (FedSGD-Epoch, ``none_epoch``);
  - ``gradient`` — one full-batch gradient × E·⌈N/m⌉ at θˢ (FedSGD / Geng et al., ``none``);

* **distance** — the authors' scripts: layer-weighted squared L2 with ω_l = e^−l over the
  parameterized layers in network order (kernel and bias share ω_l), divided by the number of
  simulated batches K_b and multiplied by the ramped factor fac_t = clip(fac₀·α^(t+1), target),
  α = (target/fac₀)^(1/ramp) (research note §A.4, §A.1). ``distance="cosine"`` with uniform layer
  weights is the cosine the paper's text names (§4.3); both are selectable. The prior weights were
  tuned by the authors for the L2 term, so a cosine term needs ``distance_scale``: with 1 the
  priors dominate and nothing is recovered; ``dimitrov-cosine`` uses 10⁴ (our choice, found on a
  small digits client; the paper gives no weight);
* **priors** — squared circular TV (λ_TV), the clipping regularizer on de-normalized images
  (λ_clip; Geng et al.'s Eq. 17 as in the scripts) and the epoch order-invariant prior L_inv
  (§4.4, Eq. 3; :class:`fedleak.attacks.losses.EpochOrderPrior`) with weight λ_inv;
* **optimizer** — the one loop: Adam, lr η_rec with continuous exponential decay γ^(t/interval),
  400 steps, N(0,1) init in normalized space (App. A.2; research note §A.1);
* **post-processing** — MatchEpoch (App. C; :func:`fedleak.attacks.postprocess.match_epochs`).

Hyperparameters default to the paper's per dataset (``hyperparameters="auto"`` picks the CIFAR100
set for CIFAR data and the FEMNIST set otherwise); any option set explicitly wins.

Registered variants (rows of Tables 1/3/6/7/8):

============================  ============================================================
``dimitrov``                  Ours (prior): per-epoch SimUpdate + the dataset's epoch prior
``dimitrov-no-prior``         Ours (no prior)
``dimitrov-shared``           Shared (Geiping et al.)
``dimitrov-fedsgd-epoch``     FedSGD-Epoch
``dimitrov-fedsgd``           FedSGD (Geng et al.)
``dimitrov-cosine``           Ours (prior) with the cosine distance of the paper's text
``dimitrov-sorted-labels``    Ours (prior) with labels in class order instead of RandOrder
``reclabels`` / ``geng-server`` / ``geng-client``  label counts only (Table 2)
============================  ============================================================

The Table 8 ablations are threat models, not attack options: "known counts per batch" is the
update metadata ``batch_labels`` (used automatically when present, or with ``labels="batches"``)
and "static batches" is the client protocol's ``reshuffle: false``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..errors import FedleakError, unknown_choice
from ..types.params import layers
from ..types import DataSpec, Reconstruction, Update
from .base import Attack, AttackOptions, register
from .labels import RECLABEL_MODES, ROUNDINGS, counts_to_labels, known_labels, labels_to_counts, reclabels
from .losses import DISTANCES, EPOCH_PRIORS, EpochOrderPrior, clip_prior, squared_circular_tv
from .matching import INITS, MatchingProblem, solve
from .optimize import OptimizerConfig
from .postprocess import match_epochs
from .targets import epoch_gradient_target, gradient_target, simulation_target

SIMULATIONS = ("per-epoch", "shared", "epoch-gradient", "gradient")
LABEL_SOURCES = ("auto", "known", "batches", "reclabels")
LABEL_ORDERS = ("random", "given")
LAYER_WEIGHTS = ("exp", "uniform")
HYPERPARAMETERS = ("auto", "femnist", "cifar100")

#: App. A.2 / the authors' scripts (research note §A.1, §A.5): per dataset.
PAPER_HYPERPARAMETERS = {
    "femnist": {"lr": 0.4, "decay": 0.995, "decay_interval": 10, "tv": 1e-3, "clip": 2.0, "fac_start": 1.0,
                "prior": "l2_mean"},
    "cifar100": {"lr": 0.1, "decay": 0.997, "decay_interval": 20, "tv": 2e-4, "clip": 10.0, "fac_start": 4.0,
                 "prior": "l2_max_conv"},
}
#: λ_inv per epoch prior (Table 4 scripts, research note §A.5).
PAPER_PRIOR_WEIGHTS = {
    "femnist": {"l1_max": 77.298, "l1_max_conv": 81.365, "l1_mean": 250.846, "l1_mean_conv": 263.623,
                "l2_max": 92.378, "l2_max_conv": 97.776, "l2_mean": 1000.0, "l2_mean_conv": 1054.413},
    "cifar100": {"l1_max": 4.848, "l1_max_conv": 5.0, "l1_mean": 15.708, "l1_mean_conv": 16.206,
                 "l2_max": 5.814, "l2_max_conv": 6.075, "l2_mean": 62.675, "l2_mean_conv": 65.573},
}


@dataclass(frozen=True)
class FedAvgLeakageOptions(AttackOptions):
    """Options of :class:`FedAvgLeakage`. ``None`` means "the paper's value for this dataset"."""

    simulation: str = "per-epoch"
    prior: str = "auto"            # auto | none | one of EPOCH_PRIORS
    reg_inv: Optional[float] = None
    conv_channels: int = 96
    tv: Optional[float] = None
    clip: Optional[float] = None
    distance: str = "l2"
    distance_scale: float = 1.0    # extra factor on the matching term (e.g. to balance a cosine distance)
    layer_weights: str = "exp"
    lr: Optional[float] = None
    decay: Optional[float] = None
    decay_interval: Optional[int] = None
    iterations: int = 400
    fac_start: Optional[float] = None
    fac_target: float = 2.0
    fac_steps: int = 200
    restarts: int = 1
    init: str = "randn"
    labels: str = "auto"
    label_order: str = "random"
    label_samples: int = 3000
    label_mode: str = "avg"
    label_rounding: str = "eth"
    match_epochs: bool = True
    hyperparameters: str = "auto"
    log_every: int = 10
    checkpoint_every: int = 0      # activation checkpointing of the unrolled steps every k steps (0: off)


def dataset_family(spec: DataSpec, choice: str = "auto") -> str:
    """Which paper hyperparameter set applies: ``cifar100`` for CIFAR data, else ``femnist``."""
    if choice != "auto":
        return choice
    return "cifar100" if spec.name.lower().startswith("cifar") else "femnist"


def layer_weights(model: nn.Module, kind: str = "exp") -> dict[str, float]:
    """ω per parameter name: e^−l for the l-th parameterized layer (kernel and bias share it)."""
    if kind not in LAYER_WEIGHTS:
        raise unknown_choice("layer weighting", kind, LAYER_WEIGHTS)
    weights = {}
    for index, layer in enumerate(layers(model)):
        for name in layer.param_names:
            weights[name] = math.exp(-index) if kind == "exp" else 1.0
    return weights


def fac_schedule(start: float, target: float, ramp: int):
    """fac_t = clip(start·α^(t+1), target) with α = (target/start)^(1/ramp) (research note §A.1)."""
    if start <= 0 or target <= 0 or ramp < 1:
        raise FedleakError(f"the scale ramp needs positive start/target and ramp ≥ 1, got {start}, {target}, {ramp}")
    alpha = (target / start) ** (1.0 / ramp)

    def fac(step: int) -> float:
        value = start * alpha ** (step + 1)
        return min(value, target) if alpha >= 1 else max(value, target)

    return fac


def batch_label_sequences(update: Update, num_classes: int) -> list[torch.Tensor]:
    """The per-epoch label sequences from ``metadata["batch_labels"]`` (Table 8's known batches).

    Accepted layouts: E lists of batches (each a list of labels) in the client's batch order, or E
    flat lists of N labels whose consecutive m-slices are the batches. Each epoch must hold N labels
    with the same multiset.
    """
    raw = update.metadata.get("batch_labels")
    if raw is None:
        raise FedleakError("labels='batches' needs the update's metadata to carry 'batch_labels' (the true per-epoch "
                           "batch composition, threat 'batches')")
    epochs = update.protocol.local_epochs()
    if not isinstance(raw, (list, tuple)) or len(raw) != epochs:
        raise FedleakError(f"metadata 'batch_labels' must list {epochs} epochs, got "
                           f"{len(raw) if isinstance(raw, (list, tuple)) else type(raw).__name__}")
    sequences = []
    for e, epoch in enumerate(raw):
        flat = [y for batch in epoch for y in (batch if isinstance(batch, (list, tuple)) else [batch])]
        seq = torch.as_tensor(flat, dtype=torch.long)
        if seq.numel() != update.num_samples:
            raise FedleakError(f"metadata 'batch_labels' epoch {e} has {seq.numel()} labels, expected N={update.num_samples}")
        if int(seq.min()) < 0 or int(seq.max()) >= num_classes:
            raise FedleakError(f"metadata 'batch_labels' epoch {e} has labels outside 0..{num_classes - 1}")
        sequences.append(seq)
    counts = labels_to_counts(sequences[0], num_classes)
    if any(not torch.equal(labels_to_counts(s, num_classes), counts) for s in sequences[1:]):
        raise FedleakError("metadata 'batch_labels' epochs hold different label multisets")
    return sequences


def label_consistent_schedule(shared: torch.Tensor, sequences: list[torch.Tensor], batch_size: int):
    """Batches of shared-image indices whose labels follow each epoch's known batch labels.

    For the ``shared`` simulation the server knows only the labels of every batch, so the k-th
    occurrence of class c in an epoch is mapped to the k-th shared image of class c.
    """
    by_class: dict[int, list[int]] = {}
    for index, y in enumerate(shared.tolist()):
        by_class.setdefault(y, []).append(index)
    schedule = []
    for seq in sequences:
        used: dict[int, int] = {}
        order = []
        for y in seq.tolist():
            k = used.get(y, 0)
            order.append(by_class[y][k])
            used[y] = k + 1
        schedule.append(list(torch.as_tensor(order, dtype=torch.long).split(batch_size)))
    return schedule


class FedAvgLeakage(Attack):
    """Dimitrov et al.'s FedAvg reconstruction attack and its baselines (see the module docstring)."""

    Options = FedAvgLeakageOptions
    name = "fedavg-leakage"

    choices = {"simulation": SIMULATIONS, "labels": LABEL_SOURCES, "label_order": LABEL_ORDERS,
               "layer_weights": LAYER_WEIGHTS, "hyperparameters": HYPERPARAMETERS, "distance": DISTANCES,
               "init": INITS, "label_mode": RECLABEL_MODES, "label_rounding": ROUNDINGS,
               "prior": ("auto", "none", *EPOCH_PRIORS)}
    non_negative = ("reg_inv", "tv", "clip", "lr", "decay", "fac_start", "distance_scale", "iterations",
                    "checkpoint_every")
    positive = ("decay_interval", "restarts", "label_samples", "conv_channels", "fac_steps", "fac_target")

    def __init__(self, **options) -> None:
        super().__init__(**options)
        o = self.options
        if o.prior not in ("auto", "none") and o.simulation != "per-epoch":
            raise FedleakError(f"the epoch prior {o.prior!r} needs per-epoch variables (simulation='per-epoch'), "
                               f"not simulation={o.simulation!r}; use prior='none'")
        if o.decay_interval is not None and int(o.decay_interval) != o.decay_interval:
            raise FedleakError(f"option 'decay_interval' must be a positive integer, got {o.decay_interval}")

    # -- hyperparameters ---------------------------------------------------------------------
    def resolved(self, spec: DataSpec) -> dict:
        """The effective hyperparameters for ``spec``: the options, with ``None``/``auto`` filled in."""
        o = self.options
        family = dataset_family(spec, o.hyperparameters)
        paper = PAPER_HYPERPARAMETERS[family]
        prior = o.prior
        if prior == "auto":
            prior = paper["prior"] if o.simulation == "per-epoch" else "none"
        reg_inv = o.reg_inv
        if reg_inv is None:
            reg_inv = PAPER_PRIOR_WEIGHTS[family].get(prior, 0.0)
        pick = lambda key: float(paper[key]) if getattr(o, key) is None else float(getattr(o, key))  # noqa: E731
        return {
            "family": family, "prior": prior, "reg_inv": float(reg_inv), "tv": pick("tv"), "clip": pick("clip"),
            "lr": pick("lr"), "decay": pick("decay"), "fac_start": pick("fac_start"),
            "decay_interval": int(paper["decay_interval"] if o.decay_interval is None else o.decay_interval),
        }

    # -- labels ---------------------------------------------------------------------------------
    def _labels(self, update: Update, model: nn.Module, spec: DataSpec) -> tuple[str, Optional[list[torch.Tensor]], torch.Tensor]:
        """(source, per-epoch sequences or None, the length-N label sequence before RandOrder)."""
        o = self.options
        meta = update.metadata
        source = o.labels
        if source == "auto":
            if meta.get("batch_labels") is not None:
                source = "batches"
            elif meta.get("labels") is not None or meta.get("label_counts") is not None:
                source = "known"
            else:
                source = "reclabels"
        if source == "batches":
            sequences = batch_label_sequences(update, spec.num_classes)
            return source, sequences, sequences[0]
        if source == "known":
            return source, None, known_labels(update, spec.num_classes)
        counts = reclabels(update, model, num_dummy=o.label_samples, mode=o.label_mode, seed=o.seed,
                           rounding=o.label_rounding, input_shape=spec.shape)
        return source, None, counts_to_labels(counts.cpu())

    # -- the attack -----------------------------------------------------------------------------
    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        o = self.options
        started = time.perf_counter()
        hp = self.resolved(spec)
        first = next(model.parameters())
        device, dtype = first.device, first.dtype
        n = update.num_samples
        epochs = update.protocol.local_epochs()
        batch_size = update.protocol.batch_size_for(n)
        per_epoch = o.simulation == "per-epoch"

        source, sequences, base = self._labels(update, model, spec)
        if int(base.numel()) != n:
            raise FedleakError(f"the attack needs N={n} labels, got {int(base.numel())}")
        if sequences is None and o.label_order == "random":  # RandOrder (Alg. 2 line 4), fixed for all epochs
            generator = torch.Generator().manual_seed(int(o.seed))
            base = base[torch.randperm(n, generator=generator)]

        schedule = None
        if per_epoch:
            sim_labels = torch.cat(sequences) if sequences is not None else base
            observed, simulate, num_inputs = simulation_target(update, model, per_epoch_inputs=True,
                                                                   checkpoint_every=o.checkpoint_every)
        elif o.simulation == "shared":
            sim_labels = base
            if sequences is not None:
                schedule = label_consistent_schedule(base, sequences, batch_size)
            observed, simulate, num_inputs = simulation_target(update, model, per_epoch_inputs=False, schedule=schedule,
                                                                   checkpoint_every=o.checkpoint_every)
        elif o.simulation == "epoch-gradient":
            sim_labels = base
            observed, simulate, num_inputs = epoch_gradient_target(update, model, o.checkpoint_every)
        else:
            sim_labels = base
            observed, simulate, num_inputs = gradient_target(update, model)
        sim_labels = sim_labels.to(device)

        # K_b: simulated batches of the dummy set (E·⌈N/m⌉ per-epoch, ⌈N/m⌉ otherwise; §A.4).
        k_batches = (epochs if per_epoch else 1) * update.protocol.batches_per_epoch(n)
        fac = fac_schedule(hp["fac_start"], o.fac_target, o.fac_steps)
        priors = [(hp["tv"], squared_circular_tv), (hp["clip"], lambda x: clip_prior(x, spec))]
        if per_epoch and hp["prior"] != "none" and epochs > 1:
            prior = EpochOrderPrior(hp["prior"], epochs, spec.shape[0], o.conv_channels, seed=o.seed,
                                    device=device, dtype=dtype)
            priors.append((hp["reg_inv"], prior))
        problem = MatchingProblem(observed, simulate, num_inputs, sim_labels, distance=o.distance,
                                  weights=layer_weights(model, o.layer_weights), priors=priors,
                                  scale=lambda step: o.distance_scale * fac(step) / k_batches,
                                  num_classes=spec.num_classes)
        config = OptimizerConfig(optimizer="adam", lr=hp["lr"], iterations=o.iterations, schedule="exp",
                                 decay=hp["decay"], decay_interval=hp["decay_interval"], log_every=o.log_every)
        solve_started = time.perf_counter()
        result = solve(problem, spec, config, init=o.init, restarts=o.restarts, seed=o.seed, device=device,
                       dtype=dtype)
        solve_seconds = time.perf_counter() - solve_started

        inputs, candidates, orders = result.inputs, None, None
        labels = sim_labels[:n]
        if per_epoch and epochs > 1:
            candidates = inputs.reshape(epochs, n, *inputs.shape[1:])
            if o.match_epochs:
                matched = match_epochs(inputs, epochs, spec)
                inputs, candidates, orders = matched.inputs, matched.aligned, matched.orders.tolist()
            else:
                inputs = candidates[0]
        counts = labels_to_counts(labels.cpu(), spec.num_classes)
        iterations_run = max(o.iterations * o.restarts, 1)
        extras = {
            "attack": getattr(self, "variant", self.name), "simulation": o.simulation, "label_source": source,
            "label_order": "batches" if sequences is not None else o.label_order,
            "label_counts": counts.tolist(), "hyperparameters": hp, "distance": o.distance,
            "layer_weights": o.layer_weights, "k_batches": k_batches, "loss": result.loss,
            "loss_history": result.losses, "restart_losses": result.restart_losses,
            "stopped_on_nan": result.stopped_on_nan, "epoch_orders": orders,
            "seconds": time.perf_counter() - started, "seconds_per_iteration": solve_seconds / iterations_run,
        }
        return Reconstruction(inputs.detach(), labels.detach(), candidates=None if candidates is None else candidates.detach(),
                              extras=extras)


register("fedavg-leakage", FedAvgLeakage,
         "Dimitrov et al. 2022 FedAvg attack, fully configurable (simulation, prior, distance, labels)")
register("dimitrov", FedAvgLeakage,
         "Dimitrov et al. 2022 'Ours (prior)': per-epoch SimUpdate + epoch order-invariant prior + MatchEpoch",
         simulation="per-epoch", prior="auto")
register("dimitrov-no-prior", FedAvgLeakage,
         "Dimitrov et al. 2022 'Ours (no prior)': per-epoch SimUpdate + MatchEpoch, no epoch prior",
         simulation="per-epoch", prior="none")
register("dimitrov-shared", FedAvgLeakage,
         "Dimitrov et al. 2022 baseline 'Shared' (Geiping et al. 2020): simulation with one image set for all epochs",
         simulation="shared", prior="none")
register("dimitrov-fedsgd-epoch", FedAvgLeakage,
         "Dimitrov et al. 2022 baseline 'FedSGD-Epoch': one full-batch step per epoch, scaled by the batches per epoch",
         simulation="epoch-gradient", prior="none")
register("dimitrov-fedsgd", FedAvgLeakage,
         "Dimitrov et al. 2022 baseline 'FedSGD' (Geng et al. 2021): one full-batch gradient scaled by the local steps",
         simulation="gradient", prior="none")
register("dimitrov-cosine", FedAvgLeakage,
         "Dimitrov et al. 2022 'Ours (prior)' with the cosine distance of the paper's text (uniform layer weights, "
         "matching term ×1e4: our choice, the paper gives no weight)",
         simulation="per-epoch", prior="auto", distance="cosine", layer_weights="uniform", distance_scale=1e4)
register("dimitrov-sorted-labels", FedAvgLeakage,
         "Dimitrov et al. 2022 'Ours (prior)' with the labels in class order (the authors' code for restored counts)",
         simulation="per-epoch", prior="auto", label_order="given")
