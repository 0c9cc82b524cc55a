"""NVFlare's client privacy filters, as NVFlare runs them: ``PercentilePrivacy`` and ``SVTPrivacy``.

Each function takes what NVFlare's filter receives — the weight difference of one round as numpy arrays
(``DataKind.WEIGHT_DIFF``, keyed by parameter name) and the round's ``MetaKey.NUM_STEPS_CURRENT_ROUND``
— plus a ``numpy.random.RandomState`` standing in for NVFlare's global ``np.random``. The random draws
are made in NVFlare's order with NVFlare's calls, so under the same seed the output is bit-identical to
NVFlare's own class (``tests/test_nvflare_filters.py`` runs the installed ``nvflare`` side by side).

Sources (Apache-2.0, re-implemented here, not copied):

* ``percentile_privacy`` — ``nvflare/app_common/filters/percentile_privacy.py``, unchanged from NVIDIA/NVFlare
  commit 0f9026b308b64692e933783926ae81bacc4efe49 through release 2.9.0: divide Δ by the round's local steps,
  zero the entries whose |Δ| is below the P-th percentile (numpy's linear interpolation), clip to [−γ, γ],
  multiply back by the steps. Shokri & Shmatikov, CCS 2015. Not a DP mechanism (no ε).
* ``svt_privacy`` — ``svt_privacy.py`` of NVFlare 2.8.0 … 2.9.0 (the file is identical in both wheels): the
  threshold budget ε_t and the query budget ε_q split ε as 1 : (2c)^{2/3} (Lyu, Su, Li, VLDB 2017, §4 for
  non-monotonic queries) unless given; threshold τ + Lap(γ/ε_t); queries |clip(Δ_i/steps, γ)| + Lap(2γc/ε_q)
  over the not-yet-accepted entries, re-queried pass after pass until at least c = ⌈fraction·|Δ|⌉ are accepted;
  c draws from the accepted entries (with replacement by default; a multinomial split over tensors and 10⁶-entry
  chunks); each drawn entry is released as (clip(Δ_i/steps, γ) + Lap(2γc/ε_r))·steps, every other entry is 0;
  ε_r = c·noise_var unless given (NVFlare's backward-compatible default: release noise 2γ/noise_var per value).
  NVFlare's accountant sums ε_t + ε_q + ε_r per call (pure DP, δ = 0): :func:`svt_epsilon`.
* ``svt_legacy_privacy`` — ``svt_privacy.py`` of NVFlare 2.0.18 … 2.7.3 (NVIDIA/NVFlare commit
  0f9026b308b64692e933783926ae81bacc4efe49; the wheels 2.0.18, 2.3.0 and 2.7.3 run this algorithm, ``replace``
  from 2.3.0, Δ/steps in float64 after 2.0.19): threshold τ + Lap(2γ/ε), query noise Lap(4γc/ε₂) with
  ε₂ = ε·(2c)^{2/3}, the same re-query, c draws from the accepted entries, the release Δ_i + Lap(2γ/noise_var)
  clipped to [−γ, γ] (noise added before the clip, on the unclipped value), every other entry 0. NVFlare ≤ 2.7
  reports no ε.
  NVFlare 2.0.0 … 2.0.16 (commit 01180f35bf12430914f65feb80be4d0c5d61ffb7) zeroed only the never-accepted
  entries, so every accepted entry that was not drawn went out raw: ``release="2.0"``.

The SHA-256 of each release's ``svt_privacy.py`` checked bit for bit against these functions is in
``benchmarks/results/nvflare_versions.json`` (``benchmarks/check_nvflare_versions.py``).

Both SVT functions stop with a :class:`~fedleak.errors.FedleakError` after :data:`MAX_PASSES` query passes that
do not reach c acceptances (a threshold far above the query noise); NVFlare loops there for ever.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..errors import FedleakError

#: NVFlare ≥ 2.8 processes every tensor in chunks of this many entries (its ``_SVT_CHUNK_SIZE``)
CHUNK = 1_000_000
#: query passes before fedleak gives up (NVFlare has no bound)
MAX_PASSES = 10_000


def percentile_privacy(diff: dict, percentile: float, gamma: float, steps: float = 1) -> dict:
    """NVFlare's ``PercentilePrivacy.process_dxo`` on a weight difference (numpy arrays, any order)."""
    scaled = {name: value / steps for name, value in diff.items()}
    magnitudes = np.concatenate([np.abs(value.ravel()) for value in scaled.values()])
    cutoff = np.percentile(a=magnitudes, q=percentile, overwrite_input=False)
    out = {}
    for name, value in scaled.items():
        if np.ndim(value) == 0:  # a scalar goes through unclipped, as in NVFlare
            out[name] = value * steps
            continue
        value[np.abs(value) < cutoff] = 0.0  # NVFlare's (value > −cutoff) & (value < cutoff)
        out[name] = np.clip(value, a_min=-gamma, a_max=gamma) * steps
    return out


