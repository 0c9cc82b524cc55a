"""The classic optimization attacks: DLG, iDLG and Inverting Gradients.

* **DLG** (Zhu et al. 2019, "Deep Leakage from Gradients", Alg. 1): dummy inputs *and* soft
  labels optimized jointly with L-BFGS (lr 1) to minimize the squared L2 distance to the
  gradient.
* **iDLG** (Zhao et al. 2020): the label of a single sample read analytically from the sign of the
  last layer's gradient, then DLG on the inputs only.
* **Inverting Gradients** (Geiping et al. 2020, §4): cosine distance + λ_TV·TV, Adam (lr 0.1) on
  signed gradients, step decay ×0.1 at 3/8, 5/8, 7/8 of the iterations, box constraint, restarts
  keeping the lowest loss. On a FedAvg update it simulates the local steps with one shared set of
  N images (Geiping et al. §6 "federated averaging" = Dimitrov et al.'s ``shared`` baseline).
* **DLG-Adam**: DLG's L2 objective with Adam on known labels (the baseline of AGIC and AWA).

All are configurations of one class (:class:`GradientInversion`): a target (full-batch gradient
or local-step simulation) + distance + TV prior + the one optimizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..types import DataSpec, Reconstruction, Update
from .base import Attack, AttackOptions, auto_label_strategy, register
from .labels import LABEL_STRATEGIES, resolve_labels
from .losses import DISTANCES, total_variation
from .matching import INITS, MatchingProblem, solve
from .targets import gradient_target, simulation_target

TARGETS = ("auto", "gradient", "simulation")


@dataclass(frozen=True)
class GradientInversionOptions(AttackOptions):
    """Options; defaults are Inverting Gradients' (Geiping et al. §4), scaled to a CPU budget."""

    distance: str = "cosine"
    optimizer: str = "adam"
    lr: float = 0.1
    iterations: int = 2000
    schedule: str = "step"
    signed: bool = True
    tv: float = 1e-4
    restarts: int = 1
    boxed: bool = True
    init: str = "randn"
    labels: str = "auto"
    target: str = "auto"
    log_every: int = 10
    stop_loss: float = 0.0
    checkpoint_every: int = 0  # simulation target: activation checkpointing every k local steps (0: off)


class GradientInversion(Attack):
    """DLG / iDLG / Inverting Gradients on FedSGD gradients or FedAvg updates."""

    Options = GradientInversionOptions
    name = "gradient-inversion"

    choices = {"distance": DISTANCES, "target": TARGETS, "labels": ("auto", *LABEL_STRATEGIES), "init": INITS}
    non_negative = ("checkpoint_every",)

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.config = self.optimizer_config()

    def _label_strategy(self, update: Update, spec: DataSpec) -> str:
        return auto_label_strategy(self.options.labels, update, spec.num_classes, few="idlg")

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        o = self.options
        strategy = self._label_strategy(update, spec)
        labels = resolve_labels(strategy, update, model, spec, seed=o.seed)
        use_simulation = o.target == "simulation" or (o.target == "auto" and not update.is_fedsgd)
        if use_simulation:
            observed, simulate, n = simulation_target(update, model, per_epoch_inputs=False,
                                                     checkpoint_every=o.checkpoint_every)
        else:
            observed, simulate, n = gradient_target(update, model, scale=1.0 if update.is_fedsgd else None)
        problem = MatchingProblem(observed, simulate, n, labels, distance=o.distance,
                                  priors=[(o.tv, total_variation)], num_classes=spec.num_classes)
        first = next(model.parameters())
        result = solve(problem, spec, self.config, init=o.init, restarts=o.restarts, seed=o.seed, boxed=o.boxed,
                       device=first.device, dtype=first.dtype)
        extras = {"attack": getattr(self, "variant", self.name), "label_strategy": strategy,
                  "target": "simulation" if use_simulation else "gradient", "loss": result.loss,
                  "loss_history": result.losses, "restart_losses": result.restart_losses,
                  "stopped_on_nan": result.stopped_on_nan}
        return Reconstruction(result.inputs, result.labels, extras=extras)


register("inverting-gradients", GradientInversion,
         "Inverting Gradients (Geiping et al. 2020): cosine + TV, signed Adam, step decay, restarts; "
         "FedAvg updates via a shared-image local-step simulation")
register("dlg", GradientInversion,
         "DLG (Zhu et al. 2019): joint inputs + soft labels, squared L2, L-BFGS",
         distance="l2", optimizer="lbfgs", lr=1.0, iterations=300, schedule="none", signed=False, tv=0.0,
         boxed=False, labels="optimize", log_every=1)
register("idlg", GradientInversion,
         "iDLG (Zhao et al. 2020): analytic label of a single sample, then DLG on the inputs",
         distance="l2", optimizer="lbfgs", lr=1.0, iterations=300, schedule="none", signed=False, tv=0.0,
         boxed=False, labels="idlg", log_every=1)
register("dlg-adam", GradientInversion,
         "DLG's squared-L2 objective with Adam and given labels (the baseline of AGIC and AWA)",
         distance="l2", optimizer="adam", lr=0.1, schedule="none", signed=False, tv=0.0, boxed=False)
