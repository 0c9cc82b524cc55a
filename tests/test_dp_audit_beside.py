"""dp-audit beside the reconstruction audit at the same σ (issue #29 item 3, :mod:`fedleak.privacy.beside`).

Deterministic (fixed seeds; the checks are on structure and on the claimed/proved/estimated ordering, not on
noisy thresholds). Measured on the loaded 2-core machine (load ≈ 7): the file 20 s (7 tests); the metrics-file
test 8 s (imports, an example-level audit of lenet, 4 steps, 100 canaries), the --with-attacks run 7 s (that
audit plus a quick ``fedleak audit``: Inverting Gradients at 0.1× budget on 2 one-image clients), bad input
< 0.1 s each.
"""

import json

import pytest

from fedleak.cli import main
from fedleak.privacy.audit import dp_audit

DEFENSE = "dp-sgd:clip=1,noise=1"


def _metrics(tmp_path, defense=DEFENSE, sweep=None, rec=25.0):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({
        "format": "fedleak.audit/2", "config": {"defense": [defense]}, "sweep": sweep, "quick": True,
        "modality": "image", "environment": {"threads": 1, "device": "cpu"},
        "threat_models": {"honest-but-curious": {"verdict": "high", "evidence": "proved", "rec_percent": rec,
                                                 "psnr": 21.5, "strongest": "fedsgd: Inverting Gradients"}},
        "epsilon": {"fedsgd": {"epsilon_rdp": 4.73, "epsilon_prv": 4.39, "delta": 1e-5, "steps": 1}}}))
    return path


def test_metrics_file_is_reported_beside_the_epsilons(tmp_path, capsys):
    out = tmp_path / "o"
    code = main(["dp-audit", "--level", "example", "--defense", DEFENSE, "--model", "lenet", "--rounds", "4",
                 "--canaries", "100", "--no-plot", "--quiet", "--leakage-metrics", str(_metrics(tmp_path)),
                 "--out", str(out)])
    assert code == 0
    saved = json.loads((out / "dp-audit.json").read_text())
    beside = saved["leakage_beside"]
    assert beside["threat_models"]["honest-but-curious"]["rec_percent"] == 25.0
    text = " ".join(beside["lines"])
    assert "accountant claims ε = " in text and "proved ε ≥" in text and "estimated ε ≈" in text
    assert "verdict high (evidence proved)" in text and "25.00 %" in text and "ε = 4.39" in text
    assert saved["summary"][-len(beside["lines"]):] == beside["lines"]
    assert "verdict high" in capsys.readouterr().out


@pytest.mark.parametrize("make, named", [
    (lambda p: _metrics(p, defense="dp-sgd:clip=1,noise=2"), "not the audited"),
    (lambda p: _metrics(p, defense="gaussian:0.1"), "not the audited"),
    (lambda p: _metrics(p, sweep={"knob": "defense"}), "sweep"),
    (lambda p: (p / "x.json").write_text("{") and p / "x.json", "not a readable"),
    (lambda p: p / "missing.json", "not a readable"),
])
def test_mismatched_metrics_exit_2_before_out(tmp_path, capsys, make, named):
    out = tmp_path / "never"
    code = main(["dp-audit", "--level", "example", "--defense", DEFENSE, "--model", "lenet", "--rounds", "4",
                 "--canaries", "100", "--leakage-metrics", str(make(tmp_path)), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--leakage-metrics" in err[0] and named in err[0], err
    assert not out.exists()


def test_with_attacks_runs_a_quick_audit_at_the_same_defense(tmp_path):
    out = tmp_path / "o"
    result = dp_audit(defense=DEFENSE, level="example", model="lenet", rounds=4, canaries=100, plot=False,
                      with_attacks=True, out=out)
    metrics = json.loads((out / "leakage" / "metrics.json").read_text())
    assert metrics["config"]["defense"] == [DEFENSE] and metrics["quick"]
    assert result["leakage_beside"]["source"].endswith("leakage/metrics.json")
    assert json.loads((out / "dp-audit.json").read_text())["leakage_beside"]["lines"] == result["leakage_beside"]["lines"]
    with pytest.raises(Exception, match="not both"):
        dp_audit(defense=DEFENSE, level="example", model="lenet", rounds=4, canaries=100, with_attacks=True,
                 leakage_metrics=str(_metrics(tmp_path)))
