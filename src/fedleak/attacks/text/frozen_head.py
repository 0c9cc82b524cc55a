"""The target after each causal-LM sequence when the output embedding is frozen (LoRA), read through the adapters.

With the LM head frozen its gradient says nothing (:func:`.final_token.recover_final` needs it), yet the targets
still shape the update. The loss gradient at the final hidden state hₙ (the state that predicts sequence n's
target yₙ) is (pₙ − e_{yₙ})/c, c the number of targets, and the logits are W·hₙ, so the update is affine in the
targets through the head's rows w_v:

    G(y) = G(u) + Σₙ Jₙᵀ (w_u − w_{yₙ}) / c,        Jₙ = ∂hₙ/∂θ  (θ: what the update trains),

for any dummy target u. The residual R = G_sent − G(u) is therefore a sum of N columns C_{n,yₙ} = Jₙᵀ(w_u − w_{yₙ})/c,
one per sequence, and a column explains R best where ‖R − C‖² is least, i.e. where 2⟨C, R⟩ − ‖C‖² is largest.
⟨C_{n,v}, R⟩ for the whole vocabulary is one forward-mode product J·R over the batch (a JVP), times the head;
‖C_{n,v}‖² needs one reverse-mode product per candidate (a VJP), so it is estimated for the whole vocabulary
from a sketch (Jω for ``PROBES`` random directions ω, one batched JVP each: E[(gᵀJω)²] = ‖Jᵀg‖²) and evaluated
exactly on a shortlist: the best ``shortlist`` tokens by the estimated fit and the model's own ``PRIOR``
most likely next tokens (a pretrained model predicts most of its training text's next tokens well). Sequences are settled greedily, the best relative fit
first, and R is deflated by the chosen column before the next JVP, so cross terms between sequences shrink as
the residual does; then each sequence is decided again against the residual the others leave (up to ``REFINE``
sweeps, until the residual is at the float floor).

FedSGD is affine in the targets; FedAvg's pseudo-gradient Σₜ gₜ is affine to first order in the lr (the later
steps see weights the earlier ones moved by lr·g), each sequence's column counted once per local step that sees
it (:func:`_uses`), so the same reading applies there. Parameters whose pseudo-gradient is float32 rounding of
the weights sent, magnified by 1/lr (A in a first round of FedAvg), are left out of the fit. The result is a proposal: :func:`.verify.verify` recomputes the whole update from it, and only a match proves the recovery.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.func import jvp, vjp, vmap

from ...types import Update
from .probes import _hook, base_of, run_model
from .spans import rounding_noise

#: candidates per sequence by the estimated fit, and from the model's own prediction
SHORTLIST, PRIOR = 64, 16
#: sweeps re-deciding each sequence against the others' residual, and the residual energy (relative) that ends them
REFINE, FLOOR = 2, 1e-8
#: a parameter's pseudo-gradient energy must exceed this multiple of its expected rounding-noise energy
NOISE_MARGIN = 4.0
#: VJPs evaluated at once (bounds memory: CHUNK × trained parameters)
CHUNK = 32
#: random directions of the sketch that estimates every candidate's ‖C‖² (relative error ≈ √(2/PROBES))
PROBES = 128


def _final_states(model: nn.Module, base: dict, head: nn.Module) -> Callable:
    """θ (trained parameters), ids (N, L) → the head's input at the last position (N, d), differentiable."""

    def states(theta: dict, ids: torch.Tensor) -> torch.Tensor:
        store: list = []
        with _hook(head, store, stop=False):
            run_model(model, {**base, **theta}, ids)
        return store[0][:, -1]

    return states


def _above_rounding(update: Update, name: str, sent: torch.Tensor) -> bool:
    """Whether a parameter's pseudo-gradient stands above the float32 rounding of the weights the client sent
    (:func:`.spans.rounding_noise`; none for FedSGD). In a first LoRA round (B = 0) A never moves in FedSGD
    and, over FedAvg's local steps at FlowerTune's lr, by little more than that rounding magnified by 1/lr:
    fitting it would fit noise."""
    energy = float(sent.double().pow(2).sum())
    if energy == 0.0:
        return False
    if update.is_fedsgd or update.client_params is None:
        return True
    sigma = rounding_noise(update.server_params[name], update.client_params[name], update.protocol.lr,
                           max(1, update.num_steps))
    return energy > NOISE_MARGIN * sent.numel() * sigma ** 2


def _uses(update: Update, n: int) -> float:
    """How many local steps see each sequence, over the share of the targets its mini-batch holds: FedAvg's
    pseudo-gradient sums the steps, each an average over its own mini-batch (FedSGD: 1)."""
    if update.is_fedsgd:
        return 1.0
    protocol = update.protocol
    batch = min(n, protocol.batch_size or n)
    return protocol.epochs * n / batch


def _norms(columns: dict, names: list) -> torch.Tensor:
    return sum((columns[k].reshape(columns[k].shape[0], -1).double() ** 2).sum(1) for k in names)


