"""The DP-LoRA consistency check (issue #29 item 4, Opacus #820): a degraded update is flagged, a correct one not.

llama-tiny with rank-4 adapters on PEFT's default targets (q_proj, v_proj: 8 tensors of 512 coordinates), 8
causal-LM sequences, DP-SGD claim C = 1, σ = 1, η = 0.05, T = 3, B = 4. Power: each norm test holds at level
α = 0.01 (Bonferroni over 9 tests) by construction, so a correct update is flagged with probability ≤ 0.01 per
seed (2 seeds here: ≤ 2 % false-alarm chance in all, and these seeds pass); a degraded adapter's norm sits at ≤ 0.07 where the interval starts at 0.29 (noise s·√512 ≈ 0.49), far
outside, on every seed. Measured on the loaded 2-core machine (load 7–9; two runs): the file 34–76 s (14 tests); the module's model
build 9–11 s (setup of the first test), the 2-seed correct-update test 5–11 s (the first per-example gradient
call warms torch.func up), the structure test (incl. a FlowerTune-keyed reply) 2–11 s, the CLI run (its own build, 2 clients) 5–15 s, the saved-reply
CLI run 6 s, the rest < 2 s each (bad input < 0.1 s).
"""

import pytest
import torch

from fedleak import data, models
from fedleak.errors import FedleakError
from fedleak.privacy.lora_check import LoraDPClaim, check_lora_update, simulate_dp_lora

CLAIM = LoraDPClaim(clip=1.0, noise=1.0, lr=0.05, steps=3, batch_size=4)


@pytest.fixture(scope="module")
def lora_model():
    spec, clients = data.load("text", num_clients=1, samples_per_client=8, seq_len=8, task="causal-lm")
    return models.build("llama-tiny", spec, seed=0, lora=4, lora_targets="peft", lora_warmup=2), clients[0]


def test_correct_dp_lora_updates_are_not_flagged(lora_model):
    model, client = lora_model
    for seed in range(2):
        before, after = simulate_dp_lora(model, client, CLAIM, seed=seed)
        result = check_lora_update(model, before, after, CLAIM, client="0")
        assert not result["detected"], result["findings"]
        assert len(result["tensors"]) == 8 and not result["structural"]


@pytest.mark.parametrize("degrade, words", [("unprocessed", "too little noise"), ("partial", "lora_B"),
                                            ("base-moves", "frozen (base) weights moved")])
def test_degraded_dp_lora_updates_are_flagged_with_the_setting(lora_model, degrade, words):
    model, client = lora_model
    before, after = simulate_dp_lora(model, client, CLAIM, seed=0, degrade=degrade)
    result = check_lora_update(model, before, after, CLAIM, client="3")
    assert result["detected"] and result["evidence"] == "proved"
    text = " ".join(result["findings"])
    assert words in text and "client 3" in text and ("setting" in text)
    if degrade == "partial":  # only the un-noised tensors are named
        bad = [t["name"] for t in result["tensors"] if not t["consistent"]]
        assert bad and all("lora_B" in name for name in bad)


def test_update_structure_and_claim_checked(lora_model):
    model, client = lora_model
    before, after = simulate_dp_lora(model, client, CLAIM, seed=0)
    again = simulate_dp_lora(model, client, CLAIM, seed=0)[1]
    assert all(torch.equal(after[k], again[k]) for k in after)  # deterministic given the seed
    dropped = {k: v for k, v in after.items() if "layers.1.self_attn.v_proj.lora_B" not in k}
    assert "adapter tensors missing" in " ".join(check_lora_update(model, before, dropped, CLAIM)["findings"])
    from fedleak.models.hf.lora import adapter_state

    flowertune = adapter_state(model, after)  # the reply as a FlowerTune client sends it (peft state-dict keys)
    assert not check_lora_update(model, before, flowertune, CLAIM)["detected"]
    flowertune.pop(next(iter(flowertune)))
    assert check_lora_update(model, before, flowertune, CLAIM)["structural"]
    # σ claimed 10× above what was applied: the update carries a tenth of the claimed noise
    loud = LoraDPClaim(clip=1.0, noise=10.0, lr=0.05, steps=3, batch_size=4)
    assert check_lora_update(model, before, after, loud)["detected"]
    with pytest.raises(FedleakError, match="--noise"):
        LoraDPClaim(clip=1.0, noise=float("nan"), lr=0.05, steps=3, batch_size=4)
    with pytest.raises(FedleakError, match="--steps"):
        LoraDPClaim(clip=1.0, noise=1.0, lr=0.05, steps=0, batch_size=4)


LORA_CLI = ["dp-audit", "--level", "lora", "--model", "llama-tiny", "--lora", "4", "--data", "text", "--samples", "8",
            "--rounds", "3", "--batch-size", "4", "--lr", "0.05", "--defense", "dp-sgd:clip=1,noise=1", "--quiet"]


def test_cli_lora_level_names_the_degraded_clients(tmp_path, capsys):
    """``fedleak dp-audit --level lora`` with #820's symptom on client 1 of 2: that client, and only it, is named.
    ≈ 8 s under load (model build, 3 clients × 3 steps)."""
    import json

    from fedleak.cli import main

    out = tmp_path / "o"
    assert main([*LORA_CLI, "--clients", "2", "--fault", "lora-unprocessed=1", "--out", str(out)]) == 0
    saved = json.loads((out / "dp-audit.json").read_text())
    check = saved["misconfiguration"]
    assert saved["level"] == "lora" and check["flagged_clients"] == [1] and check["evidence"] == "proved"
    assert "clients 1" in check["findings"][0] and "clip C = 1, σ = 1" in check["findings"][0]
    assert capsys.readouterr().out.startswith("Proved")


@pytest.mark.parametrize("args, named", [
    (["--lora", "0"], "--lora"),
    ([], "--lora"),
    (["--lora", "4", "--fault", "lora-partial=7"], "--fault"),
    (["--lora", "4", "--fault", "noise=2"], "--fault"),
    (["--lora", "4", "--rounds", "nan"], "--rounds"),
    (["--lora", "4", "--lora-reply", "only-one.pt"], "--lora-reply"),
    (["--lora", "4", "--lora-reply", "missing.pt,missing2.pt"], "--lora-reply"),
])
def test_cli_lora_bad_input_exits_2(tmp_path, capsys, args, named):
    """One line naming the option, exit 2, ``--out`` never made (each < 1 s: refused before the model build)."""
    from fedleak.cli import main

    out = tmp_path / "never"
    i = LORA_CLI.index("--lora")
    code = main([*LORA_CLI[:i], *LORA_CLI[i + 2:], *args, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and named in err[0], err
    assert not out.exists()


def test_saved_reply_is_checked_beside_the_simulated_clients(lora_model, tmp_path):
    """``--lora-reply BEFORE,AFTER``: a saved #820-degraded reply is named as client ``reply``. ≈ 5–15 s."""
    import json

    from fedleak.cli import main

    model, client = lora_model
    before, after = simulate_dp_lora(model, client, CLAIM, seed=4, degrade="unprocessed")
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in before.items()}, str(tmp_path / "before.safetensors"))
    save_file({k: v.contiguous() for k, v in after.items()}, str(tmp_path / "after.safetensors"))
    out = tmp_path / "o"
    assert main([*LORA_CLI, "--clients", "1", "--lora-reply", f"{tmp_path / 'before.safetensors'},{tmp_path / 'after.safetensors'}",
                 "--out", str(out)]) == 0
    check = json.loads((out / "dp-audit.json").read_text())["misconfiguration"]
    assert check["flagged_clients"] == ["reply"]
