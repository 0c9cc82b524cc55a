"""Regenerate the numbers block of docs/dp-audit.md from benchmarks/results/dp_audit.json.

    python benchmarks/dp_audit_doc.py            # rewrites the block between the markers
    python benchmarks/dp_audit_doc.py --check    # exit 1 if the doc is out of date
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "dp_audit.json"
DOC = ROOT / "docs" / "dp-audit.md"
BEGIN, END = "<!-- BEGIN dp_audit.json (benchmarks/dp_audit_doc.py) -->", "<!-- END dp_audit.json -->"


def block(r: dict) -> str:
    s = r["setup"]
    lines = [f"Measured {r['when']} on {r['cpu_count']} CPUs ({r['machine']}, {r['device']}), {r['torch_threads']} torch "
             f"thread, load average {r['load_average_before'][0]:.1f} → {r['load_average_after'][0]:.1f}; "
             f"{s['model']} on {s['data']}, {s['clients']} clients × {s['samples']} samples, {s['rounds']} rounds, "
             f"clip {s['clip']:g}, δ = {s['delta']:g}, {s['threat']} threat. Sum of the audits' costs: {r['cost_seconds_sum']:.0f} s.",
             "",
             "| accountant ε (exact GDP) | σ | PRV ε | RDP ε (Opacus / Flower) | canaries | seed | proved ε ≥ (f-DP) | "
             "proved ε ≥ ((ε, δ) only) | proved / PRV | estimated ε | estimate vs PRV | final-model estimate | cost s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for eps, group in r["epsilons"].items():
        for row in group["runs"]:
            acc = row["epsilon_accountant"]
            flower = acc.get("flower_rdp")
            lines.append(
                f"| {acc['gdp_exact']:.2f} | {group['noise_multiplier']:.3f} | {acc['opacus_prv']:.2f} | "
                f"{acc['opacus_rdp']:.2f} / {flower:.2f} | {row['canaries']} | {row['seed']} | {row['epsilon_lower']:.2f} | "
                f"{row['epsilon_lower_approx_dp']:.2f} | {row['ratio_lower_to_prv']:.2f} | {row['epsilon_estimate']:.2f} | "
                f"{row['estimate_error_vs_prv']:+.0%} | {row['epsilon_estimate_final_model']:.2f} | "
                f"{row['cost_seconds']['total']:.0f} |" if flower is not None else
                f"| {acc['gdp_exact']:.2f} | {group['noise_multiplier']:.3f} | {acc['opacus_prv']:.2f} | "
                f"{acc['opacus_rdp']:.2f} / n/a | {row['canaries']} | {row['seed']} | {row['epsilon_lower']:.2f} | "
                f"{row['epsilon_lower_approx_dp']:.2f} | {row['ratio_lower_to_prv']:.2f} | {row['epsilon_estimate']:.2f} | "
                f"{row['estimate_error_vs_prv']:+.0%} | {row['epsilon_estimate_final_model']:.2f} | "
                f"{row['cost_seconds']['total']:.0f} |")
    four = [x for x in r["epsilons"]["4"]["runs"] if x["canaries"] <= 1000]
    many = [x for x in r["epsilons"]["4"]["runs"] if x["canaries"] > 1000]
    lines += ["", f"At ε = 4 with 1,000 canaries the proved bound is {statistics.median(x['ratio_lower_to_prv'] for x in four):.2f}× "
              f"the PRV accountant's ε (median of {len(four)} seeds; range "
              f"{min(x['ratio_lower_to_prv'] for x in four):.2f}–{max(x['ratio_lower_to_prv'] for x in four):.2f})"
              + (f"; with {many[0]['canaries']:,} canaries {many[0]['ratio_lower_to_prv']:.2f}×." if many else ".")]
    lines += ["", "Misconfigurations (claimed ε = 4, 200 canaries, seed 0):", "",
              "| federation | claim test p | detected | evidence | clients named | finding |", "|---|---|---|---|---|---|"]
    for name, row in r["misconfigurations"].items():
        finding = " ".join(row["findings"]).replace("|", "/")
        lines.append(f"| {name} | {row['claim_p_value']:.2g} | {'yes' if row['detected'] else 'no'} | "
                     f"{row['evidence'] or '—'} | {', '.join(map(str, row['flagged_clients'])) or '—'} | {finding} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = DOC.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = f"{head}{BEGIN}\n{block(json.loads(RESULTS.read_text()))}\n{END}{tail}"
    if args.check:
        return 0 if new == text else 1
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
