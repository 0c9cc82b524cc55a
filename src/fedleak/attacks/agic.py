"""AGIC: Approximate Gradient Inversion Attack (Xu, Hong, Huang, Chen, Decouchant; SRDS 2022).

A composition of the shared parts (research note ``agic-awa.md``):

* **target** — the one-batch approximation (§IV-A, Eq. 4): the T local steps on T minibatches are
  treated as one step on the aggregated batch X_A taken at W, so the target gradient is
  ΔW/(−μ) (:func:`~fedleak.attacks.targets.gradient_target`, one forward/backward per iteration
  whatever T is). Labels come from label inference on that approximated gradient (Yin et al.'s
  rule, §V-A) unless the server was told them.
* **distance** — the layer-weighted cosine of Eq. 6 with the weights of Eqs. 7–8
  (:mod:`~fedleak.attacks.layer_weights`), plus ζ_TV·TV (Eq. 2).
* **optimizer** — Adam, lr 0.1 (§V-A). (our choice) Signed gradients, the ×0.1 step decay at
  3/8, 5/8, 7/8 and the box constraint of Inverting Gradients' code, on which AGIC's ResNet20-4
  setup is built; all are options.
* **several epochs** (§IV-B, Eq. 5; :meth:`Agic.reconstruct_rounds`) — pre-reconstruct every
  update, match the candidates of consecutive epochs one-to-one greedily on the MSE of 2×2
  average-pooled images, only between images whose updates' inferred label lists share a label,
  then optimize one shared set of images against all matched updates jointly with
  Σ_k γ_k(1 − cos_α(g'_k, g_k)), each update at its own round's weights W_k.

Named variants: ``agic`` (one-batch + layer weights), ``agic-no-weights`` (one-batch, β = 1, no
ReLU modifier: Table II's "AGIC one-batch" row) and ``invg-simulation`` (Inverting Gradients
forced to simulate the local steps: AGIC's InvG baseline on FedAvg).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import FedleakError
from ..types.params import check_update
from ..types import DataSpec, Params, Reconstruction, Update
from .base import Attack, AttackOptions, auto_label_strategy, register
from .gradient_inversion import GradientInversion
from .labels import LABEL_STRATEGIES, resolve_labels
from .layer_weights import AGIC_SHAPES, BN_POLICIES, agic_layer_weights
from .losses import UpdateDistance, total_variation
from .matching import INITS, MatchingProblem, box_projection, initial_inputs, solve
from .optimize import OptimizerConfig, optimize
from .targets import gradient_target

LABEL_FILTERS = ("batch", "image", "none")
JOINT_INITS = ("pre", "randn")


@dataclass(frozen=True)
class AgicOptions(AttackOptions):
    """AGIC's options. Paper values (§V-A): lr 0.1, 10,000 iterations, ζ_TV 1e-4 (untrained
    ResNet20-4) / 1e-2 (trained), β = 50 untrained / 2 trained, pre-reconstruction 2,000
    iterations, 2×2 pooling, γ = 1 (first epoch) / 0.1 (later). ``iterations`` defaults to a CPU
    budget; presets set the paper's count."""

    # layer weights (Eqs. 7–8)
    layer_weights: bool = True
    beta: float = 50.0
    shape: str = "linear"
    relu_modifier: bool = True
    zero_tol: float = 0.0
    bn_weight: str = "conv"
    # objective + optimizer
    tv: float = 1e-4
    optimizer: str = "adam"
    lr: float = 0.1
    iterations: int = 2000
    schedule: str = "step"
    signed: bool = True
    boxed: bool = True
    restarts: int = 1
    init: str = "randn"
    labels: str = "auto"
    log_every: int = 10
    # several epochs (§IV-B)
    pre_iterations: Optional[int] = None  # None: as many as `iterations` (our choice)
    pool: int = 2
    label_filter: str = "batch"
    gamma_first: float = 1.0
    gamma_rest: float = 0.1
    joint_init: str = "pre"


