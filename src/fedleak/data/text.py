"""A text corpus that ships with the dependencies, a word-level tokenizer, and text clients.

Fowl et al. attack text as well as images (App. A.4: wikitext sentences, GPT-2 tokens). Without a
network we use English prose installed with our dependencies:

* ``sklearn``: the dataset descriptions of scikit-learn (``sklearn/datasets/descr/*.rst``);
* ``stdlib``: the docstrings of a fixed list of Python standard-library modules and of their
  public classes and functions (they vary slightly between Python versions).

:class:`Vocabulary` is a word-level tokenizer written here: lower-cased words, numbers and single
punctuation marks; the ``size − 1`` most frequent tokens of the whole (public) corpus plus
``<unk>`` (id 0). :func:`load` cuts the token stream into windows of ``seq_len + 1`` tokens (each
distinct window once); a client sample is the first ``seq_len`` tokens (the input, token ids
stored as floats because model inputs are floating point) and the next token (the label) —
next-word prediction, the classic federated language task. A share of the windows is kept apart
as the server's public text (``surrogate``), disjoint from every client's.

:func:`token_accuracy` scores recovered token sequences against the client's.
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from ..errors import FedleakError
from ..types import ClientData, DataSpec

SOURCES = ("sklearn", "stdlib", "all")

#: Standard-library modules whose docstrings form the ``stdlib`` corpus (pure-Python ones).
STDLIB_MODULES = (
    "json", "argparse", "collections", "textwrap", "difflib", "statistics", "random", "string", "heapq", "bisect",
    "functools", "pathlib", "shutil", "subprocess", "logging", "csv", "calendar", "fractions", "decimal",
    "contextlib", "dataclasses", "enum", "fnmatch", "glob", "gzip", "tarfile", "zipfile", "tempfile", "threading",
    "queue", "sched", "pprint", "reprlib", "typing", "unittest", "doctest", "pdb", "timeit", "urllib.parse",
    "email.message", "http.client", "smtplib", "ftplib",
)

_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?|[0-9]+|[^\sa-z0-9]")
_RULE = re.compile(r"^\s*([=\-~^*#+`:.'\"_|])\1{2,}\s*$")
UNK = "<unk>"


def documents(source: str = "all") -> list[tuple[str, str]]:
    """``(name, text)`` pairs of the corpus ``source`` (``sklearn``, ``stdlib`` or ``all``)."""
    if source not in SOURCES:
        raise FedleakError(f"unknown text source {source!r}; allowed: {', '.join(SOURCES)}")
    docs: list[tuple[str, str]] = []
    if source in ("sklearn", "all"):
        docs.extend(_sklearn_documents())
    if source in ("stdlib", "all"):
        docs.extend(_stdlib_documents())
    if not docs:
        raise FedleakError(f"the text source {source!r} is empty in this installation")
    return docs


def _sklearn_documents() -> list[tuple[str, str]]:
    try:
        import sklearn.datasets
    except ImportError:
        return []
    folder = Path(sklearn.datasets.__file__).parent / "descr"
    return [(f"sklearn:{p.stem}", p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.rst"))]


def _stdlib_documents() -> list[tuple[str, str]]:
    docs = []
    for name in STDLIB_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        parts = [inspect.getdoc(module) or ""]
        with warnings.catch_warnings():  # e.g. typing.io's deprecation when its docstring is read
            warnings.simplefilter("ignore", DeprecationWarning)
            for attr, obj in sorted(vars(module).items()):
                if attr.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                    continue
                if inspect.isclass(obj) or inspect.isfunction(obj):
                    parts.append(inspect.getdoc(obj) or "")
        docs.append((f"stdlib:{name}", "\n\n".join(p for p in parts if p)))
    return docs


def tokenize(text: str) -> list[str]:
    """Lower-cased words (with an inner apostrophe), numbers and single punctuation marks.

    Lines that only underline a reStructuredText heading (``=====``) are dropped.
    """
    lines = [line for line in text.lower().splitlines() if not _RULE.match(line)]
    return _TOKEN.findall("\n".join(lines))


@dataclass(frozen=True)
class Vocabulary:
    """Token strings by id; id 0 is ``<unk>``."""

    tokens: tuple[str, ...]

    @classmethod
    def build(cls, token_lists: Sequence[Sequence[str]], size: int) -> "Vocabulary":
        """The ``size − 1`` most frequent tokens (ties by the token itself) plus ``<unk>``."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 2:
            raise FedleakError(f"vocabulary size must be an integer >= 2, got {size!r}")
        counts = Counter(tok for tokens in token_lists for tok in tokens)
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return cls((UNK, *(tok for tok, _ in ranked[: size - 1])))

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        index = {tok: i for i, tok in enumerate(self.tokens)}
        return [index.get(tok, 0) for tok in tokens]

    def decode(self, ids) -> str:
        ids = torch.as_tensor(ids).round().long().flatten().tolist()
        if any(not 0 <= i < len(self.tokens) for i in ids):
            raise FedleakError(f"token ids must lie in 0..{len(self.tokens) - 1}")
        return " ".join(self.tokens[i] for i in ids)


