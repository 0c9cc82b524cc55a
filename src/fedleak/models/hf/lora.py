"""LoRA adapters through ``peft`` (Hu et al. 2022, "LoRA", §4.1: W + (α/r)·B·A, B = 0 at the start).

:func:`add_lora` puts rank-R adapters on the attention projections — BERT ``query``/``key``/``value``,
GPT-2 ``c_attn``, LLaMA ``q_proj``/``k_proj``/``v_proj``/``o_proj`` — or, with ``targets="peft"``, on
PEFT's own default targets for the architecture (LLaMA ``q_proj``/``v_proj``, what FlowerTune's
``LoraConfig`` gets), with α = 2R unless given and PEFT's own initialisation (A Kaiming-uniform,
B = 0), as Flower's FlowerTune recipe (rank 32, α 64, ``lora_dropout`` 0.075). The adapter dropout
is PEFT's (``lora_A(dropout(x))``, active in train mode, so on in every client step); its
default is PEFT's, 0. Only
the adapters (and a classifier's new head, ``modules_to_save``) require gradients, so
:func:`fedleak.types.params.params_of` — hence every :class:`~fedleak.types.Update` — holds just
them, keyed by the wrapper's ``named_parameters()`` names.

:func:`adapter_state` / :func:`params_from_adapter_state` translate between those names and
``peft.get_peft_model_state_dict`` (what a FlowerTune client puts in its reply).

In round 1, B = 0: the adapter update is then ∂L/∂B = (∂L/∂W)·Aᵀ (times α/r) and ∂L/∂A = 0.
:func:`warm_up` trains the adapters for a number of steps first (Adam, lr 1e-3, batches of 8
sequences of the embedded ``stdlib`` corpus, seeded), giving a later round's state with B ≠ 0.
"""

from __future__ import annotations

import re
import warnings
from typing import Optional

import torch

from ...errors import FedleakError
from ...types import DataSpec, Params
from .wrapper import HFTextModel

#: attention projections per ``config.model_type``
TARGETS = {
    "bert": ["query", "key", "value"],
    "gpt2": ["c_attn"],
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mistral": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "qwen2": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "roberta": ["query", "key", "value"],
    "distilbert": ["q_lin", "k_lin", "v_lin"],
}

WARMUP_LR = 1e-3
WARMUP_BATCH = 8
ADAPTER = "default"


def _peft():
    try:
        import peft
    except ImportError:
        raise FedleakError("LoRA needs the package peft (pip install 'fedleak[text]')") from None
    return peft


TARGET_CHOICES = ("attention", "peft")


