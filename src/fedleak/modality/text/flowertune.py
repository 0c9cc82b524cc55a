"""The FlowerTune client's recipe (Flower's ``examples/flowertune-llm``): its numbers, the gradient accumulation and
the LoRA options a text model is built with under ``--flowertune``.

The preset itself (:func:`fedleak.audit.plan.flowertune.apply`, which re-exports these and documents the recipe)
is a plan stage that asks the text modality whether the data is text; the text modality builds its models with
these, so they live below both.
"""

from __future__ import annotations

FULL = {"lora": 32, "lora_alpha": 64, "lora_dropout": 0.075, "lora_targets": "peft", "seq_len": 512,
        "batch_size": 16, "local_steps": 10, "lr": 5e-5, "optimizer": "adamw"}
CPU_SEQ_LEN = 64
#: tokens per gradient-accumulation slice (see :func:`micro_batch`)
MICRO_TOKENS = 2048
MODEL = "smollm2"
#: candidate documents of the preset's membership test: 200 + 200 where the text allows (at most the client's
#: sequences as members, the rest held back; fewer where the text holds fewer, said in the report)
CANDIDATES = 400


def micro_batch(cfg) -> int | None:
    """Gradient accumulation under the preset: slices of at most :data:`MICRO_TOKENS` tokens (4 × 512), the same
    mean gradient in the memory one slice needs (16 × 512 tokens in one forward of SmolLM2 took over 20 GB)."""
    if not cfg.flowertune or cfg.seq_len is None:
        return None
    micro = max(1, MICRO_TOKENS // int(cfg.seq_len))
    return micro if micro < (cfg.batch_size or FULL["batch_size"]) else None


def lora_options(cfg) -> dict:
    """The LoRA options the text model is built with under the preset (PEFT's default targets)."""
    return {"lora_targets": FULL["lora_targets"]} if cfg.flowertune else {}
