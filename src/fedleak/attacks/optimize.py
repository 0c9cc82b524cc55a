"""The one optimization loop every optimization-based attack runs.

Optimizers: Adam (IG, Dimitrov et al., AGIC, AWA), L-BFGS (DLG, iDLG), SGD. Learning-rate
schedules: ``none``; ``step`` — ×``decay`` at 3/8, 5/8 and 7/8 of the iterations (Geiping et al.
2020, "Inverting Gradients", §4 / their released code); ``exp`` — continuous exponential decay
η_t = η·γ^(t/interval) (optax ``exponential_decay`` with ``staircase=False``, as in Dimitrov et
al.'s scripts, research note §A.1); ``cosine``. ``signed`` replaces gradients by their sign
before the step (IG). ``project`` runs after each step (e.g. IG's box constraint). A NaN guard
stops the run and restores the last finite variables (Dimitrov et al.'s loop stops when images
become NaN); ``stop_loss`` ends the run once the loss is that small. Every iteration's
``(step, total, loss)`` goes to a callback, or to the reporter installed with
:func:`progress_reporter` (the CLI's progress bar), or else to the ``fedleak`` logger (INFO, a line at
least every ``FEDLEAK_PROGRESS_INTERVAL`` seconds, default 30, with a measured-rate ETA:
``logging.basicConfig(level=logging.INFO)`` shows an API user's long attack); see :mod:`.progress`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch

from ..errors import FedleakError
from .progress import ProgressFn, loop_progress, progress_reporter  # noqa: F401  (public here too)

OPTIMIZERS = ("adam", "lbfgs", "sgd")
SCHEDULES = ("none", "step", "exp", "cosine")


@dataclass(frozen=True)
class OptimizerConfig:
    """How to run the loop. ``decay``/``decay_interval`` parametrize ``step`` and ``exp`` schedules."""

    optimizer: str = "adam"
    lr: float = 0.1
    iterations: int = 1000
    schedule: str = "none"
    decay: float = 0.1
    decay_interval: int = 1
    signed: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    log_every: int = 10
    lbfgs_inner: int = 20
    line_search: bool = True
    stop_loss: float = 0.0
    fused: bool = False  # Adam as torch's fused kernel (one pass over the variables per step; same update rule)

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise FedleakError(f"unknown optimizer {self.optimizer!r}; allowed: {', '.join(OPTIMIZERS)}")
        if self.schedule not in SCHEDULES:
            raise FedleakError(f"unknown lr schedule {self.schedule!r}; allowed: {', '.join(SCHEDULES)}")
        if int(self.iterations) != self.iterations or self.iterations < 0:
            raise FedleakError(f"iterations must be a non-negative integer, got {self.iterations}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise FedleakError(f"attack lr must be positive, got {self.lr}")
        if int(self.log_every) != self.log_every or self.log_every < 1:
            raise FedleakError(f"log_every must be a positive integer, got {self.log_every}")

    def lr_factor(self, step: int) -> float:
        """Multiplier of the base lr at 0-based ``step``."""
        n = max(self.iterations, 1)
        if self.schedule == "step":
            milestones = (3 * n // 8, 5 * n // 8, 7 * n // 8)
            return self.decay ** sum(step >= m for m in milestones)
        if self.schedule == "exp":
            return self.decay ** (step / self.decay_interval)
        if self.schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * step / n))
        return 1.0


@dataclass
class OptimizeResult:
    """Final (last finite) variables, the loss every ``log_every`` steps, and how the run ended."""

    variables: list[torch.Tensor]
    losses: list[float] = field(default_factory=list)
    final_loss: float = float("nan")
    steps: int = 0
    stopped_on_nan: bool = False


def _make_optimizer(config: OptimizerConfig, variables: Sequence[torch.Tensor]):
    if config.optimizer == "adam":
        # torch's fused Adam kernel exists for CPU and CUDA tensors; elsewhere the plain loop (same update rule)
        fused = config.fused and all(v.is_floating_point() and v.device.type in ("cpu", "cuda") for v in variables)
        return torch.optim.Adam(variables, lr=config.lr, betas=config.betas, eps=config.eps, fused=fused or None)
    if config.optimizer == "sgd":
        return torch.optim.SGD(variables, lr=config.lr)
    # DLG calls torch's L-BFGS step (up to 20 inner iterations) once per outer iteration.
    return torch.optim.LBFGS(variables, lr=config.lr, max_iter=config.lbfgs_inner, history_size=100,
                             line_search_fn="strong_wolfe" if config.line_search else None)


def optimize(
    variables: Sequence[torch.Tensor],
    objective: Callable[[int], torch.Tensor],
    config: OptimizerConfig,
    *,
    project: Optional[Callable[[], None]] = None,
    progress: Optional[ProgressFn] = None,
    description: str = "",
) -> OptimizeResult:
    """Minimize ``objective(step)`` over ``variables`` (leaf tensors, modified in place).

    ``objective`` returns a scalar loss tensor built from the variables; it may use ``step`` for
    schedules of its own (e.g. Dimitrov et al.'s ramped scale factor). Returns the variables at
    the end, or at the last step whose loss was finite.
    """
    variables = list(variables)
    for v in variables:
        if not v.requires_grad:
            v.requires_grad_(True)
    optimizer = _make_optimizer(config, variables)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, config.lr_factor)
    result = OptimizeResult(variables)
    last_good = [v.detach().clone() for v in variables]
    with loop_progress(config.iterations, "iteration", description, progress) as tick:
        _run(variables, objective, config, optimizer, scheduler, result, last_good, project, tick)
    return result


def _run(variables, objective, config, optimizer, scheduler, result, last_good, project, tick) -> None:
    """The iterations of :func:`optimize`; ``tick(step, loss)`` after every one (progress, interrupt check)."""
    for step in range(config.iterations):
        holder: dict[str, torch.Tensor] = {}

        def closure():
            optimizer.zero_grad(set_to_none=True)
            loss = objective(step)
            # only the attack's variables: the model weights' gradients would be wasted work
            loss.backward(inputs=variables)
            if config.signed:
                for v in variables:
                    if v.grad is not None:
                        v.grad.sign_()
            holder["loss"] = loss.detach()
            return loss

        if config.optimizer == "lbfgs":
            optimizer.step(closure)
        else:
            closure()
            optimizer.step()
        scheduler.step()
        loss_value = float(holder["loss"]) if (step % config.log_every == 0 or step == config.iterations - 1) else None
        finite = all(bool(torch.isfinite(v).all()) for v in variables) if loss_value is not None else True
        if loss_value is not None and (not math.isfinite(loss_value) or not finite):
            with torch.no_grad():
                for v, good in zip(variables, last_good):
                    v.copy_(good)
            result.stopped_on_nan = True
            result.steps = step
            break
        if project is not None:
            with torch.no_grad():
                project()
        if loss_value is not None:
            result.losses.append(loss_value)
            result.final_loss = loss_value
            with torch.no_grad():
                for v, good in zip(variables, last_good):
                    good.copy_(v)
        result.steps = step + 1
        # every iteration reports (the ETA needs the count); off the CPU the loss is read (a device
        # sync) only every log_every steps and the last one read stands in between
        now = loss_value if loss_value is not None else (
            float(holder["loss"]) if holder["loss"].device.type == "cpu" else result.final_loss)
        tick(step + 1, now)
        if loss_value is not None and loss_value <= config.stop_loss:
            break  # converged: the distance is as small as asked for


def best_of_restarts(run: Callable[[int], tuple[object, float]], restarts: int):
    """Run ``run(trial)`` ``restarts`` times and keep the result with the lowest final loss (IG §4)."""
    if restarts < 1:
        raise FedleakError(f"restarts must be at least 1, got {restarts}")
    best, best_loss, losses = None, float("inf"), []
    for trial in range(restarts):
        outcome, loss = run(trial)
        losses.append(loss)
        if best is None or (math.isfinite(loss) and loss < best_loss):
            best, best_loss = outcome, loss
    return best, losses