def add_lora(model: HFTextModel, rank: int, *, alpha: Optional[float] = None, dropout: float = 0.0,
             targets: str = "attention") -> HFTextModel:
    """``model`` with rank-``rank`` LoRA adapters (α = 2·rank unless ``alpha``; adapter dropout
    ``dropout``) on its attention projections (``targets="attention"``) or PEFT's default targets."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise FedleakError(f"--lora must be a positive integer rank, got {rank!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise FedleakError(f"LoRA dropout must be a number in [0, 1), got {dropout!r}")
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0):
        raise FedleakError(f"LoRA alpha must be a positive number, got {alpha!r}")
    if targets not in TARGET_CHOICES:
        raise FedleakError(f"LoRA targets must be one of {', '.join(TARGET_CHOICES)}, got {targets!r}")
    peft = _peft()
    model_type = getattr(model.hf.config, "model_type", None)
    if model_type not in TARGETS:
        raise FedleakError(f"--lora: no attention projections known for model type {model_type!r}; "
                           f"known: {', '.join(TARGETS)}")
    widths = [(name, min(m.weight.shape)) for name, m in model.hf.named_modules()
              if name.rsplit(".", 1)[-1] in TARGETS[model_type] and getattr(m, "weight", None) is not None
              and m.weight.dim() == 2]
    if widths:
        name, width = min(widths, key=lambda item: item[1])
        if rank > width:  # a rank beyond the projection's width is no low-rank adapter (peft would fail deep inside)
            raise FedleakError(f"--lora {rank} exceeds the width of the model's attention projections "
                               f"({name}: {width}); use a rank from 1 to {width}")
    task = peft.TaskType.CAUSAL_LM if model.task == "causal-lm" else peft.TaskType.SEQ_CLS
    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank if alpha is None else alpha, lora_dropout=float(dropout),
                             bias="none", task_type=task,
                             target_modules=TARGETS[model_type] if targets == "attention" else None,
                             fan_in_fan_out=(model_type == "gpt2"))
    with warnings.catch_warnings():  # peft asks transformers a deprecated question (FutureWarning)
        warnings.simplefilter("ignore", FutureWarning)
        model.hf = peft.get_peft_model(model.hf, config)
    model.lora_rank = rank
    used = model.hf.peft_config[ADAPTER].target_modules or ()
    model.lora_config = {"rank": rank, "alpha": float(config.lora_alpha), "dropout": float(dropout),
                         "targets": sorted(used)}
    return model


def peft_key(name: str) -> str:
    """Wrapper parameter name -> ``get_peft_model_state_dict`` key (no ``hf.`` prefix, no adapter name)."""
    key = name[3:] if name.startswith("hf.") else name
    key = key.replace(f".modules_to_save.{ADAPTER}.", ".")  # a classifier head trained beside the adapters
    return re.sub(rf"\.{ADAPTER}(?=\.)", "", key)


def adapter_state(model: HFTextModel, params: Optional[Params] = None) -> dict[str, torch.Tensor]:
    """The adapter state as FlowerTune sends it (``peft.get_peft_model_state_dict``), from ``params``
    (wrapper names, e.g. an Update's weights) or from the model itself."""
    peft = _peft()
    if model.lora_rank is None:
        raise FedleakError("the model has no LoRA adapters")
    state = peft.get_peft_model_state_dict(model.hf)
    if params is None:
        return {k: v.detach().clone() for k, v in state.items()}
    mapping = {peft_key(n): n for n in params}
    missing = sorted(set(state) - set(mapping))
    if missing:
        raise FedleakError(f"adapter state: no parameter for {missing[:3]}")
    return {k: params[mapping[k]].detach().clone() for k in state}


def params_from_adapter_state(model: HFTextModel, state: dict[str, torch.Tensor]) -> Params:
    """``get_peft_model_state_dict`` keys -> the wrapper's trainable parameter names (shapes checked)."""
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    by_key = {peft_key(n): n for n in trainable}
    unknown = sorted(set(state) - set(by_key))
    missing = sorted(set(by_key) - set(state))
    if unknown or missing:
        raise FedleakError(f"adapter state does not fit the model: unknown keys {unknown[:3]}, missing {missing[:3]}")
    out = {}
    for key, value in state.items():
        name = by_key[key]
        if tuple(value.shape) != tuple(trainable[name].shape):
            raise FedleakError(f"adapter state {key!r} has shape {tuple(value.shape)}, the model "
                               f"{tuple(trainable[name].shape)}")
        out[name] = value
    return out


def warm_up(model: HFTextModel, spec: DataSpec, steps: int, seed: int = 0) -> HFTextModel:
    """Train the adapters (and head) ``steps`` Adam steps on the embedded ``stdlib`` corpus (a later round)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise FedleakError(f"lora_warmup must be a non-negative integer number of steps, got {steps!r}")
    if steps == 0:
        return model
    if model.lora_rank is None:
        raise FedleakError("lora_warmup needs LoRA adapters (option lora=R)")
    from ...data import tokenized

    sequences, labels = tokenized.corpus_sequences(model.tokenizer, spec.seq_len, model.task, source="stdlib",
                                                  pad=model.pad_id)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=WARMUP_LR)
    generator = torch.Generator().manual_seed(int(seed) + 7919)
    labels = labels % spec.num_classes if model.task == "classification" else labels
    for _ in range(steps):
        index = torch.randperm(sequences.shape[0], generator=generator)[:WARMUP_BATCH]
        optimizer.zero_grad()
        loss = model.loss_fn(model(sequences[index]), labels[index])
        loss.backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return model
