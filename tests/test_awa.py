"""AWA (Song et al. 2023): scenarios of §3, the interpolated per-epoch target (Eqs. 19–21), the
weighted + enhanced attack and the Bayesian optimization of its six weight parameters."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedleak import FedleakError, Protocol, Reconstruction
from fedleak.attacks import available, build
from fedleak.attacks.awa import PARAMETERS, Awa, awa_scenario
from fedleak.attacks.targets import interpolated_epoch_target, simulation_target
from fedleak.data import load
from fedleak.fl.client import client_update
from fedleak.metrics import evaluate

torch.set_num_threads(1)


class TinyBNNet(nn.Module):
    """conv-BN-ReLU ×2 and a linear head for 1×28×28 digits (AWA's three layer types)."""

    def __init__(self, width: int = 8, classes: int = 62) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, stride=2)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu2 = nn.ReLU()
        self.fc = nn.Linear(width * 196, classes)

    def forward(self, x):
        x = self.relu1(self.bn1(self.conv1(x)))
        x = self.relu2(self.bn2(self.conv2(x)))
        return self.fc(x.flatten(1))


@pytest.fixture(scope="module")
def digits():
    spec, clients = load("digits", num_clients=1, samples_per_client=4, seed=0)
    return spec, clients[0]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return TinyBNNet()


def _flat(params, names):
    return torch.cat([params[n].detach().flatten() for n in names])


def test_scenarios_follow_epochs_and_batches():
    assert awa_scenario(Protocol("fedsgd"), 4) == 1
    assert awa_scenario(Protocol("fedavg", epochs=1, batch_size=4), 4) == 1
    assert awa_scenario(Protocol("fedavg", epochs=3, batch_size=None), 4) == 2
    assert awa_scenario(Protocol("fedavg", epochs=1, batch_size=2), 4) == 3
    assert awa_scenario(Protocol("fedavg", epochs=2, batch_size=2), 4) == 4
    assert awa_scenario(Protocol("fedavg", epochs=2, batch_size=3), 4) == 4  # K = ⌈4/3⌉ = 2


def test_interpolated_target_is_exact_for_one_epoch(digits, model):
    spec, data = digits
    update = client_update(model, data, Protocol("fedavg", epochs=1, batch_size=2, lr=1e-3, reshuffle=False))
    obs_i, sim_i, n_i = interpolated_epoch_target(update, model)
    obs_s, sim_s, n_s = simulation_target(update, model, per_epoch_inputs=False)
    names = list(obs_s)
    assert n_i == n_s == 4
    assert torch.equal(_flat(obs_i, names), _flat(obs_s, names))
    assert torch.allclose(_flat(sim_i(data.inputs, data.labels), names), _flat(sim_s(data.inputs, data.labels), names))
    # the victim's true batches with no reshuffling: the simulation on the true data is the update
    assert torch.allclose(_flat(sim_i(data.inputs, data.labels), names), _flat(obs_i, names), rtol=1e-3, atol=1e-4)


def test_interpolated_target_approximates_each_epoch(digits, model):
    """Eqs. 19–21: for E = 2 with reshuffling, one simulated epoch on the true images from the
    interpolated θ_{e−1} is close to (θ_E − θ_0)/E — in direction and in size."""
    spec, data = digits
    update = client_update(model, data, Protocol("fedavg", epochs=2, batch_size=2, lr=1e-3), seed=5)
    names = list(update.server_params)
    for epoch in (1, 2):
        observed, simulate, n = interpolated_epoch_target(update, model, epoch=epoch)
        a = _flat(observed, names)
        b = _flat(simulate(data.inputs, data.labels), names)
        assert float(torch.cosine_similarity(a, b, dim=0)) > 0.9
        assert float(b.norm() / a.norm()) == pytest.approx(1.0, abs=0.15)
    assert torch.allclose(a, _flat(update.pseudo_gradient(), names) / 2)
    with pytest.raises(FedleakError, match="epoch must be"):
        interpolated_epoch_target(update, model, epoch=3)
    with pytest.raises(FedleakError, match="FedAvg"):
        interpolated_epoch_target(client_update(model, data, Protocol("fedsgd")), model)