@dataclass
class TextData:
    """What :func:`load` returns: the spec, the clients, the vocabulary and the server's public text."""

    spec: DataSpec
    clients: list[ClientData]
    vocabulary: Vocabulary
    surrogate: torch.Tensor


def text_spec(seq_len: int, vocab_size: int, source: str = "all") -> DataSpec:
    """The :class:`DataSpec` of token sequences: shape (1, 1, seq_len), one class per token."""
    return DataSpec(f"text-{source}", (1, 1, int(seq_len)), int(vocab_size), (0.0,), (1.0,), modality="text",
                    vocab_size=int(vocab_size))


def load(num_clients: int = 1, samples_per_client: int = 128, seed: int = 0, *, seq_len: int = 32,
         vocab_size: int = 2000, source: str = "all", surrogate_fraction: float = 0.2) -> TextData:
    """Next-token clients from the corpus ``source`` (see the module docstring).

    Windows of ``seq_len + 1`` consecutive tokens (non-overlapping, never crossing documents) are
    shuffled with ``seed``; the first ``surrogate_fraction`` of them are the server's public text,
    the rest are dealt to ``num_clients`` clients of ``samples_per_client`` windows. Raises if the
    corpus is too small for the request.
    """
    for name, value, low in (("num_clients", num_clients, 1), ("samples_per_client", samples_per_client, 1),
                             ("seq_len", seq_len, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise FedleakError(f"{name} must be an integer >= {low}, got {value!r}")
    if not 0 < surrogate_fraction < 1:
        raise FedleakError(f"surrogate_fraction must lie in (0, 1), got {surrogate_fraction}")
    token_lists = [tokenize(text) for _, text in documents(source)]
    vocabulary = Vocabulary.build(token_lists, vocab_size)
    width = seq_len + 1
    windows = []
    for tokens in token_lists:
        ids = vocabulary.encode(tokens)
        windows.extend(ids[i:i + width] for i in range(0, len(ids) - width + 1, width))
    windows_t = torch.tensor(windows, dtype=torch.int64).view(-1, width)
    windows_t = torch.unique(windows_t, dim=0)  # repeated passages (shared docstrings) once
    generator = torch.Generator().manual_seed(seed)
    windows_t = windows_t[torch.randperm(windows_t.shape[0], generator=generator)]
    public = max(1, int(round(surrogate_fraction * windows_t.shape[0])))
    needed = num_clients * samples_per_client
    if windows_t.shape[0] - public < needed:
        raise FedleakError(f"the {source!r} corpus has {windows_t.shape[0] - public} private windows of "
                           f"{width} tokens, fewer than {num_clients} x {samples_per_client}")
    spec = text_spec(seq_len, len(vocabulary), source)
    clients = []
    for c in range(num_clients):
        part = windows_t[public + c * samples_per_client: public + (c + 1) * samples_per_client]
        clients.append(ClientData(part[:, :seq_len].to(torch.float32), part[:, seq_len].clone(), f"text-{c}"))
    surrogate = windows_t[:public, :seq_len].to(torch.float32)
    return TextData(spec, clients, vocabulary, surrogate)


def token_accuracy(recovered: torch.Tensor, truth: torch.Tensor) -> dict:
    """Token accuracy of recovered sequences (App. A.4), after matching them to the true ones.

    Recovered and true sequences (token ids, (M, L) and (N, L)) are paired by
    ``linear_sum_assignment`` maximizing the number of equal tokens in equal positions; the
    accuracy is the matched equal tokens over all N·L true tokens (unmatched sequences count as
    wrong). Also returns how many true sequences were recovered exactly.
    """
    from scipy.optimize import linear_sum_assignment

    rec = torch.as_tensor(recovered).round().long()
    true = torch.as_tensor(truth).round().long()
    if true.dim() != 2 or (rec.numel() and (rec.dim() != 2 or rec.shape[1] != true.shape[1])):
        raise FedleakError(f"token_accuracy needs (M, L) and (N, L) token ids, got {tuple(rec.shape)} and "
                           f"{tuple(true.shape)}")
    n, length = true.shape
    if rec.numel() == 0:
        return {"token_accuracy": 0.0, "exact_sequences": 0, "num_sequences": n, "assignment": [None] * n}
    same = (true[:, None, :] == rec[None, :, :]).sum(-1)
    rows, cols = linear_sum_assignment((-same).numpy())
    assignment: list[Optional[int]] = [None] * n
    correct = exact = 0
    for r, c in zip(rows.tolist(), cols.tolist()):
        assignment[r] = c
        correct += int(same[r, c])
        exact += int(same[r, c] == length)
    return {"token_accuracy": correct / (n * length), "exact_sequences": exact, "num_sequences": n,
            "assignment": assignment}
