"""The records of an audited Flower run → the same ``metrics.json`` / ``report.html`` as ``fedleak audit``.

One *point* in the audit's shape (:mod:`fedleak.audit.run`): one scenario (``flower``: the app's own clients and
protocol) with one summary per attack over every attacked reply, and the two threat models judged by the audit's
own judge (:func:`fedleak.audit.judge.verdict.judge_evidence`) where the clients shared their batch (Rec % and
PSNR against it, client-reported). Without a shared batch the server knows only what the attack itself shows: the
threat model's verdict is the worst per-reply level of :func:`.scoring.leakage_level` (``high`` only from a
verbatim readout, else ``inconclusive``), and the report says the data was not seen. The DP claim comes from
:class:`.canary.CanaryAudit`'s one-run test where canaries ran. Grids: each shared batch of the last round beside
its reconstruction (matched by PSNR, as the audit does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ...audit.judge.verdict import judge_evidence, worst
from ...audit.plan.threats import HONEST, MALICIOUS
from ...metrics.summary import mean

#: what a server-side audit of a simulated Flower app cannot see (stated in every report)
CANNOT_SEE = ("the clients' data (their batches are scored only where a simulated client opted in to share it; a "
              "deployment's clients never do), the ClientApp's internals (a client-side DP mod is seen only through "
              "the reply it shapes), and anything the strategy never sends or receives")
IMPRINT = ("imprint", "imprint-sparse", "imprint-one-shot", "cah")


def attack_summaries(records: list, iterations: Optional[int] = None, factor: Optional[float] = None) -> dict:
    """``{attack: summary}`` over the attacked replies, in the audit's summary shape."""
    out: dict = {}
    for r in records:
        if r.get("status") != "attacked":
            continue
        out.setdefault(str(r.get("attack")), []).append(r)
    summaries = {}
    for name, rs in out.items():
        scored = [r for r in rs if r.get("rec_percent") is not None]
        kind = "analytic" if name.split("/")[0] in IMPRINT else "optimization"
        s = {"attack": name, "title": name, "kind": kind, "targets": len(scored), "replies": len(rs), "scored_targets": len(scored),
             "options": {}, "seconds": None, "threshold": next((r["threshold"] for r in scored if r.get("threshold")),
                                                                20.0),
             "iterations": iterations if kind == "optimization" else None,
             "budget_factor": factor if kind == "optimization" else None, "tuned": False, "tuning_trials": 0,
             "verbatim": sum(int(r.get("verbatim") or 0) for r in rs),
             "levels": [(r.get("leakage") or {}).get("level") for r in rs]}
        for key in ("psnr", "ssim", "rec_percent", "iip"):
            s[key] = mean([r.get(key) for r in scored])
        s["psnr_per_input"] = [p for r in scored for p in (r.get("psnr_per_input") or [])]
        s["per_client"] = [{"target": f"round {r['round']}, node {r['client']}", "psnr": r.get("psnr"),
                            "rec_percent": r.get("rec_percent"), "num_inputs": r.get("num_examples")} for r in scored]
        if scored:
            s["rec_percent_min"] = min(r["rec_percent"] for r in scored)
            s["rec_percent_max"] = max(r["rec_percent"] for r in scored)
        summaries[name] = s
    return summaries


