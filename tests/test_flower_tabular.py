"""The Flower integration on records (issue 44 item 2): LeakageAudit attacks tabular replies through the tabular
modality, and the tabular demo federation (Adult nodes, the tabular MLP) is audited live."""

import torch

from fedleak import models
from fedleak.data import tabular
from fedleak.integrations.flower.scoring import choose_attack
from fedleak.types import Protocol


def test_the_tabular_modality_chooses_the_exact_attack_where_one_step_allows_it():
    spec, _ = tabular.load("adult", num_clients=1, samples_per_client=4, seed=0)
    model = models.build("tabular-mlp", spec, seed=0)
    one_step = Protocol("fedavg", epochs=1, batch_size=4, lr=0.05, reshuffle=False)
    assert choose_attack(model, one_step, spec, 4) == "spear"
    assert choose_attack(model, one_step, spec, 1) == "analytic-fc"
    two_steps = Protocol("fedavg", epochs=2, batch_size=4, lr=0.05, reshuffle=False)
    assert choose_attack(model, two_steps, spec, 4) == "tableak"
    assert choose_attack(model, one_step, None, 4) == "inverting-gradients"  # no spec: images, as before


def test_tabular_demo_federation_is_attacked_and_proved_live(tmp_path):
    from fedleak.integrations.flower.demo import run_demo

    torch.set_num_threads(1)
    audit = run_demo(tmp_path, task="tabular", clients=2, rounds=1, samples=4, blocking=True)
    records = sorted(audit.records, key=lambda r: r["client"])
    # measured (seed 0, Adult, 2 nodes x 4 records, one local step at lr 0.05, float32): SPEAR recovers every
    # record of both nodes, and the update recomputed from them matches the one sent (proved, not estimated)
    assert [r["status"] for r in records] == ["attacked", "attacked"]
    assert all(r["attack"] == "spear" and r["certain"] and r["exactness"]["verification"]["matches"] for r in records)
    assert all(r["leakage"]["level"] == "high" and r["leakage"]["evidence"].startswith("proved") for r in records)
    assert all(r["exact_match_rate"] == 1.0 and r["rec_percent"] == 100.0 for r in records)
    assert all(r["prior_accuracy"] < 1.0 for r in records)  # the marginal baseline beside the figure
    page = (tmp_path / "dashboard.html").read_text()
    assert "Latest recovered records (round 1)" in page and "marital-status" in page and "original" in page
