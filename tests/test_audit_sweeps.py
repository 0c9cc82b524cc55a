"""Defenses in the audit: DP-SGD (ε from Opacus's accountants), secure aggregation, sweeps, and the
report in a real browser."""

import json
import os
import re
import shutil
import subprocess

import pytest
import torch
from PIL import Image

from fedleak.cli import main
from fedleak.fl import Defense
from fedleak.fl.accounting import PrivacyParameters, epsilon

TINY = ["--algorithm", "fedsgd", "--samples", "2", "--iterations", "100", "--quiet"]
SIGMAS = (0.0, 0.1, 1.0)
ROUNDS = 10


def run_cli(*args):
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def dp_sweep(tmp_path_factory):
    """A DP-SGD σ sweep on a fixed seed (σ = 0: no defense, the baseline of the curve)."""
    out = tmp_path_factory.mktemp("dp") / "rep"
    assert run_cli("audit", *TINY, "--defense", "dp-sgd:clip=1,noise=1", "--rounds", ROUNDS,
                   "--sweep", "defense=" + ",".join(map(str, SIGMAS)), "--out", out) == 0
    return out


def _opacus_epsilon(accountant, sigma, q, steps, delta):
    for _ in range(steps):
        accountant.step(noise_multiplier=sigma, sample_rate=q)
    return accountant.get_epsilon(delta=delta)


@pytest.mark.parametrize("name", ["rdp", "prv"])
def test_epsilon_is_opacus_accountant(name):
    from opacus.accountants import PRVAccountant, RDPAccountant

    params = PrivacyParameters(noise_multiplier=1.3, sample_rate=0.25, steps=40, delta=1e-5)
    expected = _opacus_epsilon(RDPAccountant() if name == "rdp" else PRVAccountant(), 1.3, 0.25, 40, 1e-5)
    assert epsilon(params, name) == pytest.approx(expected, rel=1e-9)
    assert 0 < expected < 20


def test_dp_sgd_noise_on_the_mean_is_sigma_clip_over_batch():
    """Abadi et al. Alg. 1: mean of clipped gradients + N(0, σ²C²)/B, whatever B."""
    generator = torch.Generator().manual_seed(0)
    for batch in (1, 4, 16):
        zeros = {"w": torch.zeros(batch, 20000)}
        noisy = Defense.parse("dp-sgd:clip=0.5,noise=2").apply(zeros, generator)["w"].mean(0)
        assert noisy.std().item() == pytest.approx(2 * 0.5 / batch, rel=0.03)
    big = {"w": torch.full((3, 100), 10.0)}  # per-example norm 100 -> clipped to C
    clipped = Defense("dp-sgd", 1e-12, clip=0.5).apply(big)["w"]
    assert clipped.norm(dim=1).sub(0.5).abs().max() < 1e-5


def test_dp_sigma_sweep_lowers_leakage_and_reports_opacus_epsilon(dp_sweep):
    from opacus.accountants import RDPAccountant

    result = json.loads((dp_sweep / "metrics.json").read_text())
    points = result["points"]
    assert [p["value"] for p in points] == list(SIGMAS) and result["sweep"]["label"] == "DP-SGD noise multiplier σ"
    psnr = [p["scenarios"]["fedsgd"]["attacks"]["inverting-gradients"]["psnr"] for p in points]
    assert psnr[-1] < psnr[0] - 5, psnr  # σ = 1: the reconstruction is noise
    assert points[0]["epsilon"] == {} and points[0]["settings"]["defense"] == "none"
    for p in points[1:]:
        eps = p["epsilon"]["fedsgd"]
        # FedSGD: one full-batch step per round, q = 1, T = rounds
        assert eps["steps"] == ROUNDS and eps["sample_rate"] == 1.0
        assert eps["epsilon_rdp"] == pytest.approx(_opacus_epsilon(RDPAccountant(), p["value"], 1.0, ROUNDS, 1e-5))
    assert points[2]["epsilon"]["fedsgd"]["epsilon_rdp"] < points[1]["epsilon"]["fedsgd"]["epsilon_rdp"]
    # nothing found at the audit's quick budget is not low (issue 20: low needs tuned attacks at >= 4x the budget)
    assert points[0]["verdicts"]["malicious"] == "high" and points[-1]["verdicts"]["honest-but-curious"] == "inconclusive"
    assert points[-1]["threat_models"]["honest-but-curious"]["evidence"] == "not-found"
    assert any("= 1" in line for line in result["what_to_change"])
    assert set(result["plots"]) == {"psnr-distribution.png", "leakage-curve.png"}