def threat_model(summaries: dict, records: list, knowledge: dict, modality=None) -> dict:
    """One threat model's verdict from its attacks' summaries: the data's modality's rule where it has one for app
    replies (:meth:`fedleak.modality.Modality.app_threat_model`: records), else the audit's judge where the batch was
    shared, else what the attacker itself shows."""
    if not summaries:
        return {"verdict": "not run", "rec_percent": None, "psnr": None, "strongest": None, "evidence": None,
                "assumptions": knowledge}
    own = modality.app_threat_model(summaries, records, knowledge) if modality is not None else None
    if own is not None:
        return own
    scored = {n: s for n, s in summaries.items() if s.get("rec_percent") is not None}
    levels = [lv for s in summaries.values() for lv in s["levels"] if lv]
    attacker = worst(levels) if levels else "inconclusive"
    if scored:
        tm = judge_evidence(scored, knowledge=knowledge)
        if attacker == "high" and tm["verdict"] != "high":  # a verbatim readout the batch did not contradict
            tm.update(verdict="high", evidence="estimated", evidence_text=next(
                r["leakage"]["evidence"] for r in records if (r.get("leakage") or {}).get("level") == "high"))
        reported = sum(s["scored_targets"] for s in scored.values())
        total = sum(s["replies"] for s in summaries.values())
        tm["truth"] = f"client-reported batches of {reported} of {total} attacked replies"
        tm["sentence"] = (f"Its strongest attack, {tm['strongest']}, reconstructs {tm['rec_percent']:.0f}% of a "
                          f"client's images recognizably (best mean PSNR {tm['psnr']:.1f} dB), scored against the "
                          f"batches {reported} of {total} simulated clients shared (client-reported).")
        return tm
    strongest = max(summaries, key=lambda n: (summaries[n]["verbatim"], summaries[n]["replies"]))
    s = summaries[strongest]
    evidence = next((r["leakage"]["evidence"] for r in records if isinstance(r.get("leakage"), dict)
                     and r["leakage"].get("level") == attacker), "no reply was scored")
    sentence = (f"{strongest} read back {s['verbatim']} input(s) verbatim over {s['replies']} replies."
                if s["verbatim"] else
                f"{strongest} attacked {s['replies']} replies; no client shared its batch, so what it reconstructed "
                f"is not scored (the server cannot see the data).")
    return {"verdict": attacker, "rec_percent": None, "psnr": None, "strongest": strongest,
            "evidence": "estimated" if attacker == "high" else "not-found", "evidence_text": evidence,
            "sentence": sentence, "assumptions": knowledge, "budgets": {}, "not_tried": []}


def dp_verdict(canary: Optional[dict], mechanisms: list, notes: list) -> Optional[dict]:
    """The one DP verdict of the run: the canaries' claim test, else what is known without it."""
    if canary:
        test = canary.get("claim_test") or {}
        m, lower = canary["canaries"], canary.get("epsilon_lower")
        bound = f"one-run lower bound ε ≥ {lower:.2f}" if isinstance(lower, (int, float)) else "no lower bound"
        accounts = canary.get("epsilon_accountant") or {}
        acc = accounts.get("flower_rdp")
        claimed = f"Flower's accountant ε = {acc:.2f}" if isinstance(acc, (int, float)) else "no accountant ε"
        seen, sigma = accounts.get("canary_noise_multiplier"), accounts.get("noise_multiplier")
        if isinstance(seen, (int, float)) and isinstance(sigma, (int, float)) and abs(seen - sigma) > 1e-9:
            claimed += (f"; the test is of the noise the canaries should see, σ = {seen:.3g} rather than the "
                        f"wrapper's {sigma:.3g} (Flower sizes its noise for num_sampled_clients replies, not the "
                        f"real ones plus {canary.get('canaries_inserted')} inserted canaries): a weaker test than at "
                        f"{sigma:.3g}")
        assumption = f" (assumption: {canary['assumption']})" if canary.get("assumption") else ""
        if test.get("rejected") and test.get("evidence") == "proved":
            return {"verdict": "violated", "short": f"claim violated at {m:,} canaries",
                    "evidence": f"proved: the canaries' one-run test rejects the claimed noise (p = {test['p_value']:.2g} "
                                f"< {test['alpha']}; Gaussian by construction: {test.get('gaussian')}); {bound}"
                                f"{assumption}; {claimed}"}
        if test.get("rejected"):
            return {"verdict": "not in force", "short": f"claim not in force (estimated) at {m:,} canaries",
                    "evidence": f"estimated: the canaries' μ-GDP test rejects the claimed noise (p = "
                                f"{test['p_value']:.2g} < {test['alpha']}), but the aggregator is not Gaussian by "
                                f"construction, so this is not a proof; {bound}{assumption}; {claimed}"}
        if test:
            return {"verdict": "consistent", "short": f"claim holds at {m:,} canaries",
                    "evidence": f"consistent at this budget, not proved: the one-run test does not reject the "
                                f"claimed noise (p = {test['p_value']:.2g}, {m:,} canaries); {bound}{assumption}, beside {claimed}; "
                                f"a fault smaller than {m:,} canaries can detect is not excluded"}
        return {"verdict": "consistent", "short": f"{bound} at {m:,} canaries",
                "evidence": f"{bound} beside {claimed}; the strategy reports no σ to test the claim against"}
    if mechanisms:
        names = ", ".join(sorted({str(d.get("mechanism") or d.get("wrapper") or "DP") for d in mechanisms}))
        return {"verdict": "not audited", "short": "configured, not audited",
                "evidence": f"{names} in force; no canaries ran (set fedleak-canaries in the run config, or "
                            f"--canaries){'; ' + '; '.join(notes) if notes else ''}"}
    return None


