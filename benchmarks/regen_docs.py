"""Rebuild the measured tables of the docs from ``benchmarks/results/*.json``, and fail on a claim without a file.

A generated table sits between two markers in a doc::

    <!-- regen:NAME -->
    ...rows written by this script...
    <!-- /regen:NAME -->

``NAME`` picks a builder below (:data:`TABLES`: the results file it reads and the function that turns it into
rows). ``python benchmarks/regen_docs.py`` rewrites every block; ``--check`` only compares and exits 1 when a
block is stale (``tests/test_docs_regen.py`` runs it). Either way the script exits 1 — naming the line — when a
block names no builder, a builder's results file is missing, or a paragraph of a doc's ``## Measurements``
section states numbers outside a generated block without naming an existing ``benchmarks/results/`` file.
Results files are produced by the benchmark scripts (``bench_verdict_audit.py``: the audit engine itself,
``fedleak.audit``; ``bench_verdict.py``: the attacks called directly).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOCS = (ROOT / "docs" / "verdict.md", ROOT / "docs" / "performance.md", ROOT / "docs" / "text-attacks.md",
        ROOT / "docs" / "llm.md", ROOT / "README.md", ROOT / "docs" / "reproducibility.md")
BLOCK = re.compile(r"(<!-- regen:([\w-]+) -->\n)(.*?)(<!-- /regen:\2 -->)", re.S)


def _load(name: str) -> dict:
    path = RESULTS / name
    if not path.is_file():
        raise SystemExit(f"regen_docs: {path.relative_to(ROOT)} is missing: run the benchmark that writes it, or "
                         f"remove the claim")
    return json.loads(path.read_text())


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _short(text, limit: int = 110) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def verdict_audit() -> str:
    data = _load("verdict_audit.json")
    head = ("| case | settings | verdict | evidence | exact attack: precondition | recomputed update: relative error "
            "(tolerance) | strongest score | CPU s |\n|---|---|---|---|---|---|---|---:|\n")
    rows = []
    for name, case in data["cases"].items():
        s = case["settings"]
        settings = (f"{s.get('model')}, {s.get('data', 'digits')}, N = {s.get('samples')}, "
                    f"{', '.join(s.get('defense', [])) or 'no defense'}")
        exact = next(((n, a) for n, a in case["attacks"].items() if a.get("kind") == "exact"), (None, None))
        cond = "—"
        check = "—"
        if exact[0]:
            pre = exact[1]["precondition"]
            cond = f"{exact[0]}: {'holds' if pre['holds'] else 'fails'}" + (
                f" ({_short(pre['reason'], 1000)})" if not pre["holds"] else "")
            v = exact[1].get("verification")
            if v and v.get("relative_error") is not None:
                check = f"{v['relative_error']:.1e} ({v['tolerance']:g}): {'matches' if v.get('matches', v.get('holds')) else 'no match'}"
        scores = [a for a in case["attacks"].values()]
        if s.get("data") == "text":
            best = max(scores, key=lambda a: (a.get("exact_sequences") or 0, a.get("rouge1") or 0))
            score = f"{100 * (best.get('exact_sequences') or 0):.0f}% exact sequences, ROUGE-1 {_fmt(best.get('rouge1'), 2)}"
        else:
            best = max(scores, key=lambda a: (a.get("rec_percent") or 0, a.get("psnr") or 0))
            score = f"Rec {_fmt(best.get('rec_percent'), 0)}%, PSNR {_fmt(best.get('psnr'))} dB"
        rows.append(f"| {name} | {settings} | {case['verdict']} | {case['evidence']} | {cond} | {check} | {score} | "
                    f"{_fmt(case['cpu_seconds'])} |")
    foot = (f"\n\n`benchmarks/results/verdict_audit.json`: {data['date']}, {data['threads']} thread, load average "
            f"{data['load_average'][0]:.1f}, {data['device']}, torch {data['torch']} ({data['cpu_capability']}).\n")
    return head + "\n".join(rows) + foot


def mlp_exact() -> str:
    data = _load("verdict.json")
    head = ("| b | exact attack | exact share | certain | s | IG Rec% | IG PSNR | IG s | precondition |\n"
            "|---|---|---:|---|---:|---:|---:|---:|---|\n")
    rows = []
    for r in data["mlp_fedsgd"]:
        ex, ig = r["exact"], r["inverting_gradients"]
        pre = ex.get("precondition") or {}
        rows.append(f"| {r['batch']} | {ex['attack']} | {100 * ex['exact_share']:.1f}% | {'yes' if ex['certain'] else 'no'} "
                    f"| {_fmt(ex['seconds'])} | {_fmt(ig['rec_percent'], 0)} | {_fmt(ig['psnr'])} | {_fmt(ig['seconds'])} | "
                    f"{'holds' if pre.get('holds') else 'fails'}: {_short(pre.get('reason'), 1000)} |")
    foot = (f"\n\n`benchmarks/results/verdict.json` (`bench_verdict.py`, the attacks called directly): {data['date']}, "
            f"{data['threads']} thread, load average {data['load_average'][0]:.1f}, {data['device']}.\n")
    return head + "\n".join(rows) + foot


def label_counts() -> str:
    data = _load("verdict.json")
    head = ("| b | iLRG (FedSGD) | RecLabels (FedSGD) | RLU (FedAvg E = 5) | RecLabels (FedAvg E = 5) |\n"
            "|---|---:|---:|---:|---:|\n")
    rows = []
    for r in data["labels"]:
        cells = [r.get("ilrg"), r.get("reclabels"), (r.get("fedavg_e5") or {}).get("rlu"),
                 (r.get("fedavg_e5") or {}).get("reclabels")]
        rows.append(f"| {r['batch']} | " + " | ".join(
            "—" if c is None else f"{100 * c['label_accuracy']:.1f}%" for c in cells) + " |")
    return head + "\n".join(rows) + "\n\nLabel accuracy = multiset overlap / N; `benchmarks/results/verdict.json`.\n"


def gpu_speed() -> str:
    """The accelerator's speed table (``bench_gpu.py``) beside the CPU's figures of the same cases."""
    gpu = _load("gpu_speed.json")
    cpu = _load("speed.json")["after"]["results"]
    text = _load("text_gpt2small.json")["cases"]["gpt2-small-16x32-dager"]
    smol = _load("llm_dager.json")
    cases = gpu["cases"]
    per_client = [r["wall_seconds"] for r in smol.get("per_client", [])]
    rows = [f"Device: {gpu['device']} (torch {gpu['torch']}); CPU: this 2-core machine, 1 thread "
            "(`speed.json` `after`, `text_gpt2small.json`, `llm_dager.json`).", "",
            "| case | GPU | CPU | GPU peak MiB | result on the GPU |", "|---|--:|--:|--:|---|"]
    for key, label in (("ig_fedsgd_resnet18", "IG FedSGD ResNet-18 (1 image), s / iteration"),
                       ("dimitrov_E10_m5", "Dimitrov E10-m5 (100 unrolled steps), s / iteration"),
                       ("dimitrov_E10_m1", "Dimitrov E10-m1 (500 unrolled steps), s / iteration")):
        g = cases.get(key, {})
        ref = (f"; reference iteration {g['reference_seconds_per_iteration']:.4f} s ({g['speed_vs_reference']:.2f}×)"
               if "reference_seconds_per_iteration" in g else "")
        rows.append(f"| {label} | {_fmt(g.get('seconds_per_iteration'), 3)} | "
                    f"{_fmt(cpu.get(key, {}).get('seconds_per_iteration'), 3)} | {_fmt(g.get('peak_device_mib'))} | "
                    f"same attack{ref} |")
    g = cases.get("dager_gpt2small_16x32", {})
    rows.append(f"| DAGER, GPT-2-small config, FedSGD 16 × 32, s (whole attack) | {_fmt(g.get('seconds'), 2)} | "
                f"{_fmt(text.get('seconds'), 1)} wall, {_fmt(text.get('cpu_seconds'), 1)} CPU | "
                f"{_fmt(g.get('peak_device_mib'))} | exact share {_fmt(g.get('exact_sequences'), 2)}, "
                f"certain {g.get('certain')} |")
    g = cases.get("dager_smollm2_2x16", {})
    rows.append(f"| DAGER, SmolLM2-135M, FedSGD 2 × 16, s (whole attack) | {_fmt(g.get('seconds'), 2)} | "
                f"{_fmt(sum(per_client) / len(per_client) if per_client else None, 1)} wall per client | "
                f"{_fmt(g.get('peak_device_mib'))} | exact share {_fmt(g.get('exact_sequences'), 2)}, "
                f"certain {g.get('certain')} (ran beside 12 Dimitrov jobs on the same GPU) |")
    return "\n".join(rows) + "\n"


TEXT_CASE_FILES = ("text_dp.json", "text_dp_low.json", "text_fedavg.json", "text_final.json", "text_gpt2small.json",
                   "text_grid.json", "text_lora.json", "text_tag.json")


def _num(value) -> str:
    return "–" if value is None else str(value)


def text_cases() -> str:
    """Every case of ``bench_text.py``'s results files, one table per file, as measured (one batch each)."""
    head = ("| case | ROUGE-1 / 2 | exact seq. | token acc. | exactness (tokens / limit) | certain | CPU s | wall s | "
            "load |\n|---|---|---|---|---|---|---|---|---|\n")
    parts = []
    for name in TEXT_CASE_FILES:
        data = _load(name)
        rows = []
        for case, r in data["cases"].items():
            if "error" in r:
                rows.append(f"| {case} | error: {r['error']} | | | | | | | |")
                continue
            ex = r.get("exactness") or {}
            load = (r.get("load_average") or [None])[0]
            rows.append(f"| {case} | {r['rouge1']:.2f} / {r['rouge2']:.2f} | {r['exact_sequences']:.2f} | "
                        f"{r['token_accuracy']:.2f} | {ex.get('holds')} ({ex.get('tokens')} / {ex.get('limit')}) | "
                        f"{r.get('certain')} | {_num(r.get('cpu_seconds'))} | {_num(r.get('seconds'))} | {_num(load)} |")
        parts.append(f"### {name} (threads {data.get('threads')}, {data.get('device')})\n\n" + head + "\n".join(rows))
    return "\n\n".join(parts) + "\n"