def epsilon_split(epsilon: float, n_upload: int, epsilon_threshold: Optional[float] = None,
                  epsilon_query: Optional[float] = None) -> tuple[float, float]:
    """ε_t, ε_q of NVFlare ≥ 2.8: 1 : (2c)^{2/3} by default, the remainder of ε when one of them is given."""
    if epsilon_threshold is None and epsilon_query is None:
        epsilon_threshold = float(epsilon) / (1.0 + float((2.0 * n_upload) ** (2.0 / 3.0)))
        epsilon_query = float(epsilon) - epsilon_threshold
    elif epsilon_threshold is None:
        epsilon_threshold = float(epsilon) - float(epsilon_query)
    elif epsilon_query is None:
        epsilon_query = float(epsilon) - float(epsilon_threshold)
    if epsilon_threshold <= 0 or epsilon_query <= 0 or not np.isclose(epsilon_threshold + epsilon_query, epsilon):
        raise FedleakError(f"SVT budget split must give positive epsilon_threshold and epsilon_query summing to "
                           f"epsilon={epsilon:g}, got {epsilon_threshold:g} and {epsilon_query:g}")
    return float(epsilon_threshold), float(epsilon_query)


def n_upload(total: int, fraction: float) -> int:
    """c = min(⌈fraction·|Δ|⌉, |Δ|), NVFlare's ``n_upload``."""
    return int(min(np.ceil(float(total) * fraction), float(total)))


def svt_epsilon(total: int, fraction: float, epsilon: float, noise_var: float,
                epsilon_threshold: Optional[float] = None, epsilon_query: Optional[float] = None,
                epsilon_release: Optional[float] = None) -> dict:
    """The per-call budget NVFlare ≥ 2.8's SVT accountant records (``svt_privacy_budget``; pure DP, δ = 0)."""
    count = n_upload(total, fraction)
    eps_t, eps_q = epsilon_split(epsilon, count, epsilon_threshold, epsilon_query)
    eps_r = float(epsilon_release) if epsilon_release is not None else float(count) * float(noise_var)
    return {"accountant": "pure_dp_sum", "delta": 0.0, "epsilon_total": eps_t + eps_q + eps_r,
            "epsilon_threshold": eps_t, "epsilon_query": eps_q, "epsilon_release": eps_r, "n_upload": count}


