"""The real-Opacus audit against opacus releases side by side (issue #42): 1.4.1, 1.5.4 and 1.6.0.

Each release is installed into its own venv under /tmp (``pip install --no-deps opacus==X`` and a .pth line to the
project's .venv for torch and the rest; never into .venv). The same user code as bench_dp_audit_opacus.py (digits,
MLP 64-32-10, make_private_with_epsilon(ε = 4, δ = 1e-5), 1,000 canary examples) runs under each, at q = 1 (10
epochs) and q = ¼ (Poisson, 20 epochs), and with the noise halved inside that release's own _generate_noise (the
audit's power there). Reported per release: the verdict, proved / accountant ε, the estimate, the canaries' fitted
per-step shift over what the claim allows (1 when the noise in force is the claimed one); the proved ε's assumption
and the assumption-free bound beside it.

Usage: python benchmarks/bench_dp_audit_opacus_versions.py /tmp/op1.4.1/bin/python /tmp/op1.5.4/bin/python .venv/bin/python
(each child writes its rows; this file merges them into results/dp_audit_opacus_versions.json). Under nice -n 19.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "dp_audit_opacus_versions.json"


def child() -> None:
    import opacus
    import torch

    sys.path.insert(0, str(HERE))
    from bench_dp_audit_opacus import digits, make_train, net  # the same user code

    from fedleak.privacy.opacus_audit import audit_opacus
    from fedleak.privacy.opacus_faults import planted

    rows = []
    for name, fraction, epochs, fault in (("q=1, 10 epochs", 1.0, 10, None), ("q=1/4 Poisson, 20 epochs", 0.25, 20, None),
                                          ("q=1, 10 epochs, noise halved", 1.0, 10, "noise=0.5")):
        try:
            if fault:
                with planted(fault):
                    r = audit_opacus(make_train(fraction, epochs), net(0), digits(), canaries=1000, seed=0)
            else:
                r = audit_opacus(make_train(fraction, epochs), net(0), digits(), canaries=1000, seed=0)
        except Exception as exc:  # noqa: BLE001 - a release the audit cannot run through is a result too
            rows.append({"opacus": opacus.__version__, "setting": name, "error": f"{type(exc).__name__}: {exc}"})
            continue
        q, steps, sigma = r["sample_rate"], r["steps_observed"], r["noise_multiplier"]
        rows.append({"opacus": opacus.__version__, "torch": torch.__version__, "setting": name, "fault": fault,
                     "verdict": r["verdict"]["verdict"], "epsilon_accountant": r["epsilon_accountant"]["user_accountant"],
                     "epsilon_lower": r["epsilon_lower"], "assumption": r["verdict"]["assumption"],
                     "epsilon_assumption_free": r["lower_bounds"]["all-iterates"]["epsilon_approx_dp"],
                     "ratio": r["epsilon_lower"] / r["epsilon_accountant"]["user_accountant"],
                     "epsilon_estimate": r["epsilon_estimate"], "claim_test_p": r["verdict"]["claim_test_p"],
                     "shift_over_claim": r["mean_shift_mu"] / (q * math.sqrt(steps) / sigma),
                     "smallest_noise_fault": r["verdict"]["smallest_noise_fault"], "noise_multiplier": sigma,
                     "steps": steps, "q": q, "findings": r["misconfiguration"]["findings"]})
    print(json.dumps(rows))


def main() -> None:
    out = {"meta": {"threads": 1, "device": "cpu", "machine": platform.machine(), "data": "sklearn digits (1,797)",
                    "model": "MLP 64-32-10", "canaries": 1000,
                    "install": "pip install --no-deps opacus==X into /tmp venvs, torch from the project's .venv"},
           "rows": []}
    for python in sys.argv[1:]:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run([python, __file__, "--child"], capture_output=True, text=True, env=env)
        line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("[")), None)
        out["rows"] += json.loads(line) if line else [{"python": python, "error": done.stderr[-500:]}]
        out["meta"]["load_average"] = os.getloadavg()
        RESULTS.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    child() if "--child" in sys.argv else main()
