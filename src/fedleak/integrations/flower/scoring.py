"""What the audit attacks each reply with, and how it scores the result.

A real server has no client data, so every record carries what the attacker itself knows
(:func:`attacker_scores`): the final value of the optimization attacks' matching loss, and for
the imprint attacks (Fowl et al. 2022, Eq. 4) the number of bins that held exactly one input —
inputs recovered verbatim, certified by the bin, box and pixel-grid checks of
:mod:`fedleak.attacks.imprint`. In evaluation mode (the client shared its true batch) the
reconstruction is also scored against the truth with :func:`fedleak.metrics.evaluate`
(PSNR, Rec %, IIP).
"""

from __future__ import annotations

import copy
import logging
import math
from contextlib import contextmanager
from typing import Optional

from torch import nn

from ...modality.base import IMPRINT_ATTACKS  # noqa: F401  (the attack for each imprint structure; re-exported)
from ...types import ClientData, DataSpec, Protocol, Reconstruction, Update


def choose_attack(model: nn.Module, protocol: Protocol, spec: Optional[DataSpec] = None,
                  samples: Optional[int] = None) -> str:
    """The attack that fits, the data's modality's choice (:meth:`fedleak.modality.Modality.flower_attack`): the
    imprint readout for a model carrying an imprint block; records: SPEAR (or the row/bias ratio for one record)
    where one local step through a first linear layer allows an exact, verified recovery, else TabLeak; a language
    model: DAGER; else Inverting Gradients (FedSGD gradients, and FedAvg updates via its local-step simulation)."""
    from ...modality import named

    return named(spec).flower_attack(model, protocol, samples)


def _finite(value) -> Optional[float]:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def attacker_scores(rec: Reconstruction) -> dict:
    """Scores the attacker knows without ground truth (see the module docstring)."""
    extras = rec.extras or {}
    scores = {"reconstructed": int(rec.inputs.shape[0])}
    if "single_bins" in extras:
        scores["verbatim"] = len(extras["single_bins"])
        scores["nonempty_bins"] = len(extras.get("nonempty_bins", []))
    if extras.get("loss") is not None:
        scores["attack_loss"] = _finite(extras["loss"])
    if isinstance(extras.get("exactness"), dict):  # a text attack's stated precondition (DAGER's span limit)
        scores["exactness"] = extras["exactness"]
    for key in ("certain", "verified"):  # the text attacks' own check of what they recovered
        if isinstance(extras.get(key), bool):
            scores[key] = extras[key]
    return scores


def truth_scores(rec: Reconstruction, truth: ClientData, spec: DataSpec, tokenizer=None) -> dict:
    """PSNR / SSIM / Rec % / IIP against the true batch (evaluation mode); ROUGE-1/2/L, exact
    sequences and token accuracy for text (``tokenizer`` decodes for ROUGE)."""
    from ...modality import named

    return named(spec).truth_scores(rec, truth, spec, tokenizer=tokenizer)


@contextmanager
def root_logging_unchanged():
    """Undo handlers a third-party library adds to the root logger while we call it.

    ``rouge_score`` logs through ``absl.logging`` on first use, which gives the root logger a
    stream handler; Flower's logger propagates to the root, so every Flower line after the first
    text score was printed twice. While we call it, a root without handlers holds a NullHandler, so
    absl adds none (no window in which Flower's lines could print twice), and anything added is
    removed afterwards."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    if not before:  # absl calls logging.basicConfig() only when the root has no handler: lend it one that drops
        root.addHandler(logging.NullHandler())
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in before:
                root.removeHandler(handler)
        root.setLevel(level)


def attack_update(attack, update: Update, model: nn.Module, spec: DataSpec,
                  truth: Optional[ClientData] = None) -> tuple[Reconstruction, dict]:
    """Reconstruct one update (on a private copy of the model: attacks swap its parameters, and
    several run at once in the audit's worker pool) and score it."""
    with root_logging_unchanged():
        rec = attack.reconstruct(update, copy.deepcopy(model), spec)
        scores = attacker_scores(rec)
        if truth is not None:
            scores.update(truth_scores(rec, truth, spec, getattr(model, "tokenizer", None)))
    return rec, scores


#: words of an attack's ``exactness["reason"]`` that already say its recovery is not proved (the recomputed
#: update did not match; label counts that stay an estimate)
UNPROVED_SAID = ("does not match", "an estimate", "uncertain:")


def leakage_level(entry: dict) -> dict:
    """``{"level", "evidence"}`` of one attacked reply: ``high`` when the attacker itself can show
    what it recovered (imprint bins holding exactly one input, read back verbatim; a text attack whose
    recovered sequences reproduce the update, the only one of the two that is "proved"), else
    ``inconclusive`` (an optimization attack's loss is an estimate at its budget; fedleak never calls a reply safe). A batch the client shared (client-reported, never
    verified by the server) can raise the level — Rec % or exact sequences above 0 — but never
    lower it: a client sending a fake "truth" cannot make its own reply look less leaky."""
    if (entry.get("verbatim") or 0) > 0:
        return {"level": "high", "evidence": f"read back by the attacker: {entry['verbatim']} input(s) verbatim "
                                             "from single-input imprint bins (an analytic readout, not checked by "
                                             "recomputing the update from them)"}
    exact = entry.get("exactness")
    if isinstance(exact, dict) and exact.get("holds") and entry.get("certain"):
        return {"level": "high", "evidence": "proved by the attacker: the exactness condition held and the recovered "
                                             "inputs (sequences, records, images) reproduce the update"}
    reported = entry.get("truth") == "client-reported"
    if reported and ((entry.get("rec_percent") or 0) > 0 or (entry.get("exact_sequences") or 0) > 0):
        what = (f"Rec {entry['rec_percent']:.0f} %" if entry.get("rec_percent") else
                f"{entry.get('exact_sequences')} exact sequence(s)")
        return {"level": "high", "evidence": f"client-reported truth: {what} against the batch the client shared"}
    reason = exact.get("reason") if isinstance(exact, dict) else None
    # ``holds`` is the precondition alone: when it held, the reason says why the recovery is still no proof
    if reason and exact.get("holds") and not any(said in reason for said in UNPROVED_SAID):
        reason = f"{reason}; but the recovery was not verified against the update"
    return {"level": "inconclusive", "evidence": reason or "an optimization attack's estimate at its budget; a "
                                                           "stronger attack or budget may recover more"}
