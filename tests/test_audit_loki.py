"""The audit's malicious server under secure aggregation: LOKI beside the imprint block, and its bad input."""

import subprocess
import sys

import fedleak
from fedleak.audit import audit


def test_audit_keeps_the_strongest_malicious_attack_and_both_numbers(tmp_path):
    result = audit(out=tmp_path / "a", data="digits", model="lenet", algorithm="fedsgd", samples=4,
                   defense="secagg:8", attacks="imprint,loki", progress=None, log=None)
    mal = result["points"][0]["scenarios"]["malicious"]
    compared = mal["compared"]
    assert set(compared) == {"imprint", "loki"}
    # 8 clients x 4 images: one shared 64-bin block vs 64 bins per client
    assert compared["loki"]["verbatim_count"] > compared["imprint"]["verbatim_count"]
    assert mal["attack"] == "loki" and "ships every client" in mal["assumption"]


def test_loki_without_secure_aggregation_is_one_line_exit_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fedleak.cli", "audit", "--attacks", "loki", "--out",
                          str(tmp_path / "b")], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "secagg:K" in out.stderr
    assert not (tmp_path / "b").exists()
