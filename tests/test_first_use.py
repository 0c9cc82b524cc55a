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