def text_heldout() -> str:
    """The text attacks' documented cases over several batches of a held-out corpus (``bench_text_heldout.py``)."""
    data = _load("text_heldout.json")
    head = ("| case | N × L, dropout | batches | sequences whole | batches proved (recomputed update) | ROUGE-1 (mean) | "
            "per batch: exact share | CPU s (mean) | load |\n|---|---|--:|--:|--:|--:|---|--:|--:|\n")
    rows = []
    for name, c in data["cases"].items():
        per = c.get("per_batch", [])
        if not per:
            rows.append(f"| {name} | | 0 of {c.get('batches')} | not run yet | | | | | |")
            continue
        shares = ", ".join(f"{b['exact_share']:.2f}" for b in per)
        load = (c.get("load_average") or [None])[0]
        rows.append(f"| {name} | {c.get('batch')} × {c.get('seq_len')}, {c.get('dropout', 'off')} | "
                    f"{len(per)} of {c['batches']} | {c.get('sequences_whole')} of {c.get('sequences')} | "
                    f"{c.get('certain_batches')} of {len(per)} | {_fmt(c.get('rouge1_mean'), 2)} | {shares} | "
                    f"{_fmt(c.get('cpu_seconds_mean'))} | {_fmt(load)} |")
    corpus = data.get("corpus", {})
    foot = (f"\n\nCorpus: {corpus.get('source')}, {corpus.get('topics')} topics, {corpus.get('characters'):,} characters, "
            "one client per batch; "
            f"threads {data.get('threads')}, {data.get('device')}, torch {data.get('torch')} "
            "(`benchmarks/results/text_heldout.json`).\n")
    return head + "\n".join(rows) + foot


