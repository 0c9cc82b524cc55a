"""The text audit end to end (fedleak audit --data text) and the Flower text federation (demo --task text)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("rouge_score")

from fedleak.attacks.base import ATTACKS, ensure_loaded  # noqa: E402
from fedleak.cli import main  # noqa: E402

ensure_loaded()
needs_dager = pytest.mark.skipif("dager" not in ATTACKS, reason="the dager attack is not registered")


@needs_dager
def test_text_audit_gpt2_lora_end_to_end(tmp_path, capsys):
    """gpt2-tiny with rank-32 adapters, FedSGD, 2 x 8 tokens: dager recovers both sequences exactly."""
    out = tmp_path / "report"
    code = main(["audit", "--data", "text", "--model", "gpt2-tiny", "--seq-len", "8", "--samples", "2",
                 "--algorithm", "fedsgd", "--lora", "32", "--attacks", "dager", "--no-malicious", "--quick",
                 "--quiet", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    result = json.loads((out / "metrics.json").read_text())
    assert result["modality"] == "text" and result["model"] == "gpt2-tiny"
    scores = result["scenarios"]["fedsgd"]["attacks"]["dager"]
    for key in ("rouge1", "rouge2", "rougeL", "exact_sequences", "token_accuracy"):
        assert key in scores
    assert scores["exact_sequences"] == 1.0 and scores["rouge1"] == 1.0
    assert scores["exactness"]["holds"] is True
    settings = result["points"][0]["settings"]
    assert settings["lora"] == 32 and settings["trainable_parameters"] < 100_000
    assert result["verdicts"]["honest-but-curious"] == "high"
    page = (out / "report.html").read_text()
    assert 'class="tok-ok"' in page and "Original (client)" in page and "ROUGE-1" in page


def test_text_audit_bad_inputs_one_line(tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text("just a few words", encoding="utf-8")
    for argv, expected in (
            (["--model", "lenet"], "not a language model"),
            (["--model", "gpt2-tiny", "--data-root", str(short), "--seq-len", "16"], "shorter than one sequence"),
            (["--model", str(tmp_path)], "no config.json")):
        code = main(["audit", "--data", "text", *argv, "--quiet", "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and expected in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


@needs_dager
def test_flower_text_federation_audited_live(tmp_path):
    """A FlowerTune-shaped node, two rounds (round 2 starts from B != 0): every reply is a LoRA
    update, attacked with dager live."""
    from fedleak.integrations.flower.demo import run_demo

    audit = run_demo(tmp_path, task="text", clients=1, rounds=2, samples=2, seq_len=8, lora=32, blocking=True)
    records = sorted(audit.records, key=lambda r: (r["round"], r["client"]))
    assert [r["status"] for r in records] == ["attacked"] * 2
    assert all(r["attack"] == "dager" and r["exactness"]["holds"] for r in records)
    # round 1 (B = 0): exact; round 2 (the node's own trained adapters, B != 0): 0 exact, ROUGE-1 0.67 measured
    assert records[0]["exact_sequences"] == 1.0 and records[1]["rouge1"] >= 0.5
    from fedleak.types import Update

    update = Update.load(records[-1]["update"])
    assert update.server_params and all("lora_" in k for k in update.server_params)
    assert any(float(v.abs().max()) > 0 for k, v in update.server_params.items() if "lora_B" in k)
    assert "Latest recovered text" in (tmp_path / "dashboard.html").read_text()
