"""Flower's LocalDpMod audited with canary clients (issue #29, :mod:`fedleak.privacy.local_dp`).

lenet on digits, K = 4 clients of 5 samples, T = 3 rounds, 100 canary clients, LocalDpMod(clip 1, sensitivity 1,
ε 50, δ 1e-5): s ≈ 0.097 per client, the aggregate's claim μ ≈ 2.5-GDP. Power: with the mod missing on clients
1 and 3 their unclipped canaries (raw norm 10 C) separate by ≈ 20 null sds against a reference of ≈ 3, z-tests on
≈ 19 canaries each: p ≈ 0 (α/K = 0.0025 needed) — detected on any seed; the correct run at seed 0 is not
flagged (the claim test's false-alarm rate ≤ α = 0.01 by construction). Measured on the loaded 2-core machine
(load 7–9; two runs): the file 28–45 s (8 tests); each federation test 9–18 s (flwr's accountant import, 8 s,
falls on the first), the bit-for-bit test 3 s, bad input < 0.1 s each.
"""

import json

import numpy as np
import pytest

from fedleak.cli import main
from fedleak.fl.update_filters import flower_local_dp
from fedleak.privacy.audit import dp_audit
from fedleak.privacy.local_dp import LocalDp

DEFENSE = "flower-local-dp:clip=1,sensitivity=1,epsilon=50,delta=1e-5"
ARGS = dict(defense=DEFENSE, clients=4, model="lenet", rounds=3, canaries=100, samples=5, plot=False)


def test_mod_missing_on_two_clients_is_detected_and_named(tmp_path):
    out = tmp_path / "o"
    result = dp_audit(**ARGS, fault=["no-dp=1,3"], out=out)
    check = result["misconfiguration"]
    assert check["detected"] and check["flagged_clients"] == [1, 3]
    assert any("LocalDpMod is missing on clients 1, 3" in f for f in check["findings"])
    assert all(n["p_value"] < 0.01 for n in check["clients"] if n["client"] in (1, 3))
    saved = json.loads((out / "dp-audit.json").read_text())
    assert saved["setting"]["mod_missing_on"] == [1, 3] and saved["setting"]["defense"].startswith("flower-local-dp")


def test_noise_cut_inside_flowers_local_dp_mod_is_found():
    """LocalDpMod's own noise call patched to 0.1× (privacy/flower_faults.py): the claim (every node with the mod,
    computed from the configuration, never from the fault) is not in force: the aggregates separate by 21.8 null sds
    where the claim allows 2.83, and every node's replies carry 0.1× the claimed noise (χ² test on the residual)."""
    broken = dp_audit(**ARGS, fault=["noise=0.1"])
    correct = dp_audit(**ARGS)
    assert broken["setting"]["aggregate_noise"] == correct["setting"]["aggregate_noise"]
    assert broken["verdict"]["verdict"] == "not in force (estimated)"
    assert correct["verdict"]["verdict"] == "consistent at this budget"
    replies = broken["misconfiguration"]["reply_test"]
    assert broken["misconfiguration"]["nodes_flagged_by_replies"] == [0, 1, 2, 3]
    assert all(abs(r["noise_ratio"] - 0.1) < 0.01 for r in replies)
    assert correct["misconfiguration"]["nodes_flagged_by_replies"] == []
    assert all(abs(r["noise_ratio"] - 1) < 0.01 for r in correct["misconfiguration"]["reply_test"])


def test_correct_local_dp_federation_not_flagged_and_epsilons_per_client():
    result = dp_audit(**ARGS)
    check, acc = result["misconfiguration"], result["epsilon_accountant"]
    assert not check["detected"] and not check["flagged_clients"]
    assert acc["flower_per_round"] == 50 and acc["flower_basic_composition"] == 150
    # the canaries see the aggregate (a weaker release): the proved loss stays below the per-client ε
    assert result["epsilon_lower"] < acc["gdp_exact"]
    assert any("Claimed by Flower's LocalDpMod" in f for f in check["findings"])


def test_release_is_flowers_mod_bit_for_bit():
    import torch

    local = LocalDp(1.0, 1.0, 50.0, 1e-5)
    current = {"w": torch.zeros(3, 4), "b": torch.zeros(4)}
    final = {"w": torch.full((3, 4), 2.0), "b": torch.ones(4)}
    got = local.release(current, final, seed=7, t=2, k=1)
    state = np.random.SeedSequence([7, 1122, 2, 1]).generate_state(1)[0]
    want = flower_local_dp([v.numpy().copy() for v in current.values()], [v.numpy().copy() for v in final.values()],
                           1.0, 1.0, 50.0, 1e-5, np.random.RandomState(int(state) % 2 ** 32))
    assert torch.equal(got, torch.cat([torch.from_numpy(a).reshape(-1) for a in want]))
    low = dp_audit(**{**ARGS, "defense": "flower-local-dp:clip=2,sensitivity=1,epsilon=50,delta=1e-5", "rounds": 1,
                      "canaries": 20})
    assert any("sensitivity S = 1 is below its clipping norm" in f for f in low["misconfiguration"]["findings"])


@pytest.mark.parametrize("args, named", [
    (["--defense", DEFENSE], "--clients"),
    (["--defense", DEFENSE, "--clients", "4", "--fault", "noise=-1"], "--fault"),
    (["--defense", DEFENSE, "--clients", "4", "--fault", "no-dp=9"], "--fault"),
    (["--defense", DEFENSE, "--clients", "0"], "--clients"),
    (["--defense", "flower-local-dp:clip=1,sensitivity=1,epsilon=nan,delta=1e-5", "--clients", "4"], "--defense"),
])
def test_bad_input_exits_2(tmp_path, capsys, args, named):
    out = tmp_path / "never"
    code = main(["dp-audit", "--model", "lenet", "--out", str(out), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and named in err[0], err
    assert not out.exists()
