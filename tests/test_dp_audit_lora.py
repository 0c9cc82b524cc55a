"""The DP-LoRA consistency check (issue #29 item 4, Opacus #820): a degraded update is flagged, a correct one not.

llama-tiny with rank-4 adapters on PEFT's default targets (q_proj, v_proj: 8 tensors of 512 coordinates), 8
causal-LM sequences, DP-SGD claim C = 1, σ = 1, η = 0.05, T = 3, B = 4. Power: each norm test holds at level
α = 0.01 (Bonferroni over 9 tests) by construction, so a correct update is flagged with probability ≤ 0.01 per
seed; a degraded adapter's norm sits at ≤ 0.07 where the interval starts at 0.29 (noise s·√512 ≈ 0.49), far
outside, on every seed. Measured on the loaded 2-core machine (load ≈ 7): the whole file 26.5 s (5 tests), most of it the
imports and the model build; no test above 10 s.
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
    for seed in range(3):
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
    dropped = {k: v for k, v in after.items() if "layers.1.self_attn.v_proj.lora_B" not in k}
    assert "adapter tensors missing" in " ".join(check_lora_update(model, before, dropped, CLAIM)["findings"])
    # σ claimed 10× above what was applied: the update carries a tenth of the claimed noise
    loud = LoraDPClaim(clip=1.0, noise=10.0, lr=0.05, steps=3, batch_size=4)
    assert check_lora_update(model, before, after, loud)["detected"]
    with pytest.raises(FedleakError, match="--noise"):
        LoraDPClaim(clip=1.0, noise=float("nan"), lr=0.05, steps=3, batch_size=4)
    with pytest.raises(FedleakError, match="--steps"):
        LoraDPClaim(clip=1.0, noise=1.0, lr=0.05, steps=0, batch_size=4)
