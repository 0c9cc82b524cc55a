"""Building :class:`~fedleak.models.hf.wrapper.HFTextModel` s: config-built models, MiniLM, a local folder.

Everything loads from local files (``local_files_only=True``, ``HF_HUB_OFFLINE=1``); remote code is
refused. Config-built models draw their random weights from the torch RNG that
:func:`fedleak.models.build` seeds.

* :data:`CONFIGS` — ``gpt2-tiny`` (GPT-2, Radford et al. 2019: 2 layers, width 128, 4 heads),
  ``llama-tiny`` (LLaMA, Touvron et al. 2023: 2 layers, width 128, 4 heads, SwiGLU 256, RMSNorm,
  RoPE) and ``gpt2-small`` (the 124 M-parameter GPT-2 size: 12 layers, width 768, 12 heads), all
  causal LMs over the tokenizer's vocabulary (MiniLM WordPiece, 30522, unless another is named);
* :func:`minilm` — the pretrained all-MiniLM-L6-v2 encoder (Wang et al. 2020; BERT, 6 layers, width
  384) with a new, seeded classification head;
* :func:`from_folder` — the user's model folder (``config.json`` + ``*.safetensors`` +
  ``tokenizer.json``): a causal LM or a classifier by the config's ``architectures``.

Dropout (``dropout=``, :data:`DROPOUT_CHOICES`): a pretrained model (MiniLM, a folder, a GGUF file)
keeps the dropout its config ships (``"shipped"``, the default: clients train as deployments train,
e.g. MiniLM's hidden and attention dropout 0.1); ``"off"`` sets every dropout probability of the
config to 0 on request. The config-built models of :data:`CONFIGS` are built without dropout (their
configs are ours: random weights for the attacks' logic, not a deployment).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ...config.loaders import FLOATING, read_config_json, safetensors_header, translated
from ...data import tokenizers as toks
from ...errors import FedleakError
from ...types import DataSpec
from .wrapper import HFTextModel

DROPOUT_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop",
                "summary_first_dropout", "attention_dropout", "dropout", "classifier_dropout", "hidden_dropout",
                "mlp_dropout", "activation_dropout")

#: name -> (architecture, config keyword arguments without vocabulary / positions)
CONFIGS = {
    "gpt2-tiny": ("gpt2", dict(n_embd=128, n_layer=2, n_head=4)),
    "llama-tiny": ("llama", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=4)),
    "gpt2-small": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12)),
}


def transformers_module():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise FedleakError("language models need transformers>=5 (pip install 'fedleak[text]')") from None
    transformers.logging.set_verbosity_error()
    try:  # transformers 5 prints a loading report (new head weights) through its own logger
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:
        pass
    return transformers


DROPOUT_CHOICES = ("shipped", "off")


def check_dropout(dropout) -> str:
    if dropout not in DROPOUT_CHOICES:
        raise FedleakError(f"dropout must be one of {', '.join(DROPOUT_CHOICES)}, got {dropout!r}")
    return dropout


def tokenizer_of(tokenizer):
    if tokenizer is None:
        return toks.default_tokenizer()
    if isinstance(tokenizer, (str, os.PathLike)):
        return toks.load_tokenizer(tokenizer)
    return tokenizer


def no_dropout(config) -> None:
    """Every dropout probability of a transformers config set to 0 (before the modules are built)."""
    for key in DROPOUT_KEYS:
        if hasattr(config, key) and isinstance(getattr(config, key), (int, float)):
            setattr(config, key, 0.0)


def check_spec(spec: DataSpec, name: str) -> None:
    if spec.modality != "text":
        raise FedleakError(f"model {name!r} is a language model: it needs text data (--data text), "
                           f"got the {spec.modality} dataset {spec.name!r}")


def from_config(name: str, spec: DataSpec, tokenizer=None) -> HFTextModel:
    """A randomly initialized causal LM of :data:`CONFIGS` over the tokenizer's vocabulary."""
    check_spec(spec, name)
    tf = transformers_module()
    tok = tokenizer_of(tokenizer)
    arch, kwargs = CONFIGS[name]
    vocab = tok.get_vocab_size()
    pad = toks.pad_id(tok)
    positions = max(512, spec.seq_len)
    if arch == "gpt2":
        config = tf.GPT2Config(vocab_size=vocab, n_positions=positions, pad_token_id=pad, **kwargs)
        no_dropout(config)  # before the modules exist: nn.Dropout keeps the p it was built with
        config._attn_implementation = "eager"  # double backward (optimization attacks) and vmap work on eager
        hf = tf.GPT2LMHeadModel(config)
    else:
        config = tf.LlamaConfig(vocab_size=vocab, max_position_embeddings=positions, pad_token_id=pad,
                                bos_token_id=None, eos_token_id=None, **kwargs)
        no_dropout(config)
        config._attn_implementation = "eager"
        hf = tf.LlamaForCausalLM(config)
    return HFTextModel(hf, "causal-lm", tok, pad, name=name)


