"""Example-level DP audit through the user's real Opacus (issue #42, item 1): ``fedleak.privacy.audit_opacus``.

The user's own training function runs unchanged — their optimizer, ``DataLoader``, ``PrivacyEngine.make_private``
(or ``make_private_with_epsilon``) and loop — on their model with a **canary block** attached and their dataset with
**canary examples** appended (Steinke, Nasr, Jagielski, NeurIPS 2023, Alg. 1: each of m canaries included
independently with probability ½; §7 white-box Dirac canaries, here as real examples):

* :class:`CanaryModel` wraps the user's model with an ``nn.Embedding(m + 1, 1)`` (a layer Opacus computes
  per-sample gradients for). A canary example (its input marked by :data:`SENTINEL` and its index) outputs logits
  whose value is 0 and whose gradient reaches only its own embedding row, scaled by :data:`GAIN`: its per-sample
  gradient is GAIN·∂ℓ/∂z₀ on one coordinate, nothing on the user's parameters; a real example's output is the
  user's model's, nothing on the canary rows. So **Opacus's own** sampler decides when a canary is in a batch,
  **its own** per-sample clipping cuts the canary to −C on its coordinate, **its own** noise lands on it;
* a global optimizer step pre-hook (torch's, read-only) records the canary rows of the gradient Opacus hands to
  the user's optimizer after clipping, noise and scaling: x_{t,j} = −g_{t,j}·B/(σC) (B, σ, C read from the
  ``DPOptimizer`` that is stepping): N(0, 1) when canary j is not in the batch, N(1/σ, 1) when it is;
* the claim under test is the user's own ``PrivacyEngine`` accountant's ε at δ (``engine.get_epsilon(δ)``).

Statistics and verdict as :mod:`.sgd_run` and :mod:`.sgd_verdict`: all-iterates Σ_t log(1 − q + q·e^{x/σ − 1/(2σ²)})
(q < 1) or Σ_t x/√T (q = 1), final model the canary rows' weights at the end; guesses pre-registered from σ, q, T
and m (never from the coins). For q < 1 the headline bound is the f-DP bound of the Poisson-subsampled Gaussian's own
family (:mod:`.subsampled_fdp`, its assumption printed) when the batch sizes are Poisson, else the assumption-free
one; both are recorded. Loss contract: a classification
loss that falls as logit 0 rises for label 0 (cross-entropy, NLL of log-softmax, MSE on one-hot): the canary's
gradient is then negative; its size does not matter (it is clipped).
"""

from __future__ import annotations

import inspect
import json
import math
import platform
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
from torch import nn

from ..errors import FedleakError

#: first input value of a canary example (its second is the canary's index); no real example may start with it
SENTINEL = -987654.25
#: the canary's gradient before clipping, in units of ∂ℓ/∂z₀ (clipped to C by Opacus whatever C is)
GAIN = 1e6


