"""`fedleak audit --budget`: the durations it accepts, the refusal of others, the one scaling factor, and an
audit whose optimization attack a tiny budget shortens (issue 46 item 6)."""

import json

import pytest

import fedleak
from fedleak.audit.plan.time_budget import FLOOR, parse_budget, scale
from fedleak.audit.report import shortened
from fedleak.cli import main
from fedleak.errors import FedleakError


def test_budget_accepts_seconds_minutes_hours_and_their_sum():
    assert [parse_budget(t) for t in ("90s", "5m", "1h", "1h30m", "2m5s")] == [90, 300, 3600, 5400, 125]
    assert parse_budget(None) is None


@pytest.mark.parametrize("bad", ["", "5", "5min", "-5m", "0s", "1.5m", "m", "5m 3s", "30m1h", "31d"])
def test_other_budgets_are_refused_naming_the_flag(bad, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["audit", "--budget", bad, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--budget" in err[0] and "Traceback" not in err[0]
    assert not out.exists()  # nothing written


def test_api_refuses_a_bad_budget_and_a_budget_beside_iterations(tmp_path):
    with pytest.raises(FedleakError, match="budget"):
        fedleak.audit(out=tmp_path / "a", budget=300)
    with pytest.raises(FedleakError, match="budget and iterations"):
        fedleak.audit(out=tmp_path / "b", budget="5m", iterations=100)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def _work(per, iterations=1500, setup=0.0, runs=1, name="fedsgd: inverting-gradients"):
    return {"name": name, "attack": name.split(": ")[1], "iterations": iterations, "seconds_per_iteration": per,
            "setup_seconds": setup, "runs": runs}


def test_one_factor_scales_every_optimization_attack_to_the_budget():
    # 2 attacks x 2 runs: 0.1 s x 1000 + 0.05 s x 400 iterations, 1 s set-up each = 244 s; 100 s left x 0.8 = 80 s
    record = scale(110, 10, [_work(0.1, 1000, 1.0, 2, "fedavg: agic"), _work(0.05, 400, 1.0, 2, "fedavg: dimitrov")])
    assert record["shortened"] and record["fits"]
    assert record["factor"] == pytest.approx((80 - 4) / 240, abs=1e-4)
    assert record["attacks"]["fedavg: agic"] == {"from": 1000, "to": 316, "seconds_per_iteration": 0.1,
                                                 "setup_seconds": 1.0}
    assert record["attacks"]["fedavg: dimitrov"]["to"] == 126
    assert record["estimated_optimization_seconds_after"] <= 80
    assert record["line"].startswith("budget 1m50s: optimization attacks shortened to fedavg: agic 316 iterations "
                                     "(from 1000), fedavg: dimitrov 126 iterations (from 400)")


def test_a_budget_that_fits_shortens_nothing_and_one_too_short_stops_at_the_floor():
    fits = scale(300, 5, [_work(0.01)])  # 15 s of 236 s
    assert not fits["shortened"] and fits["attacks"]["fedsgd: inverting-gradients"]["to"] == 1500
    assert fits["line"] == "budget 5m: nothing shortened (optimization attacks estimated at 15s)"
    short = scale(10, 9, [_work(0.5)])
    assert short["attacks"]["fedsgd: inverting-gradients"]["to"] == FLOOR and not short["fits"]
    assert "shortened to 20 iterations (from 1500) (the floor)" in short["line"]
    assert "more than the budget leaves" in short["line"]
    assert scale(60, 0, [])["line"] == "budget 1m: no optimization attack in the plan; nothing shortened"


def test_a_tiny_budget_shortens_the_audit_and_says_so(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["audit", "--algorithm", "fedsgd", "--samples", "2", "--no-malicious", "--budget", "2s",
                 "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "budget 2s: optimization attacks shortened to 20 iterations (from 1500) (the floor)" in printed
    result = json.loads((out / "metrics.json").read_text())
    budget = result["time_budget"]
    assert budget["shortened"] and budget["seconds"] == 2 and budget["line"] in printed
    assert budget["seconds_until_report"] >= budget["seconds_before_attacks"] > 0  # what it took, beside the plan
    ig = budget["attacks"]["fedsgd: inverting-gradients"]
    assert ig["from"] == 1500 and ig["to"] == FLOOR and ig["seconds_per_iteration"] > 0
    ran = result["scenarios"]["fedsgd"]["attacks"]["inverting-gradients"]
    assert ran["iterations"] == FLOOR and ran["budget_factor"] == round(FLOOR / 1500, 3)  # the attack ran shortened
    assert result["config"]["budget"] == "2s" and result["quick"] is False
    assert shortened(result)  # reported as --quick is: a lower bound
    assert "lower bound of the leakage" in (out / "report.html").read_text()
