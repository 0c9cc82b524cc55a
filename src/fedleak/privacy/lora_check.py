"""Is a client's DP-LoRA update what DP-SGD on the adapters would produce? (issue #29 item 4, Opacus #820)

Opacus 1.5 with PEFT ≥ 0.14 registers its per-sample-gradient hooks wrongly on LoRA layers (meta-pytorch/opacus
#820): training looks normal, ε accumulates, and the adapter updates are not those of DP-SGD. A canary audit
needs many rounds to notice; a client's single update can be checked directly against the claim, because
DP-SGD's output has a known form (Abadi et al. 2016, Alg. 1; the Gaussian mechanism of Steinke, Nasr,
Jagielski, NeurIPS '23 §2 and §7 applied per step): with plain SGD at learning rate η, T steps of batches of B
examples, per-example clipping to C and noise N(0, σ²C²I) on each step's sum,

    Δ = θ_T − θ_0 = −(η/B)·Σ_t (Σ_{i∈batch t} clip_C(g_{t,i}) + Z_t) = S + N,
    ‖S‖ ≤ η·T·C,   N ~ N(0, s²I) on the trainable coordinates,   s = η·σ·C·√T / B.

Hence for every adapter tensor j of n_j coordinates, ‖N_j‖²/s² ~ χ²(n_j) and ‖Δ_j‖ lies in
[s·χ_{n_j}(α') − ηTC, s·χ_{n_j}(1 − α') + ηTC] except with probability 2α' (the triangle inequality; the
bound on ‖S_j‖ is that of the whole signal, so it holds for any data). A norm outside that interval is
**proved** inconsistent with the claim at level α (Bonferroni over the tensors and the whole vector). The
check also reads the reply's *structure* against the model fedleak builds (:func:`fedleak.models.hf.lora.add_lora`):
the update's tensors must be exactly the model's trainable adapters (``params_of``: lora_A/lora_B, a classifier
head in ``modules_to_save``) with their shapes, and no frozen (base) weight may move — PEFT's and Opacus's
contract that only ``requires_grad`` parameters are optimized. Andrew et al. (ICLR '24, §3) audit the same
federation from the server with canaries; this check needs one update and no canaries.

:func:`simulate_dp_lora` runs DP-SGD on the adapters of a fedleak LoRA model (per-example gradients through
:func:`fedleak.fl.per_example.per_example_gradients`) and, for the tests, the degradations of #820 seen from the
reply: ``unprocessed`` (the adapters' gradients reach the optimizer unclipped and un-noised: plain SGD),
``partial`` (noise and clipping on lora_A only; lora_B's gradients raw), ``base-moves`` (a base weight updated
with the adapters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from scipy.stats import chi2

from ..errors import FedleakError
from ..types.params import params_of

DEGRADATIONS = ("unprocessed", "partial", "base-moves")


@dataclass(frozen=True)
class LoraDPClaim:
    """The claimed DP-SGD on the adapters: clip C, noise multiplier σ, SGD learning rate η, T steps of B examples."""

    clip: float
    noise: float
    lr: float
    steps: int
    batch_size: int

    def __post_init__(self) -> None:
        for name, value in (("clip", self.clip), ("noise", self.noise), ("lr", self.lr)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise FedleakError(f"--{name} must be a finite number > 0, got {value!r}")
        for name, value in (("steps", self.steps), ("batch-size", self.batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FedleakError(f"--{name} must be an integer ≥ 1, got {value!r}")

    @property
    def noise_sd(self) -> float:
        """s = η·σ·C·√T/B: the per-coordinate standard deviation of the noise in Δ."""
        return self.lr * self.noise * self.clip * math.sqrt(self.steps) / self.batch_size

    @property
    def signal_bound(self) -> float:
        """η·T·C: the largest norm the clipped gradients can move the adapters by."""
        return self.lr * self.steps * self.clip

    def to_json(self) -> dict:
        return {"clip": self.clip, "noise": self.noise, "lr": self.lr, "steps": self.steps,
                "batch_size": self.batch_size, "noise_sd": self.noise_sd, "signal_bound": self.signal_bound}


def _interval(n: int, claim: LoraDPClaim, alpha: float) -> tuple[float, float]:
    s, r = claim.noise_sd, claim.signal_bound
    return max(0.0, s * math.sqrt(chi2.ppf(alpha / 2, n)) - r), s * math.sqrt(chi2.isf(alpha / 2, n)) + r


def check_lora_update(model, before: dict, after: dict, claim: LoraDPClaim, *, alpha: float = 0.01,
                      client: Optional[str] = None) -> dict:
    """Findings for one DP-LoRA reply: ``before`` the weights the client got, ``after`` what it sent (name → tensor:
    the wrapper's ``named_parameters`` names, frozen weights may be included, or the ``get_peft_model_state_dict``
    keys a FlowerTune client sends, :func:`fedleak.models.hf.lora.adapter_state`). ``detected`` when any
    structural check fails or a norm lies outside its (1 − α) interval under the claim (see the module text)."""
    if not (isinstance(alpha, float) and 0 < alpha < 1):
        raise FedleakError(f"alpha must be a number in (0, 1), got {alpha!r}")
    who = f"client {client}" if client is not None else "the client"
    adapters = params_of(model)
    named = dict(model.named_parameters())
    after = _wrapper_names(after, adapters, named)
    findings, structural = [], []
    missing = sorted(set(adapters) - set(after))
    if missing:
        structural.append(f"adapter tensors missing from the update: {', '.join(missing[:4])}"
                          + (f" (+{len(missing) - 4})" if len(missing) > 4 else ""))
    unknown = sorted(set(after) - set(named))
    if unknown:
        structural.append(f"update tensors that are no parameter of the model: {', '.join(unknown[:4])}")
    shapes = sorted(k for k in set(adapters) & set(after) if tuple(after[k].shape) != tuple(adapters[k].shape))
    if shapes:
        structural.append(f"adapter tensors of the wrong shape: {', '.join(shapes[:4])}")
    moved = sorted(k for k in set(after) & set(named) if k not in adapters and k in before
                   and not torch.equal(after[k].detach().cpu(), before[k].detach().cpu()))
    if moved:
        structural.append(f"frozen (base) weights moved: {', '.join(moved[:4])}"
                          + (f" (+{len(moved) - 4})" if len(moved) > 4 else ""))
    keys = [k for k in adapters if k in after and k in before and k not in shapes]
    tests = len(keys) + 1
    level = alpha / tests
    tensors = []
    for k in keys:
        delta = (after[k].detach().double() - before[k].detach().double()).reshape(-1)
        low, high = _interval(delta.numel(), claim, level)
        norm = float(delta.norm())
        tensors.append({"name": k, "size": delta.numel(), "norm": norm, "interval": [low, high],
                        "expected_noise_norm": claim.noise_sd * math.sqrt(delta.numel()),
                        "consistent": low <= norm <= high})
    total_n = sum(t["size"] for t in tensors)
    total_norm = math.sqrt(sum(t["norm"] ** 2 for t in tensors))
    whole = None
    if total_n:
        low, high = _interval(total_n, claim, level)
        whole = {"size": total_n, "norm": total_norm, "interval": [low, high], "consistent": low <= total_norm <= high}
    bad = [t for t in tensors if not t["consistent"]] + ([whole] if whole and not whole["consistent"] else [])
    setting = (f"DP-SGD on the adapters, clip C = {claim.clip:g}, σ = {claim.noise:g}, η = {claim.lr:g}, "
               f"T = {claim.steps}, B = {claim.batch_size}")
    for s in structural:
        findings.append(f"Proved ({who}, DP-LoRA update structure): {s} — the reply is not the trained adapters "
                        f"(LoRA setting; Opacus #820 pattern).")
    if bad:
        low_side = [t for t in bad if t["norm"] < t["interval"][0]]
        high_side = [t for t in bad if t["norm"] > t["interval"][1]]
        for side, words in ((low_side, "too little noise: clipping/noise not applied to them (noise setting)"),
                            (high_side, "larger than clipped gradients plus the claimed noise allow (clip setting)")):
            if side:
                names = ", ".join(t.get("name", "all adapters") for t in side[:4])
                findings.append(f"Proved ({who}, p < {alpha:g}, χ² norm test under {setting}): the update's norm on "
                                f"{names} is {words}.")
    detected = bool(structural or bad)
    if not detected:
        findings.append(f"No DP-LoRA inconsistency found for {who}: {len(tensors)} adapter tensors have the norms "
                        f"{setting} allows, and no frozen weight moved; this bounds nothing from above.")
    return {"client": client, "claim": claim.to_json(), "alpha": alpha, "structural": structural,
            "tensors": tensors, "whole": whole, "detected": detected, "evidence": "proved" if detected else None,
            "findings": findings}


def _wrapper_names(reply: dict, adapters: dict, named: dict) -> dict:
    """A reply keyed as FlowerTune sends it (``peft.get_peft_model_state_dict`` keys) renamed to the wrapper's
    parameter names; a reply already in those names, or keys that fit neither, unchanged."""
    from ..models.hf.lora import peft_key

    if any(k in named for k in reply):
        return reply
    by_key = {peft_key(n): n for n in adapters}
    return {by_key.get(k, k): v for k, v in reply.items()}


def simulate_dp_lora(model, data, claim: LoraDPClaim, *, seed: int = 0, degrade: Optional[str] = None
                     ) -> tuple[dict, dict]:
    """(before, after) of T DP-SGD steps on the adapters of a fedleak LoRA model (fixed batches of B examples
    drawn with a seeded generator), or of a degradation in :data:`DEGRADATIONS` (see the module text)."""
    from ..fl.client import model_loss
    from ..fl.per_example import per_example_gradients
    from ..types.params import buffers_of

    if degrade is not None and degrade not in DEGRADATIONS:
        raise FedleakError(f"degrade must be one of {', '.join(DEGRADATIONS)}, got {degrade!r}")
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([int(seed), 29]).generate_state(1)[0]))
    current = params_of(model)
    before = {**{k: v.detach().clone() for k, v in model.named_parameters()}, **current}
    buffers, loss_fn = buffers_of(model), model_loss(model)
    n = data.inputs.shape[0]
    if claim.batch_size > n:
        raise FedleakError(f"--batch-size {claim.batch_size} exceeds the client's {n} samples")
    was_training = model.training
    model.eval()  # no dropout: the check reads the norms, the randomness is the mechanism's only
    try:
        for _ in range(claim.steps):
            idx = torch.randperm(n, generator=gen)[:claim.batch_size]
            grads = per_example_gradients(model, current, buffers, data.inputs[idx], data.labels[idx], loss_fn)
            flat = torch.cat([g.reshape(g.shape[0], -1) for g in grads.values()], 1)
            scale = (claim.clip / flat.norm(dim=1).clamp_min(1e-12)).clamp(max=1.0)
            for k, g in grads.items():
                raw = g.sum(0)
                private = (g * scale.view(-1, *[1] * (g.dim() - 1))).sum(0) \
                    + torch.randn(g.shape[1:], generator=gen) * (claim.noise * claim.clip)
                dp_on = degrade is None or degrade == "base-moves" or (degrade == "partial" and "lora_A" in k)
                step = private if dp_on else raw
                current[k] = current[k] - claim.lr * step / claim.batch_size
    finally:
        model.train(was_training)
    after = dict(current)
    if degrade == "base-moves":
        frozen = next(k for k, v in model.named_parameters() if not v.requires_grad and v.dim() == 2)
        after[frozen] = before[frozen] + 1e-3 * torch.randn(before[frozen].shape, generator=gen)
    return before, after
