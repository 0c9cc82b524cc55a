"""Tables in a Flower federation: the attack a reply gets, its scores against a shared batch, the dashboard's records.

:class:`fedleak.integrations.flower.LeakageAudit` asks the data's modality (:mod:`fedleak.modality`) for these:

* :func:`attack_for` — an imprinted model's readout; else SPEAR (Dimitrov et al. 2024), or the row/bias ratio of
  Phong et al. for a single record, wherever the reply is one gradient step through a first linear layer with a
  bias (the tabular MLP's): their records are *proved* by recomputing the update; else TabLeak (Vero et al. 2023);
* :func:`truth_scores` — against a batch the client shared (evaluation mode): per-cell accuracy, whole-record
  exact-match rate (``rec_percent`` = that rate in %) and the prior (marginal) and random baselines beside them
  (:mod:`fedleak.metrics.tabular`);
* :func:`dashboard_sections` — the latest round's recovered records decoded into the user's column values, each
  under its original where the client shared its batch.
"""

from __future__ import annotations

from typing import Optional

#: the keys of :func:`fedleak.metrics.tabular.evaluate` a reply's record keeps
KEEP = ("accuracy", "categorical_accuracy", "continuous_accuracy", "exact_match_rate")


def attack_for(model, protocol, samples: Optional[int]) -> Optional[str]:
    """The exact attack that applies to this reply (``None``: none does, TabLeak's turn)."""
    from ...audit.plan.threats import exact_applicable

    n = int(samples or protocol.batch_size or 2)
    if exact_applicable(model, protocol, n) is not None:
        return None
    return "analytic-fc" if n == 1 else "spear"


def truth_scores(rec, truth, spec) -> dict:
    """Scores of the recovered records against the client-shared ones, with the prior baseline."""
    from ...metrics.tabular import evaluate

    width = spec.schema.width
    scores = evaluate(spec.schema, rec.inputs.detach().reshape(-1, width).cpu(),
                      truth.inputs.detach().reshape(-1, width).cpu())
    out = {k: scores[k] for k in KEEP if scores.get(k) is not None}
    out["rec_percent"] = 100.0 * scores["exact_match_rate"]
    out["prior_accuracy"] = scores["prior"].get("accuracy")
    out["random_accuracy"] = scores["random"].get("accuracy")
    return out


def dashboard_sections(records: list, spec, limit: int = 8) -> list:
    """One table of the latest attacked round: per reply, its recovered records (decoded), each under its original
    where the client shared its batch (rows matched by the metrics' assignment)."""
    from ...integrations.flower.client import load_truth
    from ...metrics.tabular import matched_cells
    from ...types import Reconstruction

    attacked = [r for r in records if r.get("status") == "attacked" and r.get("reconstruction")]
    if not attacked:
        return []
    last = max(r["round"] for r in attacked)
    schema, width = spec.schema, spec.schema.width
    names = [c.name for c in schema.columns]
    rows = []
    for record in (r for r in attacked if r["round"] == last):
        guess = Reconstruction.load(record["reconstruction"]).inputs.detach().reshape(-1, width).cpu()
        truth = load_truth(record["truth_file"]).inputs.reshape(-1, width).cpu() if record.get("truth_file") else None
        decoded = schema.decode(guess)
        if truth is None:
            rows += [{"node": record["client"], "record": i + 1, "row": "recovered",
                      **{n: decoded[n][i] for n in names}} for i in range(min(len(guess), limit))]
            continue
        right, matched = matched_cells(schema, guess, truth)
        original = schema.decode(truth)
        for i in range(min(len(truth), limit)):
            rows.append({"node": record["client"], "record": i + 1, "row": "original",
                         **{n: original[n][i] for n in names}})
            j = matched[i]
            rows.append({"node": record["client"], "record": i + 1,
                         "row": f"recovered ({int(right[i].sum())}/{len(names)} cells)" if j >= 0 else "not recovered",
                         **{n: (decoded[n][j] if j >= 0 else "-") for n in names}})
    return [{"title": f"Latest recovered records (round {last})", "table": {"rows": rows, "floatfmt": ".4g"},
             "text": "Each recovered record is decoded into the federation's own column values; where the client "
                     "shared its batch it stands under the original it was matched to, with how many cells agree "
                     "(a continuous cell agrees within the papers' tolerance)."}]