class Agic(Attack):
    """AGIC on one update (:meth:`reconstruct`) or on updates from several epochs
    (:meth:`reconstruct_rounds`)."""

    Options = AgicOptions
    name = "agic"

    choices = {"shape": AGIC_SHAPES, "bn_weight": BN_POLICIES, "label_filter": LABEL_FILTERS,
               "joint_init": JOINT_INITS, "labels": ("auto", *LABEL_STRATEGIES), "init": INITS}
    positive = ("beta", "pool")
    non_negative = ("tv", "gamma_first", "gamma_rest", "pre_iterations", "iterations", "lr")

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.config = self.optimizer_config()

    # -- parts ------------------------------------------------------------------------------
    def label_strategy(self, update: Update, spec: DataSpec) -> str:
        """``auto``: labels the server was told, else Yin et al.'s rule (§V-A) while N ≤ C,
        else the label-count estimator (``reclabels``)."""
        return auto_label_strategy(self.options.labels, update, spec.num_classes)

    def layer_weights(self, update: Update, model: nn.Module, observed: Params) -> Optional[dict[str, float]]:
        """α of Eqs. 7–8 from the received (approximated) gradient, or ``None`` (all 1)."""
        o = self.options
        if not o.layer_weights:
            return None
        return agic_layer_weights(model, observed, beta=o.beta, shape=o.shape,
                                  relu=None if o.relu_modifier else False, zero_tol=o.zero_tol, bn=o.bn_weight)

    def _problem(self, update: Update, model: nn.Module, spec: DataSpec):
        strategy = self.label_strategy(update, spec)
        labels = resolve_labels(strategy, update, model, spec)
        observed, simulate, n = gradient_target(update, model)
        weights = self.layer_weights(update, model, observed)
        return strategy, labels, observed, simulate, n, weights

    # -- one update ---------------------------------------------------------------------------
    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec,
                     iterations: Optional[int] = None, seed_offset: int = 0) -> Reconstruction:
        o = self.options
        strategy, labels, observed, simulate, n, weights = self._problem(update, model, spec)
        problem = MatchingProblem(observed, simulate, n, labels, distance="cosine", weights=weights,
                                  priors=[(o.tv, total_variation)], num_classes=spec.num_classes)
        config = self.config if iterations is None else _with_iterations(self.config, iterations)
        first = next(model.parameters())
        result = solve(problem, spec, config, init=o.init, restarts=o.restarts, seed=o.seed + seed_offset,
                       boxed=o.boxed, device=first.device, dtype=first.dtype)
        extras = {
            "attack": getattr(self, "variant", self.name), "label_strategy": strategy,
            "target": "one-batch", "num_steps": update.num_steps, "loss": result.loss,
            "loss_history": result.losses, "restart_losses": result.restart_losses,
            "stopped_on_nan": result.stopped_on_nan,
            "layer_weights": _summarize(weights),
        }
        return Reconstruction(result.inputs, result.labels, extras=extras)

    # -- several epochs (§IV-B) ---------------------------------------------------------------
    def reconstruct_rounds(self, updates: Sequence[Update], model: nn.Module, spec: DataSpec,
                           epochs: Optional[Sequence[int]] = None) -> Reconstruction:
        """Reconstruct a client's samples from updates of several rounds spanning ≥ 2 epochs.

        ``epochs[k]`` is the epoch (pass over the client's data) of ``updates[k]``; by default
        each update's ``metadata["epoch"]``. Every update carries its own round's weights W_k
        (``server_params``). Steps (§IV-B): (1) pre-reconstruct each update with
        ``pre_iterations`` (default: ``iterations``); (2) match the images of consecutive epochs one-to-one
        (:func:`greedy_match` on ``pool``×``pool`` average-pooled MSE, label filter
        ``label_filter``), giving one chain of slots per sample; (3) optimize one image per chain
        against all updates jointly, Eq. 5 with the layer-weighted cosine of Eq. 6, γ =
        ``gamma_first`` for first-epoch updates and ``gamma_rest`` otherwise, plus ζ_TV·TV.

        Returns one image per chain (sample) with its label; ``candidates`` holds each chain's
        pre-reconstruction per epoch (E, N, C, H, W) (the joint result where a chain has no slot
        in an epoch); ``extras["chains"]`` lists each chain's ``(epoch, update, index)`` slots.
        """
        o = self.options
        updates = list(updates)
        if not updates or not all(isinstance(u, Update) for u in updates):
            raise FedleakError("reconstruct_rounds needs a non-empty list of fedleak.Update")
        if not isinstance(spec, DataSpec):
            raise FedleakError(f"reconstruct_rounds needs a fedleak.DataSpec, got {type(spec).__name__}")
        epoch_of = _epochs_of(updates, epochs)
        first = next(model.parameters())
        for u in updates:
            check_update(u, model)
        updates = [u.to(device=first.device, dtype=first.dtype) for u in updates]
        order = sorted(set(epoch_of))

        # (1) pre-reconstruction of every update
        pre: list[Reconstruction] = []
        for k, u in enumerate(updates):
            pre.append(self._reconstruct(u, model, spec, iterations=o.iterations if o.pre_iterations is None else o.pre_iterations, seed_offset=1000 * (k + 1)))

        # (2) matching, epoch by epoch, into chains of slots
        slots = {e: [(k, j) for k, u in enumerate(updates) if epoch_of[k] == e for j in range(pre[k].inputs.shape[0])]
                 for e in order}
        chains: list[list[tuple[int, int, int]]] = [[(order[0], k, j)] for k, j in slots[order[0]]]
        chain_of = {(k, j): c for c, ((_, k, j),) in enumerate(chains)}
        matching_log = []
        for prev_e, e in zip(order, order[1:]):
            a_slots, b_slots = slots[prev_e], slots[e]
            a = torch.stack([pre[k].inputs[j] for k, j in a_slots])
            b = torch.stack([pre[k].inputs[j] for k, j in b_slots])
            allowed = _label_mask(a_slots, b_slots, pre, o.label_filter)
            pairs = greedy_match(a, b, allowed=allowed, pool=o.pool)
            matched_b = set()
            for i, j in pairs:
                c = chain_of[a_slots[i]]
                chains[c].append((e, *b_slots[j]))
                chain_of[b_slots[j]] = c
                matched_b.add(j)
            for j, slot in enumerate(b_slots):
                if j not in matched_b:
                    chain_of[slot] = len(chains)
                    chains.append([(e, *slot)])
            matching_log.append({"epochs": [prev_e, e], "pairs": [[int(i), int(j)] for i, j in pairs]})

        # (3) joint reconstruction
        num = len(chains)
        joint_labels = torch.stack([pre[k].labels[j] for _, k, j in (chain[0] for chain in chains)])
        parts = []
        for k, u in enumerate(updates):
            observed, simulate, n = gradient_target(u, model)
            index = torch.tensor([chain_of[(k, j)] for j in range(n)], device=first.device)
            gamma = o.gamma_first if epoch_of[k] == order[0] else o.gamma_rest
            distance = UpdateDistance(observed, "cosine", self.layer_weights(u, model, observed))
            parts.append((distance, simulate, index, pre[k].labels, gamma))
        generator = torch.Generator(device=first.device)
        generator.manual_seed(int(o.seed))
        if o.joint_init == "pre":
            inputs = torch.stack([pre[k].inputs[j] for _, k, j in (chain[0] for chain in chains)]).clone()
        else:
            inputs = initial_inputs((num, *spec.shape), o.init, generator, first.device, first.dtype)
        inputs.requires_grad_(True)

        def objective(step: int) -> torch.Tensor:
            loss = inputs.new_zeros(())
            for distance, simulate, index, labels, gamma in parts:
                if gamma:
                    loss = loss + gamma * distance(simulate(inputs.index_select(0, index), labels))
            if o.tv:
                loss = loss + o.tv * total_variation(inputs)
            return loss

        project = box_projection(inputs, spec) if o.boxed else None
        run = optimize([inputs], objective, self.config, project=project, description="agic-joint")
        result = inputs.detach()
        candidates = torch.stack([
            torch.stack([_slot_image(chain, e, pre, result[c]) for c, chain in enumerate(chains)]) for e in order
        ])
        extras = {
            "attack": getattr(self, "variant", self.name), "target": "one-batch", "mode": "rounds",
            "epochs": order, "num_updates": len(updates),
            "chains": [[[int(e), int(k), int(j)] for e, k, j in chain] for chain in chains],
            "matching": matching_log, "loss": run.final_loss, "loss_history": run.losses,
            "stopped_on_nan": run.stopped_on_nan,
            "pre_losses": [p.extras["loss"] for p in pre],
            "label_strategy": pre[0].extras["label_strategy"],
        }
        return Reconstruction(result, joint_labels.detach(), candidates=candidates, extras=extras)