#: DP verdicts, most severe first (the run's one DP verdict is the most severe of its checks)
SEVERITY = ("violated", "not in force", "consistent", "not audited")


def node_verdict(found: dict) -> dict:
    """The DP verdict of the canary nodes (:mod:`.app_canary_nodes`): which nodes' replies show a missing mod,
    the aggregate test where the strategy adds noise, what the server sees, the cost — no more than was checked."""
    rows, flagged = found.get("reply_test") or [], found.get("nodes_flagged_by_replies") or []
    m, inserted, k = found["canaries"], found["canaries_inserted"], found["nodes"]
    cost = (f"cost: {found['cost']['canary_replies']} canary replies over {found['rounds']} round(s), each one call "
            f"of the node's own ClientApp, {inserted} extra simulated nodes")
    sees = f"what the server can and cannot see: {found['sees']}"
    if not rows:
        return {"verdict": "not audited", "short": "canary nodes ran, nothing testable", "check": "canary nodes",
                "evidence": f"{found.get('note', 'no canary reply was tested')}; {sees}; {cost}"}
    tested = [r["node"] for r in rows]
    untested = sorted(set(range(k)) - set(tested))
    clipped = [str(r["node"]) for r in rows if not r["flagged"]]
    by_reason: dict = {}
    for r in rows:
        if r["flagged"]:
            by_reason.setdefault("; ".join(r["reasons"]), []).append(str(r["node"]))
    found_text = "; ".join(f"the canary replies of node(s) {', '.join(n)}: {why}" for why, n in by_reason.items())
    missing = "their LocalDpMod missing, or not clipping and noising" if found.get("claim") else \
        "their clipping mod missing, or not clipping"
    noise_by = found.get("noise_by", "Flower's wrapper adds it")
    replies = (f"{found_text} — no clipping in force in the ClientApps of node(s) {', '.join(map(str, flagged))} "
               f"({missing})" if flagged else
               "no node's canary replies come back unclipped")
    replies += (f"; node(s) {', '.join(clipped)} clip theirs" if clipped else "") + \
        (f"; node(s) {', '.join(map(str, untested))} had no canary reply (not tested)" if untested else "")
    check = found.get("aggregate_test") or {}
    test = check.get("claim_test") or {}
    aggregate = (f"; aggregate test of the released models: claim p = {test['p_value']:.2g} at σ = "
                 f"{found['noise_multiplier_seen']:.3g} for the {k} + {inserted} replies aggregated (Gaussian noise "
                 f"by construction: {noise_by}), nodes flagged by the aggregates: "
                 f"{', '.join(map(str, check.get('flagged_clients') or [])) or 'none'}" if test else
                 f"; {found.get('note', 'no aggregate test')}")
    buffers = (found.get("buffer_finding") or {}).get("sentence")  # beside the verdict, never its level
    text = f"{replies} (per-node reply test at p < 0.01, Bonferroni over {k} nodes, {m} canaries drawn, " \
           f"{inserted} included){aggregate}; {sees}; {cost}" + (f"; also seen: {buffers}" if buffers else "")
    if check.get("evidence") == "proved":
        return {"verdict": "violated", "short": f"claim violated (proved) with {inserted} canary nodes",
                "check": "canary nodes", "nodes_missing_mod": flagged,
                "evidence": f"proved: the canaries' one-run test rejects the claimed noise; {text}"}
    if flagged or check.get("detected"):
        who = f"mod missing on nodes {', '.join(map(str, flagged))}" if flagged else "claim not in force"
        return {"verdict": "not in force", "short": f"{who} (estimated, {inserted} canary nodes)",
                "check": "canary nodes", "nodes_missing_mod": flagged,
                "evidence": f"estimated: {text}"}
    return {"verdict": "consistent", "short": f"consistent at this budget: no node's canaries came back unclipped "
                                              f"({inserted} canary nodes)",
            "check": "canary nodes", "nodes_missing_mod": [],
            "evidence": f"consistent at this budget, not proved: {text}; a mod that clips only some updates, or a "
                        "node not tested, is not excluded"}