def test_secagg_sweep_leakage_falls_with_k(tmp_path):
    out = tmp_path / "rep"
    assert run_cli("audit", *TINY, "--no-malicious", "--sweep", "secagg=1,4,16", "--out", out) == 0
    points = json.loads((out / "metrics.json").read_text())["points"]
    attack = [p["scenarios"]["fedsgd"]["attacks"]["inverting-gradients"] for p in points]
    assert [a["psnr_per_input"].__len__() for a in attack] == [2, 8, 32]  # scored against all K clients' images
    psnr = [a["psnr"] for a in attack]
    assert psnr[0] > psnr[1] > psnr[2] and psnr[0] - psnr[2] > 3, psnr
    assert [p["settings"]["secagg"] for p in points] == [1, 4, 16]


CHECK = """<script>
window.addEventListener('load', () => {
  const images = Array.from(document.images);
  const loaded = images.filter(i => i.complete && i.naturalWidth > 0).length;
  const verdict = document.getElementById('verdicts');
  const mark = document.createElement('pre');
  mark.id = 'fedleak-check';
  mark.textContent = `images ${loaded}/${images.length}; verdict ${verdict ? verdict.offsetHeight : -1}px: ` +
                     (verdict ? verdict.innerText.replace(/\\s+/g, ' ') : '');
  document.body.appendChild(mark);
});
</script>"""


def _chromium():
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed but CI is set: the report must be checked in a browser")
        pytest.skip("no chromium installed (Debian package 'chromium'); the report's browser check needs it")
    return path


def _browser(chromium, profile, *args):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             "--window-size=1200,2000", "--virtual-time-budget=5000"]
    return subprocess.run([chromium, *flags, *args], capture_output=True, text=True, timeout=120)


def test_report_in_a_real_browser(dp_sweep, tmp_path):
    chromium = _chromium()
    page = tmp_path / "check.html"
    page.write_text((dp_sweep / "report.html").read_text().replace("</body>", CHECK + "</body>"))
    dom = _browser(chromium, tmp_path / "profile", "--dump-dom", page.as_uri()).stdout
    found = re.search(r"images (\d+)/(\d+); verdict (-?\d+)px: (.*)", dom)
    assert found, dom[-2000:]
    loaded, total, height, text = int(found[1]), int(found[2]), int(found[3]), found[4]
    # 2 plots + grids of the first and the last sweep value (IG and imprint each)
    assert total >= 6 and loaded == total
    assert height > 0 and "high" in text and ("low" in text or "inconclusive" in text)  # σ = 1: nothing found
    shot = tmp_path / "report.png"
    _browser(chromium, tmp_path / "profile", f"--screenshot={shot}", (dp_sweep / "report.html").as_uri())
    with Image.open(shot) as img:
        assert img.size == (1200, 2000)
        colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50  # rendered content, not a blank page
        red = sum(n for n, (r, g, b) in colours if r > 150 and g < 60 and b < 60)
        assert red > 1000  # the "high" verdict cell is drawn in red


def test_secure_aggregate_is_the_gradient_over_all_clients_images():
    """FedSGD, equal N: the N-weighted mean of K gradients = the gradient of the mean loss over K·N images."""
    import fedleak
    from fedleak.fl.secagg import concatenate, secure_aggregate

    spec, clients = fedleak.data.load("digits", num_clients=3, samples_per_client=2, seed=0)
    model = fedleak.models.build("femnist-cnn", spec, seed=0)
    protocol = fedleak.Protocol("fedsgd")
    aggregate = secure_aggregate(model, clients, protocol)
    joint = fedleak.client_update(model, concatenate(clients), protocol)
    assert aggregate.num_samples == 6 and aggregate.metadata["secure_aggregation"]["clients"] == 3
    for name, g in joint.gradient.items():
        assert torch.allclose(aggregate.gradient[name], g, atol=1e-6, rtol=1e-4), name