def _with_iterations(config: OptimizerConfig, iterations: int) -> OptimizerConfig:
    from dataclasses import replace

    return replace(config, iterations=int(iterations))


def _summarize(weights: Optional[dict[str, float]]) -> Optional[dict]:
    if not weights:
        return None
    values = list(weights.values())
    return {"min": min(values), "max": max(values), "first": values[0], "last": values[-1]}


def _epochs_of(updates: Sequence[Update], epochs: Optional[Sequence[int]]) -> list[int]:
    if epochs is None:
        missing = [k for k, u in enumerate(updates) if u.metadata.get("epoch") is None]
        if missing:
            raise FedleakError(f"reconstruct_rounds needs each update's epoch: pass epochs=[...] or set "
                               f"metadata['epoch'] (missing for updates {missing[:5]})")
        epochs = [u.metadata["epoch"] for u in updates]
    epochs = list(epochs)
    if len(epochs) != len(updates):
        raise FedleakError(f"reconstruct_rounds: {len(epochs)} epoch indices for {len(updates)} updates")
    if any(isinstance(e, bool) or int(e) != e for e in epochs):
        raise FedleakError(f"epoch indices must be integers, got {epochs}")
    return [int(e) for e in epochs]


def _label_mask(a_slots, b_slots, pre: Sequence[Reconstruction], mode: str) -> Optional[torch.Tensor]:
    """AGIC's label filter (§IV-B): may slot i (epoch e) and slot j (epoch e+1) be matched?

    ``batch`` (the paper): the two updates' inferred label lists share at least one label;
    ``image`` (our addition): the two images were reconstructed with the same label; ``none``.
    """
    if mode == "none":
        return None
    if mode == "image":
        la = torch.stack([pre[k].labels[j] for k, j in a_slots]).cpu()
        lb = torch.stack([pre[k].labels[j] for k, j in b_slots]).cpu()
        return la[:, None] == lb[None, :]
    sets = {k: set(p.labels.reshape(-1).tolist()) for k, p in enumerate(pre)}
    return torch.tensor([[bool(sets[ka] & sets[kb]) for kb, _ in b_slots] for ka, _ in a_slots])