def examples(records: list, spec) -> dict:
    """``{(label, attack): Example}``: the last round's shared batches beside their matched reconstructions (the
    data's modality's own, :meth:`fedleak.modality.Modality.app_examples`, where it has one: records)."""
    from ...audit.execute.steps import example
    from ...metrics import evaluate
    from ...modality import named
    from ...types import Reconstruction
    from .client import load_truth

    own = named(spec).app_examples(records, spec)
    if own is not None:
        return own
    shown = [r for r in records if r.get("status") == "attacked" and r.get("truth_file") and r.get("reconstruction")]
    if not shown:
        return {}
    last = max(r["round"] for r in shown)
    out = {}
    for r in sorted((r for r in shown if r["round"] == last), key=lambda r: r["client"])[:4]:
        truth, rec = load_truth(r["truth_file"]), Reconstruction.load(Path(r["reconstruction"]))
        scores = evaluate(rec, truth, spec)
        out[(f"round {r['round']}, node {r['client']}", str(r["attack"]))] = example(rec, truth, spec, scores)
    return out


def point(records: list, canary: Optional[dict], malicious: Optional[list], notes: list, settings: dict,
          iterations: Optional[int], factor: Optional[float] = None, modality=None) -> dict:
    """The audit's point for the run: scenarios, threat models, verdicts."""
    honest_records = records
    summaries = attack_summaries(honest_records, iterations, factor)
    knowledge = {"threat_model_sok": "C", "threat_model_sok_name": "Parameter-Aware Eavesdropper",
                 "batchnorm": None, "labels": "inferred by the attack (never the client's)"}
    tms = {HONEST: threat_model(summaries, honest_records, knowledge, modality)}
    mal = {}
    if malicious:
        mal = attack_summaries(malicious, iterations, factor)
        tms[MALICIOUS] = threat_model(mal, malicious, {**knowledge, "threat_model_sok": "F",
                                                       "threat_model_sok_name": "Active Manipulator"}, modality)
    else:
        tms[MALICIOUS] = {"verdict": "not run", "rec_percent": None, "psnr": None, "strongest": None,
                          "evidence": None, "not_run_reason": settings.get("malicious_reason", "not asked for")}
    text = (f"Flower app: the strategy {settings.get('strategy', '?')} audited over {settings.get('rounds', '?')} "
            f"round(s) of {settings.get('supernodes', '?')} simulated node(s); every reply attacked as the server "
            f"received it. Not seen: {CANNOT_SEE}.")
    scenarios = {"flower": {"attacks": summaries, "text": text, "records": len(records)}}
    if mal:  # the second run, whose server shipped the app's malicious model
        scenarios["flower, malicious server"] = {"attacks": mal, "records": len(malicious)}
    return {"value": None, "threat_models": tms, "scenarios": scenarios, "epsilon": {},
            "settings": settings, "verdicts": {k: v["verdict"] for k, v in tms.items()}}


def build(path, honest: dict, malicious: Optional[dict], seconds: float, malicious_reason: str) -> dict:
    """``metrics.json`` of the audited app, in the audit's format (:data:`fedleak.runs.identity.FORMAT`)."""
    from ...audit.judge.overall import overall
    from ...audit.judge.verdict import RULE
    from ...runs.identity import FORMAT, config_hash, environment
    from ...modality import named

    records = honest["records"]
    modality = named(honest["spec"])
    mechanisms = [m for r in records if isinstance(r.get("dp"), dict) for m in r["dp"].get("mechanisms", [])]
    unique = list({str(sorted(m.items())): m for m in mechanisms if isinstance(m, dict)}.values())
    rounds = max((int(r["round"]) for r in records if "round" in r), default=0)
    settings = {"strategy": "; ".join(dict.fromkeys(honest["strategies"])), "rounds": rounds,
                "supernodes": honest["supernodes"], "malicious_reason": malicious_reason}
    pt = point(records, honest["canary"], malicious["records"] if malicious else None, honest["notes"], settings,
               honest["iterations"], honest.get("budget_factor"), modality)
    defense = [", ".join(f"{k}={v}" for k, v in m.items() if k in ("mechanism", "where", "position", "noise_multiplier",
                                                                  "clipping_norm", "clipping"))
               for m in unique] or []
    spec, model = honest["spec"], honest["model"]
    config = {"flower_app": str(path), "run_config": honest["run_config"], "supernodes": honest["supernodes"],
              "canaries": honest["canaries"], "model": honest["model_name"], "weights": None, "defense": defense,
              "clients": honest["supernodes"], "rounds": rounds, "data": spec.name,
              "malicious_run_config": malicious["run_config"] if malicious else None}
    statuses: dict = {}
    for r in records + (malicious["records"] if malicious else []):
        statuses[r.get("status", "?")] = statuses.get(r.get("status", "?"), 0) + 1
    result = {"format": FORMAT, "data": spec.name, "model": honest["model_name"], "seed": None, "quick": False,
              "parameters": sum(p.numel() for p in model.parameters()), "config": config,
              "rule": modality.app_rule or RULE,
              "modality": getattr(spec, "modality", "image"), "sweep": None, "points": [pt], "headline": 0,
              "verdicts": pt["verdicts"], "threat_models": pt["threat_models"], "scenarios": pt["scenarios"],
              "epsilon": {}, "environment": environment("cpu"),
              "flower": {"app": honest["app"], "strategies": honest["strategies"], "replies": statuses,
                         "records": honest["outs"] + (malicious["outs"] if malicious else []),
                         "seconds": seconds, "cannot_see": CANNOT_SEE, "notes": honest["notes"],
                         "dp_mechanisms": unique, "canaries": honest["canary"]}}
    claims = [c for c in [dp_verdict(honest["canary"], unique, honest["notes"])] if c]
    if honest.get("canary_nodes"):  # the server-side "configured, not audited" no longer holds
        claims = [c for c in claims if c["verdict"] != "not audited"] + [node_verdict(honest["canary_nodes"])]
    if claims:  # one DP verdict: the most severe check's, each check's evidence beside it
        claims.sort(key=lambda c: SEVERITY.index(c["verdict"]) if c["verdict"] in SEVERITY else len(SEVERITY))
        result["dp_verdict"] = {**claims[0], "evidence": " | ".join(
            f"{c.get('check', 'server-side canaries')}: {c['evidence']}" for c in claims)} if len(claims) > 1 \
            else claims[0]
    result["flower"]["canary_nodes"] = honest.get("canary_nodes")
    result["what_to_change"] = what_to_change(result)
    result["overall"] = overall(result)
    result["config_hash"] = config_hash(config)
    return result


