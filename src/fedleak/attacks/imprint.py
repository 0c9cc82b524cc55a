"""Robbing the Fed (Fowl et al., ICLR 2022): analytic recovery from an imprint block's update.

The malicious server built the model with :func:`fedleak.models.imprint` and knows the block's
secrets (row order, bin edges). From the returned update it reads, per bin (§3.3, Eq. 4):

* ``cumulative`` rows (ReLU, row i fires for h > cᵢ): the bin's weight and bias updates are the
  differences of successive rows, ΔWᵢ − ΔWᵢ₊₁ and Δbᵢ − Δbᵢ₊₁ (the last row stands alone);
* ``sparse`` / sparse ``one-shot`` rows (thresholding nonlinearity, §4.3) and ``cah`` trap rows:
  each row on its own;

and returns ``x̂ = ΔW_bin / Δb_bin`` (Eq. 2) for every non-empty bin, un-flattened to the block's
input shape, mapped back to model inputs (deeper placements: first three feature channels minus
the bias shift, upsampled; text: nearest token embedding) — normalized like the model inputs. An
input alone in its bin comes back verbatim. It works on a FedSGD gradient and on a FedAvg weight
difference θᶜ − θˢ alike (the ratio does not depend on the learning rate). When more candidates
than the N inputs appear (noise, drifting bins) the N with the largest mean absolute weight update
are kept ("highest gradient mean per row in W*", §4).

The attack also says which bins it believes held exactly one input: x̂ must fall inside its own
bin (h(x̂) ∈ [cᵢ, cᵢ₊₁]), inside the box of valid inputs, and — for 8-bit images — lie on the
pixel grid; a mixture of inputs generally fails one of these.

:func:`expected_recovered` is Proposition 1: the expected number of inputs alone in their bin,
computed exactly (see its docstring for how it relates to the formula printed in App. A.1).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional, Sequence

import torch
from torch import nn

from ..errors import FedleakError
from ..types import DataSpec, Params, Reconstruction, Update
from .base import Attack, AttackOptions, register

STRUCTURES = ("auto", "cumulative", "sparse", "one-shot", "cah")
REDUCTIONS = ("weight", "bias", "none")


# ----------------------------------------------------------------------------------------------
# Proposition 1 and friends


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise FedleakError(f"the number of inputs n must be a positive integer, got {n!r}")
    return n


def _masses(masses) -> list[float]:
    values = [float(m) for m in masses]
    if not values or any(not (0.0 <= m <= 1.0) or not math.isfinite(m) for m in values) or sum(values) > 1 + 1e-9:
        raise FedleakError("bin masses must be probabilities in [0, 1] summing to at most 1")
    return values


def expected_recovered(n: int, k: Optional[int] = None, *, masses: Optional[Sequence[float]] = None) -> float:
    """Expected number of the n inputs that are alone in their bin (Proposition 1), exactly.

    Inputs are i.i.d. draws of the data distribution and bin j has probability mass pⱼ (the
    proposition's equal-mass bins: pⱼ = 1/k). Input t is recovered verbatim iff no other input
    shares its bin, so by linearity of expectation

        E[#recovered] = Σⱼ n · pⱼ · (1 − pⱼ)ⁿ⁻¹   ( = n·(1 − 1/k)ⁿ⁻¹ for k equal bins ),

    evaluated in exact rational arithmetic for equal bins. Bins whose masses sum to less than 1
    leave the rest of the distribution uncaptured (e.g. the one-shot block).

    The closed form printed in App. A.1 counts occupancy patterns ("stars and bars") as if all
    were equally likely, which i.i.d. inputs do not make them; it is
    :func:`expected_recovered_paper`, kept for comparison. This function is the expectation a
    simulation of i.i.d. inputs converges to (tests check both against their simulations).
    """
    n = _check_n(n)
    if masses is None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise FedleakError(f"the number of bins k must be a positive integer, got {k!r}")
        value = n * Fraction(k - 1, k) ** (n - 1)
        return float(value)
    if k is not None:
        raise FedleakError("give the number of bins k or their masses, not both")
    return float(sum(n * p * (1.0 - p) ** (n - 1) for p in _masses(masses)))


def expected_recovered_paper(n: int, k: int, *, residual: bool = True) -> float:
    """The formula of Proposition 1 as printed in App. A.1 (k > n > 2), in exact arithmetic.

    (1/C(k+n−1, k−1)) · Σ_{i=1}^{n−2} i·C(k, i)·Σ_{j=1}^{⌊(n−i)/2⌋} C(k−i, j)·C(n−i−j−1, j−1)
    + r(n, k),  r(n, k) = n·C(k, n)/C(k+n−1, k−1) − n/k.

    Without the last term (``residual=False`` drops only −n/k) it is the expected number of
    singly-occupied bins when every occupancy pattern of n indistinguishable inputs in k bins is
    equally likely (Bose–Einstein statistics), not under i.i.d. inputs; see
    :func:`expected_recovered`.
    """
    n = _check_n(n)
    if isinstance(k, bool) or not isinstance(k, int) or not k > n > 2:
        raise FedleakError(f"the printed formula needs integers k > n > 2, got n={n!r}, k={k!r}")
    total = 0
    for i in range(1, n - 1):
        inner = sum(math.comb(k - i, j) * math.comb(n - i - j - 1, j - 1) for j in range(1, (n - i) // 2 + 1))
        total += i * math.comb(k, i) * inner
    patterns = math.comb(k + n - 1, k - 1)
    value = Fraction(total, patterns) + Fraction(n * math.comb(k, n), patterns)
    if residual:
        value -= Fraction(n, k)
    return float(value)


def one_shot_probability(n: int, masses: Sequence[float]) -> float:
    """P(at least one of the given bins holds exactly one of n i.i.d. inputs) (§4.2, Fig. 1b).

    Inclusion–exclusion over subsets S of the bins: Σ_S (−1)^{|S|+1} · n!/(n−|S|)! · Π_{j∈S} pⱼ ·
    (1 − Σ_{j∈S} pⱼ)^{n−|S|}. For one bin of mass p this is n·p·(1−p)ⁿ⁻¹ (at most ≈ 1/e); two
    bins of mass 1/n each give ≈ 2/e − 1/e² ≈ 0.60.
    """
    n = _check_n(n)
    p = _masses(masses)
    if len(p) > 20:
        raise FedleakError("one_shot_probability takes at most 20 bins")
    total = 0.0
    for subset in range(1, 1 << len(p)):
        members = [p[j] for j in range(len(p)) if subset >> j & 1]
        size = len(members)
        if size > n:
            continue
        term = math.perm(n, size) * math.prod(members) * max(0.0, 1.0 - sum(members)) ** (n - size)
        total += term if size % 2 else -term
    return total


def simulate_recovered(n: int, masses: Sequence[float], trials: int = 1000, seed: int = 0) -> torch.Tensor:
    """Number of inputs alone in their bin in ``trials`` simulated batches of n i.i.d. inputs."""
    n = _check_n(n)
    p = torch.tensor(_masses(masses), dtype=torch.float64)
    rest = max(0.0, 1.0 - float(p.sum()))
    probs = torch.cat([p, torch.tensor([rest], dtype=torch.float64)])  # last: outside every bin
    generator = torch.Generator().manual_seed(seed)
    draws = torch.multinomial(probs.expand(trials, -1), n, replacement=True, generator=generator)
    counts = torch.zeros(trials, probs.numel(), dtype=torch.int64).scatter_add_(1, draws, torch.ones_like(draws))
    return (counts[:, :-1] == 1).sum(1)


# ----------------------------------------------------------------------------------------------
# reading the block's update


def resolve_secrets(update: Update, model: nn.Module) -> dict:
    """The server's imprint secrets: ``update.metadata["imprint"]``, else ``model.imprint_secrets()``."""
    secrets = update.metadata.get("imprint") if isinstance(update.metadata, dict) else None
    if secrets is None and hasattr(model, "imprint_secrets"):
        secrets = model.imprint_secrets()
    if secrets is None:
        raise FedleakError("the imprint attack needs the server's secrets: attack a model built with "
                           "fedleak.models.imprint (or 'imprint' from the model zoo), or put its "
                           "imprint_secrets() into update.metadata['imprint']")
    if not isinstance(secrets, dict) or secrets.get("format") != "fedleak.imprint/1":
        raise FedleakError("imprint secrets are not in the fedleak.imprint/1 format")
    return secrets


def block_update(update: Update, secrets: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's weight and bias update, rows in bin order: (k, m) and (k,).

    FedSGD: the gradient; FedAvg: the weight change θᶜ − θˢ (−η times the summed gradient).
    """
    names = (secrets["weight"], secrets["bias"])
    for name in names:
        if name not in update.server_params:
            raise FedleakError(f"the update has no parameter {name!r} named in the imprint secrets")
    if update.is_fedsgd:
        weight, bias = update.gradient[names[0]], update.gradient[names[1]]
    else:
        weight = update.client_params[names[0]] - update.server_params[names[0]]
        bias = update.client_params[names[1]] - update.server_params[names[1]]
    order = torch.as_tensor(secrets["order"], dtype=torch.long, device=weight.device)
    rows = weight.shape[0]
    if weight.dim() != 2 or bias.shape != (rows,) or sorted(order.tolist()) != list(range(rows)):
        raise FedleakError(f"imprint secrets do not match the block: {rows} rows, order of length {order.numel()}")
    if weight.shape[1] != math.prod(secrets["input_shape"]):
        raise FedleakError(f"imprint block has {weight.shape[1]} inputs but the secrets say shape "
                           f"{secrets['input_shape']}")
    return weight[order], bias[order]


def bin_sums(weight: torch.Tensor, bias: torch.Tensor, structure: str, nonlinearity: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-bin sums Σ_{t in bin} γₜ·xₜ and Σ γₜ: Eq. 4's successive differences for ReLU rows."""
    if nonlinearity == "relu" and structure != "cah":
        weight = torch.cat([weight[:-1] - weight[1:], weight[-1:]])
        bias = torch.cat([bias[:-1] - bias[1:], bias[-1:]])
    return weight, bias


def _server_rows(update: Update, secrets: dict) -> tuple[torch.Tensor, torch.Tensor]:
    order = torch.as_tensor(secrets["order"], dtype=torch.long, device=update.server_params[secrets["weight"]].device)
    return update.server_params[secrets["weight"]][order], update.server_params[secrets["bias"]][order]


@dataclass(frozen=True)
class ImprintOptions(AttackOptions):
    """Options of the analytic imprint readout.

    ``structure``: the block the attack expects (``auto``: whatever the secrets say).
    ``reduction``: which candidates to keep when there are more than N (``weight``: the largest
    mean |ΔW| row, the paper's choice; ``bias``: the largest |Δb|; ``none``: keep all).
    ``tolerance``: a bin counts as empty when |Δb| ≤ tolerance·max|Δb| (0: 1000·machine eps).
    ``clip``: clamp recovered images to the valid pixel range. ``levels``: quantization levels of
    the data (255 for 8-bit images; 0 disables the on-grid check).
    """

    structure: str = "auto"
    reduction: str = "weight"
    tolerance: float = 0.0
    clip: bool = False
    levels: int = 255


class ImprintAttack(Attack):
    """Analytic recovery of the inputs that fell alone into an imprint bin (Fowl et al. 2022)."""

    Options = ImprintOptions
    name = "imprint"

    choices = {"structure": STRUCTURES, "reduction": REDUCTIONS}
    non_negative = ("tolerance", "levels")

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        start = time.perf_counter()
        o = self.options
        secrets = resolve_secrets(update, model)
        structure = secrets["structure"]
        if o.structure != "auto" and o.structure != structure:
            raise FedleakError(f"attack {getattr(self, 'variant', self.name)!r} expects a {o.structure!r} imprint "
                               f"block, the model carries a {structure!r} one")
        weight, bias = block_update(update, secrets)
        sums_w, sums_b = bin_sums(weight, bias, structure, secrets["nonlinearity"])
        eps = torch.finfo(sums_b.dtype).eps
        tolerance = o.tolerance if o.tolerance > 0 else 1000 * eps
        scale = float(bias.abs().max()) if bias.numel() else 0.0
        nonempty = (sums_b.abs() > tolerance * scale).nonzero().flatten() if scale > 0 else sums_b.new_zeros(0, dtype=torch.long)
        candidates = sums_w[nonempty] / sums_b[nonempty, None]
        if structure == "cah":
            candidates, nonempty = _dedupe(candidates, nonempty)
        checks = _single_checks(candidates, nonempty, update, secrets, spec, o.levels)
        single = checks["single"]
        score = (sums_w[nonempty].abs().mean(1) if o.reduction != "bias" else sums_b[nonempty].abs())
        keep = torch.arange(nonempty.numel(), device=nonempty.device)
        if o.reduction != "none" and nonempty.numel() > update.num_samples:
            # prefer candidates that pass the single-input checks, then the largest score
            rank = torch.argsort(score + single.to(score.dtype) * (score.max() + 1), descending=True)
            keep = rank[: update.num_samples].sort().values
        inputs = _to_model_inputs(candidates[keep], update, secrets, spec)
        if o.clip and secrets.get("box") is not None:
            lo, hi = spec.pixel_range
            inputs = spec.normalize(spec.denormalize(inputs).clamp(lo, hi))
        bins = nonempty[keep].tolist()
        extras = {
            "attack": getattr(self, "variant", self.name),
            "structure": structure,
            "num_bins": int(weight.shape[0]),
            "nonempty_bins": nonempty.tolist(),
            "candidate_bins": bins,
            "single_bins": [b for b, s in zip(nonempty.tolist(), single.tolist()) if s],
            "single_candidates": [bool(single[i]) for i in keep.tolist()],
            "checks": {key: [value[i] for i in keep.tolist()] for key, value in checks.items() if key != "single"},
            "source": "gradient" if update.is_fedsgd else "weight difference",
            "seconds": time.perf_counter() - start,
        }
        return Reconstruction(inputs.detach(), None, extras=extras)


def _dedupe(candidates: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge CAH rows that recovered the same input (several trap rows can fire for one input)."""
    if candidates.shape[0] < 2:
        return candidates, rows
    norms = candidates.norm(dim=1).clamp_min(torch.finfo(candidates.dtype).tiny)
    dist = torch.cdist(candidates, candidates) / norms[:, None]
    same = dist < 1e-3
    keep = []
    taken = torch.zeros(candidates.shape[0], dtype=torch.bool, device=candidates.device)
    for i in range(candidates.shape[0]):
        if not taken[i]:
            keep.append(i)
            taken |= same[i]
    index = torch.tensor(keep, dtype=torch.long, device=candidates.device)
    return candidates[index], rows[index]


def _single_checks(candidates: torch.Tensor, bins: torch.Tensor, update: Update, secrets: dict, spec: DataSpec,
                   levels: int) -> dict:
    """Evidence that a candidate is one input, not a mixture (in its bin, in the box, on the grid)."""
    count = candidates.shape[0]
    true = torch.ones(count, dtype=torch.bool, device=candidates.device)
    in_bin = true.clone()
    info = secrets["bins"]
    if count and info and info[0].get("low") is not None:
        rows, _ = _server_rows(update, secrets)
        scales = torch.tensor([info[b]["row_scale"] for b in bins.tolist()], dtype=candidates.dtype,
                              device=candidates.device)
        h = (rows[bins] * candidates).sum(1) / scales
        low = torch.tensor([info[b]["low"] for b in bins.tolist()], dtype=h.dtype, device=h.device)
        high = torch.tensor([info[b]["high"] for b in bins.tolist()], dtype=h.dtype, device=h.device)
        slack = 1e-3 * (high - low)
        in_bin = (h >= low - slack) & (h <= high + slack)
    in_box = true.clone()
    on_grid = true.clone()
    grid_error = [None] * count
    if count and secrets.get("box") is not None and secrets.get("features") is None:
        images = candidates.view(count, *secrets["input_shape"])
        pixels = spec.denormalize(images).flatten(1)
        lo, hi = spec.pixel_range
        slack = 1e-3 * (hi - lo)
        in_box = ((pixels >= lo - slack) & (pixels <= hi + slack)).all(1)
        if levels:
            grid = (pixels - lo) / (hi - lo) * levels
            error = (grid - grid.round()).pow(2).mean(1).sqrt()
            on_grid = error < 0.15
            grid_error = [float(e) for e in error.tolist()]
            if count >= 4 and not bool(on_grid.any()):  # none of several on the grid: data not 8-bit
                on_grid = true.clone()
    if count and secrets.get("tokens") is not None:
        embedding = update.server_params[secrets["tokens"]["embedding"]]
        vectors = candidates.view(count, -1, embedding.shape[1])
        table = embedding.to(vectors.dtype)
        nearest = torch.cdist(vectors, table).min(-1).values
        spacing = torch.cdist(table, table).fill_diagonal_(float("inf")).min(1).values.median()
        on_grid = nearest.max(1).values <= 0.02 * spacing
    return {"single": in_bin & in_box & on_grid, "in_bin": in_bin.tolist(), "in_box": in_box.tolist(),
            "on_grid": on_grid.tolist(), "grid_error": grid_error}


def _to_model_inputs(candidates: torch.Tensor, update: Update, secrets: dict, spec: DataSpec) -> torch.Tensor:
    """Candidates at the block → model inputs (images; token ids for text)."""
    count = candidates.shape[0]
    shape = secrets["input_shape"]
    tokens = secrets.get("tokens")
    if tokens is not None:
        embedding = update.server_params[tokens["embedding"]]
        vectors = candidates.view(count, -1, embedding.shape[1])
        if count == 0:
            return candidates.new_zeros(0, vectors.shape[1])
        ids = torch.cdist(vectors, embedding.to(vectors.dtype)).argmin(-1)
        return ids.to(candidates.dtype)
    features = secrets.get("features")
    if features is None:
        return candidates.view(count, *shape)
    c, h, w = features["input_shape"]
    stride = int(features["stride"])
    maps = candidates.view(count, *shape)[:, : features["channels"]] - features["shift"]
    maps = maps.repeat_interleave(stride, dim=2).repeat_interleave(stride, dim=3)[:, :, :h, :w]
    if maps.shape[1:] != (c, h, w):
        raise FedleakError(f"cannot map features of shape {tuple(shape)} back to inputs {features['input_shape']}")
    return maps.contiguous()


# ----------------------------------------------------------------------------------------------
# secure aggregation (§4.2) and the audit section


def aggregate(updates: Sequence[Update]) -> Update:
    """The aggregate the server sees under secure aggregation: the sample-weighted mean update.

    FedSGD: Σ Nᵤ·gᵤ / Σ Nᵤ, the gradient of the mean loss over all users' inputs (§4.2); FedAvg:
    the weighted mean of the returned weights. All updates must share θˢ and the protocol.
    """
    updates = list(updates)
    if not updates or not all(isinstance(u, Update) for u in updates):
        raise FedleakError("aggregate needs a non-empty list of fedleak.Update")
    first = updates[0]
    for u in updates[1:]:
        if u.protocol != first.protocol or u.is_fedsgd != first.is_fedsgd or set(u.server_params) != set(first.server_params):
            raise FedleakError("aggregated updates must share the protocol and the model")
        if any(not torch.equal(u.server_params[k], first.server_params[k]) for k in first.server_params):
            raise FedleakError("aggregated updates must start from the same server parameters")
    total = sum(int(u.num_samples) for u in updates)

    def mean(get) -> Params:
        return {k: sum(get(u)[k] * (u.num_samples / total) for u in updates) for k in first.server_params}

    meta = {"aggregated_users": len(updates)}
    if "imprint" in first.metadata:
        meta["imprint"] = first.metadata["imprint"]
    if first.is_fedsgd:
        return Update(first.server_params, first.protocol, total, gradient=mean(lambda u: u.gradient),
                      buffers=first.buffers, metadata=meta)
    return Update(first.server_params, first.protocol, total, client_params=mean(lambda u: u.client_params),
                  buffers=first.buffers, metadata=meta)


def audit_section(spec: DataSpec, clients, seed: int = 0, *, model="resnet18", bins: int = 128,
                  client_index: int = 0, protocol=None, surrogate: Optional[torch.Tensor] = None,
                  linfunc: str = "randn", verbatim_db: float = 60.0) -> dict:
    """The malicious-server section of ``fedleak audit``: Robbing the Fed against one client.

    The server puts a ``bins``-row imprint block in front of the audit model (a zoo name or an
    ``nn.Module``), the client ``clients[client_index]`` trains on it under ``protocol`` (default
    FedSGD; FedAvg uses the sparse block of §4.3), and the attack reads the inputs back. h is a
    Gaussian random direction with the N(0, 1) assumption (App. A.2) unless ``surrogate`` inputs
    (the server's own data) are given to fit it. Returns a dict: ``metrics`` from
    :func:`fedleak.metrics.evaluate`, ``verbatim_percent`` (PSNR > ``verbatim_db``),
    ``expected_percent`` (Proposition 1), the attack's own count of single-input bins, timing,
    and ``reconstruction`` (a :class:`~fedleak.types.Reconstruction`, not JSON; drop it before
    serializing).
    """
    from ..fl.client import client_update
    from ..metrics import evaluate
    from ..models import build as build_model
    from ..models.imprint import imprint
    from ..types import ClientData, Protocol

    clients = list(clients)
    if not clients or not 0 <= client_index < len(clients):
        raise FedleakError(f"audit_section: client_index {client_index} out of range for {len(clients)} clients")
    client = clients[client_index]
    if not isinstance(client, ClientData):
        raise FedleakError(f"audit_section needs ClientData, got {type(client).__name__}")
    protocol = protocol if protocol is not None else Protocol("fedsgd")
    base = build_model(model, spec, seed=seed) if isinstance(model, str) else model
    structure = "cumulative" if protocol.algorithm == "fedsgd" else "sparse"
    # FedAvg: small rows (c0 = 1e-3) keep the lr-scaled update above float32 rounding (robbing-fedavg preset)
    gain = 1.0 if structure == "cumulative" else 1e-3
    malicious = imprint(base, spec, bins=bins, structure=structure, linfunc=linfunc, gain=gain,
                        surrogate=surrogate, seed=seed)
    update = client_update(malicious, client, protocol, seed=seed)
    attack = ImprintAttack()
    attack.variant = "imprint" if structure == "cumulative" else "imprint-sparse"
    rec = attack.reconstruct(update, malicious, spec)
    metrics = evaluate(rec, client, spec)
    verbatim = sum(1 for p in metrics["psnr_per_input"] if p is not None and p > verbatim_db)
    n = len(client)
    return {
        "section": "malicious-server",
        "title": "Robbing the Fed: malicious imprint module (Fowl et al., ICLR 2022)",
        "threat_model": "the server modifies the model it sends; the client trains honestly",
        "attack": attack.variant,
        "model": model if isinstance(model, str) else type(model).__name__,
        "structure": structure,
        "bins": bins,
        "added_parameters": int(sum(p.numel() for p in malicious.imprint.parameters())),
        "protocol": protocol.to_json(),
        "client_id": client.client_id,
        "num_inputs": n,
        "metrics": metrics,
        "verbatim_db": verbatim_db,
        "verbatim_percent": 100.0 * verbatim / n,
        "expected_percent": 100.0 * expected_recovered(n, bins) / n,
        "single_bins_reported": len(rec.extras["single_bins"]),
        "recovery_seconds": rec.extras["seconds"],
        "reconstruction": rec,
    }


register("imprint", ImprintAttack,
         "Robbing the Fed (Fowl et al. 2022): malicious imprint block, analytic readout of the inputs alone in "
         "their bin (Eq. 4); FedSGD gradients and FedAvg weight differences")
register("imprint-sparse", ImprintAttack,
         "Robbing the Fed, sparse FedAvg variant (§4.3): thresholded bins read row by row", structure="sparse")
register("imprint-one-shot", ImprintAttack,
         "Robbing the Fed, one-shot (§4.2): two rows isolating single inputs from huge aggregates",
         structure="one-shot")
register("cah", ImprintAttack,
         "Curious Abandon Honesty (Boenisch et al. 2021) trap weights, read row by row (Fowl et al. App. A.8)",
         structure="cah")
