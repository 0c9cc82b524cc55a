"""The findings under the side-by-side table (``bench_tableak_reference.py --doc``), generated from the same rows.

Per setting (dataset, B or FedAvg protocol, restarts × iterations) over the batches both codes finished:

* accuracy (the reference's own metric): fedleak's mean, the reference's mean, and the PAIRED difference
  fedleak − reference per batch with its 95 % t-interval (batches are the unit: both codes attack the same
  records with the same weights, so the batch-to-batch spread cancels in the difference). "≥ the reference" is
  read as: the interval's upper end is ≥ 0 (the data do not show fedleak below) — and the mean difference's sign
  is stated beside it; with one batch no interval exists and the sentence says so;
* CPU: the ratio of mean CPU seconds per batch (reference / fedleak) and whether it reaches the issue's 10×.

Nothing here is typed by hand: the docs' sentences are these strings.
"""

from __future__ import annotations

import math
import statistics

from scipy import stats

TARGET_RATIO = 10.0


def paired(fedleak: list[float], reference: list[float]) -> dict:
    """Mean difference (points) and its 95 % t-interval; no interval for one batch."""
    diffs = [100 * (a - b) for a, b in zip(fedleak, reference)]
    mean = statistics.mean(diffs)
    if len(diffs) < 2:
        return {"mean": mean, "low": None, "high": None, "batches": len(diffs)}
    half = stats.t.ppf(0.975, len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return {"mean": mean, "low": mean - half, "high": mean + half, "batches": len(diffs)}


def sentence(entry: dict) -> str:
    """One setting's finding, from one entry of ``bench_tableak_reference.summary``."""
    ours = entry["fedleak"]["reference_metric"]["accuracy"]
    theirs = entry["reference"]["reference_metric"]["accuracy"]
    d = paired(ours, theirs)
    cpu = {impl: statistics.mean(entry[impl]["cpu_seconds"]) for impl in ("fedleak", "reference")}
    ratio = cpu["reference"] / max(cpu["fedleak"], 1e-9)
    n = d["batches"]
    size = f"N = {entry['records']}" if "FedAvg" in entry["dataset"] else f"B = {entry['records']}"
    head = (f"{entry['dataset']}, {size}, {entry['restarts']} × {entry['iterations']}, "
            f"{n} batch{'es' if n != 1 else ''}: ")
    acc = (f"accuracy {100 * statistics.mean(ours):.1f} % (fedleak) vs {100 * statistics.mean(theirs):.1f} % "
           f"(reference), paired difference {d['mean']:+.1f} points")
    if d["low"] is None:
        acc += " (one batch: no interval, not evidence either way)"
    else:
        verdict = ("not below the reference" if d["high"] >= 0 else "below the reference")
        acc += f" (95 % CI {d['low']:+.1f} to {d['high']:+.1f}: {verdict})"
    met = "meets" if ratio >= TARGET_RATIO else "misses"
    return (f"{head}{acc}; CPU {cpu['fedleak']:.1f} vs {cpu['reference']:.1f} s per batch, {ratio:.1f}× less "
            f"({met} the 10× target).")


def findings(entries: list[dict]) -> str:
    """The findings block for the docs: one bullet per setting."""
    if not entries:
        return ""
    return "\n\nFindings, generated from the rows above (paired over batches; reference metric):\n\n" + \
        "\n".join(f"* {sentence(e)}" for e in entries)