def _accept(flats: list, threshold: float, scale: float, gamma: float, steps, count: int, rng) -> list:
    """The re-queried SVT answers: one boolean mask per tensor, ≥ ``count`` entries accepted in all."""
    masks = [np.zeros(flat.size, dtype=np.bool_) for flat in flats]
    accepted, passes = 0, 0
    while accepted < count:
        passes += 1
        if passes > MAX_PASSES:
            raise FedleakError(f"SVT accepted {accepted} of {count} entries after {MAX_PASSES} query passes: the "
                               "threshold tau is far above the query noise (NVFlare would loop for ever here)")
        for flat, mask in zip(flats, masks):
            # one draw over a tensor's remaining entries = NVFlare's per-chunk draws, in the same order
            remaining = np.flatnonzero(~mask)
            if remaining.size == 0:
                continue
            values = flat[remaining].astype(np.float64, copy=False) / steps
            answers = np.abs(np.clip(values, a_min=-gamma, a_max=gamma))
            answers += rng.laplace(scale=scale, size=values.size)
            hits = remaining[answers >= threshold]
            mask[hits] = True
            accepted += int(hits.size)
    return masks


def _split(total: int, counts: list, weights_total: int, replace: bool, rng) -> list:
    """Spread ``total`` draws over groups in proportion to ``counts`` (NVFlare's sequential binomials)."""
    out, left_groups, left = [], int(weights_total), int(total)
    for i, count in enumerate(counts):
        if i == len(counts) - 1:
            drawn = left
        elif left == 0 or count == 0:
            drawn = 0
        elif replace:
            drawn = int(rng.binomial(left, float(count) / float(left_groups)))
        else:
            drawn = int(rng.hypergeometric(ngood=count, nbad=left_groups - count, nsample=left))
        out.append(drawn)
        left_groups -= count
        left -= drawn
    return out


def svt_privacy(diff: dict, fraction: float = 0.1, epsilon: float = 0.1, noise_var: float = 0.1, gamma: float = 1e-5,
                tau: float = 1e-6, steps: float = 1, rng: Optional[np.random.RandomState] = None, replace: bool = True,
                epsilon_threshold: Optional[float] = None, epsilon_query: Optional[float] = None,
                epsilon_release: Optional[float] = None) -> tuple[dict, dict]:
    """NVFlare ≥ 2.8's ``SVTPrivacy.process_dxo``; returns the released difference and the per-call ε record."""
    rng = rng if rng is not None else np.random.RandomState(0)
    steps = np.float64(steps)
    names = sorted(diff)
    arrays = [np.asarray(diff[name]) for name in names]
    flats = [value.reshape(-1) for value in arrays]
    total = sum(flat.size for flat in flats)
    if total == 0:
        return dict(diff), {}
    count = n_upload(total, fraction)
    budget = svt_epsilon(total, fraction, epsilon, noise_var, epsilon_threshold, epsilon_query, epsilon_release)
    threshold = tau + rng.laplace(scale=gamma / budget["epsilon_threshold"])
    query_scale = gamma * 2.0 * count / budget["epsilon_query"]
    release_scale = gamma * 2.0 * count / budget["epsilon_release"]
    masks = _accept(flats, threshold, query_scale, gamma, steps, count, rng)
    accepted = [int(mask.sum()) for mask in masks]
    drawn = _split(count, accepted, sum(accepted), replace, rng)
    out = {}
    for name, value, flat, mask, n_accepted, n_drawn in zip(names, arrays, flats, masks, accepted, drawn):
        scalar = np.ndim(value) == 0
        released = None if scalar else np.zeros(value.size, dtype=value.dtype)
        left_accepted, left_drawn = n_accepted, n_drawn
        for start in range(0, flat.size, CHUNK):  # chunk by chunk: each chunk's binomial, then its draws
            end = min(start + CHUNK, flat.size)
            in_chunk = int(mask[start:end].sum())
            if end == flat.size:
                k = left_drawn
            elif left_drawn == 0 or in_chunk == 0:
                k = 0
            elif replace:
                k = int(rng.binomial(left_drawn, float(in_chunk) / float(left_accepted)))
            else:
                k = int(rng.hypergeometric(ngood=in_chunk, nbad=left_accepted - in_chunk, nsample=left_drawn))
            left_accepted, left_drawn = left_accepted - in_chunk, left_drawn - k
            if scalar or k == 0:
                continue
            pick = rng.choice(np.flatnonzero(mask[start:end]), size=k, replace=replace)
            noise = rng.laplace(scale=release_scale, size=k)
            chosen = flat[start:end][pick].astype(np.float64, copy=False) / steps
            released[start:end][pick] = (np.clip(chosen, a_min=-gamma, a_max=gamma) + noise) * steps
        out[name] = value if scalar else released.reshape(value.shape)
    return out, budget