#: parameter-name prefixes of the classification head a classifier gets new (an encoder folder has none)
HEAD_PREFIXES = ("classifier.", "score.")


def _check_shapes(folder: Path, config, auto, *, new_head: bool) -> None:
    """The architecture config.json describes, built on the meta device (no memory), against the
    shapes in the safetensors headers: a mismatch is named before transformers reads a byte."""
    import torch

    tf = transformers_module()
    with translated(f"--model {folder} (config.json)"), torch.device("meta"):
        skeleton = getattr(tf, auto).from_config(config, trust_remote_code=False)
    expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    prefix = getattr(skeleton, "base_model_prefix", "") + "."
    for file in sorted(folder.glob("*.safetensors")):
        for name, (_, shape) in safetensors_header(file).items():
            key = name if name in expected else (prefix + name if prefix + name in expected else None)
            if key is None or (new_head and key.startswith(HEAD_PREFIXES)):
                continue
            if expected[key] != shape:
                raise FedleakError(f"{file}: tensor {name!r} has shape {list(shape)} but config.json's architecture "
                                   f"needs {list(expected[key])}")


def _loaded(load, folder: Path, *, new_head: bool):
    """Call a ``from_pretrained`` ``load`` (translated errors) and refuse what transformers would
    silently paper over: weights missing for a parameter (randomly initialized) or of another shape."""
    with translated(f"--model {folder}"):
        hf, info = load()
    missing = [k for k in info.get("missing_keys", ()) if not (new_head and k.startswith(HEAD_PREFIXES))]
    mismatched = [str(k[0] if isinstance(k, (tuple, list)) else k) for k in info.get("mismatched_keys", ())]
    if missing or mismatched:
        kind, names = ("has no weights for", missing) if missing else ("holds weights of the wrong shape for", mismatched)
        raise FedleakError(f"--model {folder}: *.safetensors {kind} {len(names)} parameter(s) of config.json's "
                           f"architecture, e.g. {sorted(names)[0]!r}; fedleak never audits randomly initialized weights")
    return hf


def _classifier(path: Path, spec: DataSpec, name: str, dropout: str = "shipped") -> "object":
    tf = transformers_module()
    if spec.num_classes < 2:
        raise FedleakError(f"a classifier needs at least 2 labels, the data has {spec.num_classes}")
    with translated(f"--model {path} (config.json)"):
        config = tf.AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=False,
                                               num_labels=int(spec.num_classes))
    if check_dropout(dropout) == "off":
        no_dropout(config)
    config.problem_type = "single_label_classification"
    _check_shapes(path, config, "AutoModelForSequenceClassification", new_head=True)
    return _loaded(lambda: tf.AutoModelForSequenceClassification.from_pretrained(
        str(path), config=config, local_files_only=True, trust_remote_code=False, use_safetensors=True,
        attn_implementation="eager", output_loading_info=True), path, new_head=True)


def minilm(spec: DataSpec, dropout: str = "shipped") -> HFTextModel:
    """The pretrained all-MiniLM-L6-v2 encoder with a new classification head (seeded by the caller);
    hidden and attention dropout 0.1 as shipped unless ``dropout="off"``."""
    check_spec(spec, "minilm")
    path = toks.minilm_path()
    tok = toks.load_tokenizer(path)
    hf = _classifier(path, spec, "minilm", dropout)
    return HFTextModel(hf, "classification", tok, int(hf.config.pad_token_id or 0), name="minilm")


def _folder_task(config: dict, folder: Path) -> str:
    archs = config.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise FedleakError(f"{folder / 'config.json'}: 'architectures' must be a list of names, got {archs!r}")
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "causal-lm"
    return "classification"  # an encoder (…Model) or a …ForSequenceClassification: a classifier head


