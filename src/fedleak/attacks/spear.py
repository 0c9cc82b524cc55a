"""SPEAR: exact recovery of a whole batch through a linear layer followed by ReLU (Dimitrov et al., NeurIPS 2024).

Dimitrov, Müller, Fischer, Vechev, "SPEAR: Exact Gradient Inversion of Batches in Federated Learning",
NeurIPS 2024. With the PyTorch convention ``Z = X Wᵀ + b`` the FedSGD gradient of the layer is
``∇W = ∇Zᵀ X`` (§3, Eq. 1: rank ≤ B). Steps, as in the paper:

1. **Low-rank factorization** (§3, Thm. 3.1): the SVD ∇W = U S Vᵀ truncated to rank B gives ``L = U_B S_B``
   (m × B) and ``R = V_Bᵀ`` (B × n); some unknown invertible Q (B × B) has ``∇Zᵀ = L Q`` and ``X = Q⁻¹ R``.
2. **Sparse directions** (§4, Lemma 4.1): ReLU makes ∇Z sparse (an output that is ≤ 0 gets no gradient). If
   B − 1 rows A of L are rows where sample i's column of ∇Zᵀ is zero, then ``L_A q_i = 0`` fixes q_i (up
   to scale) as the null vector of L_A. Random subsets A are sampled (batched SVDs); a candidate whose null
   space is not one-dimensional is discarded.
3. **Sparsity filter** (§4.1): a true direction induces a column ``L q`` with about half its entries zero; a
   wrong one only the B − 1 forced zeros. Candidates with at least ``tau`` × (live rows) zeros are kept.
4. **Greedy selection** (§4.2): candidates in decreasing sparsity, each kept when it is new (not parallel to
   a kept one) and keeps the selected set linearly independent, until B are chosen.
5. **Scale** (§4.3): the bias gradient ∇b = ∇Zᵀ 1 = L Q 1 fixes every column's scale and sign
   (least squares), then X = Q⁻¹ R.
6. **Verification** (:func:`fedleak.attacks.fc_exact.verify`): the labels are read from ∇Z and the gradient is
   recomputed from the recovered batch; the recovery is *certain* when it matches.

**Precondition** (reported in ``extras["exactness"]``): a FedSGD (one-step) update; rank(∇W) = B (so B ≤ m, n
and the inputs are linearly independent); enough sparsity for B directions to be found within
``max_samples`` subsets. The expected number of subsets grows like 2^(B−1)·H_B (each of the B − 1 rows
must be inactive for the sample, probability ≈ ½ each): ~350 at B = 8, ~10⁵ at B = 16, ~6·10⁷ at
B = 25 — past the CPU budget, where the attack reports the precondition as not met and why.

**Measured failure mode below the budget limit** (CIFAR-100, b = 16, seed 0): the samples with the fewest
inactive outputs (119 of 256) need ~10⁵ subsets each to be hit (the coupon collector's tail), so 2·10⁵
subsets found 14 of the 16 directions; the greedy selection filled the set with candidates that passed the
sparsity filter but not the ReLU test. The attack then returns the batch it has (most samples exact),
reports how many samples fail the ReLU test, and never marks it certain. With ``max_samples=1_000_000``
the same batch is found whole after 5·10⁵ subsets (50 s on one loaded CPU thread) and verified; the default
stays 2·10⁵ because candidates are deduplicated in Python and highly similar images (the embedded digits)
yield thousands of candidates, which makes a 10⁶ budget take minutes inside an audit. (In principle a sample whose active
outputs are nested in another's cannot be isolated at all: its null space is two-dimensional. None of the
16 samples of this case is nested; checked against the ground truth.)

**Zero test in the update's own precision.** "∇z_ij = 0" is read as ``|(L q)_j| ≤ max(zero_tol · max|L q|,
FLOAT_MARGIN · noise_j)``: the fixed relative part is the paper's; ``noise_j`` is the float error of one entry of
row j of ∇W in the update's dtype (:func:`row_noise`). A weights update's pseudo-gradient (θˢ − θᶜ)/η carries the
rounding of θᶜ (up to ½ ulp per entry, divided by η): ε · max_k |θᶜ_jk| / η, in float32 at η = 0.05 on Adult's
tabular MLP 0.5–5× the fixed test's threshold, so the fixed test read rounding as activity (measured: 0 of 4
float32 nodes proved). A candidate found from B − 1 noisy rows also carries their error (δ); the first count
allows ‖L_j‖·δ per row, and :func:`refine` re-solves it from all its zero rows (δ shrinks), drops two-dimensional
null spaces and counts its zeros against the float floor alone. The derived tolerance only decides which
candidate directions are tried; soundness stays with the recomputation (``verify``), which a wrong record fails
(``tests/test_spear_float32.py``). FedSGD gradients (no θᶜ to round) and float64 keep the paper's test.

**FedAvg.** The paper's FedAvg extension (SPEAR++) is not implemented: with several local steps ∇W sums
gradients at different weights; a one-step FedAvg update is treated as FedSGD.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..types import DataSpec, Reconstruction, Update
from .base import Attack, AttackOptions, register
from .progress import loop_progress
from .fc_exact import TOLERANCE, fc_gradients, fc_layer, finish, numerical_rank, single_step


@dataclass(frozen=True)
class SpearOptions(AttackOptions):
    """SPEAR's few settings (none needs tuning; they bound work and numerical tolerances)."""

    layer: str = ""
    max_samples: int = 200_000
    chunk: int = 4096
    tau: float = 0.2
    zero_tol: float = 1e-6
    rank_tol: float = 1e-5
    tolerance: float = TOLERANCE


