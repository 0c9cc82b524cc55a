"""The text audit's membership measurement: which candidate documents were in a client's update?

Where exact recovery is impossible (more tokens in a step than the span limit, e.g. FlowerTune's
16 × 512 tokens into rank-32 adapters), a server can still test documents it holds. The audit
builds the candidates — M documents, half of them placed in the audited client's data, half not —
runs the client's real update (:func:`fedleak.fl.client.client_update`, dropout on as configured),
scores every candidate by its coefficient in the update fitted on all candidates' gradients
(:mod:`fedleak.attacks.text.membership`) and reports the ROC curve, AUC and TPR at 1 % and 0.1 % FPR
(:mod:`fedleak.metrics.membership`).

Candidates are the client's own sequences and sequences of other clients (the default), or the
user's documents (``--candidates FILE``: one UTF-8 document per non-empty line; the first L tokens
of each; a seeded half replaces the first sequences of the client's data). The split is seeded.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...errors import FedleakError
from ...types import ClientData
from ..plan.candidates import read_candidates
from ..plan.default import DEFAULT_CANDIDATES


def _file_sequences(docs: list[str], tokenizer, seq_len: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    from ...data import tokenizers as toks

    rows, labels = [], []
    for doc in docs:
        ids = toks.encode(tokenizer, doc)
        if not ids:
            continue
        labels.append(ids[seq_len] if len(ids) > seq_len else -100)
        ids = ids[:seq_len]
        rows.append(ids + [pad] * (seq_len - len(ids)))
    if len(rows) < 2:
        raise FedleakError("--candidates: fewer than 2 documents hold any token")
    return torch.tensor(rows, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


def build_candidates(client: ClientData, outside: Optional[ClientData], count: int, seed: int, *,
                     docs: Optional[list] = None, tokenizer=None, seq_len: int = 0, pad: int = 0):
    """``(client with the members in it, candidate ids (M, L), candidate labels, members (M,) bool)``."""
    generator = torch.Generator().manual_seed(int(seed) + 31)
    if docs is not None:
        ids, labels = _file_sequences(docs, tokenizer, seq_len, pad)
        order = torch.randperm(ids.shape[0], generator=generator)
        ids, labels = ids[order], labels[order]
        k = min(ids.shape[0] // 2, len(client))
        inputs, targets = client.inputs.clone(), client.labels.clone()
        inputs[:k] = ids[:k].to(inputs.dtype)
        targets[:k] = labels[:k].to(targets.dtype)
        members = torch.zeros(ids.shape[0], dtype=torch.bool)
        members[:k] = True
        return ClientData(inputs, targets, client.client_id), ids, labels, members
    k = min(count // 2, len(client))
    if outside is None or len(outside) < count - k:
        have = 0 if outside is None else len(outside)
        raise FedleakError(f"the membership test needs {count - k} sequences outside the audited clients' data; the "
                           f"text holds {have} more (lower --membership or give a larger --data-root)")
    pick = torch.randperm(len(client), generator=generator)[:k]
    other = torch.randperm(len(outside), generator=generator)[:count - k]
    ids = torch.cat([client.inputs[pick].long(), outside.inputs[other].long()])
    labels = torch.cat([client.labels[pick], outside.labels[other]])
    members = torch.cat([torch.ones(k, dtype=torch.bool), torch.zeros(count - k, dtype=torch.bool)])
    return client, ids, labels, members


def measure(model, client: ClientData, outside: Optional[ClientData], protocol, *, count: int, seed: int,
            docs: Optional[list] = None, spec=None, progress=None) -> dict:
    """The membership entry of metrics.json for one audited client under ``protocol``."""
    from ...attacks.text.membership import membership_scores
    from ...fl.client import client_update
    from ...metrics.membership import membership_metrics

    tokenizer = getattr(model, "tokenizer", None)
    victim, ids, labels, members = build_candidates(
        client, outside, count, seed, docs=docs, tokenizer=tokenizer, seq_len=int(spec.seq_len) if spec else 0,
        pad=int(spec.pad_id or 0) if spec else 0)
    if progress is not None:
        progress(f"membership: the client's update ({len(victim)} sequences, {protocol.num_steps(len(victim))} "
                 f"local steps)")
    import time

    start = time.perf_counter()
    update = client_update(model, victim, protocol, seed=seed)
    client_seconds = time.perf_counter() - start
    step = max(1, ids.shape[0] // 8)

    def tick(done, total):
        if progress is not None and (done % step == 0 or done == total):
            progress(f"membership: scored {done}/{total} candidate documents")

    # the server does not know which candidate labels (next tokens) the client saw: none is used
    scored = membership_scores(model, update, ids, None, seed=seed, progress=tick)
    out = membership_metrics(scored["scores"], members.tolist())
    raw = membership_metrics(scored["raw"], members.tolist())
    cosine = membership_metrics(scored["cosine"], members.tolist())
    out.update({"statistic": scored["statistic"], "candidates": int(ids.shape[0]),
                "source": "file" if docs is not None else "the client's sequences and other clients'",
                "cosine": {"auc": cosine["auc"], "tpr_at_1pct_fpr": cosine["tpr_at_1pct_fpr"],
                           "tpr_at_0.1pct_fpr": cosine["tpr_at_0.1pct_fpr"]},
                "raw_cosine": {"auc": raw["auc"], "tpr_at_1pct_fpr": raw["tpr_at_1pct_fpr"]},
                "scores": [float(s) for s in scored["scores"]], "is_member": members.tolist(),
                "client_seconds": client_seconds, "scoring_seconds": scored["seconds"],
                "trainable_parameters": scored["parameters"], "sketched": scored["sketched"],
                "local_steps": protocol.num_steps(len(victim)), "sequences": len(victim)})
    return out


def sentence(entry: dict) -> str:
    """One paragraph for the report and the printed summary."""
    return (f"Membership of candidate documents: of {entry['candidates']} documents the server holds "
            f"({entry['members']} in the client's data, {entry['non_members']} not), fitting the update on their "
            f"gradients jointly finds "
            f"{entry['tpr_at_1pct_fpr']:.0%} of the members at 1% false positives and {entry['tpr_at_0.1pct_fpr']:.0%} "
            f"at 0.1% (AUC {entry['auc']:.3f}; with {entry['non_members']} non-members the smallest resolvable FPR "
            f"is {entry['fpr_resolution']:.2%}, so a rate at a lower FPR is the rate with no false positive). "
            f"Scoring took {entry['scoring_seconds']:.0f} s after the client's {entry['local_steps']}-step update "
            f"({entry['client_seconds']:.0f} s).")


# -- the audit's use (audit/run.py) ------------------------------------------------------------
def wanted(cfg) -> bool:
    return bool(cfg.membership or cfg.candidates)


def outside_pool(cfg, model_name: str, needed: int, samples: int) -> Optional[ClientData]:
    """Sequences outside the audited clients' data (the non-member candidates), checked before any attack
    runs; with ``--candidates`` the file is read (and checked) instead."""
    if not wanted(cfg):
        return None
    if cfg.candidates:
        cfg.extra["candidate_docs"] = read_candidates(cfg.candidates)
        return None
    from ..plan import text as text_audit

    count = cfg.membership
    members = min(count // 2, samples)
    extra = -(-(count - members) // samples)
    _, pool, _, _ = text_audit.prepare(cfg, model_name, needed + extra, samples)
    rest = pool[needed:needed + extra]
    have = sum(len(c) for c in rest)
    if have < count - members:
        raise FedleakError(f"--membership {count}: the text holds {have} sequences outside the {needed} audited "
                           f"client(s), {count - members} are needed as non-members (lower --membership, shorten "
                           f"--seq-len or give a larger --data-root)")
    return ClientData(torch.cat([c.inputs for c in rest]), torch.cat([c.labels for c in rest]), "outside")


def training(model, cfg) -> dict:
    """How the clients train: dropout as configured (with the rates that act) and the LoRA config."""
    rates = model.dropout_rates() if hasattr(model, "dropout_rates") else {}
    by_rate: dict = {}
    for name, p in rates.items():
        kind = "lora" if "lora_dropout" in name else "model"
        by_rate[f"{kind} p={p:g}"] = by_rate.get(f"{kind} p={p:g}", 0) + 1
    return {"dropout": cfg.dropout, "dropout_modules": by_rate, "lora": getattr(model, "lora_config", None),
            "statement": ("dropout as the model's and the LoRA config say (as shipped)" if cfg.dropout == "shipped"
                          else "dropout off on request (--dropout off): the clients do not train as shipped")
            + (f": {', '.join(f'{n} × {k}' for k, n in by_rate.items())} dropout modules act in every step"
               if by_rate else ": no dropout module acts")}


def measure_point(cfg, model, spec, pool: list, outside: Optional[ClientData], plan, show=None) -> dict:
    scenario = plan.scenarios[0]
    client = pool[0]
    client = ClientData(client.inputs[:scenario.samples], client.labels[:scenario.samples], client.client_id)

    def progress(text):
        if show is not None:
            show({"stage": text})

    entry = measure(model, client, outside, scenario.protocol, count=cfg.membership or DEFAULT_CANDIDATES,
                    seed=cfg.seed, docs=cfg.extra.get("candidate_docs"), spec=spec, progress=progress)
    entry["scenario"] = scenario.key
    entry["sentence"] = sentence(entry)
    return entry


def result_entries(cfg, points: list) -> dict:
    """metrics.json's top-level ``membership``, ``training`` and ``flowertune`` entries."""
    out = {"training": points[0]["settings"].get("training")}
    if points[0].get("membership") is not None:
        out["membership"] = points[0]["membership"]
    if cfg.extra.get("flowertune"):
        out["flowertune"] = cfg.extra["flowertune"]
    return out
