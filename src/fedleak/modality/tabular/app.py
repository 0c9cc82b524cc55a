"""``fedleak audit --flower-app`` on a federation of records: the app report's verdict, record tables and results.

:mod:`fedleak.integrations.flower.app_report` asks the data's modality for these (no modality branch there):

* :func:`threat_model` — one threat model's verdict over the attacked replies, by the tabular audit's rule
  (:mod:`.judge`: records recovered whole, i.e. every column right, and the cell accuracy beside the prior baseline).
  A reply an exact attack *proved* (SPEAR or the row/bias ratio of Phong et al.: the update recomputed from the
  recovered records matches the one sent, :mod:`fedleak.attacks.spear`) gives its records whole without any shared
  batch, so the server itself can say ``high (proved)``; where simulated nodes shared their batch (client-reported)
  the replies are scored against it (per-cell accuracy, whole records, prior and random baselines; TabLeak's
  estimate is judged from these). With neither, ``None``: the app report's own attacker-only verdict.
* :func:`examples` — the latest round's recovered records, each under its original where the node shared its batch,
  cell by cell (green right, red wrong: :func:`.report.record_table`), else decoded alone.
* :func:`results_body` — per threat model the attacks over the replies (proved, scored, cells right, whole records,
  baselines), then the record tables.
"""

from __future__ import annotations

import html
from typing import Optional

from ...metrics.summary import mean
from . import judge
from .report import _value, record_table

#: what the report says of one recovered record and of the replies
HOW_TO_READ = (
    "Each attacked reply of the latest round is shown as a table of records: the node's record (grey, where the "
    "simulated node shared its batch: client-reported) above the record the server recovered from the reply alone, "
    "decoded into the federation's own column values and matched to the originals (Hungarian assignment on the "
    "cells right); a cell is green when right (categories equal, numbers within 0.319 sigma of the column: "
    "TabLeak's tolerance), red when wrong. A record is recovered whole when every column is right: all its "
    "quasi-identifiers (age, sex, race, native country, occupation, ...) match. 'proved' means the exact attack "
    "recomputed the node's update from the recovered records and it matched the one sent (no shared batch needed); "
    "'estimated' means an optimization attack (TabLeak) scored against the shared batch. metrics.json holds every "
    "reply's numbers.")
CSS = ".ok{background:#d1fadf}.bad{background:#fee4e2}.orig{background:#f2f4f7}"


def spec(data: str, folder, settings: dict):
    """The records' :class:`~fedleak.types.DataSpec` for ``[tool.fedleak] data``: ``adult``/``german``, or a
    CSV/Parquet file (relative to the app folder ``folder``) whose schema is inferred as ``fedleak.data.tabular.load``
    infers it for the app's own ClientApp, ``label`` naming its label column. A file that is missing or unreadable,
    a label it lacks, a value it cannot read: one line naming the file (and row and column), via FedleakError."""
    from pathlib import Path

    from ...data.tabular import load
    from ...errors import FedleakError

    where = f"{Path(folder) / 'pyproject.toml'}: [tool.fedleak]"
    label = settings.get("label")
    if label is not None and not isinstance(label, str):
        raise FedleakError(f"{where} label must be a column name (a string), got {label!r}")
    path = Path(data).expanduser()
    if not path.suffix:  # a named table: its label is fixed
        if label is not None:
            raise FedleakError(f"{where} label = {label!r} applies to a CSV or Parquet file of records, not to "
                               f"{data!r} (its label column is fixed)")
        return load(data.strip().lower(), num_clients=1, samples_per_client=1, seed=0)[0]
    path = path if path.is_absolute() else Path(folder) / path
    if not path.is_file():
        raise FedleakError(f"{where} data = {data!r}: no file {path}")
    return load(str(path), num_clients=1, samples_per_client=1, seed=0, label=label)[0]


def proved(record: dict) -> bool:
    """Whether the attacker proved this reply's records (the exactness condition held and the recomputed update
    matched: :func:`fedleak.integrations.flower.scoring.leakage_level`'s ``proved`` case)."""
    exact = record.get("exactness")
    return isinstance(exact, dict) and bool(exact.get("holds")) and bool(record.get("certain")) \
        and bool((exact.get("verification") or {}).get("matches", True))