def llm_dager() -> str:
    """DAGER on SmolLM2 (``bench_llm.py dager``): one row per results file, per client figures."""
    files = ["llm_dager.json", "llm_dager_4x16.json", "llm_dager_16x32.json"]
    files += [f for f in ("llm_dager_lora128_2x16_round1.json", "llm_dager_lora128_2x16_round2.json",
                          "llm_dager_lora128_4x16_round1.json", "llm_dager_lora128_4x16_round2.json",
                          "llm_minilm_dropout.json", "llm_minilm_dropout_seed1.json", "llm_minilm_dropout_4x16.json",
                          "llm_minilm_dropout_4x16_seed1.json", "llm_minilm_dropout_4x32.json",
                          "llm_minilm_dropout_4x32_seed1.json",
                          "llm_minilm_dropout_16x16.json",
                          "llm_dager_lora32_dropout.json", "llm_dager_lora32_dropout_seed1.json",
                          "llm_dager_lora32_dropout_seed2.json",
                          "llm_minilm_4x32.json")
              if (RESULTS / f).is_file()]
    rows = ["| N × L | training | dropout | exact sequences (final token included) | proved per client | "
            "ROUGE-1 | CPU s per client | load average | file |", "|---|---|---|--:|---|--:|---|--:|---|"]
    for name in files:
        d = _load(name)
        clients = d["per_client"]
        cpu = ", ".join(f"{c['cpu_seconds']:.0f}" for c in clients)
        model = "" if d["model"].startswith("smollm2") else f"{d['model'].split(' ')[0]}: "
        rows.append(f"| {d['batch']} × {d['seq_len']} | {model}{d['training']} | "
                    f"{d.get('dropout', 'shipped (build default)')}; acting: {d.get('dropout_acting', 'none')} | "
                    f"{100 * d['exact_share']:.0f} % | {sum(bool(c['certain']) for c in clients)} of {len(clients)} | "
                    f"{d['rouge1']:.2f} | {cpu} | "
                    f"{d['environment']['load_average'][0]:.1f} | `benchmarks/results/{name}` |")
    return "\n".join(rows) + "\n"