def _slot_image(chain, epoch, pre, fallback: torch.Tensor) -> torch.Tensor:
    for e, k, j in chain:
        if e == epoch:
            return pre[k].inputs[j]
    return fallback


def pooled_mse(a: torch.Tensor, b: torch.Tensor, pool: int = 2) -> torch.Tensor:
    """MSE between every image of ``a`` (N) and of ``b`` (M) after ``pool``×``pool`` average pooling
    with stride ``pool`` (AGIC §IV-B, §V-A): an (N, M) matrix. Built on
    :func:`fedleak.metrics.psnr_matrix` (exact differences): MSE = 10^(−PSNR/10) at peak 1."""
    from ..metrics import psnr_matrix

    if a.dim() != 4 or b.dim() != 4 or a.shape[1:] != b.shape[1:]:
        raise FedleakError(f"pooled_mse needs two (N, C, H, W) batches of equal image shape, got "
                           f"{tuple(a.shape)} and {tuple(b.shape)}")
    if pool > 1:
        a, b = F.avg_pool2d(a, pool, stride=pool), F.avg_pool2d(b, pool, stride=pool)
    p = psnr_matrix(a.detach(), b.detach(), data_range=1.0)
    return torch.pow(10.0, -p / 10.0)


def greedy_match(a: torch.Tensor, b: torch.Tensor, allowed: Optional[torch.Tensor] = None, pool: int = 2,
                 fallback: bool = True) -> list[tuple[int, int]]:
    """AGIC's greedy one-to-one matching (§IV-B): pairs (i, j) from the most similar down.

    Similarity is the pooled MSE (:func:`pooled_mse`). Pairs are visited in order of increasing
    MSE (ties: smaller i, then j) and kept when both images are still unmatched and
    ``allowed[i, j]`` (the label filter). (our choice) With ``fallback`` the images the filter left
    unmatched are then matched among themselves the same way, so that min(N, M) pairs are formed
    as the paper states. Returns the pairs in the order they were chosen.
    """
    cost = pooled_mse(a, b, pool).double().cpu()
    n, m = cost.shape
    if allowed is not None:
        allowed = torch.as_tensor(allowed, dtype=torch.bool).cpu()
        if tuple(allowed.shape) != (n, m):
            raise FedleakError(f"greedy_match: label mask has shape {tuple(allowed.shape)}, expected {(n, m)}")
    order = sorted(((float(cost[i, j]), i, j) for i in range(n) for j in range(m)))
    used_a, used_b, pairs = set(), set(), []
    passes = [True, False] if (allowed is not None and fallback) else [True]
    for filtered in passes:
        for _, i, j in order:
            if i in used_a or j in used_b:
                continue
            if filtered and allowed is not None and not bool(allowed[i, j]):
                continue
            used_a.add(i)
            used_b.add(j)
            pairs.append((i, j))
    return pairs


register("agic", Agic,
         "AGIC (Xu et al. 2022): one-batch approximation ΔW/(−μ) + linear layer weights (β) with the ReLU "
         "zero modifier, weighted cosine + TV; reconstruct_rounds for updates of several epochs")
register("agic-no-weights", Agic,
         "AGIC one-batch approximation without layer weights (Table II's 'one-batch' row)",
         layer_weights=False)
register("invg-simulation", GradientInversion,
         "Inverting Gradients forced to simulate the local steps on one shared image set (AGIC/AWA baseline)",
         target="simulation")