def read_targets(model: nn.Module, update: Update, ids: torch.Tensor, gradient: Callable[[torch.Tensor, torch.Tensor], dict],
                 count: Callable[[torch.Tensor, torch.Tensor], int], shortlist: int = SHORTLIST):
    """The targets (N,) after ``ids`` (N, L) read through a frozen head, or ``(None, why not)``.

    ``gradient(ids, labels)`` is the client's summed gradient over its local steps (the one client update; FedSGD:
    the gradient), ``count(ids, labels)`` the number of targets its mean loss divides by.
    """
    head = base_of(model).get_output_embeddings() if hasattr(base_of(model), "get_output_embeddings") else None
    pad = getattr(model, "pad_id", None)
    if head is None or getattr(head, "bias", None) is not None or (pad is not None and bool((ids == pad).any())):
        return None, "the targets after the sequences are not observable through this model's frozen head"
    sent = update.pseudo_gradient()
    names = [k for k in sent if _above_rounding(update, k, sent[k])]
    if not names:
        return None, "the update holds nothing above the float32 rounding of the weights sent: no target is observable"
    weights = head.weight.detach()
    vocab, n = weights.shape[0], ids.shape[0]
    used = set(ids.reshape(-1).tolist())
    dummy = next(v for v in range(vocab) if v not in used and v != pad)
    dummies = torch.full((n,), dummy, dtype=torch.long)
    simulated = gradient(ids, dummies)
    scale = float(count(ids, dummies)) / _uses(update, n)
    params = {k: v.detach() for k, v in update.server_params.items()}
    theta = {k: params[k] for k in names}
    base = {k: v for k, v in params.items() if k not in theta}
    states = _final_states(model, base, head)
    residual = {k: (sent[k] - simulated[k]).detach().to(params[k].dtype) for k in names}
    with torch.no_grad():
        prior = (states(theta, ids).double() @ weights.double().T).topk(min(PRIOR, vocab), dim=1).indices
    gap = (weights[dummy].unsqueeze(0) - weights).double()  # (V, d): w_u − w_v

    def correlations(res: dict) -> torch.Tensor:  # ⟨C_{n,v}, res⟩ for every n, v
        _, jr = jvp(lambda th: states(th, ids), (theta,), (res,))
        return (jr.double() @ gap.T) / scale

    sketch = _sketch(states, theta, ids, generator=torch.Generator().manual_seed(0))  # (k, N, d)
    guess = torch.stack([((gap @ sketch[:, row].double().T) ** 2).mean(1) for row in range(n)]) / scale ** 2
    exact: list[dict] = [{} for _ in range(n)]  # ‖C_{n,v}‖² per evaluated candidate

    def shortlisted(row: int, corr_row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The row's candidates (best by 2⟨C, R⟩ − estimated ‖C‖², and the prior's) and their exact gains."""
        pool = torch.cat([(2 * corr_row - guess[row]).topk(min(shortlist, vocab)).indices,
                          prior[row].to(corr_row.device)]).unique()
        new = torch.tensor([int(t) for t in pool if int(t) not in exact[row]], dtype=torch.long)
        if len(new):
            for t, size in zip(new.tolist(), _norms(columns(row, new), names).tolist()):
                exact[row][t] = size
        sizes = torch.tensor([exact[row][int(t)] for t in pool], dtype=torch.float64, device=corr_row.device)
        return pool, 2 * corr_row[pool] - sizes

    def columns(row: int, tokens: torch.Tensor) -> dict:
        _, pullback = vjp(lambda th: states(th, ids[row:row + 1])[0], theta)
        cot = (gap[tokens] / scale).to(weights.dtype)
        parts = [vmap(pullback)(cot[i:i + CHUNK])[0] for i in range(0, len(tokens), CHUNK)]
        return {k: torch.cat([p[k] for p in parts]) for k in names}

    def energy(res: dict) -> float:
        return sum(float((res[k].double() ** 2).sum()) for k in names)

    corr = correlations(residual)
    start = energy(residual) or 1.0
    targets, chosen, left = torch.full((n,), -1, dtype=torch.long), {}, list(range(n))
    while left:  # greedy: the sequence whose best column explains most of what is left, first
        best = {row: shortlisted(row, corr[row]) for row in left}
        row = max(left, key=lambda r: float(best[r][1].max()))
        pool, gains = best[row]
        targets[row] = int(pool[int(gains.argmax())])
        left.remove(row)
        chosen[row] = {k: v[0] for k, v in columns(row, targets[row].view(1)).items()}
        residual = {k: residual[k] - chosen[row][k] for k in names}
        if left:
            corr = correlations(residual)
    for _ in range(REFINE):  # each sequence again, against the residual the others leave
        if energy(residual) <= FLOOR * start:
            break
        moved = False
        for row in range(n):
            own = {k: residual[k] + chosen[row][k] for k in names}
            pool, gains = shortlisted(row, correlations(own)[row])
            token = int(pool[int(gains.argmax())])
            if token != int(targets[row]):
                targets[row], moved = token, True
                chosen[row] = {k: v[0] for k, v in columns(row, torch.tensor([token])).items()}
            residual = {k: own[k] - chosen[row][k] for k in names}
        if not moved:
            break
    return targets, None


def _sketch(states: Callable, theta: dict, ids: torch.Tensor, generator: torch.Generator, probes: int = PROBES):
    """J·ω for ``probes`` random directions ω in parameter space (k, N, d): E[(gᵀJω)²] = ‖Jᵀg‖², so
    ‖C_{n,v}‖² is estimated for the whole vocabulary from k JVPs over the batch (seeded: deterministic)."""
    out = []
    for start in range(0, probes, CHUNK // 4):
        size = min(CHUNK // 4, probes - start)
        tangents = {k: torch.randn((size, *v.shape), generator=generator, dtype=v.dtype).to(v.device)
                    for k, v in theta.items()}
        out.append(vmap(lambda tan: jvp(lambda th: states(th, ids), (theta,), (tan,))[1])(tangents))
    return torch.cat(out)
