"""The text audit's run steps: per-attack summaries, the examples shown, the malicious imprint's placement.

* :func:`summarize` — ROUGE-1/2/L, exact sequences, token accuracy per attack (means over the
  audited targets) and the attack's stated exactness condition;
* :class:`TextExample` — original and recovered sequences of the first target, token by token, for
  the report (:mod:`fedleak.audit.report.text`);
* :func:`imprint_placement` — where the malicious server's imprint block goes in a language model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ...errors import FedleakError
from ...types import ClientData, DataSpec, Reconstruction
from ...metrics.summary import mean

TEXT_KEYS = ("rouge1", "rouge2", "rougeL", "exact_sequences", "token_accuracy", "rec_percent")


def tokens_of(tokenizer, ids) -> list[str]:
    """Display strings of ``ids`` (WordPiece ``##`` pieces kept, GPT-2's ``Ġ`` shown as a space)."""
    out = []
    for i in ids:
        tok = tokenizer.id_to_token(int(i)) if tokenizer is not None and int(i) >= 0 else None
        out.append(str(int(i)) if tok is None else tok.replace("Ġ", " ").replace("▁", " "))
    return out


@dataclass
class TextExample:
    """Per original sequence: its tokens, and the matched recovered tokens with a right/wrong mark."""

    originals: list  # list[list[str]]
    recovered: list  # list[list[tuple[str, bool]]] (empty when nothing was matched)
    exact: list  # list[bool]


def example(rec: Reconstruction, truth: ClientData, spec: DataSpec, scores: dict, tokenizer,
            limit: int = 16) -> TextExample:
    from ...models.hf.wrapper import as_ids

    true = as_ids(truth.inputs.detach().cpu())
    recs = as_ids(rec.inputs.detach().cpu()) if rec.inputs.numel() else torch.zeros(0, true.shape[1], dtype=torch.long)
    pad = spec.pad_id
    originals, recovered, exact = [], [], []
    for i, j in enumerate(scores["assignment"][:limit]):
        keep = [t for t in range(true.shape[1]) if pad is None or int(true[i, t]) != pad]
        originals.append(tokens_of(tokenizer, [true[i, t] for t in keep]))
        if j is None:
            recovered.append([])
            exact.append(False)
            continue
        marks = [(tok, int(recs[j, t]) == int(true[i, t]))
                 for t, tok in zip(keep, tokens_of(tokenizer, [recs[j, t] for t in keep]) if keep else [])]
        recovered.append(marks)
        exact.append(all(ok for _, ok in marks))
    return TextExample(originals, recovered, exact)


def summarize(per_target: list[dict], seconds: float, choice, exactness: Optional[dict] = None) -> dict:
    """Mean text scores over the audited targets (the keys of metrics.json) and their distribution."""
    out = {"attack": choice.name, "title": choice.title, "options": choice.options, "seconds": seconds,
           "targets": len(per_target), "modality": "text"}
    for key in TEXT_KEYS:
        out[key] = mean([s.get(key) for s in per_target])
    out["psnr"] = None  # image keys the shared tables read
    out["threshold"] = None
    out["rouge1_per_input"] = [v for s in per_target for v in s["rouge1_per_input"]]
    out["psnr_per_input"] = []
    out["per_client"] = [{"target": s["target"], "rouge1": s["rouge1"], "exact_sequences": s["exact_sequences"],
                          "rec_percent": s["rec_percent"], "num_inputs": s["num_inputs"]} for s in per_target]
    rec = [s["rec_percent"] for s in per_target]
    out["rec_percent_min"], out["rec_percent_max"] = min(rec), max(rec)
    if exactness is not None:
        out["exactness"] = exactness
    return out


#: public sequences the malicious server fits its imprint bins to (Fowl et al. App. A.4: public text)
SURROGATE_SEQUENCES = 256


def imprint_placement(base, spec: DataSpec) -> dict:
    """Where a malicious server puts its imprint block in a language model: right after the token
    embedding (Fowl et al. 2022, App. A.4), bins fitted to public text (the embedded ``stdlib`` corpus)."""
    from torch import nn

    from ...data import tokenized
    from ...data import tokenizers as toks

    getter = getattr(base, "input_embeddings", None)
    table = getter() if callable(getter) else getattr(base, "embedding", None)
    path = next((name for name, module in base.named_modules() if module is table), None)
    if not isinstance(table, nn.Embedding) or path is None:
        raise FedleakError(f"the malicious imprint needs the model's token embedding; {type(base).__name__} has "
                           f"none it can find (use --no-malicious)")
    if getattr(base, "lora_rank", None) is not None:
        raise FedleakError("the malicious imprint reads tokens through the embedding table, which a LoRA update "
                           "does not carry; audit LoRA with --no-malicious")
    tokenizer = getattr(base, "tokenizer", None) or toks.default_tokenizer()
    task = getattr(base, "task", "causal-lm")
    ids, _ = tokenized.corpus_sequences(tokenizer, spec.seq_len, task, source="stdlib",
                                        pad=spec.pad_id if spec.pad_id is not None else 0)
    generator = torch.Generator().manual_seed(0)
    ids = ids[torch.randperm(ids.shape[0], generator=generator)[:SURROGATE_SEQUENCES]]
    return {"position": path, "side": "after", "surrogate": ids}
