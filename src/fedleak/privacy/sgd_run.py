"""One DP-SGD client's training with gradient canaries, and the canaries' statistics (example-level audit).

The client runs fedleak's own local training (:func:`fedleak.fl.client.local_training`, the victim's code path)
with its DP-SGD defense (Abadi et al. 2016, Alg. 1: per-example clipping to C, noise N(0, σ²C²) on the sum,
the mean over the batch B) for ``rounds`` rounds of E epochs of ⌈N/B⌉ steps: T steps in all. After each
round the server model is the client's (the audited client trains alone: other clients' updates are
post-processing for its examples' privacy). :class:`.sgd_canaries.CanaryStep` adds the Dirac canaries.

Statistics (Steinke et al. NeurIPS 2023 §7; the auditor's observation is the iterates):

* per step t and canary j, x_{t,j} = (B_t·(θ_t − θ_{t+1})/η − S_t)[c_j] / (σC): N(0, 1) when canary j is not in
  step t's batch, N(raw_j/σ, 1) when it is (raw_j = 1 under working clipping), S_t the real examples' clipped
  sum the white-box auditor computes;
* **all-iterates**: with sampling rate q < 1 the Neyman–Pearson statistic of a canary joining each step with
  probability q, Σ_t log(1 − q + q·exp(x_{t,j}/σ − 1/(2σ²))) (the log-likelihood ratio of the claimed
  mechanism, per step); with q = 1 the equivalent Σ_t x_{t,j}/√T (N(0, 1) null, N(√T/σ, 1) included);
* **final-model**: only θ_T is seen: (θ_0 − θ_T)[c_j]·B/(η·σC·√T), no subtraction possible;
* ``mean_shift`` Σ_t x_{t,j}/√T for every q (for the findings: an included canary at the clip norm shifts it
  by q√T/σ).

Faults (to show what the audit detects), planted in fedleak's own DP-SGD code, never in the canaries' view
(:func:`planted`): ``noise=F`` — the defense runs with F × the claimed σ (F = 0: noise off, the client only clips);
``no-clip`` — its per-example clipping function returns the gradients unclipped (noise N(0, σ²C²) still added).
"""

from __future__ import annotations

import contextlib

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from ..errors import FedleakError
from ..fl.client import batch_schedule, local_training
from ..fl.defenses import Defense
from ..types import ClientData, Protocol
from ..types.params import buffers_of, params_of
from .federation import noise_factor
from .sgd_canaries import CanaryStep, DiracCanaries


@dataclass(frozen=True)
class SGDFault:
    """A deliberate misconfiguration of the client's DP-SGD (for testing the audit)."""

    noise_factor: float = 1.0
    no_clip: bool = False

    @classmethod
    def parse(cls, specs) -> "SGDFault":
        noise, no_clip = 1.0, False
        for spec in specs or ():
            key, eq, value = str(spec).strip().partition("=")
            key = key.strip().lower()
            if key == "noise" and eq:
                noise = noise_factor(value)
            elif key == "no-clip" and not eq:
                no_clip = True
            else:
                raise FedleakError(f"--fault {spec!r}: with --level example allowed noise=F, no-clip")
        return cls(noise, no_clip)

    def to_json(self) -> dict:
        return {"noise_factor": self.noise_factor, "no_clip": self.no_clip}


@contextlib.contextmanager
def planted(fault: SGDFault):
    """``no-clip`` planted inside fedleak's own DP-SGD: :func:`fedleak.fl.defenses.clip_per_example`, which
    :meth:`fedleak.fl.defenses.Defense.apply` calls, returns the gradients unclipped for the run (the noise stays
    N(0, σ²C²) on the sum); ``noise=F`` is the defense configured with F·σ. The canaries go through that code."""
    from ..fl import defenses

    original = defenses.clip_per_example
    if fault.no_clip:
        defenses.clip_per_example = lambda per_example, max_norm: per_example
    try:
        yield
    finally:
        defenses.clip_per_example = original


@dataclass
class SGDRunResult:
    included: np.ndarray
    scores: dict  # threat -> (m,) statistics
    mean_shift: np.ndarray
    raw_norm: np.ndarray
    steps: int
    sample_rate: float
    dim: int
    seconds: dict = field(default_factory=dict)


def run_dpsgd(model, data: ClientData, protocol: Protocol, noise: float, clip: float, canaries: DiracCanaries, *,
              rounds: int, fault: SGDFault = SGDFault(), seed: int = 0,
              log: Optional[Callable[[str], None]] = None) -> SGDRunResult:
    """Train one DP-SGD client with the canaries for ``rounds`` rounds; score every canary (module docstring)."""
    start_time = time.perf_counter()
    params, buffers = params_of(model), buffers_of(model)
    names = [(k, v.numel()) for k, v in params.items()]
    d = sum(n for _, n in names)
    if canaries.dim != d:
        raise FedleakError(f"canaries have {canaries.dim} dimensions, the model {d}")
    n = len(data)
    batch = protocol.batch_size_for(n)
    q = batch / n
    inner = Defense("dp-sgd", fault.noise_factor * noise, clip)
    step = CanaryStep(inner, canaries, clip, q, [(k, m) for k, m in names], seed=seed)
    noise_gen = torch.Generator().manual_seed(int(np.random.SeedSequence([int(seed), 2]).generate_state(1)[0]))
    order_gen = torch.Generator().manual_seed(int(np.random.SeedSequence([int(seed), 4]).generate_state(1)[0]))
    m, unit = canaries.count, noise * clip
    mu1 = 1.0 / noise
    llr_sum, x_sum = np.zeros(m), np.zeros(m)
    theta0 = step.gather(params)
    current, t = params, 0
    for r in range(rounds):
        schedule = batch_schedule(n, protocol, order_gen)
        step.known_sums.clear()  # one round's sums at a time: O(steps per round × m) memory
        step.batch_sizes.clear()
        with planted(fault):
            result = local_training(model, current, data.inputs, data.labels, schedule, protocol.lr, buffers=buffers,
                                    defense=step, generator=noise_gen, keep_steps=True, train_mode=protocol.train_mode)
        for i, g in enumerate(result.step_grads):
            observed = step.gather(g) * step.batch_sizes[i]  # B_t·(θ_t − θ_{t+1})/η on the coordinates
            x = (observed - step.known_sums[i]) / unit
            x_sum += x
            if q < 1:
                llr_sum += np.logaddexp(math.log1p(-q), math.log(q) + mu1 * x - mu1 * mu1 / 2)
        t += len(result.step_grads)
        current = {k: v.detach() for k, v in result.params.items()}
        if log:
            log(f"round {r + 1}/{rounds}: {t} DP-SGD steps, {sum(step.sampled[-len(result.step_grads):])} canary "
                f"insertions this round")
    t_rounds = time.perf_counter()
    mean_shift = x_sum / math.sqrt(t)
    final = (theta0 - step.gather(current)) * batch / (protocol.lr * unit * math.sqrt(t))
    scores = {"all-iterates": llr_sum if q < 1 else mean_shift.copy(), "final-model": final}
    return SGDRunResult(canaries.included, scores, mean_shift, canaries.raw_norm(), t, q, d,
                        {"training": t_rounds - start_time, "scoring": time.perf_counter() - t_rounds})
