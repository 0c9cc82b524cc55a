"""AWA: Approximate and Weighted data reconstruction Attack (Song, Wang, Zuazua; arXiv 2308.06822).

A composition of the shared parts (research note ``agic-awa.md``, AWA section):

* **scenario** (§3) — from the protocol: with E local epochs and K minibatches per epoch,
  (1) E = 1, K = 1; (2) E > 1, K = 1; (3) E = 1, K > 1; (4) E > 1, K > 1 (:func:`awa_scenario`).
* **target** — scenarios 1–3: the exact simulation of local training on the dummy data
  (:func:`~fedleak.attacks.targets.simulation_target`; in scenario 3 the batch order is free);
  scenario 4 with reshuffling: the interpolated per-epoch target (Eqs. 19–21,
  :func:`~fedleak.attacks.targets.interpolated_epoch_target`), epoch ``epoch`` (the paper
  uses e = 1). Without reshuffling every epoch has the same batches, so scenario 4 is simulated
  exactly too (our reading: §3's argument rests on the shuffling).
* **distance** — the layer-weighted squared Euclidean distance of Eq. 23 with the type-wise
  linearly increasing weights of Eq. 24 and the enhancement of the worst layers (Eqs. 25–30),
  :mod:`~fedleak.attacks.layer_weights`. (our choice) The enhanced subset is recomputed every
  ``enhance_every`` objective evaluations (iterations, with Adam), from the current dummy update.
* **Bayesian optimization** (§4.2.2, Eqs. 31–39) of θ = (ω_conv, ω_bn, ω_fc, ω_enh, p_μ, p_σ) over
  [1, 1000]⁴ × [0, 0.5]² (Table 2): scikit-optimize's ``gp_minimize`` (Gaussian-process
  surrogate, expected improvement), ``bayes_trials`` trials of which the first
  ``bayes_initial`` random. The objective (Eq. 33) is the *unweighted* squared distance between
  the true update and the update of the reconstruction obtained with θ (we hand its log10 to the
  GP; same minimizer). Every trial starts from the same initial dummy data (our choice), and the
  best trial's reconstruction is returned.
* **optimizer** — Adam, lr 0.1, 1,000 iterations (§5.1, Table 1); labels known (§5.1).

Both sides of the distance are summed gradients (update / −η): the weighted L2 of the weight
updates is the same up to the constant factor η², and the relative errors of Eqs. 25–26 are
scale-free.

Named variants: ``awa`` (with Bayesian optimization) and ``awa-no-bo`` (fixed θ; the defaults are
the paper's Table 3 values for its Case 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import nn

from ..errors import FedleakError
from ..types import DataSpec, Params, Protocol, Reconstruction, Update
from .base import Attack, AttackOptions, auto_label_strategy, register
from .labels import LABEL_STRATEGIES, resolve_labels
from .layer_weights import EnhancedWeights, awa_base_weights
from .losses import DISTANCES, total_variation, update_distance
from .matching import INITS, MatchingProblem, MatchingResult, solve
from .targets import interpolated_epoch_target, simulation_target

TARGETS = ("auto", "simulation", "interpolated")
PARAMETERS = ("omega_conv", "omega_bn", "omega_fc", "omega_enh", "p_mu", "p_sigma")


def awa_scenario(protocol: Protocol, num_samples: int) -> int:
    """AWA §3: 1 (E=1, K=1), 2 (E>1, K=1), 3 (E=1, K>1) or 4 (E>1, K>1); FedSGD is scenario 1."""
    epochs = protocol.local_epochs()
    batches = protocol.batches_per_epoch(num_samples)
    if batches == 1:
        return 1 if epochs == 1 else 2
    return 3 if epochs == 1 else 4


@dataclass(frozen=True)
class AwaOptions(AttackOptions):
    """AWA's options. Defaults of θ: the paper's Table 3 values for Case 4."""

    omega_conv: float = 655.98
    omega_bn: float = 692.94
    omega_fc: float = 283.42
    omega_enh: float = 665.28
    p_mu: float = 0.40
    p_sigma: float = 0.33
    enhance_every: int = 100
    target: str = "auto"
    epoch: int = 1
    # Bayesian optimization (Table 2 ranges)
    bayes_trials: int = 50
    bayes_initial: int = 10
    bayes_iterations: int = 0  # 0: each trial runs `iterations`
    bayes_log: bool = True
    omega_range: tuple = (1.0, 1000.0)
    p_range: tuple = (0.0, 0.5)
    # objective + optimizer (§5.1)
    distance: str = "l2"
    tv: float = 0.0
    optimizer: str = "adam"
    lr: float = 0.1
    iterations: int = 1000
    schedule: str = "none"
    signed: bool = False
    boxed: bool = False
    restarts: int = 1
    init: str = "randn"
    labels: str = "auto"
    log_every: int = 10
    checkpoint_every: int = 0  # activation checkpointing of the simulated local steps every k steps (0: off)


class Awa(Attack):
    """AWA on one FedAvg (or FedSGD) update."""

    Options = AwaOptions
    name = "awa"

    choices = {"target": TARGETS, "distance": DISTANCES, "labels": ("auto", *LABEL_STRATEGIES), "init": INITS}
    positive = ("enhance_every",)
    non_negative = ("bayes_trials", "bayes_initial", "bayes_iterations", "iterations", "checkpoint_every")

    def __init__(self, **options) -> None:
        super().__init__(**options)
        o = self.options
        for name, rng, low in (("omega_range", o.omega_range, 0.0), ("p_range", o.p_range, 0.0)):
            if len(tuple(rng)) != 2 or not (low <= float(rng[0]) < float(rng[1])):
                raise FedleakError(f"AWA option {name!r} must be an increasing pair (low, high), got {rng!r}")
        if float(o.omega_range[0]) <= 0 or float(o.p_range[1]) > 1:
            raise FedleakError("AWA search ranges: omegas must be positive and proportions at most 1")
        self.config = self.optimizer_config()
        self.theta = {name: float(getattr(o, name)) for name in PARAMETERS}

    # -- parts ------------------------------------------------------------------------------
    def label_strategy(self, update: Update, spec: DataSpec) -> str:
        """``auto``: known labels (the paper's assumption, §5.1) when the server was told them,
        else Yin et al.'s rule while N ≤ C, else the label-count estimator."""
        return auto_label_strategy(self.options.labels, update, spec.num_classes)

    def target(self, update: Update, model: nn.Module) -> tuple[str, tuple[Params, Callable, int]]:
        """The target for the update's scenario (see the module docstring)."""
        o = self.options
        scenario = awa_scenario(update.protocol, update.num_samples)
        kind = o.target
        if kind == "auto":
            kind = "interpolated" if (scenario == 4 and update.protocol.reshuffle) else "simulation"
        if kind == "interpolated":
            return kind, interpolated_epoch_target(update, model, o.epoch, o.checkpoint_every)
        return kind, simulation_target(update, model, per_epoch_inputs=False, checkpoint_every=o.checkpoint_every)

    def _solve(self, theta: dict, observed: Params, simulate: Callable, n: int, labels, model: nn.Module,
               spec: DataSpec, iterations: int) -> tuple[MatchingResult, EnhancedWeights]:
        o = self.options
        base = awa_base_weights(model, theta["omega_conv"], theta["omega_bn"], theta["omega_fc"])
        weights = EnhancedWeights(model, base, theta["omega_enh"], theta["p_mu"], theta["p_sigma"])
        calls = [0]

        def enhanced_simulate(inputs: torch.Tensor, lab: torch.Tensor) -> Params:
            out = simulate(inputs, lab)
            if calls[0] % o.enhance_every == 0:
                weights.refresh(out, observed)
            calls[0] += 1
            return out

        problem = MatchingProblem(observed, enhanced_simulate, n, labels, distance=o.distance, weights=weights,
                                  priors=[(o.tv, total_variation)], num_classes=spec.num_classes)
        first = next(model.parameters())
        config = replace(self.config, iterations=int(iterations))
        result = solve(problem, spec, config, init=o.init, restarts=o.restarts, seed=o.seed, boxed=o.boxed,
                       device=first.device, dtype=first.dtype)
        return result, weights

    @staticmethod
    def update_error(observed: Params, simulate: Callable, inputs: torch.Tensor, labels: torch.Tensor) -> float:
        """Eq. 33: the unweighted squared Euclidean distance of the reconstruction's update."""
        with torch.enable_grad():  # the simulation differentiates the model, not the inputs
            simulated = simulate(inputs.detach(), labels)
        value = float(update_distance(observed, {k: v.detach() for k, v in simulated.items()}, "l2"))
        return value if math.isfinite(value) else float("inf")

    # -- attack -----------------------------------------------------------------------------
    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        o = self.options
        scenario = awa_scenario(update.protocol, update.num_samples)
        strategy = self.label_strategy(update, spec)
        labels = resolve_labels(strategy, update, model, spec)
        target_kind, (observed, simulate, n) = self.target(update, model)
        trials: list[dict] = []
        if o.bayes_trials > 0:
            theta, best, weights = self._bayes(observed, simulate, n, labels, model, spec, trials)
        else:
            theta = dict(self.theta)
            best, weights = self._solve(theta, observed, simulate, n, labels, model, spec, o.iterations)
        extras = {
            "attack": getattr(self, "variant", self.name), "label_strategy": strategy,
            "scenario": scenario, "target": target_kind, "epoch": o.epoch if target_kind == "interpolated" else None,
            "theta": theta, "bayes_trials": trials, "loss": best.loss, "loss_history": best.losses,
            "update_error": self.update_error(observed, simulate, best.inputs, best.labels),
            "enhanced_layers": weights.enhanced_modules(), "stopped_on_nan": best.stopped_on_nan,
        }
        return Reconstruction(best.inputs, best.labels, extras=extras)

    def _bayes(self, observed, simulate, n, labels, model, spec, trials: list):
        """θ by Bayesian optimization (§4.2.2): GP surrogate + expected improvement (skopt)."""
        try:
            from skopt import gp_minimize
            from skopt.space import Real
        except ImportError:  # pragma: no cover - a declared dependency
            raise FedleakError("AWA's Bayesian optimization needs scikit-optimize (pip install scikit-optimize)") from None
        o = self.options
        low_w, high_w = (float(v) for v in o.omega_range)
        low_p, high_p = (float(v) for v in o.p_range)
        space = [Real(low_w, high_w, name=n_) for n_ in PARAMETERS[:4]] + \
                [Real(low_p, high_p, name=n_) for n_ in PARAMETERS[4:]]
        trial_iterations = o.bayes_iterations or o.iterations
        best: dict = {}

        def objective(point) -> float:
            theta = {name: float(v) for name, v in zip(PARAMETERS, point)}
            result, weights = self._solve(theta, observed, simulate, n, labels, model, spec, trial_iterations)
            error = self.update_error(observed, simulate, result.inputs, result.labels)
            trials.append({"theta": theta, "update_error": error})
            if not best or error < best["error"]:
                best.update(error=error, theta=theta, result=result, weights=weights)
            if not math.isfinite(error):
                return 1e30 if not o.bayes_log else 30.0
            return math.log10(max(error, 1e-300)) if o.bayes_log else error

        calls = int(o.bayes_trials)
        initial = max(1, min(int(o.bayes_initial), calls))
        with _quiet_sklearn():
            gp_minimize(objective, space, n_calls=calls, n_initial_points=initial, acq_func="EI",
                        random_state=int(o.seed))
        theta, result, weights = best["theta"], best["result"], best["weights"]
        if trial_iterations != o.iterations:
            result, weights = self._solve(theta, observed, simulate, n, labels, model, spec, o.iterations)
        return theta, result, weights


class _quiet_sklearn:
    """Silence the GP's convergence / repeated-point warnings during the search."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


register("awa", Awa,
         "AWA (Song et al. 2023): exact simulation (scenarios 1-3) or interpolated per-epoch target (4), "
         "type-wise linear layer weights + enhancement, weights tuned by Bayesian optimization")
register("awa-no-bo", Awa,
         "AWA with fixed layer-weight parameters (Table 3, Case 4 values), no Bayesian optimization",
         bayes_trials=0)
