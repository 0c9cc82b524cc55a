"""``--flowertune``: the client of Flower's FlowerTune LLM recipe as one audit preset.

FlowerTune (Flower's ``examples/flowertune-llm`` and its leaderboard) fine-tunes a pretrained
decoder with PEFT's LoRA: r 32, α 64, ``lora_dropout`` 0.075 on PEFT's default target modules
(LLaMA: ``q_proj``, ``v_proj``), sequences of 512 tokens, per-device batch 16, 10 local steps a
round, lr 5e-5 decaying to 1e-6 over the rounds (cosine); the server receives the adapter state
(``get_peft_model_state_dict``). The preset sets exactly these where the user gave no value (any
flag overrides its part), the model ``smollm2`` where the text default was left, the membership
test of candidate documents (:mod:`.membership`), DAGER as the honest attack (it states its
exactness condition and by how much the step exceeds it) and no malicious server (the imprint
needs the embedding table, which a LoRA update does not carry).

The local optimizer is FlowerTune's: the Trainer's AdamW (``adamw_torch``, weight decay 0), a fresh
state each round (a new Trainer per round), the lr constant within the round
(``lr_scheduler_type = "constant"``); ``--optimizer sgd`` gives Alg. 1's plain SGD instead (said in the
report). Differences from FlowerTune, stated in the report: round 1's lr (5e-5; FlowerTune decays it by
a cosine over the rounds to 1e-6); ``--lora-warmup S`` gives a later round (B ≠ 0).

Scaling on CPU: the full client update is 10 steps of 16 × 512 tokens through the model (plus one
gradient per candidate document at 512 tokens), on the order of a thousand CPU-seconds for SmolLM2
on two cores (``benchmarks/bench_llm.py flowertune --seq-len-override 512`` measures it). On a CPU
device, when ``--seq-len`` is not given, the preset cuts the sequences to :data:`CPU_SEQ_LEN` tokens
(batch, steps, rank and dropout unchanged) and says so; ``--seq-len 512`` runs the full shape.
"""

from __future__ import annotations

from dataclasses import replace

# the recipe's numbers live below the text modality, which builds its models with them (re-exported here)
from ...modality.text.flowertune import (CANDIDATES, CPU_SEQ_LEN, FULL, MICRO_TOKENS, MODEL,  # noqa: F401
                                        lora_options, micro_batch)


def apply(cfg, device: str = "cpu"):
    """``(config with the preset where the user gave no value, description)``."""
    from ...errors import FedleakError
    from .default import DEFAULT_DATA, DEFAULT_MODEL

    data = "text" if cfg.data == DEFAULT_DATA else cfg.data
    from ...modality import TEXT

    if not TEXT.matches(str(data)):
        raise FedleakError(f"--flowertune audits a language model's clients: it needs --data text, got {cfg.data!r}")

    given_seq = cfg.seq_len is not None
    scaled = not given_seq and not str(device).startswith(("cuda", "mps"))
    seq_len = cfg.seq_len if given_seq else (CPU_SEQ_LEN if scaled else FULL["seq_len"])
    batch = cfg.batch_size if cfg.batch_size is not None else FULL["batch_size"]
    samples = cfg.samples if cfg.samples is not None else batch * FULL["local_steps"]
    changes = {
        "data": data, "model": MODEL if cfg.model == DEFAULT_MODEL else cfg.model,
        "algorithm": cfg.algorithm or "fedavg", "epochs": cfg.epochs or 1, "batch_size": batch, "samples": samples,
        "lr": cfg.lr if cfg.lr is not None else FULL["lr"], "seq_len": seq_len,
        "lora": cfg.lora if cfg.lora is not None else FULL["lora"],
        "lora_dropout": cfg.lora_dropout if cfg.lora_dropout is not None else FULL["lora_dropout"],
        "membership": cfg.membership if cfg.membership is not None else CANDIDATES,
        "attacks": cfg.attacks or ("dager",), "malicious": False,
        "optimizer": cfg.optimizer or FULL["optimizer"],
    }
    out = replace(cfg, **changes)
    steps = -(-out.samples // out.batch_size) * out.epochs
    shape = f"{out.batch_size} × {out.seq_len} tokens, {steps} local steps"
    description = {
        "preset": "FlowerTune (Flower's LLM fine-tuning recipe)",
        "full_shape": f"{FULL['batch_size']} × {FULL['seq_len']} tokens, {FULL['local_steps']} local steps, LoRA r "
                      f"{FULL['lora']}, alpha {FULL['lora_alpha']}, dropout {FULL['lora_dropout']}, PEFT's default "
                      f"targets, lr {FULL['lr']:g}",
        "shape": shape, "scaled": scaled,
        "scaling": (f"scaled down on CPU: sequences of {CPU_SEQ_LEN} tokens instead of {FULL['seq_len']} "
                    f"({FULL['seq_len'] // CPU_SEQ_LEN}x fewer tokens per step; batch, steps, rank and dropout as "
                    f"FlowerTune); --seq-len {FULL['seq_len']} runs the full shape") if scaled else None,
        "optimizer": (f"{out.optimizer}: " + ("AdamW as FlowerTune's Trainer (a fresh state each round, β (0.9, 0.999), "
                                              "ε 1e-8, no weight decay), constant lr within the round"
                                              if out.optimizer == "adamw" else "plain SGD (not FlowerTune's AdamW: "
                                              "--optimizer sgd)")),
        "candidates_by": "--membership" if cfg.membership is not None else "the preset",
        "attacks_chosen_by": "--attacks" if cfg.attacks else ("the FlowerTune preset, which runs DAGER and the "
                                                              "membership test; add it with --attacks"),
        "differences": "round 1's lr (5e-5; FlowerTune decays it to 1e-6 by a cosine over the rounds); round 1 (B = "
                       "0) unless --lora-warmup gives a later one" + ("" if out.optimizer == "adamw" else
                                                                     "; plain SGD instead of FlowerTune's AdamW"),
    }
    micro = micro_batch(out)
    if micro:
        description["gradient_accumulation"] = (f"each step's 16 sequences in slices of {micro} × {out.seq_len} tokens "
                                                "(the same mean gradient, in the memory of one slice)").replace(
            "16", str(out.batch_size), 1)
    return out, description