def what_to_change(result: dict) -> list:
    lines = [f"Not seen by this audit: {CANNOT_SEE}."]
    honest = result["threat_models"][HONEST]
    if honest.get("truth") is None and honest["verdict"] != "not run":
        lines.append("No simulated client shared its batch, so no reconstruction is scored: run with --share-truth "
                     "if the app's ClientApp shares it (fedleak.integrations.flower.share_truth), or audit the same "
                     "model and protocol with fedleak audit --model … to score the attacks on embedded data.")
    if honest["verdict"] in ("high", "medium"):
        lines.append("The replies leak the clients' data: add client-side DP (Flower's LocalDpMod or a DP-SGD "
                     "client), larger local batches, or secure aggregation, and rerun this command.")
    missing = result.get("dp_verdict", {}).get("nodes_missing_mod")
    if missing:
        lines.append(f"Nodes {', '.join(map(str, missing))} send their canaries unclipped: their ClientApp build "
                     "lacks the clipping mod (fixedclipping_mod / adaptiveclipping_mod); build it with the mod and "
                     "rerun this command.")
    if result.get("dp_verdict", {}).get("verdict") == "violated":
        lines.append("The DP claim is violated: the noise the canaries see is below the claimed σ; check where the DP "
                     "wrapper sits and how many clients it sizes its noise for.")
    return lines


def finite(value):
    """``value`` with every non-finite float as ``None`` (``metrics.json`` is strict JSON)."""
    import math

    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def write(out: Path, result: dict, shown: dict) -> None:
    """Stage and move in ``metrics.json``, ``report.html`` and the plots (nothing half-written)."""
    import json
    import shutil

    from ...audit import report
    from ...runs.lock import staging_dir

    series = any(s.get("psnr_per_input") for sc in result["points"][0]["scenarios"].values()
                 for s in sc.get("attacks", {}).values())
    plots = report.make_plots(result, [shown]) if series else {}
    staging = staging_dir(out)
    try:
        result["plots"] = report.save_plots(staging, plots)
        (staging / "metrics.json").write_text(json.dumps(finite(result), indent=1, allow_nan=False, default=str))
        report.write_report(staging, result, [shown], plots)
        for item in sorted(staging.iterdir(), key=lambda p: p.name == "metrics.json"):
            item.replace(out / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def final_dashboard(folder: Path, records: list, spec, overall: dict) -> None:
    """Rewrite a run's ``dashboard.html`` with the audit's final verdict line."""
    from .dashboard import write_dashboard

    write_dashboard(folder / "dashboard.html", records, spec, "fedleak: leakage audit of a Flower app (final)",
                    overall)
