"""``fedleak dp-audit --level lora``: are the clients' DP-LoRA updates what the claimed DP-SGD would produce?

Issue #29 item 4 (Opacus #820: Opacus with PEFT ≥ 0.14 silently corrupts LoRA updates). K clients of a fedleak
LoRA model (``--model llama-tiny --lora R``, :func:`fedleak.models.hf.lora.add_lora`) each run T = ``--rounds``
DP-SGD steps of ``--batch-size`` B on their adapters from the same global weights (:func:`.lora_check.simulate_dp_lora`)
under ``--defense dp-sgd:clip=C,noise=σ``; every reply is checked (:func:`.lora_check.check_lora_update`):
structure against the model's trainable adapters, frozen weights unmoved, each adapter tensor's norm inside its
χ² interval under the claim. The findings name the clients and the setting. Faults (what the check detects):
``lora-unprocessed=I,J`` (the adapters' gradients reach SGD unclipped and un-noised, #820's symptom),
``lora-partial=I,J`` (lora_B's gradients raw), ``lora-base-moves=I,J`` (a base weight moves).
``--lora-reply BEFORE,AFTER`` checks a real client's saved reply too (two tensor files: the weights it got, the
reply it sent, in the wrapper's names or FlowerTune's PEFT keys), reported as client ``reply``.
The canary audits (Andrew et al. ICLR '24; Steinke et al. NeurIPS '23) need many rounds to see this; the
check needs one reply per client.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Optional

import torch

from ..errors import FedleakError
from .lora_check import DEGRADATIONS, LoraDPClaim, check_lora_update, simulate_dp_lora


def parse_lora_faults(specs, clients: int) -> dict:
    """client index → degradation, from ``--fault lora-unprocessed=I,J`` etc."""
    out: dict = {}
    for spec in specs or ():
        key, eq, value = str(spec).strip().partition("=")
        kind = key.strip().lower().removeprefix("lora-")
        if not (key.strip().lower().startswith("lora-") and kind in DEGRADATIONS and eq):
            raise FedleakError(f"--fault {spec!r}: --level lora allows "
                               + ", ".join(f"lora-{d}=I,J" for d in DEGRADATIONS))
        try:
            idx = {int(v) for v in value.split(",") if v.strip()}
        except ValueError:
            raise FedleakError(f"--fault {key}= needs client indices like 0,2, got {value!r}") from None
        if not idx or min(idx) < 0 or max(idx) >= clients:
            raise FedleakError(f"--fault {key}= needs client indices in 0..{clients - 1}, got {value!r}")
        for i in idx:
            out[i] = kind
    return out


def load_reply(spec) -> tuple[dict, dict]:
    """(before, after) from ``--lora-reply BEFORE,AFTER``: two ``.safetensors`` files (never pickles), read through
    the boundary's loader (:func:`fedleak.config.loaders.read_safetensors`: header, sizes, floating dtypes) — the
    weights a client got and the reply it sent (wrapper names or PEFT keys)."""
    parts = [x.strip() for x in str(spec).split(",")]
    if len(parts) != 2 or not all(parts):
        raise FedleakError(f"--lora-reply needs BEFORE,AFTER (two tensor files), got {spec!r}")
    out = []
    from ..config.loaders import read_safetensors

    for path in parts:
        if not path.endswith(".safetensors"):
            raise FedleakError(f"--lora-reply {path}: give .safetensors files (fedleak never unpickles)")
        if not Path(path).is_file():
            raise FedleakError(f"--lora-reply {path}: no such file")
        state = read_safetensors(path, f"--lora-reply {path}", floating=True)
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise FedleakError(f"--lora-reply {path}: not a name → tensor state dict")
        out.append(state)
    return out[0], out[1]


def prepare_lora(a: dict) -> tuple:
    """(model, clients, claim, faults): everything that can refuse the input, before ``--out`` is made."""
    from .. import data as data_mod
    from .. import models

    lora, k = a["lora"], a["clients"] or 2
    if lora is None:
        raise FedleakError("--lora: --level lora needs the adapters' rank (e.g. --lora 4 with --model llama-tiny)")
    if isinstance(lora, bool) or not isinstance(lora, int) or not 1 <= lora <= 4096:
        raise FedleakError(f"--lora must be an integer from 1 to 4096, got {lora!r}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1000:
        raise FedleakError(f"--clients must be an integer from 1 to 1000, got {k!r}")
    batch = a["batch_size"] or min(4, a["samples"])
    claim = LoraDPClaim(clip=a["clip"], noise=a["noise"], lr=a["lr"], steps=a["rounds"], batch_size=batch)
    faults = parse_lora_faults(a["fault"], k)
    reply = load_reply(a["lora_reply"]) if a.get("lora_reply") else None  # refused before the model build
    options = {"seq_len": 8, "task": "classification" if a["model"] == "minilm" else "causal-lm"} \
        if a["data"] == "text" else {}
    spec, clients = data_mod.load(a["data"], root=a["data_root"], num_clients=k, samples_per_client=a["samples"],
                                  seed=a["seed"], **options)
    if len(clients) < k or any(len(c) < batch for c in clients):
        raise FedleakError(f"--data {a['data']}: {k} clients of at least --batch-size {batch} samples needed")
    net = models.build(a["model"], spec, seed=a["model_seed"], lora=lora)
    return net, clients, claim, faults, reply


def run_lora_audit(a: dict, out_dir: Optional[Path]) -> dict:
    """The DP-LoRA consistency audit once its inputs are valid (``a["prepared"]`` from :func:`prepare_lora`)."""
    net, clients, claim, faults, reply = a["prepared"]
    started = a["started"]
    reports = []
    if reply is not None:  # a real client's saved reply, checked first (client "reply")
        reports.append(check_lora_update(net, reply[0], reply[1], claim, client="reply"))
    for i, client in enumerate(clients):
        before, after = simulate_dp_lora(net, client, claim, seed=a["seed"] * 1009 + i, degrade=faults.get(i))
        reports.append(check_lora_update(net, before, after, claim, client=str(i)))
    flagged = [r["client"] if r["client"] == "reply" else int(r["client"]) for r in reports if r["detected"]]
    findings = [f for r in reports if r["detected"] for f in r["findings"]]
    if not findings:
        findings = [f"No DP-LoRA inconsistency found in the {len(reports)} clients' updates (each adapter tensor's norm "
                    f"inside its χ² interval under the claim, no frozen weight moved); this bounds nothing from above."]
    elif flagged:
        findings.insert(0, f"Proved: the DP-LoRA updates of clients {', '.join(map(str, flagged))} are not DP-SGD with "
                           f"clip C = {claim.clip:g}, σ = {claim.noise:g} on the adapters (Opacus #820 pattern); "
                           "the accountant's ε does not apply to them.")
    result = {
        "level": "lora", "setting": {"defense": f"dp-sgd:clip={claim.clip:g},noise={claim.noise:g}",
                                     **claim.to_json(), "lora_rank": a["lora"],
                                     "lora_config": getattr(net, "lora_config", None)},
        "misconfiguration": {"detected": bool(flagged), "evidence": "proved" if flagged else None,
                             "flagged_clients": flagged, "clients": reports, "findings": findings},
        "fault": {str(i): d for i, d in sorted(faults.items())}, "model": a["model"], "data": a["data"],
        "clients": len(clients), "seed": a["seed"], "threads": torch.get_num_threads(), "device": "cpu",
        "machine": platform.machine(),
        "methods": {"check": "χ² norm intervals of DP-SGD's output on the adapters (Abadi et al. 2016 Alg. 1; the "
                             "Gaussian mechanism as in Steinke et al. NeurIPS 2023 §2), Bonferroni over the tensors, "
                             "plus the reply's structure against PEFT's trainable adapters"},
        "cost_seconds": {"total": round(time.perf_counter() - started, 3)},
    }
    result["summary"] = list(findings)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "dp-audit.json").write_text(json.dumps(result, indent=2, allow_nan=True) + "\n")
    return result