#: ReLU consistency a recovered sample must reach (1 for a true sample, about ½ for a wrong direction)
CONSISTENT = 0.99
#: the zero test's float part is this multiple of the row's float-error bound (:func:`row_noise`)
FLOAT_MARGIN = 4.0


def row_noise(update: Update, layer: str, grad_w: torch.Tensor) -> torch.Tensor:
    """Per output row j, the float error of one entry of row j of ∇W as the server reads it (float64, length m).

    A FedSGD gradient is taken as sent (its own float32 summation is what the fixed relative test covers: 0). A
    weights update's pseudo-gradient (θˢ − θᶜ)/η: θᶜ was rounded to the update's dtype (≤ ½ ulp ≤ ε/2 · |θᶜ_jk|),
    the difference and the division add one rounding each, so an entry's error is at most
    ε (max_k |θᶜ_jk| / η + max_k |Ĝ_jk|) (ε: the dtype's machine epsilon; float64 makes it negligible and the test
    the paper's). Column j of L q for a unit q sums these errors with unit weights and independent signs: its size
    is that of one entry (the L2 bound ε ‖θᶜ_j‖₂ / η, √n times larger, would hide Adult's smallest active
    outputs, measured at 3e-6 in float32 at η 0.05).
    """
    if update.is_fedsgd or update.client_params is None:
        return torch.zeros(grad_w.shape[0], dtype=torch.float64)
    client = update.client_params[f"{layer}.weight"].detach()
    eps = torch.finfo(client.dtype).eps if client.is_floating_point() else 0.0
    lr = float(update.protocol.lr)
    return eps * (client.double().abs().amax(dim=1) / lr + grad_w.abs().amax(dim=1))


def expected_subsets(batch: int) -> float:
    """Expected random subsets before every direction is found: ≈ 2^(B−1) · H_B / B (coupon collector)."""
    harmonic = sum(1.0 / k for k in range(1, batch + 1))
    return 2.0 ** (batch - 1) * harmonic


