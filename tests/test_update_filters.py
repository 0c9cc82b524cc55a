"""Update-level defenses deployments run (NVFlare PercentilePrivacy / SVTPrivacy, Flower local and central
DP): what each does to the update, the ε it reports, and bad specs rejected in one line (exit 2)."""

import math

import pytest
import torch

from fedleak.attacks import build
from fedleak.cli import main
from fedleak.errors import FedleakError
from fedleak.fl import client_update
from fedleak.fl.defenses import Defense
from fedleak.fl.update_filters import UpdateFilter, central_epsilon
from fedleak.models import MLP
from fedleak.types import ClientData, DataSpec, Protocol

SPEC = DataSpec("toy", (1, 8, 8), 10, (0.0,), (1.0,), pixel_range=(-4.0, 4.0))


def _delta(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn((20, 10), generator=g), "b": torch.randn(50, generator=g)}


def test_percentile_zeroes_the_small_entries_and_clips_the_rest():
    delta = _delta()
    out = UpdateFilter.parse("percentile:percentile=90,gamma=0.5").apply_update(delta)
    flat = torch.cat([v.reshape(-1) for v in out.values()])
    assert (flat != 0).sum() == 25 and flat.abs().max() <= 0.5  # top 10% of 250 entries, clipped


def test_svt_releases_at_most_the_fraction_and_reports_nvflares_epsilon():
    f = UpdateFilter.parse("svt:fraction=0.1,epsilon=1,noise_var=0.1,gamma=1,tau=0.5")
    out = f.apply_update(_delta(), torch.Generator().manual_seed(0))
    flat = torch.cat([v.reshape(-1) for v in out.values()])
    assert 0 < (flat != 0).sum() <= 25  # c = 25 draws with replacement: duplicates release one entry
    eps = f.spent(250)  # NVFlare ≥ 2.8's record: ε_t : ε_q = 1 : (2c)^{2/3}, ε_release = c·noise_var
    assert eps["n_upload"] == 25 and eps["epsilon_release"] == pytest.approx(2.5)
    assert eps["epsilon_threshold"] == pytest.approx(1 / (1 + 50 ** (2 / 3))) and eps["epsilon_total"] == pytest.approx(3.5)
    legacy = UpdateFilter.parse("svt-legacy:fraction=0.1,epsilon=1,noise_var=0.1,gamma=1,tau=0.5")
    assert legacy.spent(250)["epsilon_reported_by_nvflare"] is None


def test_flower_local_dp_noise_and_central_dp_clipping():
    delta = _delta()
    local = UpdateFilter.parse("flower-local-dp:clip=1,sensitivity=1,epsilon=1,delta=1e-5")
    noisy = torch.cat([v.reshape(-1) for v in local.apply_update(delta, torch.Generator().manual_seed(0)).values()])
    std = math.sqrt(2 * math.log(1.25 / 1e-5))
    assert noisy.std().item() == pytest.approx(std, rel=0.15)
    central = UpdateFilter.parse("flower-central-dp:noise=1,clip=2,clients=10")
    clipped = torch.cat([v.reshape(-1) for v in central.apply_update(delta).values()])
    assert clipped.norm().item() == pytest.approx(2.0, rel=1e-5)
    eps = central_epsilon(1.0)
    assert 4 < eps["epsilon_fedleak"] < 6 and ("epsilon_flower" in eps)
    if eps["epsilon_flower"] is not None:
        assert eps["epsilon_flower"] == pytest.approx(eps["epsilon_fedleak"], rel=0.05)
    else:
        assert "flwr[dp]" in eps["flower_note"]


def test_central_dp_does_not_hide_one_input_from_the_server_but_local_dp_does():
    torch.manual_seed(0)
    model = MLP(SPEC, (64,))
    data = ClientData(torch.randn((1, *SPEC.shape), generator=torch.Generator().manual_seed(1)).clamp(-3.5, 3.5),
                      torch.tensor([3]))
    central = client_update(model, data, Protocol("fedsgd"), defense="flower-central-dp:noise=1,clip=1e-4,clients=10")
    rec = build("analytic-fc").reconstruct(central, model, SPEC)
    assert rec.extras["certain"] is True  # clipping scales the update; the ratio and the verification survive
    local = client_update(model, data, Protocol("fedsgd"), defense="flower-local-dp:clip=1,sensitivity=1,epsilon=10,delta=1e-5")
    assert build("analytic-fc").reconstruct(local, model, SPEC).extras["certain"] is False


@pytest.mark.parametrize("spec, message", [
    ("percentile:percentile=200", "percentile must be"),
    ("svt:fraction=0", "fraction must be"),
    ("flower-local-dp:clip=1,epsilon=1,delta=1e-5", "missing sensitivity"),
    ("flower-central-dp:noise=1,clip=1", "missing clients"),
    ("percentile:gamma=abc", "gamma must be a number"),
    ("svt:bogus=1", "KEY=VALUE"),
    ("svt:replace=0.5", "replace must be 0 or 1"),
    ("svt:epsilon=1,epsilon_threshold=2", "budget split"),
    ("percentile:steps=1.5", "steps must be a whole number"),
])
def test_bad_filter_specs_are_one_line_errors_and_exit_2(spec, message, capsys):
    with pytest.raises(FedleakError, match=message):
        Defense.parse(spec)
    assert main(["audit", "--quick", "--defense", spec, "--out", "/nonexistent-fedleak-out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.split()[0] in err[0]