def check_folder(folder) -> tuple[Path, dict]:
    """The folder and its config, or one-line errors: no config, no safetensors weights, remote code."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FedleakError(f"--model {folder}: not a model name and not a folder")
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        raise FedleakError(f"--model {folder}: no config.json (a model folder needs config.json, *.safetensors "
                           f"and tokenizer.json)")
    config = read_config_json(cfg_file)  # strict JSON: NaN, Infinity and deep nesting refused, naming the file
    if "auto_map" in config or config.get("trust_remote_code"):
        raise FedleakError(f"{cfg_file}: 'auto_map' asks for the folder's own Python code; fedleak never runs "
                           f"remote code (trust_remote_code)")
    if not any(folder.glob("*.safetensors")):
        bins = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt")]
        hint = f" ({', '.join(bins[:2])} are pickles, which fedleak does not load)" if bins else ""
        raise FedleakError(f"--model {folder}: no *.safetensors weights{hint}")
    odd = {}
    for file in sorted(folder.glob("*.safetensors")):  # checked before transformers reads them; never cast
        header = safetensors_header(file)
        odd.update({n: (file, d) for n, (d, _) in header.items() if d not in FLOATING})
        if not header:
            raise FedleakError(f"{file}: holds no tensors")
    tf = transformers_module()
    model_type = config.get("model_type")
    if model_type not in tf.CONFIG_MAPPING:
        raise FedleakError(f"{cfg_file}: model_type {model_type!r} is not an architecture transformers "
                           f"{tf.__version__} knows")
    if odd:  # integer tensors are allowed as buffers (BERT's position_ids), never as weights
        buffers = _buffer_names(folder)
        weights = [n for n in sorted(odd) if not any(b == n or b.endswith("." + n) for b in buffers)]
        if weights:
            file, dtype = odd[weights[0]]
            raise FedleakError(f"{file}: weights must be floating point (F16, BF16, F32, F64), got {weights[0]} "
                               f"({dtype}), which is no buffer of config.json's architecture; fedleak does not "
                               "cast quantized or integer weights")
    return folder, config


def _buffer_names(folder: Path) -> set:
    """The buffers (not parameters) of the architecture config.json describes, built on the meta device."""
    import torch

    tf = transformers_module()
    with translated(f"--model {folder} (config.json)"):
        config = tf.AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
        with torch.device("meta"):
            skeleton = tf.AutoModel.from_config(config, trust_remote_code=False)
    return {name for name, _ in skeleton.named_buffers()}


def folder_task(folder) -> str:
    """``"causal-lm"`` or ``"classification"`` for a model folder (by its config's architectures)."""
    folder, config = check_folder(folder)
    return _folder_task(config, folder)


def from_folder(folder, spec: DataSpec, tokenizer=None, dropout: str = "shipped") -> HFTextModel:
    """The model in ``folder``: a causal LM (``…ForCausalLM`` / ``…LMHeadModel``) or a classifier."""
    folder, config = check_folder(folder)
    check_spec(spec, str(folder))
    tok = tokenizer_of(tokenizer) if tokenizer is not None else toks.load_tokenizer(folder)
    task = _folder_task(config, folder)
    tf = transformers_module()
    if task == "causal-lm":
        with translated(f"--model {folder} (config.json)"):
            config = tf.AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
        if check_dropout(dropout) == "off":
            no_dropout(config)
        _check_shapes(folder, config, "AutoModelForCausalLM", new_head=False)
        hf = _loaded(lambda: tf.AutoModelForCausalLM.from_pretrained(
            str(folder), config=config, local_files_only=True, trust_remote_code=False, use_safetensors=True,
            attn_implementation="eager", output_loading_info=True), folder, new_head=False)
    else:
        hf = _classifier(folder, spec, str(folder), dropout)
    rows = int(hf.get_input_embeddings().weight.shape[0])
    if tok.get_vocab_size() > rows:
        raise FedleakError(f"--model {folder}: tokenizer.json has {tok.get_vocab_size()} tokens but the model "
                           f"embeds only {rows}")
    pad_cfg: Optional[int] = getattr(hf.config, "pad_token_id", None)
    pad = int(pad_cfg) if isinstance(pad_cfg, int) else toks.pad_id(tok, getattr(hf.config, "eos_token_id", None))
    return HFTextModel(hf, task, tok, pad, name=folder.name)


# the earlier private names (kept for callers outside this package)
_no_dropout, _check_spec, _tokenizer = no_dropout, check_spec, tokenizer_of