def test_target_choice_per_scenario(digits, model):
    spec, data = digits
    attack = Awa(bayes_trials=0)
    shuffled = client_update(model, data, Protocol("fedavg", epochs=2, batch_size=2, lr=1e-3))
    fixed = client_update(model, data, Protocol("fedavg", epochs=2, batch_size=2, lr=1e-3, reshuffle=False))
    one_epoch = client_update(model, data, Protocol("fedavg", epochs=1, batch_size=2, lr=1e-3))
    assert attack.target(shuffled, model)[0] == "interpolated"
    assert attack.target(fixed, model)[0] == "simulation"  # same batches every epoch: exact
    assert attack.target(one_epoch, model)[0] == "simulation"
    assert Awa(bayes_trials=0, target="simulation").target(shuffled, model)[0] == "simulation"


def test_awa_reconstructs_scenario_4_with_known_labels(digits, model):
    spec, data = digits
    update = client_update(model, data, Protocol("fedavg", epochs=2, batch_size=2, lr=1e-3), seed=1,
                           metadata={"labels": data.labels.tolist()})
    rec = build("awa-no-bo", iterations=120, enhance_every=20).reconstruct(update, model, spec)
    assert rec.extras["scenario"] == 4 and rec.extras["target"] == "interpolated"
    assert rec.extras["label_strategy"] == "known"
    assert rec.labels.tolist() == data.labels.tolist()
    assert rec.extras["enhanced_layers"]  # Table 3's p_μ = 0.40, p_σ = 0.33 enhance some layers here
    baseline = evaluate(Reconstruction(torch.zeros_like(data.inputs)), data, spec)["psnr"]
    assert evaluate(rec, data, spec)["psnr"] > baseline + 1.0


def test_bayesian_optimization_searches_the_six_parameters(digits, model):
    spec, data = digits
    update = client_update(model, data.subset(2), Protocol("fedavg", epochs=1, batch_size=1, lr=1e-3), seed=0,
                           metadata={"labels": data.labels[:2].tolist()})
    rec = build("awa", iterations=15, bayes_trials=4, bayes_initial=3, seed=0).reconstruct(update, model, spec)
    trials = rec.extras["bayes_trials"]
    assert len(trials) == 4
    for trial in trials:
        theta = trial["theta"]
        assert set(theta) == set(PARAMETERS)
        assert all(1.0 <= theta[k] <= 1000.0 for k in PARAMETERS[:4])
        assert all(0.0 <= theta[k] <= 0.5 for k in PARAMETERS[4:])
    errors = [t["update_error"] for t in trials]
    best = min(range(4), key=errors.__getitem__)
    assert rec.extras["theta"] == trials[best]["theta"]  # the best trial's reconstruction is returned
    assert rec.extras["update_error"] == pytest.approx(errors[best], rel=1e-5)
    assert len({tuple(t["theta"].values()) for t in trials}) == 4  # the search moves
    again = build("awa", iterations=15, bayes_trials=4, bayes_initial=3, seed=0).reconstruct(update, model, spec)
    assert torch.equal(again.inputs, rec.inputs)  # deterministic given the seed


def test_variants_and_option_errors():
    names = available()
    assert "awa" in names and "awa-no-bo" in names
    assert build("awa-no-bo").options.bayes_trials == 0
    with pytest.raises(FedleakError, match="option .target. of attack .awa."):
        build("awa", target="magic")
    with pytest.raises(FedleakError, match="omega_range"):
        build("awa", omega_range=(10.0, 1.0))
    with pytest.raises(FedleakError, match="enhance_every"):
        build("awa", enhance_every=0)


def test_table4_preset_runs_cases_1_to_4_end_to_end(tmp_path):
    """The awa-table4 preset's four cases through the runner (digits, a narrow ResNet18, a short
    search): each job detects its case's scenario and picks the case's target (§3)."""
    import json

    from fedleak.config import apply_overrides, load_preset
    from fedleak.runs.experiment import Runner

    config = apply_overrides(load_preset("awa-table4"), quick=True, variants=["awa-quick"],
                             variant_options={"iterations": 4, "bayes_iterations": 3})
    config.data = {"dataset": "digits", "num_clients": 1, "samples_per_client": 4, "seed": 0}
    config.model = {"name": "resnet18", "seed": 0, "options": {"width": 0.125}}
    summary = Runner(config, tmp_path, show_progress=False, log=lambda *_: None).run()
    rows = {r["setting"]: r for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert sorted(rows) == ["case1", "case2", "case3", "case4"] and summary["jobs"] == 4
    for case, row in rows.items():
        extras = row["attack_extras"]
        assert extras["scenario"] == int(case[-1])
        assert extras["target"] == ("interpolated" if case == "case4" else "simulation")
        assert len(extras["bayes_trials"]) == 4 and row["num_reconstructed"] == 4
    assert (tmp_path / "table.md").read_text().count("awa-quick") == 4
