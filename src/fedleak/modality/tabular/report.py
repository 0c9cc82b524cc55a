"""The tabular audit's report: a self-contained HTML page with the verdict, the attacks beside their random and
prior baselines, the per-column leakage, and the record table — each original record beside its
reconstruction, cell by cell, coloured right / wrong, with TabLeak's per-cell confidence."""

from __future__ import annotations

import html
import math

from .judge import RULE

CSS = ("body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}"
       "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}.ok{background:#d1fadf}.bad{background:#fee4e2}"
       ".orig{background:#f2f4f7}.high{color:#b42318}.medium{color:#b54708}.inconclusive{color:#59636e}"
       "small{color:#555}")


def _value(v) -> str:
    if isinstance(v, float):
        return f"{v:g}" if abs(v) < 1e6 else f"{v:.3g}"
    return str(v)


def record_table(schema, truth, guess, cells, matched, entropy=None, limit: int = 16) -> str:
    """Originals (grey) above their matched reconstructions, every cell green (right) or red (wrong)."""
    true_cols, guess_cols = schema.decode(truth), schema.decode(guess)
    names = [c.name for c in schema.columns]
    rows = ["<tr><th>#</th><th></th>" + "".join(f"<th>{html.escape(n)}</th>" for n in names) + "</tr>"]
    for i in range(min(len(matched), limit)):
        j = matched[i]
        rows.append(f"<tr class=orig><td rowspan=2>{i + 1}</td><td>original</td>" +
                    "".join(f"<td>{html.escape(_value(true_cols[n][i]))}</td>" for n in names) + "</tr>")
        if j < 0:
            rows.append("<tr><td>reconstructed</td>" + "<td class=bad>-</td>" * len(names) + "</tr>")
            continue
        out = []
        for c, n in enumerate(names):
            conf = ""
            if entropy is not None:
                value = entropy[j][c]
                conf = f" <small>{value:.2f}</small>" if math.isfinite(value) else ""
            out.append(f"<td class={'ok' if cells[i][c] else 'bad'}>{html.escape(_value(guess_cols[n][j]))}{conf}</td>")
        whole = " (whole)" if all(cells[i]) else ""
        rows.append(f"<tr><td>reconstructed{whole}</td>" + "".join(out) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def page(result: dict, tables: list[str]) -> str:
    """The report page for ``result`` (metrics.json's content) and one record table per point."""
    parts = [f"<!doctype html><meta charset=utf-8><title>fedleak audit: {html.escape(result['data'])}</title>"
             f"<style>{CSS}</style><h1>fedleak audit — {html.escape(result['data'])} records, "
             f"{html.escape(result['model'])}</h1>",
             f"<p><b>Overall:</b> {html.escape(result['overall']['line'])}</p>"
             + "<ul>" + "".join(f"<li><b>{html.escape(p['name'])}: {html.escape(p['level'])}</b> — "
                               f"{html.escape(p['evidence'])}</li>" for p in result["overall"]["parts"]) + "</ul>",
             f"<p><small>Verdict rule: {html.escape(RULE)}</small></p>"]
    for point, table in zip(result["points"], tables):
        if result.get("sweep"):
            parts.append(f"<h2>{html.escape(result['sweep']['knob'])} = {point['value']}</h2>")
        for key, scenario in point["scenarios"].items():
            tm = scenario["verdict"]
            parts.append(f"<h3>{html.escape(key)}: <span class={tm['verdict']}>{tm['verdict']}</span></h3>"
                         f"<p>{html.escape(scenario['sentence'])}</p>")
            head = ("<tr><th>attack</th><th>evidence</th><th>cells right</th><th>categorical</th><th>continuous</th>"
                    "<th>records whole (EMR)</th><th>random baseline</th><th>prior baseline</th>"
                    "<th>low-entropy 25% (cat / cont)</th><th>CPU s</th></tr>")
            rows = []
            for name, s in scenario["clients"][0]["attacks"].items():
                low = (f"{100 * s['categorical_low_entropy_accuracy']:.0f}% / "
                       f"{100 * s.get('continuous_low_entropy_accuracy', float('nan')):.0f}%"
                       if "categorical_low_entropy_accuracy" in s else "-")
                rows.append(
                    f"<tr><td>{html.escape(name)}</td><td title='{html.escape(s['evidence_text'])}'>{s['evidence']}</td>"
                    f"<td>{100 * s['accuracy']:.1f}%</td><td>{_pct(s['categorical_accuracy'])}</td>"
                    f"<td>{_pct(s['continuous_accuracy'])}</td><td>{100 * s['exact_match_rate']:.0f}%</td>"
                    f"<td>{100 * s['random']['accuracy']:.1f}% (EMR {100 * s['random']['exact_match_rate']:.0f}%)</td>"
                    f"<td>{100 * s['prior']['accuracy']:.1f}% (EMR {100 * s['prior']['exact_match_rate']:.0f}%)</td>"
                    f"<td>{low}</td><td>{s['cpu_seconds']}</td></tr>")
            parts.append("<table>" + head + "".join(rows) + "</table>")
            strongest = scenario["clients"][0]["attacks"][scenario["clients"][0]["strongest"]]
            leak = sorted(strongest["per_column"].items(), key=lambda kv: -kv[1])
            parts.append("<p>Per-column leakage (share of records whose column the strongest attack gets right): " +
                         ", ".join(f"{html.escape(k)} {100 * v:.0f}%" for k, v in leak) + "</p>")
            parts.append(f"<h4>Records of {html.escape(scenario['clients'][0]['client'])} "
                         f"({html.escape(scenario['clients'][0]['strongest'])}; green right, red wrong; small numbers: the "
                         f"attack's per-cell entropy where it gives one, lower = more confident — categorical "
                         f"normalized to [0, 1], continuous the Gaussian entropy of the restarts' spread)</h4>")
            parts.append(table.get(key, ""))
    env = result["environment"]
    parts.append(f"<p><small>Environment: torch {env['torch']}, {env['threads']} thread(s), device {env['device']}, "
                 f"load average {env.get('load_average')}</small></p>")
    return "\n".join(parts)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def scores_of(rec, client, spec) -> dict:
    """:func:`fedleak.metrics.tabular.evaluate` of a reconstruction against a client's records (with TabLeak's
    per-cell entropy when the reconstruction carries one)."""
    import torch

    from ...metrics.tabular import evaluate

    width = spec.schema.width
    guess = rec.inputs.detach().reshape(-1, width).cpu()
    entropy = rec.extras.get("entropy")
    entropy = torch.tensor(entropy) if entropy is not None and len(guess) else None
    scores = evaluate(spec.schema, guess, client.inputs.detach().reshape(-1, width).cpu(), entropy=entropy)
    scores["rec_percent"] = 100.0 * scores["exact_match_rate"]  # a recognizable record: every column right
    return scores


def attack_page(attack: str, rec, truth, spec, scores: dict, folder) -> str:
    """``fedleak attack``'s ``comparison.html`` (the audit report's record table) and its one-line summary."""
    width = spec.schema.width
    guess = rec.inputs.detach().reshape(-1, width).cpu()
    truth_rows = truth.inputs.detach().reshape(-1, width).cpu()
    matched = [-1 if j is None else int(j) for j in scores["matched"]]
    table = record_table(spec.schema, truth_rows, guess, scores["cells"], matched, rec.extras.get("entropy"),
                         limit=len(matched))
    line = (f"{attack}: cells right {100 * scores['accuracy']:.1f} % (random {100 * scores['random']['accuracy']:.1f}"
            f" %, prior {100 * scores['prior']['accuracy']:.1f} %), whole records "
            f"{100 * scores['exact_match_rate']:.1f} %")
    if not len(guess):  # an exact attack whose precondition failed returns nothing: say why, not only "0 %"
        reason = (rec.extras.get("exactness") or {}).get("reason")
        line = f"{attack}: no record recovered" + (f" ({reason})" if reason else "")
    (folder / "comparison.html").write_text(
        f"<!doctype html><meta charset=utf-8><title>fedleak attack: {html.escape(attack)}</title><style>{CSS}</style>"
        f"<h1>{html.escape(attack)} on {len(truth_rows)} {html.escape(spec.name)} records</h1><p>{html.escape(line)}"
        "</p><p><small>Each original (grey) above the reconstruction matched to it; green cells right, red wrong"
        + (", with the attack's per-cell entropy (low: confident)" if rec.extras.get("entropy") is not None else "")
        + ".</small></p>" + table)
    return line