def svt_legacy_privacy(diff: dict, fraction: float = 0.1, epsilon: float = 0.1, noise_var: float = 0.1,
                       gamma: float = 1e-5, tau: float = 1e-6, steps: float = 1,
                       rng: Optional[np.random.RandomState] = None, replace: bool = True,
                       release: str = "2.3") -> dict:
    """NVFlare 2.0.18 … 2.7.3's ``SVTPrivacy`` (module docstring); returns the released difference.

    ``release`` picks among that file's versions: ``"2.3"`` (2.1 … 2.7.3: Δ/steps in float64), ``"2.0.18"``
    (2.0.18, 2.0.19: the same in the update's dtype, ``np.float`` being Python's float, no ``replace``), ``"2.0"``
    (2.0.0 … 2.0.16: as 2.0.18, but only the never-accepted entries are zeroed, so the accepted entries that were
    not drawn go out unchanged).
    """
    if release not in ("2.0", "2.0.18", "2.3"):
        raise FedleakError(f"unknown NVFlare SVT release {release!r}; allowed: 2.0, 2.0.18, 2.3")
    nvflare_2_0 = release == "2.0"
    rng = rng if rng is not None else np.random.RandomState(0)
    names = sorted(diff)
    arrays = [np.asarray(diff[name]) for name in names]
    divisor = np.float64(steps) if release == "2.3" else float(steps)
    delta = np.concatenate([value.ravel() / divisor for value in arrays])
    count = np.minimum(np.ceil(np.float64(delta.size) * fraction), np.float64(delta.size))
    threshold = tau + rng.laplace(scale=gamma * 2.0 / epsilon)
    query_scale = gamma * 4.0 * count / (epsilon * (2.0 * count) ** (2.0 / 3.0))
    answers_of = np.abs(np.clip(delta, a_min=-gamma, a_max=gamma))
    accepted, candidates, passes = [], np.arange(delta.size), 0
    while len(accepted) < count:
        passes += 1
        if passes > MAX_PASSES:
            raise FedleakError(f"SVT accepted {len(accepted)} of {int(count)} entries after {MAX_PASSES} query passes: "
                               "the threshold tau is far above the query noise (NVFlare would loop for ever here)")
        above = (answers_of[candidates] + rng.laplace(scale=query_scale, size=candidates.shape)) >= threshold
        accepted += candidates[above].tolist()
        candidates = candidates[~above]
    chosen = rng.choice(accepted, size=np.int64(count), replace=replace)
    noise = rng.laplace(scale=gamma * 2.0 / noise_var, size=chosen.shape)
    delta[chosen] = np.clip(delta[chosen] + noise, a_min=-gamma, a_max=gamma)
    keep = np.zeros(delta.size, dtype=np.bool_)
    keep[np.asarray(accepted, dtype=np.int64) if nvflare_2_0 else chosen] = True
    delta[~keep] = 0.0
    out, start = {}, 0
    for name, value in zip(names, arrays):
        if np.ndim(value) == 0:
            out[name] = value
            start += 1
            continue
        out[name] = delta[start:start + value.size].reshape(value.shape) * divisor
        start += value.size
    return out


def legacy_query_budget(epsilon: float, count: int) -> float:
    """ε₂ = ε·(2c)^{2/3} of NVFlare ≤ 2.7 (its query noise is Lap(4γc/ε₂))."""
    return float(epsilon) * (2.0 * count) ** (2.0 / 3.0) if count > 0 else math.nan
