"""Client-side inspection of a received model for imprint and trap-weight signatures (a defense).

A malicious server can ship a model built to leak (Fowl et al., "Robbing the Fed", ICLR 2022;
Boenisch et al., "When the Curious Abandon Honesty", 2021). Before training on it, a client can
look at the weights alone — no architecture, no parameter names (an attacker renames freely), either
orientation of a matrix (a layer may store its rows as columns), any order of rows and columns — for
the structures those attacks need:

* ``imprint-rows`` (Fowl et al. §3.3, §4.2–4.3): a linear layer whose rows all measure *one*
  linear function h(x) = ⟨u, x⟩ of their input, with different biases, so that each row fires on
  a bin of h. The rows are parallel (cumulative: equal rows; sparse/thresholded: rows scaled by
  1/δᵢ; one-shot: two rows). Test: every non-zero row's |cos| with the layer's top singular
  vector. Random or trained rows of ≥ 8 inputs are never parallel to 10⁻³; the confidence is the
  fraction of aligned rows, and the bins are reported as the thresholds tᵢ = −bᵢ/⟨Wᵢ, u⟩. Parallel
  rows sharing one threshold (or without a bias) form no bins — a zero-initialized layer after one
  gradient step on one input is rank one too — and are reported at confidence 0.3 only.
* ``trap-weights`` (Boenisch et al. §4, as in :func:`fedleak.models.imprint`'s ``cah``): rows
  with a fixed share of negative entries. Honest weights have independent signs, so the share of
  negative entries per row varies like a binomial proportion; trap rows vary far less. Test: the
  lower tail of the χ² statistic (k−1)·s²/(p̂(1−p̂)/m) of the per-row shares with k−1 degrees of
  freedom; confidence = 1 − p. A model holds dozens of layers, each tested in both orientations, so the test
  is made at a family-wise level (:data:`TRAP_FAMILY_ALPHA`, Bonferroni over every test made in the model):
  at a per-layer 1e-3, 2 of 81 honest models of ``benchmarks/bench_inspect_honest.py`` were flagged (one an MLP
  at initialization whose (16, 64) layer has p = 1.2e-4, which a Monte Carlo of independent signs puts at 5e-5:
  a chance event, the χ² tail is calibrated). The level is 1e-4, chosen after that calibration: a client's
  inspector refusing an honest server is costly, and trap rows give p below 1e-300, so no trap model is missed.
* ``fishing`` (Wen et al. 2022, :mod:`.inspect_fishing`): a classifier whose rows or biases single out
  one class, or whose rows rest on one feature, far beyond what trained or initialized classifiers show.
* ``linearized-convolution`` (Fowl et al. App. A.5): a convolution whose kernel is all zeros or
  a Dirac identity — the layers in front of a deep imprint block are made near-identity maps.
  Supporting evidence only (confidence 0.4, below the default threshold): honest initializations
  can zero a layer (Fixup) or use Dirac kernels (DiracNets).

:func:`inspect_state` returns an :class:`Inspection` (findings, suspicious or not); the
``fedleak inspect`` command and the Flower client mod
(:func:`fedleak.integrations.flower.inspector_mod`) use it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Optional

import torch
from torch import nn

from ..errors import FedleakError
from .findings import Finding
from .inspect_fishing import bias_candidates, fishing_finding

#: |cos| above which a row counts as parallel to the layer's main direction
ALIGNED = 0.999
#: share of non-zero rows that must be aligned for an imprint finding
ALIGNED_SHARE = 0.9
#: fewest inputs for the parallel-rows test (tiny layers can be parallel by chance)
MIN_INPUTS = 8
#: fewest rows and inputs for the sign-share test
MIN_TRAP_ROWS, MIN_TRAP_INPUTS = 8, 32
TRAP_FAMILY_ALPHA = 1e-4  # the chance that an honest model is flagged by any of its trap-weight tests
#: confidence at or above which a finding makes the model suspicious
DEFAULT_THRESHOLD = 0.5
#: supporting evidence only, below the default threshold: honest inits can zero a layer (Fixup) or
#: use Dirac kernels (DiracNets)
LINEARIZED_CONFIDENCE = 0.4
#: parallel rows that cannot form bins (no bias, or one shared threshold)
NOT_BINS_CONFIDENCE = 0.3
#: the most other 1-D tensors tried as a parallel layer's renamed bias
MAX_BIAS_CANDIDATES = 256


@dataclass(frozen=True)
class Inspection:
    """All findings for one model, and the verdict at ``threshold``."""

    findings: tuple[Finding, ...]
    layers_checked: int
    threshold: float = DEFAULT_THRESHOLD

    @property
    def suspicious(self) -> bool:
        return any(f.confidence >= self.threshold for f in self.findings)

    def summary(self) -> str:
        flagged = [f for f in self.findings if f.confidence >= self.threshold]
        if not flagged:
            return f"passed: no imprint or trap-weight signature in {self.layers_checked} layers"
        return "suspicious: " + "; ".join(f.line() for f in flagged)

    def to_json(self) -> dict:
        return {"suspicious": self.suspicious, "threshold": self.threshold, "layers_checked": self.layers_checked,
                "findings": [f.to_json() for f in self.findings]}


def _bias_for(name: str, rows: int, state: Mapping[str, torch.Tensor],
              following: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The layer's bias: ``<prefix>bias`` by name, else the next entry when it has one value per
    row (a state dict lists a layer's weight then its bias; names may have been changed)."""
    candidates = [state.get(name[: -len("weight")] + "bias")] if name.endswith("weight") else []
    for bias in candidates + [following]:
        if isinstance(bias, torch.Tensor) and bias.is_floating_point() and tuple(bias.shape) == (rows,):
            return bias.detach().double()
    return None