class CanaryModel(nn.Module):
    """The user's model plus m canary coordinates (an ``nn.Embedding(m + 1, 1)``; row m is the real examples')."""

    def __init__(self, model: nn.Module, count: int) -> None:
        super().__init__()
        self.model, self.count = model, int(count)
        self.canary = nn.Embedding(self.count + 1, 1)
        nn.init.zeros_(self.canary.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(x.shape[0], -1)
        is_canary = flat[:, 0] == SENTINEL
        index = torch.where(is_canary, flat[:, 1].round().long().clamp(0, self.count - 1),
                            torch.full_like(flat[:, 1], self.count).long())
        out = self.model(torch.where(is_canary.view(-1, *[1] * (x.dim() - 1)), torch.zeros_like(x), x))
        e = self.canary(index)[:, 0]
        push = (e - e.detach()) * GAIN * is_canary.to(e.dtype)  # value 0; gradient GAIN on a canary's own row
        logit0 = torch.zeros_like(out)
        logit0[:, 0] = 1.0
        return torch.where(is_canary[:, None], push[:, None] * logit0, out)


def canary_inputs(like: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Canary examples shaped like one real input: zeros, the sentinel, the index."""
    x = torch.zeros((len(index), *like.shape), dtype=like.dtype)
    flat = x.view(len(index), -1)
    flat[:, 0] = SENTINEL
    flat[:, 1] = torch.as_tensor(index, dtype=like.dtype)
    return x


class _Recorder:
    """Reads the canary rows of the privatized gradient each time the user's optimizer steps (read-only hook)."""

    def __init__(self, weight: nn.Parameter, count: int) -> None:
        self.weight, self.count = weight, count
        self.x: list[np.ndarray] = []
        self.settings: list[tuple] = []
        self.batch_sizes: list[int] = []

    def __call__(self, optimizer, args, kwargs) -> None:
        from opacus.optimizers import DPOptimizer

        if isinstance(optimizer, DPOptimizer) or not any(p is self.weight for g in optimizer.param_groups
                                                          for p in g["params"]):
            return
        dp = _stepping_dp_optimizer()
        if dp is None or self.weight.grad is None:
            raise FedleakError("train: the model's optimizer stepped outside Opacus's DPOptimizer (make_private's "
                               "optimizer must be the one that steps)")
        scale = dp.expected_batch_size * dp.accumulated_iterations if dp.loss_reduction == "mean" else 1.0
        unit = float(dp.noise_multiplier) * float(dp.max_grad_norm)
        g = self.weight.grad.detach()[: self.count, 0].double().numpy()
        self.x.append(-g * scale / unit if unit > 0 else -g * scale)
        self.settings.append((float(dp.noise_multiplier), float(dp.max_grad_norm)))
        sample = getattr(self.weight, "grad_sample", None)  # the batch the sampler drew (rows per example)
        self.batch_sizes.append(int(sample.shape[0]) if isinstance(sample, torch.Tensor) else -1)


def _stepping_dp_optimizer():
    """The ``DPOptimizer`` whose ``step`` is calling the wrapped optimizer (found on the call stack)."""
    from opacus.optimizers import DPOptimizer

    frame = inspect.currentframe()
    for _ in range(12):
        frame = frame.f_back if frame is not None else None
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, DPOptimizer):
            return owner
    return None


def _dataset_with_canaries(dataset, included: np.ndarray):
    from torch.utils.data import ConcatDataset, TensorDataset

    try:
        n = len(dataset)
        x0 = dataset[0][0]
    except Exception as exc:  # noqa: BLE001 - any failure here is the user's dataset
        raise FedleakError(f"dataset: must be a sized torch Dataset of (input, label) pairs ({exc})") from None
    if not isinstance(x0, torch.Tensor) or x0.numel() < 2:
        raise FedleakError("dataset: inputs must be tensors of at least 2 values (a canary example is marked in them)")
    tensors = getattr(dataset, "tensors", None)
    firsts = (tensors[0].reshape(n, -1)[:, 0] if tensors else
              torch.stack([dataset[i][0].reshape(-1)[0] for i in range(n)]))
    if bool((firsts == SENTINEL).any()):
        raise FedleakError(f"dataset: a real example starts with the canary marker {SENTINEL}; rescale the inputs")
    index = np.nonzero(included)[0]
    if len(index) > n:
        raise FedleakError(f"canaries: {int(included.size)} canaries put {len(index)} in a dataset of {n} examples; "
                           f"use at most {2 * n} so that real examples stay the majority")
    canaries = TensorDataset(canary_inputs(x0, index), torch.zeros(len(index), dtype=torch.long))
    return ConcatDataset([dataset, canaries]), n


def run_opacus(train: Callable, model: nn.Module, dataset, count: int, seed: int):
    """Run the user's ``train(model, dataset) -> PrivacyEngine`` with the canaries; (recorder, engine, wrapped
    model, real examples, included)."""
    from .sgd_canaries import DiracCanaries

    included = DiracCanaries(count, count, seed).included  # Steinke et al.'s fair coins, from the seed
    data, n = _dataset_with_canaries(dataset, included)
    wrapped = CanaryModel(model, count)
    recorder = _Recorder(wrapped.canary.weight, count)
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    handle = register_optimizer_step_pre_hook(recorder)
    try:
        torch.manual_seed(seed)
        engine = train(wrapped, data)
    except FedleakError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code refused the wrapped model or failed
        name = type(exc).__name__
        if "per sample gradient is not initialized" in str(exc).lower():
            raise FedleakError("train: the loss is not differentiable through the model's output (Opacus found no "
                               "per-sample gradient)") from None
        if "opacus" in type(exc).__module__ or "Unsupported" in name or "not supported" in str(exc).lower():
            raise FedleakError(f"model: Opacus refuses it ({name}: {str(exc).splitlines()[0][:200]})") from None
        raise FedleakError(f"train: the training function failed ({name}: {str(exc).splitlines()[0][:200]})") \
            from None
    finally:
        handle.remove()
    if not hasattr(engine, "get_epsilon") or not hasattr(engine, "accountant"):
        raise FedleakError("train: must return the PrivacyEngine it called make_private on, got "
                           f"{type(engine).__name__}")
    if not recorder.x:
        raise FedleakError("train: no DP-SGD step reached the canary coordinates (is the loss differentiated through "
                           "the model's output, and does the optimizer step?)")
    return recorder, engine, wrapped, n, included


def _claim(engine, delta: float) -> tuple[float, str, float, float, int]:
    """(ε, accountant name, σ, q, steps) of the user's PrivacyEngine accountant."""
    acc = engine.accountant
    history = list(getattr(acc, "history", []) or [])
    if not history:
        raise FedleakError("train: the PrivacyEngine's accountant recorded no step (did training run through it?)")
    sigmas, rates = {h[0] for h in history}, {h[1] for h in history}
    if len(sigmas) > 1 or len(rates) > 1:
        raise FedleakError("train: the accountant saw several noise multipliers or sample rates; the audit handles one")
    try:
        eps = float(engine.get_epsilon(delta))
    except Exception as exc:  # noqa: BLE001 - the user's accountant could not answer
        raise FedleakError(f"train: the PrivacyEngine's accountant gives no ε at δ = {delta:g} ({exc})") from None
    return eps, f"{type(acc).__name__} ({acc.mechanism()})", float(history[0][0]), float(history[0][1]), \
        int(sum(h[2] for h in history))


def sampling_check(batch_sizes, examples: int, q: float, noise: float, epochs: float, delta: float,
                   alpha: float = 0.01) -> dict:
    """Is the loader Poisson, as the accountant assumes (item 5; Chua et al., ICML 2024)? Under Poisson sampling
    with rate q the batch sizes are independent Binomial(N, q): (T − 1)·s²/(Nq(1 − q)) is about χ²_{T−1}; fixed-size
    shuffled batches make s² ≈ 0 (lower tail). With shuffling each example sits in one batch per epoch, so without
    any amplification credited T·q epochs of the Gaussian mechanism are √(Tq)/σ-GDP: the ε reported beside."""
    from scipy.stats import chi2

    from .gdp import epsilon_of

    sizes = np.asarray([b for b in batch_sizes if b >= 0], float)
    out = {"batch_sizes_min": int(sizes.min()) if sizes.size else None,
           "batch_sizes_max": int(sizes.max()) if sizes.size else None, "steps": int(sizes.size),
           "epsilon_if_shuffled": epsilon_of(math.sqrt(max(epochs, 1e-12)) / noise, delta),
           "shuffled_bound": "each example in one batch per epoch, no amplification: √(epochs)/σ-GDP (add/remove)"}
    if q >= 1 or sizes.size < 3:
        return {**out, "p_value": 1.0, "poisson": None}
    var = examples * q * (1 - q)
    stat = (sizes.size - 1) * sizes.var(ddof=1) / var
    p = float(chi2.cdf(stat, sizes.size - 1))
    return {**out, "p_value": p, "poisson": p >= alpha}


def _findings(shift_mu: float, expected: float) -> list[str]:
    """From outputs only: how far the canaries' per-step shift is above what the claim allows, and what that says."""
    if not (math.isfinite(shift_mu) and expected > 0) or shift_mu <= 1.5 * expected:
        return []
    ratio = shift_mu / expected
    if ratio > 20:
        return [f"Estimated: the canaries shift {ratio:.0f}× more than the claimed noise allows: their gradients reach "
                "the noise far above the clip norm (per-sample clipping not in force) or the noise is nearly off."]
    return [f"Estimated: the canaries shift {ratio:.2f}× more than the claim allows: the noise in force is about "
            f"{1 / ratio:.2f}× the claimed σ (noise or clipping setting)."]


def audit_opacus(train: Callable, model: nn.Module, dataset, *, canaries: int = 1000, delta: float = 1e-5,
                 seed: int = 0, threat: str = "all-iterates", out=None) -> dict:
    """Audit the user's own DP-SGD (module docstring). ``train(model, dataset)`` is the user's training function: it
    builds its optimizer and ``DataLoader`` on what it is given, calls ``PrivacyEngine().make_private(...)`` (or
    ``make_private_with_epsilon``), trains, and returns the engine. Returns (and writes ``dp-audit.json`` into
    ``out``) the verdict, proved and estimated ε beside the engine's ε."""
    from .checks import THREATS, positive
    from .estimate import estimate
    from .one_run import lower_bounds
    from .report import _ratio
    from .sgd_diagnose import diagnose_sgd
    from .sgd_verdict import pre_registered_fraction, sgd_verdict
    from .verdict import verdict_lines

    started = time.perf_counter()
    if not callable(train):
        raise FedleakError(f"train: must be a function train(model, dataset) -> PrivacyEngine, got {type(train).__name__}")
    if not isinstance(model, nn.Module):
        raise FedleakError(f"model: must be a torch.nn.Module, got {type(model).__name__}")
    m = positive("canaries", canaries, integer=True, upper=1_000_000)
    if m < 2:
        raise FedleakError(f"canaries: at least 2, got {m}")
    delta = positive("delta", delta, upper=1.0)
    if delta >= 1 or threat not in THREATS:
        raise FedleakError(f"delta must be < 1 and threat one of {', '.join(THREATS)}")
    out_dir = None
    if out is not None:
        from ..runs.outdir import prepare_out_dir

        out_dir = prepare_out_dir(out, "out")
    rec, engine, wrapped, n, included = run_opacus(train, model, dataset, m, seed)
    trained = time.perf_counter()
    claimed, acc_name, noise, q, steps = _claim(engine, delta)
    x = np.asarray(rec.x)  # (T, m)
    mean_shift = x.sum(0) / math.sqrt(len(x))
    mu1 = 1.0 / noise
    llr = np.logaddexp(math.log1p(-q), math.log(q) + mu1 * x - mu1 * mu1 / 2).sum(0) if q < 1 else None
    final = wrapped.canary.weight.detach()[:m, 0].double().numpy()
    scores = {"all-iterates": llr if q < 1 else mean_shift.copy(), "final-model": final}
    fraction = pre_registered_fraction(noise, q, len(x), m - m // 2, m // 2, delta)  # from m, never the coins
    bounds = {t: lower_bounds(scores[t], included, delta, fraction=fraction) for t in THREATS}
    estimates = {t: estimate(scores[t], included, delta) for t in THREATS}
    raw = np.full(m, 10.0)  # every canary far above the clip norm (GAIN): the claim test uses them all
    check = diagnose_sgd(scores["all-iterates"], mean_shift, included, raw, noise=noise, steps=len(x), sample_rate=q,
                         epsilon_claimed=claimed, delta=delta)
    shift_mu = estimate(mean_shift, included, delta)["mu"]
    check["findings"] = _findings(shift_mu, q * math.sqrt(len(x)) / noise)
    sampling = sampling_check(rec.batch_sizes, n + int(included.sum()), q, noise, len(x) * q, delta)
    if sampling["poisson"] is False:
        check["findings"].append(
            f"Estimated: the batches are not Poisson-sampled (sizes {sampling['batch_sizes_min']}–"
            f"{sampling['batch_sizes_max']} over {sampling['steps']} steps, variance test p = {sampling['p_value']:.1e}) "
            f"while the accountant assumes Poisson with q = {q:.3g}: its ε = {claimed:.2f} does not apply; with "
            f"shuffled batches ε ≤ {sampling['epsilon_if_shuffled']:.2f} ({sampling['shuffled_bound']}; Chua et al., "
            "ICML 2024: shuffling accounted as Poisson).")
    headline, family = bounds[threat], None
    if q < 1:  # the f-DP bound of the subsampled Gaussian's own family; headline when the sampler is Poisson
        from .subsampled_fdp import SUBSAMPLED_GAUSSIAN, family_bound

        bounds["all-iterates"]["subsampled_gaussian"] = fam = family_bound(scores["all-iterates"], included, noise,
                                                                           q, len(x), delta)
        if threat == "all-iterates" and sampling["poisson"] is not False:
            headline, family = {**headline, "epsilon_gdp": fam["epsilon"]}, SUBSAMPLED_GAUSSIAN
    v = sgd_verdict(scores=scores["all-iterates"], mean_shift=mean_shift, included=included, family=family,
                    test_set=np.ones(m, bool), bound=headline, check=check, noise=noise, q=q, steps=len(x),
                    claimed=claimed, claim_name=f"{acc_name}, σ = {noise:.4g}, q = {q:.3g}, {steps} steps",
                    estimate_epsilon=estimates[threat]["epsilon"],
                    estimate_interval=estimates[threat].get("epsilon_interval"), delta=delta,
                    budget=f"{m} canary examples, {len(x)} steps")
    result = {
        "level": "example", "source": "opacus", "opacus_version": _opacus_version(),
        "verdict": v, "exceeds_claim": v["exceeds_claim"], "epsilon_lower": v["epsilon_proved"],
        "epsilon_estimate": estimates[threat]["epsilon"],
        "epsilon_accountant": {"user_accountant": claimed, "accountant": acc_name, "accountant_steps": steps},
        "threat": threat, "canaries": m, "canaries_inserted": int(included.sum()), "real_examples": n,
        "steps_observed": len(x), "sample_rate": q, "noise_multiplier": noise,
        "clip_norm": rec.settings[0][1], "delta": delta, "lower_bounds": bounds, "estimates": estimates,
        "misconfiguration": check, "mean_shift_mu": shift_mu, "sampling": sampling,
        "seed": seed, "threads": torch.get_num_threads(), "device": "cpu", "machine": platform.machine(),
        "cost_seconds": {"training": round(trained - started, 3),
                         "analysis": round(time.perf_counter() - trained, 3)},
        "methods": {"canaries": "canary examples through the user's DataLoader and make_private; per-sample gradients "
                                "on one nn.Embedding coordinate each (fedleak.privacy.opacus_audit)",
                    "epsilon_lower": v["assumption"], "epsilon_accountant": "the user's PrivacyEngine.get_epsilon(δ)"},
    }
    result["summary"] = verdict_lines(v, threat, delta, f"one-run audit of {m} canary examples through Opacus") + [
        f"Claimed by the user's PrivacyEngine ({acc_name}): ε = {claimed:.2f} at δ = {delta:g} for σ = {noise:.4g}, "
        f"q = {q:.3g}, {steps} steps."] + _ratio(v, estimates[threat]["epsilon"]) + check["findings"]
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "dp-audit.json").write_text(json.dumps(result, indent=2, allow_nan=True, default=float) + "\n")
    return result


def _opacus_version() -> str:
    import opacus

    return opacus.__version__