def llm_boundary() -> str:
    """The boundary map (``bench_llm_boundary.py``): exact share per cell, "not run" where missing."""
    d = _load("llm_boundary.json")
    grid, cells = d["grid"], d["cells"]
    shapes = [(b, n) for b in grid["batch"] for n in grid["seq_len"]]
    rows = ["| local steps, rank, dropout | " + " | ".join(f"{b} × {n}" for b, n in shapes) + " |",
            "|---|" + "--:|" * len(shapes)]
    for steps in grid.get("local_steps", [1]):
        for rank in grid["lora_rank"]:
            for dropout in grid["dropout"]:
                label = (f"{steps}, " + ("full fine-tuning" if rank == "full" else f"LoRA r {rank}") + f", {dropout}")
                out = []
                for b, n in shapes:
                    tag = "full" if rank == "full" else f"r{rank}"
                    c = cells.get(f"{b}x{n}-{tag}-{dropout}" + (f"-s{steps}" if steps > 1 else ""))
                    out.append("not run" if c is None else
                               f"{100 * c['exact_share']:.0f} %" + (" ✓" if c["certain"] else "")
                               + ("" if c["holds"] else (" (noise)" if "noise fills" in (c.get("reason") or "")
                                                         else " (limit)"))
                               + (f" (R1 {c['rouge1']:.2f})" if 0 < c["rouge1"] and c["exact_share"] < 1 else ""))
                rows.append(f"| {label} | " + " | ".join(out) + " |")
    env = d["environment"]
    missing = len(d.get("not_run", []))
    return ("\n".join(rows) + f"\n\nExact share of N sequences of L tokens; ✓ proved (the update recomputed from "
            f"them matched); (limit): DAGER's condition fails (N·L token inputs against the span dimension); (noise): "
            f"the span is filled by noise (the float32 rounding of the weights a FedAvg client sends, magnified by "
            f"1/lr); R1: ROUGE-1 of a partial recovery. {len(cells)} cells measured, {missing} not run yet; "
            f"{env['threads']} thread, load average {env['load_average'][0]:.1f} at the start; "
            f"`benchmarks/results/llm_boundary.json`, plots `docs/llm-boundary.png` (1 step) and "
            f"`docs/llm-boundary-s10.png` (10 steps).\n")


