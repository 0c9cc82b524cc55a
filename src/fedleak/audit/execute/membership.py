"""The text audit's membership measurement: which candidate documents were in a client's update?

Where exact recovery is impossible (more tokens in a step than the span limit, e.g. FlowerTune's
16 × 512 tokens into rank-32 adapters), a server can still test documents it holds. The audit
builds the candidates — members placed in the audited client's data, non-members held back —
runs the client's real update (:func:`fedleak.fl.client.client_update`, dropout and optimizer as
configured), scores every candidate by three attacks that see only the update and the candidates —
ProjRes (:mod:`fedleak.attacks.text.projres`: the projection residual of the candidate's hidden
embeddings on the update's row subspaces), the joint fit of the update on the candidates' gradients
(:mod:`fedleak.attacks.text.membership`) and the same fit in the client's AdamW metric
(:mod:`fedleak.attacks.text.adam_fit`; one gradient per candidate serves both fits) — and reports for
each the ROC curve, the AUC with DeLong's 95 % interval and TPR at 1 % and 0.1 % FPR
(:mod:`fedleak.metrics.membership`). The headline is the stronger of those run by AUC (a choice among
them made with the audit's labels, said in ``headline_statistic``).

Non-members come from the same distribution as the members (:data:`SPLIT`): sequences of the audited
client's own file or shuffled pool of windows that no audited client trains on (a held-back split), never
another file's topic. With ``--candidates FILE`` (one UTF-8 document per non-empty line; the first L
tokens of each) a seeded half replaces the first sequences of the client's data, the rest are held back;
a file with fewer documents than ``--membership`` asks, a document longer than the model's context, or the
same document twice (it could be both a member and a non-member) is one line naming it.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...errors import FedleakError
from ...types import ClientData
from ..plan.candidates import read_candidates
from ..plan.default import DEFAULT_CANDIDATES

SPLIT = ("held back from the audited client's own data source — its file, or the seeded shuffle of windows of the "
         "same documents — and trained on by no audited client (same distribution as the members)")
JOINT_STATISTIC = ("coefficient of the candidate's gradient (at the server's weights) in the least-squares fit of the "
                   "update's pseudo-gradient on all candidates' gradients jointly")
#: the LoRA blocks the fits use (bench_membership.py's rule: the largest k in 1, 2, 4, 8 whose scoring costs <= 0.9x
#: the client's update at FlowerTune's CPU shape; k = 2)
LORA_BLOCKS = 2
SPLIT_FILE = "the user's --candidates file, a seeded half placed in the client's data, the rest held back"


def _context(model) -> Optional[int]:
    base = getattr(model, "hf", None) or getattr(model, "base", None) or model
    config = getattr(base, "config", None)
    value = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def _file_sequences(docs: list[str], tokenizer, seq_len: int, pad: int,
                    context: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
    from ...data import tokenizers as toks

    rows, labels, seen = [], [], {}
    for line, doc in enumerate(docs, 1):
        ids = toks.encode(tokenizer, doc)
        if not ids:
            continue
        if context is not None and len(ids) > context:
            raise FedleakError(f"--candidates: document {line} holds {len(ids)} tokens, longer than the model's "
                               f"context of {context} tokens")
        labels.append(ids[seq_len] if len(ids) > seq_len else -100)
        ids = ids[:seq_len]
        key = tuple(ids)
        if key in seen:
            raise FedleakError(f"--candidates: documents {seen[key]} and {line} are the same in their first {seq_len} "
                               f"tokens; one could be a member and the other a non-member (remove one)")
        seen[key] = line
        rows.append(ids + [pad] * (seq_len - len(ids)))
    if len(rows) < 2:
        raise FedleakError("--candidates: fewer than 2 documents hold any token")
    return torch.tensor(rows, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


def held_back(outside: Optional[ClientData], audited: list, need: int, seed: int) -> ClientData:
    """``need`` sequences of ``outside`` (the audited client's data source) that no ``audited`` client trains on,
    drawn with the seed; too few is one line."""
    if outside is None:
        raise FedleakError(f"the membership test needs {need} sequences held back from the audited client's data")
    used = {tuple(r) for c in audited for r in c.inputs.long().tolist()}
    free = [i for i, r in enumerate(outside.inputs.long().tolist()) if tuple(r) not in used]
    if len(free) < need:
        raise FedleakError(f"the membership test needs {need} sequences held back from the audited client's data "
                           f"source; it holds {len(free)} that no audited client trains on (lower --membership, "
                           f"shorten --seq-len or give more text)")
    generator = torch.Generator().manual_seed(int(seed) + 37)
    pick = torch.tensor(free)[torch.randperm(len(free), generator=generator)[:need]]
    return ClientData(outside.inputs[pick], outside.labels[pick], "held-back")


def build_candidates(client: ClientData, outside: Optional[ClientData], count: int, seed: int, *,
                     docs: Optional[list] = None, tokenizer=None, seq_len: int = 0, pad: int = 0,
                     audited: Optional[list] = None, context: Optional[int] = None):
    """``(client with the members in it, candidate ids (M, L), candidate labels, members (M,) bool)``."""
    generator = torch.Generator().manual_seed(int(seed) + 31)
    if docs is not None:
        if count and len(docs) < count:
            raise FedleakError(f"--candidates: the file holds {len(docs)} documents, --membership asks for {count}")
        ids, labels = _file_sequences(docs, tokenizer, seq_len, pad, context)
        order = torch.randperm(ids.shape[0], generator=generator)
        ids, labels = ids[order], labels[order]
        if count:
            ids, labels = ids[:count], labels[:count]
        k = min(ids.shape[0] // 2, len(client))
        inputs, targets = client.inputs.clone(), client.labels.clone()
        inputs[:k] = ids[:k].to(inputs.dtype)
        targets[:k] = labels[:k].to(targets.dtype)
        members = torch.zeros(ids.shape[0], dtype=torch.bool)
        members[:k] = True
        return ClientData(inputs, targets, client.client_id), ids, labels, members
    k = min(count // 2, len(client))
    rest = held_back(outside, audited if audited is not None else [client], count - k, seed)
    pick = torch.randperm(len(client), generator=generator)[:k]
    ids = torch.cat([client.inputs[pick].long(), rest.inputs.long()])
    labels = torch.cat([client.labels[pick], rest.labels])
    members = torch.cat([torch.ones(k, dtype=torch.bool), torch.zeros(count - k, dtype=torch.bool)])
    return client, ids, labels, members


def _scored(name: str, scores: list, members: list, seconds: float, statistic: str) -> dict:
    from ...metrics.membership import membership_metrics

    m = membership_metrics(scores, members)
    return {"auc": m["auc"], "auc_ci95": m["auc_ci95"], "tpr_at_1pct_fpr": m["tpr_at_1pct_fpr"],
            "tpr_at_0.1pct_fpr": m["tpr_at_0.1pct_fpr"], "seconds": seconds, "statistic": statistic,
            "scores": [float(s) for s in scores], "roc": m["roc"], "name": name}


def measure(model, client: ClientData, outside: Optional[ClientData], protocol, *, count: int, seed: int,
            docs: Optional[list] = None, spec=None, progress=None, audited: Optional[list] = None,
            statistics=("projres", "joint-fit", "adam-fit"), defense=None) -> dict:
    """The membership entry of metrics.json for one audited client under ``protocol`` and the audit's ``defense``
    (a per-example defense or an update filter such as Flower's DP wrappers, applied by the client update)."""
    import time

    from ...attacks.text.adam_fit import adam_fit_scores
    from ...attacks.text.projres import projres_scores
    from ...fl.client import client_update
    from ...metrics.membership import membership_metrics

    tokenizer = getattr(model, "tokenizer", None)
    victim, ids, labels, members = build_candidates(
        client, outside, count, seed, docs=docs, tokenizer=tokenizer, seq_len=int(spec.seq_len) if spec else 0,
        pad=int(spec.pad_id or 0) if spec else 0, audited=audited, context=_context(model))
    if progress is not None:
        progress(f"membership: the client's update ({len(victim)} sequences, {protocol.num_steps(len(victim))} "
                 f"local steps, {protocol.optimizer})")
    start = time.perf_counter()
    update = client_update(model, victim, protocol, seed=seed, defense=defense)
    client_seconds = time.perf_counter() - start
    step = max(1, ids.shape[0] // 8)
    truth = members.tolist()

    def tick(what):
        def report(done, total):
            if progress is not None and (done % step == 0 or done == total):
                progress(f"membership ({what}): scored {done}/{total} candidate documents")
        return report

    results, extra = {}, {}
    if "projres" in statistics:
        got = projres_scores(model, update, ids, progress=tick("ProjRes"))
        results["projres"] = _scored("ProjRes", got["scores"], truth, got["seconds"], got["statistic"])
        results["projres"]["subspace"] = got["subspace"]
    if "joint-fit" in statistics or "adam-fit" in statistics:
        # one gradient per candidate serves both fits; the server does not know which candidate labels (next
        # tokens) the client saw: none is used
        from ...attacks.text.lora_grads import is_lora

        # a LoRA update is fitted on the last LORA_BLOCKS blocks' adapters: at FlowerTune's CPU shape that keeps the
        # scoring below the client's own update at AUC >= 0.97 (benchmarks/results/membership_adamfit_seed*.json)
        layers = LORA_BLOCKS if is_lora(list(update.server_params)) and callable(getattr(model, "loss_fn", None)) \
            else None
        got = adam_fit_scores(model, update, ids, None, seed=seed, layers=layers,
                              progress=tick("joint and AdamW fits"))
        if "joint-fit" in statistics:
            results["joint-fit"] = _scored("joint fit", got["joint"], truth, got["seconds"], JOINT_STATISTIC)
        if "adam-fit" in statistics:
            results["adam-fit"] = _scored("AdamW fit", got["scores"], truth, got["seconds"], got["statistic"])
        raw = membership_metrics(got["raw"], truth)
        cosine = membership_metrics(got["cosine"], truth)
        extra = {"cosine": {"auc": cosine["auc"], "tpr_at_1pct_fpr": cosine["tpr_at_1pct_fpr"],
                            "tpr_at_0.1pct_fpr": cosine["tpr_at_0.1pct_fpr"]},
                 "raw_cosine": {"auc": raw["auc"], "tpr_at_1pct_fpr": raw["tpr_at_1pct_fpr"]},
                 "trainable_parameters": got["parameters"], "gradient_coordinates": got["kept"],
                 "sketched": got["kept"] < got["parameters"],
                 "fitted_blocks": (f"the LoRA adapters of the last {layers} blocks" if layers else "every trainable "
                                   "parameter")}
    best = max(results, key=lambda k: (results[k]["auc"], results[k]["tpr_at_1pct_fpr"]))
    head = results[best]
    out = membership_metrics(head["scores"], truth)
    out.update({"statistic": head["statistic"], "headline_statistic": head["name"],
                "headline_rule": "the stronger statistic by AUC (then TPR at 1% FPR) of those run; each is listed in "
                                 "'attacks'", "candidates": int(ids.shape[0]),
                "split": SPLIT_FILE if docs is not None else SPLIT,
                "source": "file" if docs is not None else "held back from the client's data source",
                "attacks": {k: {kk: vv for kk, vv in v.items() if kk not in ("scores", "roc")}
                            for k, v in results.items()},
                "scores": head["scores"], "is_member": truth, "client_seconds": client_seconds,
                "scoring_seconds": head["seconds"], "optimizer": protocol.optimizer,
                "local_steps": protocol.num_steps(len(victim)), "sequences": len(victim),
                "defense": update.metadata.get("defense"), **extra})
    return out


def sentence(entry: dict) -> str:
    """One paragraph for the report and the printed summary."""
    ci = entry.get("auc_ci95") or [None, None]
    interval = f", 95% CI {ci[0]:.2f}–{ci[1]:.2f} (DeLong)" if ci[0] is not None else ""
    others = "; ".join(f"{v['name']}: AUC {v['auc']:.3f}, {v['tpr_at_1pct_fpr']:.0%} at 1% FPR, {v['seconds']:.0f} s"
                       for v in (entry.get("attacks") or {}).values())
    return (f"Membership of candidate documents: of {entry['candidates']} documents the server holds "
            f"({entry['members']} in the client's data, {entry['non_members']} not; non-members "
            f"{entry.get('split', 'from other clients')}), {entry.get('headline_statistic', 'the test')} finds "
            f"{entry['tpr_at_1pct_fpr']:.0%} of the members at 1% false positives and {entry['tpr_at_0.1pct_fpr']:.0%} "
            f"at 0.1% (AUC {entry['auc']:.3f}{interval}; with {entry['non_members']} non-members the smallest "
            f"resolvable FPR is {entry['fpr_resolution']:.2%}, so a rate at a lower FPR is the rate with no false "
            f"positive). Each attack: {others}."
            + (f" Defense on the client's update: {entry['defense'].get('kind', entry['defense'])}."
               if isinstance(entry.get("defense"), dict) and entry["defense"].get("kind") not in (None, "none") else "")
            + (f" Caution: {entry['secure_aggregation']}." if entry.get("secure_aggregation") else "")
            + f" Scoring took {entry['scoring_seconds']:.0f} s after the client's "
            f"{entry['local_steps']}-step {entry.get('optimizer', 'sgd')} update ({entry['client_seconds']:.0f} s).")


# -- the audit's use (audit/run.py) ------------------------------------------------------------
def wanted(cfg) -> bool:
    return bool(cfg.membership or cfg.candidates)


def outside_pool(cfg, model_name: str, needed: int, samples: int) -> Optional[ClientData]:
    """The audited client's whole data source (its file, or the seeded shuffle of all windows), from which the
    non-member candidates are held back (:func:`held_back`: the sequences no audited client trains on); checked
    before any attack runs. With ``--candidates`` the file is read (and checked) instead."""
    if not wanted(cfg):
        return None
    if cfg.candidates:
        docs = read_candidates(cfg.candidates)
        if cfg.membership and len(docs) < cfg.membership:
            raise FedleakError(f"--candidates {cfg.candidates}: the file holds {len(docs)} documents, --membership "
                               f"asks for {cfg.membership}")
        cfg.extra["candidate_docs"] = docs
        return None
    from ..plan import text as text_audit

    count = cfg.membership
    need = count - min(count // 2, samples)
    # the same seed and cut as the audit's pool: client 0's file (or the whole shuffle, one client) in full
    _, whole, _, _ = text_audit.prepare(cfg, model_name, 1, None)
    source = whole[0]
    free = len(source) - (samples * needed if len(source) >= samples * needed else samples)
    preset = cfg.extra.get("flowertune") or {}
    if free < need and preset.get("candidates_by") == "the preset" and free >= 2:  # as many as the text allows
        fewer = 2 * free if free < samples else samples + free  # k = min(fewer // 2, samples) members, free others
        cfg.extra["membership_count"] = fewer
        preset["candidates"] = (f"{fewer} candidates, not the preset's {count}: the text holds {free} sequences to "
                                f"hold back beside the audited clients'")
        return source
    if free < need:
        raise FedleakError(f"--membership {count}: the audited client's data source holds about {max(0, free)} "
                           f"sequences beyond what the {needed} audited client(s) train on; {need} are needed as "
                           f"held-back non-members (lower --membership, shorten --seq-len or give more text)")
    return source


def check_candidates(cfg, model, spec) -> None:
    """The ``--candidates`` documents cut for ``model`` (context, duplicates), before any attack runs."""
    docs = cfg.extra.get("candidate_docs")
    if docs:
        _file_sequences(docs, getattr(model, "tokenizer", None), int(spec.seq_len), int(spec.pad_id or 0),
                        _context(model))


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

    count = cfg.extra.get("membership_count") or cfg.membership or DEFAULT_CANDIDATES
    entry = measure(model, client, outside, scenario.protocol, count=count,
                    seed=cfg.seed, docs=cfg.extra.get("candidate_docs"), spec=spec, progress=progress,
                    audited=pool, defense=plan.defense if plan.defense.active else None)
    entry["scenario"] = scenario.key
    if plan.secagg > 1:  # the score reads one client's own update; the server sees the sum of K
        entry["secure_aggregation"] = (f"measured on one client's own update; under secure aggregation of "
                                       f"{plan.secagg} the server sees only their sum (not measured here)")
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