def factorize(grad_w: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(L, R)`` with ∇W ≈ L R, L = U_B S_B (m × B), R = V_Bᵀ (B × n) (§3)."""
    u, s, vh = torch.linalg.svd(grad_w, full_matrices=False)
    return u[:, :batch] * s[:batch], vh[:batch]


def sample_directions(left: torch.Tensor, batch: int, opts: SpearOptions, generator: torch.Generator,
                      check=None, noise: Optional[torch.Tensor] = None):
    """Candidate directions q (unit B-vectors) with their zero counts, sampled until B are selected.

    ``check(chosen)`` returns the indices of selected directions whose sample fails the ReLU consistency
    test (:func:`solve`); those are rejected for good and sampling goes on (§4.1's filter, applied again
    once a full set is at hand).
    """
    live = left.norm(dim=1) > 1e-12 * left.norm(dim=1).max()
    rows = left[live]
    floor = (FLOAT_MARGIN * noise[live] if noise is not None else torch.zeros(rows.shape[0], dtype=rows.dtype))[:, None]
    noisy = bool((floor > 0).any())
    norms = rows.norm(dim=1, keepdim=True)  # ‖L_j‖: how much row j's value moves per unit error of q
    m = rows.shape[0]
    need = max(math.ceil(opts.tau * m), 2 * (batch - 1) + 1)
    found: list[tuple[int, torch.Tensor]] = []
    rejected: list[torch.Tensor] = []
    selected: list[torch.Tensor] = []
    last_full: list[torch.Tensor] = []
    tried = 0
    if batch == 1:
        return [torch.ones(1, dtype=left.dtype)], True, {"subsets": 0, "candidates": 1, "live_rows": m, "need_zeros": 0}
    with loop_progress(opts.max_samples, "subsets tried", "spear") as tick:
        done = False
        while tried < opts.max_samples and not done:
            count = min(opts.chunk, opts.max_samples - tried)
            subsets = torch.rand((count, m), generator=generator).topk(batch - 1, dim=1).indices
            tried += count
            tick(tried)  # progress (subsets tried of the budget) and the interrupt check
            _, svals, vh = torch.linalg.svd(rows[subsets], full_matrices=True)  # count × (B−1) × B
            simple = svals[:, -1] > opts.rank_tol * svals[:, 0]  # null space of dimension one
            q = vh[:, -1, :][simple]
            if q.numel() == 0:
                continue
            column = rows @ q.T  # m × count
            scale = column.abs().amax(dim=0).clamp_min(1e-300)
            zeros = (column.abs() <= torch.maximum(opts.zero_tol * scale, floor)).sum(dim=0)
            if noisy:  # the float error of q from its B − 1 rows, carried into every row's zero test, then refined
                error_a = (floor[:, 0][subsets[simple]] ** 2).sum(dim=1).sqrt() / svals[simple][:, -1]
                zeros = (column.abs() <= torch.maximum(opts.zero_tol * scale, floor + norms * error_a)).sum(dim=0)
                q, column, zeros = refine(rows, norms, q, column, zeros, floor, opts.zero_tol, max(batch, need // 2))
            keep = zeros >= need
            before = len(found)
            for z, direction in zip(zeros[keep].tolist(), q[keep]):
                direction = direction / direction.norm()
                if not any(abs(float(direction @ other)) > 1 - 1e-6 for _, other in found) and \
                        not any(abs(float(direction @ other)) > 1 - 1e-6 for other in rejected):
                    found.append((z, direction))
            if len(found) == before:
                continue  # nothing new: the selection cannot change
            selected = greedy(found, batch)
            if len(selected) == batch:
                last_full = selected
                bad = check(selected) if check is not None else []
                if not bad:
                    done = True
                else:  # reject the least sparse failing direction only: one wrong direction spoils other samples too
                    zeros_of = [next(z for z, d in found if abs(float(d @ selected[i])) > 1 - 1e-6) for i in bad]
                    rejected.append(selected[bad[min(range(len(bad)), key=zeros_of.__getitem__)]])
                    found = [(z, d) for z, d in found if not any(abs(float(d @ r)) > 1 - 1e-6 for r in rejected)]
    stats = {"subsets": tried, "candidates": len(found), "rejected": len(rejected), "live_rows": m,
             "need_zeros": need, "independent_found": len(selected)}
    return (selected if done else last_full), done, stats


def refine(rows, norms, q, column, zeros, floor, zero_tol, least: int, rounds: int = 3):
    """Each candidate with at least ``least`` zeros re-solved as the null vector of *all* its zero rows.

    A direction fixed by B − 1 noisy rows carries their float error amplified by 1/σ_min of those rows; row j of
    L q then errs by up to floor_j + ‖L_j‖·δ (δ: the direction's error), and the zero test allows for that. The
    least-squares null vector of all the zero rows found has a far smaller δ = ‖floor_S‖ / σ_{B−1}(L_S), which
    admits more true zeros; a few rounds (the standard refinement; only where the update has a float floor). A
    null space of dimension two (σ_{B−1}(L_S) within the rows' float error: a mixture of two samples' directions is
    null on the rows both leave inactive) is no direction and gets no zeros, as for B − 1 rows (§4). The zeros
    returned are counted against the float floor alone, so a direction slightly off never outranks the true one.
    """
    pick = (zeros >= least).nonzero().flatten()
    if pick.numel() == 0:
        return q, column, zeros
    q, column, zeros = q.clone(), column.clone(), zeros.clone()
    cols = column[:, pick]
    allowed = torch.maximum(zero_tol * cols.abs().amax(dim=0), floor)
    for step in range(rounds):
        mask = cols.abs() <= allowed
        stacked = mask.T[:, :, None].to(rows.dtype) * rows[None]  # picked × m × B
        _, svals, vh = torch.linalg.svd(stacked, full_matrices=False)
        error = ((floor * mask) ** 2).sum(dim=0).sqrt()  # picked: the zero rows' float error
        second = svals[:, -2] if svals.shape[1] > 1 else torch.full_like(error, float("inf"))
        simple = second > FLOAT_MARGIN * error
        better = vh[:, -1, :]
        cols = rows @ better.T
        allowed = torch.maximum(zero_tol * cols.abs().amax(dim=0), floor + norms * (error / second))
    q[pick] = better
    column[:, pick] = cols
    # counted with the float floor alone: a direction a little off (its δ large) must not buy zeros with its own error
    zeros[pick] = (cols.abs() <= torch.maximum(zero_tol * cols.abs().amax(dim=0), floor)).sum(dim=0) * simple
    return q, column, zeros


def greedy(found: list, batch: int) -> list[torch.Tensor]:
    """§4.2: sparsest first; keep a candidate when it is new and keeps the set linearly independent."""
    chosen: list[torch.Tensor] = []
    for _, q in sorted(found, key=lambda item: -item[0]):
        q = q / q.norm()
        if any(abs(float(q @ c)) > 1 - 1e-6 for c in chosen):
            continue
        trial = torch.stack([*chosen, q], dim=1)
        svals = torch.linalg.svdvals(trial)
        if svals[-1] > 1e-6 * svals[0]:
            chosen.append(q)
        if len(chosen) == batch:
            break
    return chosen


class Spear(Attack):
    """SPEAR (Dimitrov et al., NeurIPS 2024): the batch through a linear + ReLU layer, exactly, then verified."""

    Options = SpearOptions
    name = "spear"
    positive = ("max_samples", "chunk", "tau", "zero_tol", "rank_tol", "tolerance")

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        o = self.options
        start = time.perf_counter()
        layer, first = fc_layer(model, o.layer or None)
        batch = update.num_samples
        extras = {"attack": getattr(self, "variant", self.name), "batch": batch}
        exactness = {"holds": False, "batch": batch, "method": "SPEAR (NeurIPS 2024) §3-4"}
        why = single_step(update)
        x = grad_z = None
        if why is None:
            grad_w, grad_b = fc_gradients(update, layer)
            self._weights = (update.server_params[f"{layer}.weight"].detach().double(),
                             update.server_params[f"{layer}.bias"].detach().double())
            self._noise = row_noise(update, layer, grad_w)
            rank, leading = numerical_rank(grad_w, o.rank_tol)
            exactness.update({"rank": rank, "width": grad_w.shape[0], "input_dim": grad_w.shape[1],
                              "singular_values": leading})
            if rank != batch:
                why = (f"rank(∇W) = {rank} ≠ batch size {batch}" + (
                    f" (batch larger than the layer width {grad_w.shape[0]})" if batch > grad_w.shape[0] else
                    " (repeated or linearly dependent inputs, or a defense changed the gradient)"))
            else:
                x, grad_z, why = self._recover(grad_w, grad_b, batch, exactness)
        exactness["seconds"] = time.perf_counter() - start
        if why is not None:
            exactness["reason"] = why
        else:
            exactness["holds"] = True
            exactness["reason"] = (f"rank(∇W) = B = {batch}; {batch} sparse directions found and the bias "
                                   f"gradient fixed their scale")
        return finish(model, update, spec, layer, first, x, grad_z, exactness, extras, o.tolerance)

    def _recover(self, grad_w, grad_b, batch: int, exactness: dict):
        o = self.options
        exactness["expected_subsets"] = expected_subsets(batch)
        if exactness["expected_subsets"] > o.max_samples:
            return None, None, (f"batch {batch} needs about {expected_subsets(batch):.3g} random subsets to find every "
                                f"sparse direction, over the budget max_samples = {o.max_samples} (2^(B-1) growth)")
        left, right = factorize(grad_w, batch)
        generator = torch.Generator().manual_seed(o.seed)
        weight, bias = self._weights
        noise = self._noise
        exactness["zero_test"] = {"relative": o.zero_tol, "float_margin": FLOAT_MARGIN,
                                  "row_noise_max": float(noise.max()) if noise.numel() else 0.0,
                                  "rule": "|∇z_ij| ≤ max(zero_tol × the column's max, float_margin × row j's float "
                                          "error in the update's dtype)"}

        def check(chosen):
            solved = solve(chosen, left, right, grad_b, weight, bias, o.zero_tol, noise)
            if solved is None:
                return list(range(len(chosen)))
            return [i for i, c in enumerate(solved[2].tolist()) if c < CONSISTENT]

        chosen, done, stats = sample_directions(left, batch, o, generator, check, noise)
        exactness.update(stats)
        if len(chosen) < batch:
            return None, None, (f"only {stats['independent_found']} of {batch} sparse directions found in {stats['subsets']} random "
                                f"subsets (about {expected_subsets(batch):.3g} expected: 2^(B-1) grows too fast, or "
                                f"the layer is not followed by ReLU / too little sparsity)")
        solved = solve(chosen, left, right, grad_b, weight, bias, o.zero_tol, noise)
        if solved is None:
            return None, None, "the bias gradient leaves a direction's scale undetermined"
        x, grad_z, consistency, residual, active = solved
        exactness.update({"bias_residual": residual, "relu_consistency_min": float(consistency.min()),
                          "relu_consistent_samples": int((consistency >= CONSISTENT).sum()),
                          "sparsity": float((~active).double().mean())})
        if not done:
            failing = batch - exactness["relu_consistent_samples"]
            return x, grad_z, (f"{failing} of {batch} recovered samples fail the ReLU consistency test after "
                               f"{stats['subsets']} subsets: some directions were not found within the budget (samples "
                               f"with few inactive outputs need the most subsets; raise max_samples), so the batch "
                               f"is returned unverified")
        return x, grad_z, None


def solve(chosen, left, right, grad_b, weight, bias, zero_tol, noise: Optional[torch.Tensor] = None):
    """§4.3: scales from ∇b, X = Q⁻¹ R, ∇Z = (L Q)ᵀ, and each sample's ReLU consistency.

    The consistency of sample i (Dimitrov et al. 2024, §4.1's sparsity matching) is the share of the layer's
    outputs where "∇z_ij ≠ 0" agrees with "z_ij > 0" for z_i = W x_i + b recomputed from the recovered x_i:
    1 for a true sample, about ½ for a wrong direction.
    """
    q_hat = torch.stack(chosen, dim=1)  # B × B
    scales = torch.linalg.lstsq(left @ q_hat, grad_b[:, None]).solution[:, 0]
    if bool((scales.abs() < 1e-12 * scales.abs().max()).any()):
        return None
    residual = float((left @ q_hat @ scales - grad_b).norm() / grad_b.norm().clamp_min(1e-300))
    q = q_hat * scales
    x = torch.linalg.solve(q, right)  # B × n
    grad_z = (left @ q).T  # B × m
    floor = 0.0 if noise is None else FLOAT_MARGIN * noise[None, :] * scales.abs()[:, None]  # column i scaled by s_i
    active = grad_z.abs() > torch.maximum(zero_tol * grad_z.abs().amax(dim=1, keepdim=True), torch.as_tensor(floor))
    z = x @ weight.T + bias
    consistency = (active == (z > 0)).double().mean(dim=1)
    return x, grad_z, consistency, residual, active


register("spear", Spear, "SPEAR (Dimitrov et al., NeurIPS 2024): exact batch through a linear+ReLU layer; each recovery recomputed against the update")
