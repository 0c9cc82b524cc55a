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

Layout: :mod:`.expectations` (Proposition 1, one-shot probability), :mod:`.readout` (secrets,
block rows, per-bin sums, single-input checks, mapping back to inputs), :mod:`.attack`
(:class:`ImprintAttack` and its registered variants), :mod:`.aggregate` (secure aggregation,
§4.2), :mod:`.audit` (the audit's malicious-server section).
"""

from .aggregate import aggregate
from .attack import REDUCTIONS, STRUCTURES, ImprintAttack, ImprintOptions
from .audit import audit_section
from .expectations import expected_recovered, expected_recovered_paper, one_shot_probability, simulate_recovered
from .readout import bin_sums, block_update, resolve_secrets

__all__ = [
    "ImprintAttack", "ImprintOptions", "REDUCTIONS", "STRUCTURES", "aggregate", "audit_section", "bin_sums",
    "block_update", "expected_recovered", "expected_recovered_paper", "one_shot_probability", "resolve_secrets",
    "simulate_recovered",
]