def imprint_rows(name: str, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> Optional[Finding]:
    """The parallel-rows test on one (k, m) weight (see the module docstring)."""
    w = weight.detach().double()
    k, m = w.shape
    if k < 2 or m < MIN_INPUTS:
        return None
    norms = w.norm(dim=1)
    top = float(norms.max())
    if not top > 0:
        return None
    active = (norms > 1e-12 * top).nonzero().flatten()
    if active.numel() < 2:
        return None
    rows = w[active]
    direction = torch.linalg.svd(rows, full_matrices=False).Vh[0]
    projections = rows @ direction
    cosines = projections.abs() / norms[active]
    aligned = cosines > ALIGNED
    share = float(aligned.double().mean())
    if int(aligned.sum()) < 2 or share < ALIGNED_SHARE:
        return None
    scales = projections[aligned].abs()
    equal_rows = bool((scales.max() - scales.min()) <= 1e-4 * scales.max())
    evidence = {"rows": k, "inputs": m, "aligned_rows": int(aligned.sum()), "min_abs_cos": float(cosines.min()),
                "equal_rows": equal_rows}
    shape = "equal rows (cumulative ReLU bins)" if equal_rows else "rows scaled per bin (thresholded bins)"
    detail = f"{int(aligned.sum())} of {k} rows measure one linear function of the input, {shape}"
    confidence = share
    if bias is None:
        confidence = min(share, NOT_BINS_CONFIDENCE)
        detail += "; no bias, so no bins (reported, not decisive)"
    else:
        thresholds = -bias[active][aligned] / projections[aligned]
        distinct = int(torch.unique(torch.round(thresholds * 1e6)).numel())
        evidence.update(bins=distinct, threshold_min=float(thresholds.min()), threshold_max=float(thresholds.max()))
        detail += f"; {distinct} distinct thresholds in [{float(thresholds.min()):.3g}, {float(thresholds.max()):.3g}] (bins)"
        if distinct < 2:
            # one threshold for all rows: a rank-one layer (e.g. zero-initialized, then one gradient step
            # on one input), not bins of h
            confidence = min(share, NOT_BINS_CONFIDENCE)
    return Finding(name, "imprint-rows", confidence, detail, evidence)


def _chi2_lower_tail(statistic: float, dof: int) -> float:
    """P(χ²_dof ≤ statistic)."""
    x = torch.tensor(max(statistic, 0.0) / 2, dtype=torch.float64)
    return float(torch.special.gammainc(torch.tensor(dof / 2, dtype=torch.float64), x))


def trap_weights(name: str, weight: torch.Tensor, alpha: float = TRAP_FAMILY_ALPHA) -> Optional[Finding]:
    """The sign-share test on one (k, m) weight at level ``alpha`` (the family-wise level divided by the number of
    tests the model takes: see the module docstring)."""
    w = weight.detach().double()
    k, m = w.shape
    if k < MIN_TRAP_ROWS or m < MIN_TRAP_INPUTS:
        return None
    shares = (w < 0).double().mean(1)
    p = float(shares.mean())
    if not 0.05 < p < 0.95:
        return None
    expected = p * (1 - p) / m
    observed = float(shares.var(unbiased=True))
    statistic = (k - 1) * observed / expected
    p_value = _chi2_lower_tail(statistic, k - 1)
    confidence = 1.0 - p_value
    if p_value > alpha:
        return None
    detail = (f"the share of negative weights per row is too regular for random or trained weights "
              f"(mean {p:.3f}, variance {observed:.2e} vs {expected:.2e} for independent signs, p = {p_value:.1e})")
    return Finding(name, "trap-weights", confidence, detail,
                   {"rows": k, "inputs": m, "negative_share": p, "variance_ratio": observed / expected,
                    "p_value": p_value})


def linearized_convolution(name: str, weight: torch.Tensor) -> Optional[Finding]:
    """A convolution kernel that is all zeros or a Dirac identity (deep-placement linearization)."""
    w = weight.detach()
    out_c, in_c, kh, kw = w.shape
    if w.numel() < 2 or kh * kw < 2:
        return None
    nonzero = w != 0
    if not bool(nonzero.any()):
        kind = "all zeros"
    else:
        per_out = nonzero.flatten(1).sum(1)
        centre = torch.zeros_like(nonzero)
        centre[:, :, kh // 2, kw // 2] = True
        dirac = bool((per_out <= 1).all()) and bool((nonzero <= centre).all()) and bool((w[nonzero] == 1).all())
        if not dirac:
            return None
        kind = f"a Dirac identity on {int(per_out.sum())} channels"
    return Finding(name, "linearized-convolution", LINEARIZED_CONFIDENCE,
                   f"the {kh}x{kw} convolution kernel is {kind} (layers linearized in front of a deep imprint block)",
                   {"shape": [out_c, in_c, kh, kw]})


def inspect_state(state: Mapping[str, torch.Tensor], threshold: float = DEFAULT_THRESHOLD) -> Inspection:
    """Inspect a state dict (any names) for imprint and trap-weight signatures."""
    if not isinstance(state, Mapping) or not state:
        raise FedleakError("inspection needs a non-empty mapping of parameter names to tensors")
    if not (isinstance(threshold, (int, float)) and 0 < threshold <= 1):
        raise FedleakError(f"the inspection threshold must be in (0, 1], got {threshold!r}")
    findings, checked = [], 0
    entries = list(state.items())
    tests = 2 * sum(1 for _, t in entries if isinstance(t, torch.Tensor) and t.dim() == 2)  # both orientations
    alpha = TRAP_FAMILY_ALPHA / max(tests, 1)
    for index, (name, tensor) in enumerate(entries):
        if not isinstance(tensor, torch.Tensor):
            raise FedleakError(f"entry {name!r} is a {type(tensor).__name__}, not a tensor")
        if not tensor.is_floating_point():
            continue
        if not bool(torch.isfinite(tensor).all()):
            raise FedleakError(f"entry {name!r} holds NaN or infinite values")
        if tensor.dim() == 2:
            checked += 1
            following = entries[index + 1][1] if index + 1 < len(entries) else None
            found = _imprint_any_orientation(name, tensor, state, following)
            found = found or trap_weights(name, tensor, alpha) or trap_weights(name, tensor.T, alpha)
        elif tensor.dim() == 4:
            checked += 1
            found = linearized_convolution(name, tensor)
        else:
            continue
        if found is not None:
            findings.append(found)


    fishing = fishing_finding(state)
    if fishing is not None:
        findings.append(fishing)
    return Inspection(tuple(findings), checked, float(threshold))


def _imprint_any_orientation(name: str, tensor: torch.Tensor, state: Mapping[str, torch.Tensor],
                             following: Optional[torch.Tensor]) -> Optional[Finding]:
    """The parallel-rows test on the weight as stored and, if that finds no bins, transposed (a layer
    computing ``x @ W`` stores its rows as columns); the bias is the one named like the weight or the
    next entry, of either dimension's length (names and orientation are the attacker's to choose)."""
    best = None
    for weight, label in ((tensor, name), (tensor.T, f"{name} (transposed)")):
        bias = _bias_for(name, weight.shape[0], state, following)
        found = imprint_rows(label, weight, bias)
        if found is not None and found.confidence <= NOT_BINS_CONFIDENCE:
            found = _renamed_bias(label, weight, bias, state, name, following) or found
        if found is not None and (best is None or found.confidence > best.confidence):
            best = found
        if best is not None and best.confidence > NOT_BINS_CONFIDENCE:
            break
    return best


def _renamed_bias(label: str, weight: torch.Tensor, named: Optional[torch.Tensor], state: Mapping[str, torch.Tensor],
                  name: str, following: Optional[torch.Tensor]) -> Optional[Finding]:
    """Parallel rows without bins under the bias named like the weight (or next to it): names and order are the
    attacker's, so the other 1-D tensors of one value per row are tried as the bias (Fowl et al. §3.3 need one
    that spreads the thresholds); the first that makes bins is the finding. Tried: those of the weight's own
    layer (its name prefix) and those no other layer claims (alone under their prefix) — not a norm layer's
    weight or another layer's bias, which would give an honest rank-one layer (a zero-initialized head after
    one-class training) bins it does not have."""
    def prefix(key: str) -> str:
        return key.rsplit(".", 1)[0] if "." in key else key

    groups = Counter(prefix(key) for key in state)
    pool = {key: tensor for key, tensor in state.items()
            if prefix(key) == prefix(name) or groups[prefix(key)] == 1}
    for other in bias_candidates(pool, weight.shape[0], name)[:MAX_BIAS_CANDIDATES]:
        if named is not None and torch.equal(other, named):
            continue
        found = imprint_rows(label, weight, other)
        if found is not None and found.confidence > NOT_BINS_CONFIDENCE:
            return replace(found, detail=found.detail + "; its bias stored under another name or place")
    return None


def inspect_model(model: nn.Module, threshold: float = DEFAULT_THRESHOLD) -> Inspection:
    """:func:`inspect_state` of ``model.state_dict()``."""
    if not isinstance(model, nn.Module):
        raise FedleakError(f"inspect_model needs a torch.nn.Module, got {type(model).__name__}")
    return inspect_state(model.state_dict(), threshold)


def load_state(path) -> dict[str, torch.Tensor]:
    """Tensors of a ``.safetensors`` file (never unpickles)."""
    from ..config.loaders import read_safetensors

    path = Path(path)
    if not path.is_file():
        raise FedleakError(f"model file {str(path)!r} does not exist")
    if path.suffix != ".safetensors":
        raise FedleakError(f"{str(path)!r}: fedleak inspect reads .safetensors files (never pickles)")
    state = read_safetensors(path, f"{str(path)!r} is not a readable safetensors file")
    if not state:
        raise FedleakError(f"{str(path)!r} holds no tensors")
    return state


def check_architecture(state: Mapping[str, torch.Tensor], model: nn.Module) -> None:
    """Raise unless ``state`` has exactly ``model``'s state-dict names and shapes."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    extra = [k for k in state if k not in expected]
    if missing or extra:
        what = f"missing {missing[0]!r}" if missing else f"unexpected {extra[0]!r}"
        raise FedleakError(f"the file does not hold a {type(model).__name__} state dict ({what}; "
                           f"{len(missing)} missing, {len(extra)} unexpected)")
    for name, tensor in expected.items():
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise FedleakError(f"entry {name!r} has shape {tuple(state[name].shape)}, the model has "
                               f"{tuple(tensor.shape)}")


def structure_finding(state: Mapping[str, torch.Tensor], model: nn.Module) -> Optional[Finding]:
    """A finding (confidence 1) when ``state`` is not ``model``'s state dict: missing, unexpected or
    reshaped tensors. A received model whose structure differs from the architecture the client
    expects is what a malicious server ships (an imprint block, LOKI's routing layers); ``None`` when
    names and shapes match."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    extra = [k for k in state if k not in expected]
    reshaped = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    if not (missing or extra or reshaped):
        return None
    parts = [f"{len(missing)} missing", f"{len(extra)} unexpected", f"{len(reshaped)} reshaped"]
    examples = ([f"missing {missing[0]!r}"] if missing else []) + ([f"unexpected {extra[0]!r}"] if extra else []) + (
        [f"{reshaped[0]!r} is {tuple(state[reshaped[0]].shape)}, expected {tuple(expected[reshaped[0]].shape)}"]
        if reshaped else [])
    detail = (f"structure differs: {', '.join(parts)} tensors against the expected {type(model).__name__} "
              f"({'; '.join(examples)})")
    return Finding("(model)", "structure-differs", 1.0, detail,
                   {"missing": missing[:20], "unexpected": extra[:20], "reshaped": reshaped[:20],
                    "counts": {"missing": len(missing), "unexpected": len(extra), "reshaped": len(reshaped)}})


def with_findings(inspection: Inspection, extra) -> Inspection:
    """``inspection`` with more findings (structure, D-SNR) in front."""
    return Inspection(tuple(extra) + inspection.findings, inspection.layers_checked, inspection.threshold)


def require_inspected(inspection: Inspection, what: str) -> Inspection:
    """Refuse a verdict when nothing was inspected: no 2-D or 4-D floating-point weight and no other finding."""
    if inspection.layers_checked == 0 and not inspection.findings:
        raise FedleakError(f"{what}: inspected nothing: no linear (2-D) or convolution (4-D) floating-point weight "
                           f"to inspect, so no verdict")
    return inspection


__all__ = ["Finding", "Inspection", "check_architecture", "require_inspected", "structure_finding", "with_findings", "imprint_rows", "inspect_model", "inspect_state",
           "linearized_convolution", "load_state", "trap_weights"]
