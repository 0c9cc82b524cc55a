"""Text data for language models: documents -> token sequences of ``seq_len`` -> clients.

``fedleak.data.load("text", root, num_clients, samples_per_client, seed, tokenizer=…, seq_len=L,
task=…)``. Documents come from ``root`` (:mod:`.text_files`: a ``.txt``/``.jsonl`` file or a folder
of them) or, without a root, from the embedded corpus of :mod:`.text` (scikit-learn's dataset
descriptions and Python's standard-library docstrings; label 0 = sklearn, 1 = stdlib).

Sequences (token ids, int64, (N, L)), by the model's ``task``:

* ``causal-lm``: a ``.txt`` file or an embedded document is one token stream, cut into
  consecutive windows of L tokens; the label of a window is the token that follows it (−100 at
  the end of the stream). A ``.jsonl`` record is one sequence: its first L tokens, padded with the
  pad id, label the (L+1)-th token or −100. ``spec.num_classes`` = the vocabulary size.
* ``classification``: windows of L − s content tokens wrapped in the tokenizer's special tokens (s
  of them, BERT: ``[CLS] … [SEP]``); a ``.jsonl`` record is one such sequence (truncated, padded)
  labelled by its ``label_field``; a ``.txt`` file's windows are labelled by the file's index among
  the files (a folder of one file per class). ``spec.num_classes`` = max(2, largest label + 1).

Clients (``partition``): ``file`` — one file = one client (its sequences in a seeded order);
``iid`` — all sequences shuffled with ``seed`` and dealt out; ``auto`` (default) — ``file`` for a
folder of several files, else ``iid``. ``samples_per_client=None`` gives each client all of its
file's sequences (``file``) or an equal share (``iid``); fewer clients are returned when the data
runs out. A ``.txt`` file shorter than one sequence is an error naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..errors import FedleakError
from ..types import ClientData, DataSpec
from . import text as embedded_text
from . import text_files
from . import tokenizers as toks

TASKS = ("causal-lm", "classification")
PARTITIONS = ("auto", "file", "iid")
IGNORE = -100
MAX_SEQ_LEN = 8192
OPTIONS = ("tokenizer", "seq_len", "task", "text_field", "label_field", "partition", "pad_id")


def _check(task: str, seq_len, partition: str) -> int:
    if task not in TASKS:
        raise FedleakError(f"text task must be one of {', '.join(TASKS)}, got {task!r}")
    if partition not in PARTITIONS:
        raise FedleakError(f"text partition must be one of {', '.join(PARTITIONS)}, got {partition!r}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or not 2 <= seq_len <= MAX_SEQ_LEN:
        raise FedleakError(f"--seq-len must be an integer from 2 to {MAX_SEQ_LEN}, got {seq_len!r}")
    return int(seq_len)


def _tokenizer(tokenizer):
    if tokenizer is None:
        return toks.default_tokenizer()
    if isinstance(tokenizer, (str, Path)):
        return toks.load_tokenizer(tokenizer)
    return tokenizer


def _stream(ids: list[int], seq_len: int, task: str, prefix, suffix) -> tuple[list[list[int]], list[int]]:
    """Consecutive windows of one token stream (see the module docstring), labels −100 if none."""
    if task == "causal-lm":
        seqs = [ids[i:i + seq_len] for i in range(0, len(ids) - seq_len + 1, seq_len)]
        labels = [ids[i + seq_len] if i + seq_len < len(ids) else IGNORE
                  for i in range(0, len(ids) - seq_len + 1, seq_len)]
        return seqs, labels
    width = seq_len - len(prefix) - len(suffix)
    seqs = [list(prefix) + ids[i:i + width] + list(suffix) for i in range(0, len(ids) - width + 1, width)]
    return seqs, [IGNORE] * len(seqs)


def _record(ids: list[int], seq_len: int, task: str, prefix, suffix, pad: int) -> tuple[list[int], int]:
    if task == "causal-lm":
        seq = ids[:seq_len]
        label = ids[seq_len] if len(ids) > seq_len else IGNORE
    else:
        seq = list(prefix) + ids[:seq_len - len(prefix) - len(suffix)] + list(suffix)
        label = IGNORE
    return seq + [pad] * (seq_len - len(seq)), label


def sequences(docs, tokenizer, seq_len: int, task: str, pad: int):
    """``(group, ids (L,), label)`` of every document ``(group, text, label, kind)``; ``kind`` is
    ``"stream"`` (windows) or ``"record"`` (one sequence)."""
    prefix, suffix = toks.special_ids(tokenizer) if task == "classification" else ((), ())
    if seq_len - len(prefix) - len(suffix) < 1:
        raise FedleakError(f"--seq-len {seq_len} leaves no room for text beside {len(prefix) + len(suffix)} "
                           f"special tokens")
    out = []
    for group, text, label, kind in docs:
        ids = toks.encode(tokenizer, text)
        if kind == "record":
            if not ids:
                continue
            seq, next_token = _record(ids, seq_len, task, prefix, suffix, pad)
            out.append((group, seq, label if task == "classification" else next_token))
            continue
        seqs, next_tokens = _stream(ids, seq_len, task, prefix, suffix)
        if not seqs and isinstance(group, Path):
            raise FedleakError(f"{group}: {len(ids)} tokens, shorter than one sequence of --seq-len {seq_len} "
                               f"tokens")
        for seq, nxt in zip(seqs, next_tokens):
            out.append((group, seq, label if task == "classification" else nxt))
    if not out:
        raise FedleakError(f"the text holds no sequence of --seq-len {seq_len} tokens")
    return out


def _documents(root, task: str, text_field: str, label_field: Optional[str]):
    if root is None:
        return [(name.split(":")[0], text, int(name.startswith("stdlib")), "stream")
                for name, text in embedded_text.documents("all")]
    wanted = label_field if task == "classification" else None
    raw = text_files.read_documents(root, text_field, wanted)
    files = sorted({path for path, _, _ in raw})
    index = {path: i for i, path in enumerate(files)}
    return [(path, text, index[path] if label is None else label,
             "stream" if path.suffix.lower() == ".txt" else "record") for path, text, label in raw]


def corpus_sequences(tokenizer, seq_len: int, task: str, source: str = "all", pad: int = 0):
    """Sequences and labels (int64 tensors) of the embedded corpus ``source`` (LoRA warm-up text)."""
    docs = [(name, text, int(name.startswith("stdlib")), "stream") for name, text in embedded_text.documents(source)]
    seqs = sequences(docs, tokenizer, seq_len, task, pad)
    return torch.tensor([s for _, s, _ in seqs]), torch.tensor([lab for _, _, lab in seqs])


def text_spec(seq_len: int, task: str, tokenizer, num_labels: int = 2, pad: Optional[int] = None,
              name: str = "text") -> DataSpec:
    """The spec of token sequences: shape (1, 1, L), classes = labels or vocabulary, modality text."""
    vocab = int(tokenizer.get_vocab_size())
    classes = vocab if task == "causal-lm" else max(2, int(num_labels))
    pad = toks.pad_id(tokenizer) if pad is None else int(pad)
    return DataSpec(name, (1, 1, int(seq_len)), classes, (0.0,), (1.0,), modality="text", vocab_size=vocab,
                    pad_id=pad)


def _fewer_hint(docs, tok, seq_len: int, task: str, pad: int, have: int, want) -> str:
    """What would fit: fewer samples (``--samples``), or the longest shorter ``--seq-len`` giving enough sequences."""
    options = [f"--samples {have}"] if have >= 1 else []
    for shorter in range(seq_len - 1, 1, -1):
        try:
            count = len(sequences(docs, tok, shorter, task, pad))
        except FedleakError:  # too short for the tokenizer's special tokens
            break
        if want is not None and count >= want:
            options.append(f"--seq-len {shorter} ({count} sequences)")
            break
    return f": use {' or '.join(options)}" if options else ""


def load(root=None, num_clients: int = 10, samples_per_client: Optional[int] = 50, seed: int = 0,
         split: str = "train", *, tokenizer=None, seq_len: int = 32, task: str = "classification",
         text_field: str = "text", label_field: str = "label", partition: str = "auto",
         pad_id: Optional[int] = None) -> tuple[DataSpec, list[ClientData]]:
    """``(spec, clients)`` of text (see the module docstring); ``split`` is not used (one pool)."""
    seq_len = _check(task, seq_len, partition)
    tok = _tokenizer(tokenizer)
    pad = toks.pad_id(tok) if pad_id is None else int(pad_id)
    docs = _documents(root, task, text_field, label_field)
    seqs = sequences(docs, tok, seq_len, task, pad)
    labels_all = [lab for _, _, lab in seqs]
    num_labels = (max(labels_all) + 1) if task == "classification" else 0
    name = "text" if root is None else f"text:{Path(root).name}"
    spec = text_spec(seq_len, task, tok, num_labels, pad, name=name)
    groups = sorted({str(g) for g, _, _ in seqs})
    mode = partition if partition != "auto" else ("file" if root is not None and len(groups) > 1 else "iid")
    generator = torch.Generator().manual_seed(int(seed))
    ids = torch.tensor([s for _, s, _ in seqs], dtype=torch.int64)
    labels = torch.tensor(labels_all, dtype=torch.int64)
    if mode == "file":
        parts = []
        for g in groups[:num_clients]:
            member = torch.tensor([i for i, (grp, _, _) in enumerate(seqs) if str(grp) == g])
            member = member[torch.randperm(member.numel(), generator=generator)]
            parts.append(member if samples_per_client is None else member[:samples_per_client])
    else:
        order = torch.randperm(ids.shape[0], generator=generator)
        per = samples_per_client if samples_per_client is not None else max(1, ids.shape[0] // num_clients)
        parts = [order[c * per:(c + 1) * per] for c in range(num_clients) if (c + 1) * per <= ids.shape[0]]
    if not parts:
        raise FedleakError(f"the text holds {ids.shape[0]} sequences of {seq_len} tokens, fewer than "
                           f"samples_per_client={samples_per_client}{_fewer_hint(docs, tok, seq_len, task, pad, ids.shape[0], samples_per_client)}")
    clients = [ClientData(ids[p], labels[p], f"text-{c}") for c, p in enumerate(parts)]
    return spec, clients
