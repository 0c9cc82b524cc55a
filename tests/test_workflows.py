"""``fedleak simulate`` / ``fedleak attack`` as Python calls (fedleak.simulate_update, fedleak.attack_update):
the same files as the CLI, and the same refusals before any write."""

import json

import pytest
import torch

import fedleak


def test_simulate_then_attack_in_python_writes_what_the_cli_writes(tmp_path):
    lines = []
    folder = fedleak.simulate_update(tmp_path / "upd", data="digits", algorithm="fedavg", epochs=1, batch_size=2,
                                     samples=4, say=lines.append)
    assert (folder / "truth.safetensors").exists() and "N=4, 2 local steps" in lines[0]
    torch.manual_seed(0)
    scores = fedleak.attack_update(folder, tmp_path / "rec", attack="dimitrov",
                                   options={"iterations": 5, "labels": "reclabels"}, say=lines.append)
    on_disk = json.loads((tmp_path / "rec" / "metrics.json").read_text())
    assert on_disk["psnr"] == pytest.approx(scores["psnr"]) and (tmp_path / "rec" / "comparison.png").exists()
    assert len(scores["psnr_per_input"]) == 4


def test_attack_update_refuses_a_bad_truth_file_before_writing(tmp_path):
    folder = fedleak.simulate_update(tmp_path / "upd", data="digits", algorithm="fedsgd", samples=2, say=lambda s: None)
    (folder / "truth.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(fedleak.FedleakError, match="truth.safetensors"):
        fedleak.attack_update(folder, tmp_path / "rec", attack="dimitrov", options={"iterations": 2}, say=print)
    assert not (tmp_path / "rec").exists()
