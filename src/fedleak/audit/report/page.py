"""The audit's outputs: ``report.html`` (verdicts first), the printed table, "what to change".

The HTML is one self-contained file (inline CSS, PNGs as data URIs, built from the pieces of
:mod:`fedleak.report`); every plot is also saved as a PNG next to it. Column names are written
for people (:data:`COLUMNS`), the imprint result is stated once (verbatim count at 60 dB, the
Rec% threshold, Proposition 1's expectation), and unrecovered images are labelled in the grids.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Optional

from PIL import Image

from ...report import CSS, html_images, html_text
from .tables import IMAGE
from ..plan.threats import HONEST, MALICIOUS
from ..judge.verdict import BUDGET_FACTOR_FOR_LOW, EVIDENCE_RULE, MIN_TUNE_TRIALS, RULE, evidence_sentence
from ..judge.verdict import COLOURS  # noqa: F401  (re-exported: the verdicts' colours, as before labels.py)
from .labels import QUICK_CAVEAT, shortened, verdict_colour, verdict_label  # noqa: F401  (re-exported)

#: JSON key -> column title (images)
COLUMNS = IMAGE.columns
THREAT_TITLES = {HONEST: "Honest-but-curious server", MALICIOUS: "Malicious server"}
_EXTRA_CSS = """
.verdicts { display: flex; flex-wrap: wrap; gap: 1rem; margin: 1rem 0 .5rem; }
.verdict { flex: 1 1 300px; border-radius: 8px; padding: .8rem 1rem; color: #fff; }
.verdict .level { font-size: 1.5rem; font-weight: 700; letter-spacing: .02em; }
.verdict p { margin: .3rem 0 0; }
.rule { color: var(--muted); font-size: .9rem; }
.overall-line { font-size: 1.15rem; margin: .5rem 0 .2rem; }
td.v { color: #fff; font-weight: 600; }
"""


def modality_of(*records: dict):
    """The modality a result, point or threat model names (:func:`fedleak.modality.named`; images when none does)."""
    from ...modality import named

    return named(next((r.get("modality") for r in records if isinstance(r, dict) and r.get("modality")), None))


def _table(point: dict):
    """The point's table configuration (:mod:`.tables`): the modality's."""
    return modality_of(*point.get("threat_models", {}).values()).table


def rows(point: dict) -> list[dict]:
    """One row per (scenario, attack) with the human column names."""
    return _table(point).rows(point)


def printed_table(point: dict) -> str:
    return _table(point).printed(point)


def verdict_sentence(name: str, tm: dict, prefix: bool = True, quick: bool = False) -> str:
    """A threat model's verdict in one sentence, in the words of its modality."""
    return modality_of(tm).verdict_sentence(THREAT_TITLES[name], tm, prefix, quick)


def imprint_sentence(mal: dict) -> str:
    """The malicious result, stated once: verbatim count, Rec% threshold, Proposition 1's expectation."""
    return modality_of(mal).imprint_sentence(mal)


def loki_sentence(mal: dict) -> str:
    """LOKI's result (:mod:`fedleak.audit.execute.malicious`), stated once with its assumption."""
    k, bins, total = mal["clients_per_aggregate"], mal["bins_per_client"], mal["num_inputs"]
    return (f"LOKI: the server ships each of the {k} clients of an aggregate its own model (a routing "
            f"convolution and {bins} bins per client, {int(mal['added_parameters']):,} added parameters). From the "
            f"secure aggregate it reads back {mal['verbatim_count']} of {total} images verbatim (PSNR above "
            f"{mal['verbatim_db']:.0f} dB); Proposition 1 of Fowl et al. per client expects "
            f"{mal['expected_count']:.1f}. {mal['rec_percent']:.0f}% are recognizable (PSNR above "
            f"{mal['threshold']:g} dB), with no optimization, in {mal['seconds']:.2f} s. Assumes {mal['assumption']}.")


def state_malicious(mal: dict) -> None:
    """Store the malicious result's sentence in its summary (``metrics.json``'s ``sentence``) where one sentence
    says more than the shared one: LOKI's (its assumption) and, with several malicious attacks, the others'
    verbatim counts beside the strongest's."""
    compared = mal.get("compared") or {}
    if mal.get("attack") != "loki" and not compared:
        return
    sentence = loki_sentence(mal) if mal.get("attack") == "loki" else imprint_sentence(mal)
    if compared:
        others = "; ".join(f"{s['title']} [{s['attack']}] {s['verbatim_count']} of {s['num_inputs']}"
                           for name, s in compared.items() if name != mal["attack"])
        sentence += f" Verbatim with the other malicious attacks: {others}."
    mal["sentence"] = sentence


def what_to_change(result: dict) -> list[str]:
    """The sweep settings under which every threat model's verdict is low (and the honest one's)."""
    sweep = result.get("sweep")
    if not sweep:
        return ["No sweep was run. Sweep a setting to find one that brings the verdict to low, e.g. "
                "--sweep defense=0,0.5,1,2 with --defense dp-sgd:clip=1,noise=1 (ε is reported), "
                "--sweep secagg=1,2,4,8, or --sweep epochs=1,5,10 for FedAvg."]
    knob = sweep["label"]
    all_low = [p["value"] for p in result["points"] if all(t["verdict"] in ("low", "not run")
                                                            for t in p["threat_models"].values())]
    honest_low = [p["value"] for p in result["points"] if p["threat_models"][HONEST]["verdict"] == "low"]
    lines = []
    if all_low:
        lines.append(f"Every threat model's verdict is low at {knob} = {', '.join(f'{v:g}' for v in all_low)}.")
    elif honest_low:
        lines.append(f"The honest-but-curious server's verdict is low at {knob} = "
                     f"{', '.join(f'{v:g}' for v in honest_low)}; the malicious server still leaks there, so "
                     "clients should also verify the model architecture they receive (or run with --no-malicious "
                     "if they already do).")
    else:  # issue 46: name the threat model whose verdict stays above low, and any that reaches it
        values = ", ".join(f"{v:g}" for v in sweep["values"])
        names = list(result["points"][0]["threat_models"]) if result["points"] else [HONEST]
        low_at = {n: [p["value"] for p in result["points"] if p["threat_models"][n]["verdict"] == "low"] for n in names}
        reached = [f"the {n} server's verdict is low at {knob} = {', '.join(f'{v:g}' for v in low_at[n])}"
                   for n in names if low_at[n]]
        stuck = [n for n in names if not low_at[n] and any(p["threat_models"][n]["verdict"] != "not run"
                                                            for p in result["points"])]
        lines.append(f"No value of {knob} in this sweep ({values}) brings the {' or the '.join(stuck) or 'any'} "
                     f"server's verdict to low{'; ' + '; '.join(reached) if reached else ''}; extend the sweep "
                     "(stronger defense, more clients per aggregate) and rerun.")
    inconclusive = [p["value"] for p in result["points"] if p["threat_models"][HONEST]["verdict"] == "inconclusive"]
    if inconclusive:
        lines.append(f"At {' and '.join(f'{knob} = {v:g}' for v in inconclusive)} no attack succeeded, but only at the "
                     "audit's budget: that is not found, not low (low requires every applicable exact attack's "
                     f"precondition failing and each optimization attack tuned by a search of at least "
                     f"{MIN_TUNE_TRIALS} trials at ≥ {BUDGET_FACTOR_FOR_LOW:.0f}× its default budget: "
                     f"--tune {MIN_TUNE_TRIALS} and a larger --iterations).")
    for p in result["points"]:
        eps = epsilon_text(p)
        if eps and p["threat_models"][HONEST]["verdict"] == "low":
            lines.append(f"At {knob} = {p['value']:g} the clients' DP guarantee is {eps}.")
    if shortened(result) and (all_low or honest_low):
        lines.append(QUICK_CAVEAT)
    return lines


def epsilon_text(point: dict) -> Optional[str]:
    parts = []
    for key, e in point.get("epsilon", {}).items():
        if e.get("epsilon_rdp") is not None:
            prv = f", PRV {e['epsilon_prv']:.2f}" if e.get("epsilon_prv") is not None else ""
            parts.append(f"ε = {e['epsilon_rdp']:.2f} (RDP{prv}) at δ = {e['delta']:g} for {key}")
    return "; ".join(parts) or None


def _tuning_text(point: dict) -> list[str]:
    """One paragraph per tuned attack: surrogate clients, trials, default vs best PSNR, chosen settings."""
    lines = []
    for key, scenario in point.get("scenarios", {}).items():
        for name, summary in scenario.get("attacks", {}).items():
            t = summary.get("tuning") if isinstance(summary, dict) else None
            if not t:
                continue
            chosen = ", ".join(f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}" for k, v in t["options"].items())
            metric = t.get("metric", "mean PSNR (dB)")
            default, best = t.get("default_score", t.get("default_psnr")), t.get("best_score", t.get("best_psnr"))
            lines.append(f"{key}: {summary.get('title', name)} tuned with {len(t['trials'])} Optuna trials "
                         f"({t['sampler']}) on {t['clients']} surrogate client(s) simulated from a disjoint split "
                         f"(never the audited clients), in {t['seconds']:.1f} s: {metric} {default:.2f} "
                         f"at the default settings, {best:.2f} at the chosen ones ({chosen}).")
    return lines


def _assumptions(tm: dict) -> str:
    a = tm.get("assumptions") or {}
    if not a:
        return "not recorded"
    return (f"threat model {a.get('threat_model_sok')}, {a.get('threat_model_sok_name', '')} (the A–H threat models of the "
            f"SoK of Carletti et al., USENIX Security 2025), "
            f"{_batchnorm(a.get('batchnorm'))}, labels {a.get('labels')}")


def _batchnorm(mode) -> str:
    return "no BatchNorm" if mode in (None, "no BatchNorm") else f"BatchNorm in {mode} mode"


def _verdict_boxes(point: dict, quick: bool = False) -> str:
    boxes = []
    for name, tm in point["threat_models"].items():
        colour = verdict_colour(tm["verdict"], quick)
        boxes.append(f'<div class="verdict" style="background:{colour}" data-verdict="{html.escape(tm["verdict"])}">'
                     f'<div>{html.escape(THREAT_TITLES[name])}</div>'
                     f'<div class="level">{html.escape(verdict_label(tm["verdict"], quick))}</div>'
                     f'<p>{html.escape(verdict_sentence(name, tm, prefix=False, quick=quick))}</p>'
                     f'<p class="evidence">Evidence — {html.escape(tm.get("evidence_text") or evidence_sentence(tm))}. Assumptions: '
                     f'{html.escape(_assumptions(tm))}.</p></div>')
    return '<div class="verdicts" id="verdicts">' + "".join(boxes) + "</div>"


def _sweep_verdict_table(result: dict) -> str:
    knob = result["sweep"]["label"]
    head = [knob, "ε (RDP)"] + [THREAT_TITLES[n] for n in result["points"][0]["threat_models"]]
    body = []
    for p in result["points"]:
        eps = [e.get("epsilon_rdp") for e in p.get("epsilon", {}).values() if e.get("epsilon_rdp") is not None]
        no_dp = "∞ (no DP)" if result["sweep"]["knob"] == "defense" else "—"
        mark = " (configured)" if p["value"] == result["sweep"].get("configured") else ""
        cells = [f"<td>{p['value']:g}{mark}</td>", f"<td>{max(eps):.2f}</td>" if eps else f"<td>{no_dp}</td>"]
        quick = shortened(result)
        for tm in p["threat_models"].values():
            colour = verdict_colour(tm["verdict"], quick)
            text = tm["verdict"] + (" (shortened attacks)" if quick and tm["verdict"] in ("low", "medium") else "")
            cells.append(f'<td class="v" style="background:{colour}">{html.escape(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return ('<div class="table-wrap" id="verdicts"><table><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(body) + "</tbody></table></div>")


def _section(title: str, anchor: str, *parts: str) -> str:
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>{"".join(parts)}</section>'


def _setup_text(result: dict) -> str:
    """The audited setup; a swept setting is shown as swept (its values), never as one fixed value."""
    c, sweep = result["config"], result.get("sweep")
    knob = sweep["knob"] if sweep else None
    values = ", ".join(f"{p['value']:g}" for p in result["points"]) if sweep else ""
    if knob == "defense":
        defense = (f"swept ({sweep['label']} = {values}): "
                   + ", ".join(dict.fromkeys(p["settings"]["defense"] for p in result["points"])))
    else:
        defense = ", ".join(c["defense"]) if c["defense"] else "none"
    name = result.get("model") or c["model"]  # the model that ran (a text audit's, not the image default)
    weights = (f" with weights {c['weights']}" if c.get("weights") else
               f" ({result['model_weights']})" if result.get("model_weights") else " (untrained)")
    lines = [f"Model: {name}{weights}, {result.get('parameters', 0):,} parameters. Data: {result['data']} "
             f"({c['clients']} audited client(s) or aggregate(s)).", f"Defense: {defense}."]
    ranks = [p.get("settings", {}).get("lora") for p in result["points"]]
    if any(r is not None for r in ranks) or "lora" in (result["points"][0].get("settings") or {}):
        trainable = [p["settings"].get("trainable_parameters") for p in result["points"]]
        if knob == "lora":
            lines.append(f"Fine-tuning: LoRA adapters, rank swept ({values}); trainable parameters "
                         + ", ".join(f"{t:,}" for t in trainable if t is not None) + ".")
        elif ranks[0] is not None:
            lines.append(f"Fine-tuning: LoRA adapters of rank {ranks[0]} ({trainable[0]:,} trainable parameters; "
                         "the update carries the adapters only).")
        else:
            lines.append(f"Fine-tuning: full (every weight trained; {trainable[0]:,} trainable parameters).")
    if sweep and knob != "defense":
        lines.append(f"Swept: {sweep['label']} = {values} (the protocol below is the first value's).")
    lines += [p["text"] for p in result["points"][0]["scenarios"].values() if p.get("text")]
    preset = result.get("flowertune")
    if isinstance(preset, dict):  # --flowertune (audit/plan/flowertune.py): the shape audited and how it was scaled
        lines.append(f"Preset: {preset['preset']}, {preset['full_shape']}; audited: {preset['shape']}."
                     + (f" {preset['scaling'][0].upper()}{preset['scaling'][1:]}." if preset.get("scaling") else "")
                     + f" Differences: {preset['differences']}."
                     + (f" Gradient accumulation: {preset['gradient_accumulation']}."
                        if preset.get("gradient_accumulation") else ""))
    if shortened(result):
        lines.append(QUICK_CAVEAT)
    if sweep and any(p.get("epsilon") for p in result["points"]):
        lines.append(f"Differential privacy (Opacus accountants, {c['rounds']} round(s)): ε per sweep value in the "
                     "verdict table above.")
    else:
        eps = epsilon_text(result["points"][0])
        if eps:
            lines.append(f"Differential privacy (Opacus accountants, {c['rounds']} round(s)): {eps}.")
    return "\n\n".join(lines)


def write_report(out: Path, result: dict, examples: list, plots: dict) -> Path:
    """``report.html`` in ``out``; ``examples`` per point: {(scenario, attack): Example}; ``plots``: name -> image."""
    first = result["points"][0]
    modality = modality_of(result)
    title = "fedleak audit: what a server can reconstruct from your clients' updates"
    parts = []
    head = result["points"][result.get("headline", 0)]
    verdict_html = _verdict_boxes(head, shortened(result))
    if result.get("sweep"):  # the headline is the configured deployment; the sweep is the curve beside it
        verdict_html = (f'<p>The configured deployment ({html.escape(result["sweep"]["label"])} = '
                        f'{head["value"]:g}):</p>' + verdict_html.replace('id="verdicts"', 'id="verdicts-configured"')
                        + "<p>Every value of the sweep:</p>" + _sweep_verdict_table(result))
    from ..judge.overall import html as overall_html

    parts.append(_section("Verdict", "verdict", overall_html(result), verdict_html,
                          f'<p class="rule">Rule: {html.escape(result.get("rule") or RULE)}</p>',
                          f'<p class="rule">{html.escape(EVIDENCE_RULE[:1].upper() + EVIDENCE_RULE[1:])}</p>'))
    parts.append(_section("What to change", "what-to-change", html_text("\n\n".join(result["what_to_change"]))))
    parts.append(_section("Setup", "setup", html_text(_setup_text(result))))
    tuning_lines = _tuning_text(first)
    if tuning_lines:
        parts.append(_section("Attack tuning", "tuning", html_text("\n\n".join(tuning_lines))))
    shown = sorted({0, result.get("headline", 0), len(result["points"]) - 1})
    for index in shown:
        point = result["points"][index]
        label = "" if not result.get("sweep") else f" at {result['sweep']['label']} = {point['value']:g}"
        parts.append(_section(f"Results{label}", f"results-{index}", *modality.results_body(point, examples[index])))
    plot_images = [(caption, img) for caption, img in plots.values()]
    parts.append(_section("Plots", "plots", html_images(plot_images)))
    parts.append(_section("How to read this report", "how-to-read", html_text(modality.how_to_read)))
    document = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                f"<title>{html.escape(title)}</title><style>{CSS}{_EXTRA_CSS}"
                f"{modality.css}</style></head>\n"
                f"<body><main><h1>{html.escape(title)}</h1>\n" + "\n".join(parts)
                + "\n<footer>Generated by fedleak audit.</footer></main></body></html>\n")
    path = out / "report.html"
    path.write_text(document, encoding="utf-8")
    return path


def make_plots(result: dict, examples: list) -> dict:
    """name -> (caption, PIL image): the modality's plots (images: the PSNR distribution and, with a sweep, the
    leakage curve)."""
    return modality_of(result).make_plots(result, examples, THREAT_TITLES)


def save_plots(out: Path, plots: dict) -> list[str]:
    names = []
    for name, (_, img) in plots.items():
        assert isinstance(img, Image.Image)
        img.save(out / f"{name}.png", format="PNG")
        names.append(f"{name}.png")
    return names