def _attack(replies: list) -> dict:
    """One attack's figures over its replies: scored ones by their shared batch, proved ones whole."""
    scored = [r for r in replies if r.get("exact_match_rate") is not None]
    shown = [r for r in replies if proved(r)]
    # per reply: its shared batch's exact-match rate; else all of its records where proved (the update recomputed
    # from them); else none (unknown: the figure is a lower bound)
    recognizable = 100 * mean(r["exact_match_rate"] if r in scored else float(r in shown) for r in replies)
    return {"replies": len(replies), "proved": len(shown), "scored": len(scored),
            "recognizable_percent": recognizable,
            "accuracy": mean(r.get("accuracy") for r in scored),
            "categorical_accuracy": mean(r.get("categorical_accuracy") for r in scored),
            "continuous_accuracy": mean(r.get("continuous_accuracy") for r in scored),
            "prior_accuracy": mean(r.get("prior_accuracy") for r in scored),
            "random_accuracy": mean(r.get("random_accuracy") for r in scored),
            "records": sum(int(r.get("num_examples") or r.get("reconstructed") or 0) for r in replies),
            "proved_percent": 100 * len(shown) / len(replies),
            "evidence": "proved" if len(shown) == len(replies) else "estimated" if scored else "not-found"}


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def threat_model(summaries: dict, records: list, knowledge: dict) -> Optional[dict]:
    """The threat model's verdict over the attacked replies (module docstring); ``None`` where no reply was proved
    and none scored (the app report's attacker-only verdict then)."""
    attacked: dict = {}
    for r in records:
        if r.get("status") == "attacked":
            attacked.setdefault(str(r.get("attack")), []).append(r)
    per_attack = {name: _attack(rs) for name, rs in attacked.items()}
    per_attack = {n: a for n, a in per_attack.items() if a["scored"] or a["proved"]}
    if not per_attack:
        return None
    strongest = max(per_attack, key=lambda n: (per_attack[n]["recognizable_percent"], per_attack[n]["proved"],
                                               per_attack[n]["accuracy"] or 0.0))
    best = per_attack[strongest]
    verdict = judge.level(best["recognizable_percent"], best["accuracy"], best["prior_accuracy"])
    # proved where the proved replies alone (their records whole, the rest counted as none) reach the level
    evidence = ("proved" if verdict != "inconclusive" and judge.level(best["proved_percent"]) == verdict else
                best["evidence"] if verdict != "inconclusive" else "not-found")
    scored = sum(a["scored"] for a in per_attack.values())
    total = sum(len(rs) for rs in attacked.values())
    if best["proved"]:
        how = (f"proved for {best['proved']} of {best['replies']} replies: the node's update recomputed from the "
               f"recovered records matches the one it sent")
    else:
        how = ("estimated: scored against the batches the simulated nodes shared (client-reported), not proved by "
               "recomputing the update")
    cells = (f" and {100 * best['accuracy']:.1f}% of the cells (prior baseline {_pct(best['prior_accuracy'])}, "
             f"random {_pct(best['random_accuracy'])})" if best["accuracy"] is not None else "")
    sentence = (f"Its strongest attack, {strongest}, recovers {best['recognizable_percent']:.0f}% of a node's records "
                f"whole{cells} over {best['replies']} replies; {how}.")
    if verdict == "inconclusive":
        sentence = (f"Its strongest attack, {strongest}, recovers no record whole{cells} over {best['replies']} "
                    f"replies: nothing found at the stated budget, which is not evidence of protection.")
    return {"modality": "tabular", "verdict": verdict, "evidence": evidence, "evidence_text": how,
            "strongest": strongest, "rec_percent": best["recognizable_percent"], "accuracy": best["accuracy"],
            "psnr": None, "sentence": sentence, "assumptions": knowledge, "attacks": per_attack,
            "truth": f"client-reported batches of {scored} of {total} attacked replies" if scored else None,
            "budgets": {}, "not_tried": []}


def examples(records: list, spec, limit: int = 4) -> dict:
    """``{(label, attack): HTML table}``: the latest round's replies (at most ``limit``), records beside originals."""
    from ...integrations.flower.client import load_truth
    from ...metrics.tabular import matched_cells
    from ...types import Reconstruction

    shown = [r for r in records if r.get("status") == "attacked" and r.get("reconstruction")]
    if not shown:
        return {}
    last = max(r["round"] for r in shown)
    schema, width = spec.schema, spec.schema.width
    out = {}
    for r in sorted((r for r in shown if r["round"] == last), key=lambda r: r["client"])[:limit]:
        guess = Reconstruction.load(r["reconstruction"]).inputs.detach().reshape(-1, width).cpu()
        label = (f"round {r['round']}, node {r['client']}", str(r["attack"]))
        if r.get("truth_file"):
            truth = load_truth(r["truth_file"]).inputs.reshape(-1, width).cpu()
            cells, matched = matched_cells(schema, guess, truth)
            out[label] = record_table(schema, truth, guess, cells.tolist(), matched)
        else:
            decoded, names = schema.decode(guess), [c.name for c in schema.columns]
            rows = "".join("<tr><td>recovered</td>" + "".join(f"<td>{html.escape(_value(decoded[n][i]))}</td>"
                                                               for n in names) + "</tr>" for i in range(len(guess)))
            out[label] = ("<table><tr><th></th>" + "".join(f"<th>{html.escape(n)}</th>" for n in names) + "</tr>"
                          + rows + "</table>")
    return out


def results_body(point: dict, examples: dict) -> list:
    """HTML pieces: per threat model its attacks over the replies, then the latest round's record tables."""
    head = ("<tr><th>attack</th><th>replies</th><th>proved</th><th>scored</th><th>records whole</th>"
            "<th>cells right</th><th>categorical</th><th>continuous</th><th>prior baseline</th>"
            "<th>random baseline</th></tr>")
    parts = []
    for name, tm in point.get("threat_models", {}).items():
        attacks = tm.get("attacks") if isinstance(tm.get("attacks"), dict) else {}
        if not attacks:
            continue
        rows = "".join(
            f"<tr><td>{html.escape(a)}</td><td>{s['replies']}</td><td>{s['proved']}</td><td>{s['scored']}</td>"
            f"<td>{s['recognizable_percent']:.0f}%</td><td>{_pct(s['accuracy'])}</td>"
            f"<td>{_pct(s['categorical_accuracy'])}</td><td>{_pct(s['continuous_accuracy'])}</td>"
            f"<td>{_pct(s['prior_accuracy'])}</td><td>{_pct(s['random_accuracy'])}</td></tr>"
            for a, s in attacks.items())
        parts.append(f"<h3>{html.escape(name)}: {html.escape(tm['verdict'])}</h3>"
                     f"<div class=\"table-wrap\"><table>{head}{rows}</table></div>")
    for (label, attack), table in (examples or {}).items():
        parts.append(f"<h3>{html.escape(label)}: {html.escape(attack)} (originals grey; recovered cells green right, "
                     f"red wrong)</h3><div class=\"table-wrap\">{table}</div>")
    return parts