def llm_flowertune() -> str:
    """The FlowerTune preset's membership (``bench_llm.py flowertune``): one row per results file."""
    rows = ["| shape | optimizer | seed | client's sequences | candidates (members / non-members) | non-members from | "
            "joint fit: AUC | TPR at 1 % FPR | TPR at 0.1 % FPR | centred cosine: AUC | raw cosine: AUC | audit CPU s | "
            "load average | file |",
            "|---|---|--:|--:|---|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    for name in ("llm_flowertune.json", "llm_flowertune_seed1.json", "llm_flowertune_512.json"):
        if not (RESULTS / name).is_file():
            continue
        d = _load(name)
        m = d["membership"]
        cos = m.get("cosine", {}).get("auc")
        optimizer = m.get("optimizer", "sgd (plain SGD, not FlowerTune's AdamW)")
        split = m.get("split") or "other clients' windows of the same shuffled corpus"
        rows.append(f"| {d['preset']['shape']}, LoRA r {d['training']['lora']['rank']}, dropout "
                    f"{d['training']['lora']['dropout']:g} | {optimizer} | {d.get('seed', 0)} | {m['sequences']} | "
                    f"{m['members']} / {m['non_members']} | {split} | "
                    f"{m['auc']:.3f} | {m['tpr_at_1pct_fpr']:.3f} | {m['tpr_at_0.1pct_fpr']:.3f} | "
                    + (f"{cos:.3f}" if cos is not None else "not recorded") + f" | {m['raw_cosine']['auc']:.3f} | "
                    f"{d['audit_cpu_seconds']:.0f} | {d['environment']['load_average'][0]:.1f} | "
                    f"`benchmarks/results/{name}` |")
    return "\n".join(rows) + ("\n\nWith 32 non-members the smallest resolvable FPR is 1/32: a TPR \"at 1 %\" or "
                              "\"at 0.1 %\" is the TPR with no false positive.\n")


def llm_membership() -> str:
    """ProjRes beside the joint fit at FlowerTune's client with AdamW (``bench_membership.py``): one row per results
    file ``membership_seed*.json`` / ``membership_heldout*.json``, every statistic pooled over the file's clients."""
    rows = ["| shape | optimizer | corpus | seed | members / non-members | candidate gradients | statistic | "
            "AUC (95 % CI, DeLong) | TPR at 1 % FPR | TPR at 0.1 % FPR | scoring wall s | client's update wall s | "
            "CPU s per client: scoring / update (ratio) | load average | file |",
            "|---|---|---|--:|---|---|---|---|--:|--:|--:|--:|---|--:|---|"]
    files = sorted(RESULTS.glob("membership_seed*.json")) + sorted(RESULTS.glob("membership_adamfit*.json")) \
        + sorted(RESULTS.glob("membership_heldout*.json"))
    for path in files:
        d = json.loads(path.read_text())
        client_s = sum(c["client_update_seconds"] for c in d["clients"])
        for name, s in d.get("pooled", {}).items():
            ci = s.get("auc_ci95") or [float("nan")] * 2
            cpu = [c.get(name, {}).get("cpu_seconds") for c in d["clients"]]
            update = [c.get("client_update_cpu_seconds") for c in d["clients"]]
            per = (f"{sum(cpu) / len(cpu):.0f} / {sum(update) / len(update):.0f} ({sum(cpu) / sum(update):.2f}×)"
                   if None not in cpu + update else
                   "sub-fit of the same gradients" if name.startswith("adam-fit-last-") else "not recorded")
            grads = d.get("gradients", "every trainable parameter") if name != "projres" else "none (forward pass)"
            if name.startswith("adam-fit-last-"):
                grads = f"LoRA adapters of the last {name.rsplit('-', 1)[1]} blocks (a sub-fit)"
            rows.append(f"| {d['shape']}, LoRA r {d['client']['lora']['rank']}, dropout {d['client']['lora']['dropout']:g} "
                        f"| {d['client']['optimizer']}, lr {d['client']['lr']:g} | {d['corpus'].split(' (')[0]} | "
                        f"{d['seed']} | {s['members']} / {s['non_members']} | {grads} | {name} | {s['auc']:.3f} ({ci[0]:.3f}–"
                        f"{ci[1]:.3f}) | {s['tpr_at_1pct_fpr']:.3f} | {s['tpr_at_0.1pct_fpr']:.3f} | {s['seconds']:.0f} | "
                        f"{client_s:.0f} | {per} | {d['environment']['load_average'][0]:.1f} | "
                        f"`benchmarks/results/{path.name}` |")
    if not files:
        return "No `bench_membership.py` results file yet: nothing measured at this shape with AdamW.\n"
    split = json.loads(files[-1].read_text())["split"]
    return "\n".join(rows) + (f"\n\nNon-members: {split}. Seconds are wall time of one thread under `nice -n 19` at the "
                              "load average shown (a shared 2-core machine): the scoring and the client's update ran "
                              "under the same load, so their ratio is the cost comparison, not their values.\n")


def llm_membership_tiny() -> str:
    """The membership scores compared on llama-tiny (``bench_membership_tiny.py``): one row per case, corpus and seed,
    each statistic's pooled AUC (DeLong 95 % CI) / TPR at 1 % FPR, and CPU seconds per client."""
    files = sorted(RESULTS.glob("membership_tiny*.json"))
    if not files:
        return "No `bench_membership_tiny.py` results file yet.\n"
    loaded = [(path, json.loads(path.read_text())) for path in files]
    d = loaded[0][1]
    names = (("adam-fit", "AdamW fit"), ("joint-fit", "joint fit"), ("projres", "ProjRes"), ("loss-diff", "loss diff"),
             ("loss-diff-top20", "loss diff, top 20 % tokens"), ("cosine", "centred cosine"))
    rows = ["| case | shape | corpus | seed | members / non-members | "
            + " | ".join(f"{label}: AUC (95 % CI) / TPR at 1 % FPR" for _, label in names)
            + " | CPU s per client: update / both fits / ProjRes / loss diff | file |",
            "|---|---|---|--:|---|" + "---|" * len(names) + "---|---|"]
    for path, r in ((path, r) for path, f in loaded for r in f["rows"]):
        pooled, n = r.get("pooled") or {}, max(1, len(r["clients"]))
        if not pooled:
            continue
        cells = []
        for key, _ in names:
            s = pooled[key]
            ci = s["auc_ci95"]
            cells.append(f"{s['auc']:.3f} ({ci[0]:.3f}–{ci[1]:.3f}) / {s['tpr_at_1pct_fpr']:.2f}")
        first = pooled["adam-fit"]
        cost = " / ".join(f"{v:.1f}" for v in (sum(c["client_update_cpu_seconds"] for c in r["clients"]) / n,
                                                pooled["adam-fit"]["cpu_seconds"] / n, pooled["projres"]["cpu_seconds"] / n,
                                                pooled["loss-diff"]["cpu_seconds"] / n))
        lora = r["client"]["lora"]
        case = (f"LoRA r {lora['rank']}, dropout {lora['dropout']:g}" if lora else "full fine-tuning") + \
            f", {r['client']['optimizer']} lr {r['client']['lr']:g}"
        rows.append(f"| {case} | {r['shape']} | {r['corpus']} | {r['seed']} | {first['members']} / "
                    f"{first['non_members']} | " + " | ".join(cells) + f" | {cost} | `benchmarks/results/{path.name}` |")
    loads = ", ".join(f"{f['environment']['load_average'][0]:.1f}" for _, f in loaded)
    return "\n".join(rows) + (f"\n\n{d['model']}; corpora: " + "; ".join(f"{k}: {v}" for k, v in d["corpora"].items())
                              + f". Non-members: {d['split']}. Scores pooled over each row's clients; "
                              f"{d['environment']['threads']} thread, load average {loads} at the start of each file "
                              "(`benchmarks/bench_membership_tiny.py`).\n")


def llm_membership_dp() -> str:
    """Membership under Flower's DP wrappers (``bench_membership_dp.py``): one row per σ (central) or ε (local)."""
    d = _load("membership_dp.json")
    fits = [k for k in ("joint-fit", "adam-fit") if all(k in r for r in d["rows"])]
    label = {"joint-fit": "joint fit", "adam-fit": "AdamW fit"}
    rows = ["| Flower wrapper | σ or ε | Flower's ε (δ 1e-5, 1 round) | ProjRes AUC (95 % CI) | "
            + " | ".join(f"{label[k]} AUC (95 % CI) | {label[k]} TPR at 1 % FPR" for k in fits) + " |",
            "|---|--:|--:|---|" + "---|--:|" * len(fits)]
    for r in d["rows"]:
        value = r.get("noise", r.get("epsilon"))
        eps = r.get("epsilon_flower")
        cells = [f"{r[k]['auc']:.3f} ({r[k]['auc_ci95'][0]:.2f}–{r[k]['auc_ci95'][1]:.2f})" for k in ("projres", *fits)]
        rows.append(f"| {'central (server noise)' if r['wrapper'] == 'central' else 'local (client noise)'} | "
                    f"{'σ' if r['wrapper'] == 'central' else 'ε'} = {value:g} | "
                    f"{'none' if eps is None else f'{eps:.3g}'} | {cells[0]} | "
                    + " | ".join(f"{cell} | {r[k]['tpr_at_1pct_fpr']:.3f}" for cell, k in zip(cells[1:], fits)) + " |")
    return ("\n".join(rows) + f"\n\n{d['model']}, LoRA r {d['lora']['rank']}, dropout {d['lora']['dropout']:g}, "
            f"{d['shape']}, {d['optimizer']}; {d['split']}; clip {d['clip']:g}, {d['clients']} clients; seed "
            f"{d['seed']}, load average {d['environment']['load_average'][0]:.1f} (`benchmarks/results/membership_dp.json`, "
            f"`benchmarks/bench_membership_dp.py`).\n")


def readme_audit() -> str:
    """The README's first screen: the default audit's table and verdicts as ``bench_audit.py`` last measured them."""
    data = _load("audit_timing.json")
    m = data["measurements"][-1]
    run = m["runs"]["default"][-1]
    table = [line for line in run["table"] if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rows = ["| " + " | ".join(header) + " |", "|---|---|" + "--:|" * (len(header) - 2)]
    rows += ["| " + " | ".join(c.strip() for c in line.strip("|").split("|")) + " |" for line in table[2:]]
    verdicts = ", ".join(f"{name} server **{level}**" for name, level in run["verdicts"].items())
    return ("\n".join(rows) + f"\n\nVerdicts: {verdicts}. Seed 0, {m['torch_threads']} torch thread, torch {m['torch']}, "
            f"{run['seconds']:.0f} s on {m['cpu_count']} CPU cores at load {run['load_average_before'][0]:.1f} "
            f"({m['when'][:10]}; `benchmarks/bench_audit.py`, `benchmarks/results/audit_timing.json`).\n")


def audit_spread() -> str:
    """The default audit under both CPU kernel sets and three seeds (``audit_spread.py``), and what moves most."""
    data = _load("audit_spread.json")
    keys = ("fedsgd/inverting-gradients", "fedavg/dimitrov", "fedavg/agic", "fedavg/awa-no-bo", "malicious/imprint")
    rows = ["| kernels | seed | honest-but-curious | malicious | " + " | ".join(f"{k}: PSNR dB (IIP %)" for k in keys)
            + " | s | load |", "|---|--:|---|---|" + "--:|" * (len(keys) + 2)]
    for r in data["runs"]:
        cells = [f"{r['scores'][k]['psnr']:.2f} ({100 * r['scores'][k]['iip']:.0f})" if k in r["scores"] else "—"
                 for k in keys]
        rows.append(f"| {r['capability']} | {r['seed']} | {r['verdicts']['honest-but-curious']} | "
                    f"{r['verdicts']['malicious']} | " + " | ".join(cells) + f" | {r['seconds']:.0f} | "
                    f"{r['load_average_before'][0]:.1f} |")
    summary = data["summary"]

    def span(key, over="over_all_runs"):
        s = summary[key]["psnr"][over]
        return f"{s['min']:.1f}–{s['max']:.1f} dB"

    per_seed = summary["fedavg/dimitrov"]["psnr"]["over_capabilities_per_seed"]
    widest = max(per_seed.items(), key=lambda kv: kv[1]["range"])
    return ("\n".join(rows) + f"\n\nOver all runs Inverting Gradients on the FedSGD client reads "
            f"{span('fedsgd/inverting-gradients')} and Dimitrov et al. {span('fedavg/dimitrov')}; between the two "
            f"kernel sets at one seed Dimitrov et al. moves at most {widest[1]['range']:.2f} dB (seed {widest[0]}). "
            f"torch {data['torch']}, {data['torch_threads']} thread, {data['cpu_count']} CPU cores "
            f"(`benchmarks/results/audit_spread.json`).\n")


def readme_table1() -> str:
    """How long Dimitrov et al.'s Table 1 takes at the README's scales (``bench_table1_scale.py``), and the quick
    run's CPU time projected from the smoke run by the variants' measured seconds per iteration."""
    from datetime import timedelta

    data = _load("table1_scale.json")
    per_iteration = {k: v["seconds_per_iteration"] for k, v in _load("dimitrov_table1_femnist_E10-m5.json")["variants"].items()}
    smoke, quick = data["scales"]["smoke"], data["scales"]["quick"]

    def span(seconds):
        h, rest = divmod(round(seconds), 3600)
        m, sec = divmod(rest, 60)
        return f"{h} h {m:02d} min" if h else (f"{m} min {sec:02d} s" if m else f"{sec} s")

    # the quick command: 10 clients of ours-prior (dimitrov), shared (dimitrov-shared) and fedsgd (dimitrov-fedsgd)
    factor = sum(per_iteration[v] for v in ("dimitrov", "dimitrov-shared", "dimitrov-fedsgd")) / per_iteration["dimitrov"]
    projected = 10 * factor * smoke["cpu_s"]
    est = quick["estimate"]
    return (f"The smoke scale (the first command: 1 client, `ours-prior`, 50 iterations) took {smoke['cpu_s']:.0f} "
            f"CPU-seconds ({span(smoke['wall_s'])} wall at load {smoke['load_average_before'][0]:.1f} on "
            f"{data['environment']['cpu_count']} cores). The `--quick` command (the second: 30 jobs) is about "
            f"{span(projected)} of one core by the variants' measured seconds per iteration "
            f"(`benchmarks/results/dimitrov_table1_femnist_E10-m5.json`); at load "
            f"{quick['load_average_before'][0]:.1f} it estimated {span(est['seconds'])} for itself after its first "
            f"iterations. The full scale runs 400 iterations a job, 8× the quick one's, on 100 clients "
            f"(`benchmarks/bench_table1_scale.py`, `benchmarks/results/table1_scale.json`).\n")


TABLES = {"readme-audit": readme_audit, "audit-spread": audit_spread, "readme-table1": readme_table1,
          "verdict-audit": verdict_audit, "mlp-exact": mlp_exact, "label-counts": label_counts,
          "gpu-speed": gpu_speed, "text-cases": text_cases, "text-heldout": text_heldout,
          "llm-dager": llm_dager, "llm-boundary": llm_boundary, "llm-flowertune": llm_flowertune,
          "llm-membership": llm_membership, "llm-membership-dp": llm_membership_dp,
          "llm-membership-tiny": llm_membership_tiny}


def _unbacked_claims(path: Path, text: str) -> list[str]:
    """Paragraphs of the ``## Measurements`` section that state numbers outside generated blocks without a file."""
    section = re.search(r"^## Measurements\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not section:
        return []
    body = BLOCK.sub("", section.group(1))
    problems = []
    for paragraph in re.split(r"\n\s*\n", body):
        if not re.search(r"\d", paragraph) or paragraph.lstrip().startswith("<!--"):
            continue
        files = re.findall(r"benchmarks/results/[\w.\-/]+\.jsonl?", paragraph)
        if not files:
            problems.append(f"{path.relative_to(ROOT)}: a measured claim names no results file: "
                            f"{_short(paragraph, 80)!r}")
        problems += [f"{path.relative_to(ROOT)}: {f} does not exist" for f in files if not (ROOT / f).is_file()]
    return problems


def regenerate(check: bool = False) -> int:
    problems, stale = [], []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")

        def build(match):
            name = match.group(2)
            if name not in TABLES:
                problems.append(f"{path.relative_to(ROOT)}: no builder for block {name!r} (known: {', '.join(TABLES)})")
                return match.group(0)
            return match.group(1) + TABLES[name]() + match.group(4)

        new = BLOCK.sub(build, text)
        problems += _unbacked_claims(path, new)
        if new != text:
            stale.append(str(path.relative_to(ROOT)))
            if not check:
                path.write_text(new, encoding="utf-8")
    for line in problems:
        print(line, file=sys.stderr)
    if check and stale:
        print(f"regen_docs: stale tables in {', '.join(stale)}: run python benchmarks/regen_docs.py", file=sys.stderr)
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(regenerate(check="--check" in sys.argv[1:]))
