"""Text metrics: ROUGE-1/2/L, exact sequences and token accuracy of recovered token sequences.

Protocol (as DAGER, Petrov et al. 2024 §6 and LAMP, Balunović et al. 2022 §5, score text attacks):

1. Recovered sequences (M, L') are paired with the client's N originals (N, L) by
   ``linear_sum_assignment`` maximizing the number of equal tokens at equal positions (padding of
   the original excluded); min(N, M) pairs, an original left unpaired scores 0 everywhere.
2. ``token_accuracy``: paired equal tokens / all non-padding tokens of the originals.
3. ``exact_sequences``: the share of originals whose every non-padding token was recovered at its
   position (``rec_percent`` is the same share in percent, the text analogue of Rec%).
4. ``rouge1``/``rouge2``/``rougeL``: mean over the originals of the ROUGE F-measure (Lin 2004,
   package ``rouge-score``) of the pair. With a ``tokenizer`` both sides are decoded and scored as
   text (``rouge_on: "text"``, rouge-score's own word tokenization); without, the token ids are the
   words (``rouge_on: "tokens"``). Identical texts score 1; a pair whose original holds no word rouge-score's
   tokenizer keeps (a line of punctuation such as "= = = …", markup) is scored on its token ids instead
   (``rouge_on_tokens`` counts such pairs): 29 of 30 "=" recovered scored 0 on text.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..errors import FedleakError

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
_NO_TOKEN = -1


def _ids(t, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise FedleakError(f"{what} must be a tensor of token ids, got {type(t).__name__}")
    if t.dim() == 4 and t.shape[1] == t.shape[2] == 1:
        t = t.flatten(1)
    if t.numel() == 0:
        return t.reshape(0, 0).long()
    if t.dim() != 2:
        raise FedleakError(f"{what} must be token ids (N, L) or (N, 1, 1, L), got shape {tuple(t.shape)}")
    if t.is_floating_point():
        if not bool(torch.isfinite(t).all()):
            raise FedleakError(f"{what} contain NaN or infinite values")
        t = t.round()
    return t.detach().cpu().long()


def _scorer(on_text: bool):
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        raise FedleakError("text metrics need the package rouge-score (pip install 'fedleak[text]')") from None

    class _Split:  # token ids as words: split on whitespace, nothing dropped
        def tokenize(self, text):
            return text.split()

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), tokenizer=None if on_text else _Split())


def match_sequences(recovered: torch.Tensor, truth: torch.Tensor, valid: torch.Tensor) -> tuple[list, torch.Tensor]:
    """Pairing (original -> recovered index or None) maximizing equal valid tokens, and the counts (N, M)."""
    from scipy.optimize import linear_sum_assignment

    n = truth.shape[0]
    if recovered.shape[0] == 0:
        return [None] * n, torch.zeros(n, 0, dtype=torch.long)
    same = ((truth[:, None, :] == recovered[None, :, :]) & valid[:, None, :]).sum(-1)
    rows, cols = linear_sum_assignment((-same).numpy())
    assignment: list[Optional[int]] = [None] * n
    for r, c in zip(rows.tolist(), cols.tolist()):
        assignment[r] = int(c)
    return assignment, same


def text_scores(recovered, truth, *, pad_id: Optional[int] = None, tokenizer=None) -> dict:
    """The scores of the module docstring for recovered ids (M, L') against original ids (N, L)."""
    true = _ids(truth, "original token ids")
    if true.dim() != 2 or true.shape[0] == 0:
        raise FedleakError(f"original token ids must be (N, L) with N >= 1, got shape {tuple(true.shape)}")
    n, length = true.shape
    rec = _ids(recovered, "recovered token ids")
    if rec.shape[0] and rec.shape[1] != length:  # cut or fill with a token id that never matches
        rec = rec[:, :length] if rec.shape[1] > length else torch.cat(
            [rec, torch.full((rec.shape[0], length - rec.shape[1]), _NO_TOKEN)], 1)
    valid = true != pad_id if pad_id is not None else torch.ones_like(true, dtype=torch.bool)
    assignment, same = match_sequences(rec, true, valid)
    per_valid = valid.sum(1)
    correct = exact = 0
    for i, j in enumerate(assignment):
        if j is not None:
            correct += int(same[i, j])
            exact += int(same[i, j] == per_valid[i])
    from ..data.tokenizers import decode

    def kept(ids: torch.Tensor) -> list[int]:
        return [int(t) for t in ids.tolist() if t != _NO_TOKEN and (pad_id is None or t != pad_id)]

    def id_words(ids: torch.Tensor) -> str:  # the token ids as words (no tokenizer, or no word in the text)
        return " ".join(map(str, kept(ids)))

    def words(ids: torch.Tensor) -> str:
        return decode(tokenizer, kept(ids)) if tokenizer is not None else id_words(ids)

    scorer = _scorer(tokenizer is not None)
    by_ids, on_ids = (_scorer(False) if tokenizer is not None else None), 0
    if by_ids is not None:
        from rouge_score.tokenizers import DefaultTokenizer  # the words rouge-score scores text on
        text_words = DefaultTokenizer(use_stemmer=False).tokenize
    rouge = {key: [] for key in ROUGE_TYPES}
    for i, j in enumerate(assignment):
        if j is None:
            for key in ROUGE_TYPES:
                rouge[key].append(0.0)
            continue
        reference, candidate = words(true[i]), words(rec[j])
        if reference == candidate:  # identical (also when rouge-score's tokenizer keeps no word, e.g. "= = =")
            for key in ROUGE_TYPES:
                rouge[key].append(1.0)
            continue
        if by_ids is not None and not text_words(reference):  # no word to score: the token ids
            scores, on_ids = by_ids.score(id_words(true[i]), id_words(rec[j])), on_ids + 1
        else:
            scores = scorer.score(reference, candidate)
        for key in ROUGE_TYPES:
            rouge[key].append(float(scores[key].fmeasure))
    result = {key: sum(values) / n for key, values in rouge.items()}
    result.update({
        "exact_sequences": exact / n,
        "token_accuracy": correct / max(1, int(per_valid.sum())),
        "rec_percent": 100.0 * exact / n,
        "rouge_on": "text" if tokenizer is not None else "tokens",
        "rouge_on_tokens": on_ids,
        "num_inputs": n,
        "num_reconstructed": int(rec.shape[0]),
        "rouge1_per_input": rouge["rouge1"],
        "assignment": assignment,
    })
    return result


def evaluate_text(rec, client, spec, *, tokenizer=None) -> dict:
    """:func:`fedleak.metrics.evaluate` for a text spec: :func:`text_scores` plus label accuracy
    (classifiers' class labels, when the reconstruction has labels)."""
    from .labels import label_accuracy

    result = text_scores(rec.inputs, client.inputs, pad_id=spec.pad_id, tokenizer=tokenizer)
    result["label_accuracy"] = None
    if rec.labels is not None and bool((client.labels >= 0).all()) and spec.num_classes <= 100_000:
        labels = _ids(rec.labels.reshape(1, -1), "recovered labels").flatten()
        if labels.numel() and bool((labels >= 0).all()) and bool((labels < spec.num_classes).all()):
            result["label_accuracy"] = label_accuracy(client.labels.cpu(), labels, spec.num_classes)
    return result
