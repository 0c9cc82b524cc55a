"""Update matching: the composition every optimization-based attack runs.

An attack supplies a *target* (what observed quantity to match and how to simulate it from dummy
inputs), a distance with layer weights, priors, and an optimizer configuration;
:func:`solve` initializes the dummy inputs (and, for DLG, dummy soft labels), builds the loss

    L(X) = fac_t · D(observed, simulate(X, y)) + Σ_k λ_k · R_k(X)

and runs the one loop of :mod:`fedleak.attacks.optimize`, with restarts keeping the lowest loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

import torch

from ..errors import FedleakError
from ..types import DataSpec, Params
from .losses import UpdateDistance
from .optimize import OptimizerConfig, best_of_restarts, optimize

INITS = ("randn", "rand", "zeros")

Prior = tuple[float, Callable[[torch.Tensor], torch.Tensor]]


@dataclass
class MatchingProblem:
    """What to match: ``observed`` vs ``simulate(inputs, labels)`` under ``distance``.

    ``labels`` fixed class indices, or ``None`` to optimize soft labels jointly (DLG).
    ``scale(step)`` multiplies the distance (Dimitrov et al.'s ramped factor; default 1).
    ``names`` restricts the distance to some parameter tensors.
    """

    observed: Params
    simulate: Callable[[torch.Tensor, torch.Tensor], Params]
    num_inputs: int
    labels: Optional[torch.Tensor]
    distance: str = "l2"
    weights: Optional[Mapping[str, float]] = None
    priors: Sequence[Prior] = ()
    scale: Optional[Callable[[int], float]] = None
    names: Optional[Sequence[str]] = None
    num_classes: int = 0


@dataclass
class MatchingResult:
    inputs: torch.Tensor
    labels: torch.Tensor
    loss: float
    losses: list[float] = field(default_factory=list)
    restart_losses: list[float] = field(default_factory=list)
    stopped_on_nan: bool = False


def initial_inputs(shape: Sequence[int], init: str, generator: torch.Generator, device, dtype) -> torch.Tensor:
    """Dummy inputs in normalized space: N(0,1) (Dimitrov et al., IG), U[0,1) or zeros."""
    if init == "randn":
        return torch.randn(tuple(shape), generator=generator, device=device, dtype=dtype)
    if init == "rand":
        return torch.rand(tuple(shape), generator=generator, device=device, dtype=dtype)
    if init == "zeros":
        return torch.zeros(tuple(shape), device=device, dtype=dtype)
    raise FedleakError(f"unknown init {init!r}; allowed: {', '.join(INITS)}")


def box_projection(inputs: torch.Tensor, spec: DataSpec) -> Callable[[], None]:
    """IG's box constraint: keep de-normalized pixels inside ``spec.pixel_range``."""
    lo, hi = spec.pixel_range
    mean = torch.as_tensor(spec.mean, dtype=inputs.dtype, device=inputs.device).view(1, -1, 1, 1)
    std = torch.as_tensor(spec.std, dtype=inputs.dtype, device=inputs.device).view(1, -1, 1, 1)
    low, high = (lo - mean) / std, (hi - mean) / std

    def project() -> None:
        inputs.data = torch.max(torch.min(inputs.data, high), low)

    return project


def solve(problem: MatchingProblem, spec: DataSpec, config: OptimizerConfig, *, init: str = "randn",
          restarts: int = 1, seed: int = 0, boxed: bool = False, device=None, dtype=torch.float32) -> MatchingResult:
    """Optimize dummy inputs (and soft labels if ``problem.labels`` is None) to match the update."""
    if problem.labels is None and problem.num_classes < 1:
        raise FedleakError("joint label optimization needs num_classes")
    generator = torch.Generator(device=device or "cpu")
    generator.manual_seed(int(seed))
    distance = UpdateDistance(problem.observed, problem.distance, problem.weights, problem.names)

    def attempt(trial: int):
        inputs = initial_inputs((problem.num_inputs, *spec.shape), init, generator, device, dtype).requires_grad_(True)
        variables = [inputs]
        label_logits = None
        if problem.labels is None:
            label_logits = torch.randn((problem.num_inputs, problem.num_classes), generator=generator,
                                       device=device, dtype=dtype).requires_grad_(True)
            variables.append(label_logits)

        def current_labels() -> torch.Tensor:
            return problem.labels if label_logits is None else torch.softmax(label_logits, dim=-1)

        def objective(step: int) -> torch.Tensor:
            simulated = problem.simulate(inputs, current_labels())
            loss = distance(simulated)
            if problem.scale is not None:
                loss = loss * problem.scale(step)
            for weight, prior in problem.priors:
                if weight:
                    loss = loss + weight * prior(inputs)
            return loss

        project = box_projection(inputs, spec) if boxed else None
        run = optimize(variables, objective, config, project=project)
        labels = problem.labels if label_logits is None else label_logits.detach().argmax(-1)
        outcome = MatchingResult(inputs.detach(), labels.detach(), run.final_loss, run.losses,
                                 stopped_on_nan=run.stopped_on_nan)
        loss = run.final_loss if math.isfinite(run.final_loss) else float("inf")
        return outcome, loss

    best, losses = best_of_restarts(attempt, restarts)
    best.restart_losses = losses
    return best
