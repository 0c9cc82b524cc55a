"""Tests for fedleak.metrics: pixel metrics against scikit-image, matching, Rec%, IIP, labels,
LPIPS (missing weights and a random-weights file) and evaluate()."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from skimage import data as skdata
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

import fedleak.metrics as M
from fedleak import ClientData, DataSpec, FedleakError, Reconstruction

RNG = np.random.default_rng(1234)


def _crops():
    """Real test images in [0, 1] as (C, H, W) float64 arrays, with noisy versions."""
    camera = skdata.camera()[120:184, 200:264].astype(np.float64) / 255.0  # 64×64 gray
    astronaut = skdata.astronaut()[80:128, 160:200].astype(np.float64) / 255.0  # 48×40 RGB
    out = []
    for img in (camera[None], astronaut.transpose(2, 0, 1)):
        for sigma in (0.02, 0.1, 0.3):
            noisy = np.clip(img + RNG.normal(0.0, sigma, img.shape), 0.0, 1.0)
            out.append((img, noisy))
        out.append((img, img[:, ::-1, :].copy()))  # structurally different, same statistics
    return out


def _sk_ssim(a: np.ndarray, b: np.ndarray) -> float:
    kw = dict(gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1.0)
    if a.shape[0] == 1:
        return structural_similarity(a[0], b[0], **kw)
    return structural_similarity(a, b, channel_axis=0, **kw)


# ----------------------------------------------------------------------------------------------
# pixel metrics


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ssim_matches_scikit_image(dtype):
    for img, other in _crops():
        ref = _sk_ssim(img, other)
        got = M.ssim(torch.tensor(img, dtype=dtype), torch.tensor(other, dtype=dtype))
        assert got.dim() == 0
        assert abs(float(got) - ref) < 1e-4, (img.shape, float(got), ref)
    # batched: one value per image
    img, noisy = _crops()[1]
    batch_a = torch.tensor(np.stack([img, img, noisy]))
    batch_b = torch.tensor(np.stack([img, noisy, img]))
    vals = M.ssim(batch_a, batch_b)
    assert vals.shape == (3,)
    assert float(vals[0]) == pytest.approx(1.0, abs=1e-7)
    assert float(vals[1]) == pytest.approx(_sk_ssim(img, noisy), abs=1e-4)
    assert float(vals[2]) == pytest.approx(float(vals[1]), abs=1e-6)  # symmetric


def test_ssim_small_images_and_data_range():
    g = torch.Generator().manual_seed(8)
    x = torch.rand(2, 1, 8, 8, generator=g)
    assert torch.allclose(M.ssim(x, x), torch.ones(2))
    assert (M.ssim(x, torch.rand(2, 1, 8, 8, generator=g)) < 1).all()
    img, noisy = _crops()[0]
    ref = structural_similarity(img[0] * 255, noisy[0] * 255, gaussian_weights=True, sigma=1.5,
                                use_sample_covariance=False, data_range=255.0)
    got = M.ssim(torch.tensor(img * 255), torch.tensor(noisy * 255), data_range=255.0)
    assert float(got) == pytest.approx(ref, abs=1e-4)


def test_mse_and_psnr_known_values():
    a = torch.zeros(3, 1, 4, 4)
    b = a.clone()
    b[0] += 0.1  # MSE 0.01 -> 20 dB
    b[1] += 0.01  # MSE 1e-4 -> 40 dB
    m = M.mse(a, b)
    assert torch.allclose(m, torch.tensor([1e-2, 1e-4, 0.0]), rtol=1e-5)
    p = M.psnr(a, b)
    assert p[0].item() == pytest.approx(20.0, abs=1e-4)
    assert p[1].item() == pytest.approx(40.0, abs=1e-3)
    assert math.isinf(p[2].item()) and p[2].item() > 0
    assert M.psnr(a, b, data_range=255.0)[0].item() == pytest.approx(20 + 20 * math.log10(255), abs=1e-3)
    img, noisy = _crops()[4]
    assert float(M.psnr(torch.tensor(img), torch.tensor(noisy))) == pytest.approx(
        peak_signal_noise_ratio(img, noisy, data_range=1.0), abs=1e-8)


def test_psnr_matrix_matches_pairwise():
    g = torch.Generator().manual_seed(9)
    a, b = torch.rand(5, 3, 6, 6, generator=g), torch.rand(4, 3, 6, 6, generator=g)
    pm = M.psnr_matrix(a, b, max_chunk_elements=200)  # forces several chunks
    assert pm.shape == (5, 4)
    for i in range(5):
        assert torch.allclose(pm[i], M.psnr(a[i].expand(4, -1, -1, -1), b), atol=1e-5)
    assert math.isinf(M.psnr_matrix(a, a)[2, 2].item())


def test_pixel_metric_errors():
    with pytest.raises(FedleakError, match="shapes differ"):
        M.psnr(torch.rand(2, 1, 4, 4), torch.rand(2, 1, 4, 5))
    with pytest.raises(FedleakError, match=r"\(N, C, H, W\)"):
        M.ssim(torch.rand(4, 4), torch.rand(4, 4))
    with pytest.raises(FedleakError, match="data_range"):
        M.psnr(torch.rand(1, 1, 4, 4), torch.rand(1, 1, 4, 4), data_range=0)


# ----------------------------------------------------------------------------------------------
# matching, Rec%, IIP, labels


def test_match_by_psnr_recovers_permutation():
    g = torch.Generator().manual_seed(0)
    originals = torch.rand(12, 3, 8, 8, generator=g)
    perm = torch.randperm(12, generator=g)
    recs = (originals[perm] + 0.05 * torch.randn(12, 3, 8, 8, generator=g)).clamp(0, 1)
    assignment = M.match_by_psnr(recs, originals)
    # original perm[k] was reconstructed at position k
    expected = [None] * 12
    for k, i in enumerate(perm.tolist()):
        expected[i] = k
    assert assignment == expected


def test_match_by_psnr_unequal_sizes():
    g = torch.Generator().manual_seed(1)
    originals = torch.rand(6, 1, 8, 8, generator=g)
    # N' < N: reconstructions of originals 4 and 1
    fewer = M.match_by_psnr(originals[[4, 1]] + 0.01, originals)
    assert fewer == [None, 1, None, None, 0, None]
    # N' > N: the true copies among random distractors are picked
    recs = torch.cat([torch.rand(5, 1, 8, 8, generator=g), originals[[2, 0, 5, 1, 4, 3]]])
    more = M.match_by_psnr(recs, originals)
    assert more == [6, 8, 5, 10, 9, 7]
    assert len(set(more)) == 6


def test_rec_percent():
    values = [25.0, 19.5, 20.0, 31.0]
    assert M.rec_percent(values, 20.0) == 50.0  # strict: 20.0 is not above 20
    assert M.rec_percent(values, 19.0) == 100.0
    assert M.rec_percent(torch.tensor(values), 19.0, matched=[True, True, False, True]) == 75.0
    with pytest.raises(FedleakError):
        M.rec_percent([], 20.0)


def test_label_metrics():
    true = torch.tensor([0, 0, 1, 2, 2, 2])
    est = torch.tensor([0, 1, 1, 1, 2, 2])
    # counts true (2,1,3) vs est (1,3,2): ½(1 + 2 + 1) = 2
    assert M.label_count_error(true, est, 4) == 2.0
    assert M.label_accuracy(true, est, 4) == pytest.approx(4 / 6)
    assert M.label_count_error(true, true.flip(0), 3) == 0.0
    one_hot = torch.nn.functional.one_hot(est, 4).float()
    assert M.label_count_error(true, one_hot, 4) == 2.0
    with pytest.raises(FedleakError, match="out of range"):
        M.label_count_error(true, torch.tensor([0, 7]), 4)


def test_iip():
    g = torch.Generator().manual_seed(2)
    originals = torch.rand(6, 3, 8, 8, generator=g)
    assert M.iip(originals.clone(), originals) == 1.0
    # swapping two reconstructions (without matching) misidentifies both
    swapped = originals[[1, 0, 2, 3, 4, 5]]
    assert M.iip(swapped, originals) == pytest.approx(4 / 6)
    # the matching undoes the swap
    assert M.iip(swapped, originals, assignment=M.match_by_psnr(swapped, originals)) == 1.0
    # heavy noise: lower
    noisy = originals + 2.0 * torch.randn(6, 3, 8, 8, generator=g)
    assert M.iip(noisy, originals) < 1.0
    # a pool image closer than the original steals the identification of original 0
    pool = originals[:1] + 1e-3
    rec = originals.clone()
    rec[0] += 2e-3
    assert M.iip(rec, originals, pool=pool) == pytest.approx(5 / 6)
    # duplicates tie: still identified; unmatched originals are not
    assert M.iip(originals, originals, pool=originals.clone()) == 1.0
    assert M.iip(originals[:3], originals) == pytest.approx(0.5)


# ----------------------------------------------------------------------------------------------
# LPIPS


def _random_lpips_file(path, seed=0):
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in M.LPIPS_WEIGHT_SHAPES.items():
        t = torch.randn(shape, generator=g) * 0.1
        if name.startswith("lin"):
            t = t.abs()  # LPIPS heads are non-negative
        elif name.endswith("bias"):
            t = t.abs() + 0.01
        tensors[name] = t
    save_file(tensors, str(path))
    return path


def test_lpips_without_weights(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDLEAK_LPIPS_WEIGHTS", raising=False)
    a = torch.rand(2, 3, 32, 32)
    value, reason = M.lpips(a, a)
    assert value is None
    assert "FEDLEAK_LPIPS_WEIGHTS" in reason and "\n" not in reason
    value, reason = M.lpips(a, a, weights=tmp_path / "missing.safetensors")
    assert value is None and "missing.safetensors" in reason
    bad = tmp_path / "corrupt.safetensors"
    bad.write_bytes(b"not a safetensors file")
    value, reason = M.lpips(a, a, weights=bad)
    assert value is None and "unusable" in reason and "\n" not in reason
    from safetensors.torch import save_file

    partial = tmp_path / "partial.safetensors"
    save_file({"features.0.weight": torch.zeros(64, 3, 11, 11)}, str(partial))
    value, reason = M.lpips(a, a, weights=partial)
    assert value is None and "lin0.weight" in reason


def test_lpips_channels(tmp_path):
    path = _random_lpips_file(tmp_path / "lpips.safetensors")
    four = torch.rand(2, 4, 32, 32, generator=torch.Generator().manual_seed(10))
    value, reason = M.lpips(four, four, weights=path)
    assert value is None and "1 or 3 channels" in reason
    spec = DataSpec("four", (4, 32, 32), 3, (0.5,) * 4, (0.5,) * 4)
    client = ClientData(four, torch.tensor([0, 1]))
    s = M.evaluate(Reconstruction(four.clone()), client, spec, lpips=path)
    assert s["lpips"] is None and "1 or 3 channels" in s["lpips_note"]
    with pytest.raises(FedleakError, match="lpips must be"):
        M.evaluate(Reconstruction(four.clone()), client, spec, lpips=1)


def test_lpips_random_weights(monkeypatch, tmp_path):
    path = _random_lpips_file(tmp_path / "lpips.safetensors")
    g = torch.Generator().manual_seed(3)
    a = torch.rand(3, 3, 32, 32, generator=g)
    b = (a + 0.2 * torch.randn(3, 3, 32, 32, generator=g)).clamp(0, 1)
    same, reason = M.lpips(a, a.clone(), weights=path)
    assert reason is None and same.shape == (3,)
    assert torch.allclose(same, torch.zeros(3), atol=1e-6)
    diff, _ = M.lpips(a, b, weights=path)
    assert (diff > 0).all() and torch.isfinite(diff).all()
    # grayscale 28×28 (FEMNIST-sized) is upsampled and runs; env var path works
    monkeypatch.setenv("FEDLEAK_LPIPS_WEIGHTS", str(path))
    gray, reason = M.lpips(a[:, :1, :28, :28], b[:, :1, :28, :28])
    assert reason is None and gray.shape == (3,) and (gray > 0).all()
    # the lpips package's key names load too (converted into one file)
    from safetensors.torch import load_file, save_file

    canonical = load_file(str(path))
    renamed = {}
    for k, v in canonical.items():
        if k.startswith("lin"):
            renamed[k.replace(".weight", ".model.1.weight")] = v
        else:
            idx = int(k.split(".")[1])
            slice_no = {0: 1, 3: 2, 6: 3, 8: 4, 10: 5}[idx]
            renamed[f"net.slice{slice_no}.{k.split('.', 1)[1]}"] = v
    torch.save({k: v for k, v in renamed.items() if k.startswith("lin")}, tmp_path / "alex.pth")
    save_file({k: v for k, v in renamed.items() if k.startswith("net")}, str(tmp_path / "net.safetensors"))
    out = M.convert_lpips_weights([tmp_path / "net.safetensors", tmp_path / "alex.pth"], tmp_path / "merged.safetensors")
    again, _ = M.lpips(a, b, weights=out)
    assert torch.allclose(again, diff)
    with pytest.raises(FedleakError, match="lacks LPIPS weight"):
        M.convert_lpips_weights([tmp_path / "alex.pth"], tmp_path / "bad.safetensors")


# ----------------------------------------------------------------------------------------------
# evaluate()

SPEC = DataSpec("toy-rgb", (3, 16, 16), 5, mean=(0.5, 0.4, 0.3), std=(0.25, 0.2, 0.3))


def _client(n=8, seed=0, spec=SPEC):
    g = torch.Generator().manual_seed(seed)
    pixels = torch.rand(n, *spec.shape, generator=g)
    labels = torch.randint(0, spec.num_classes, (n,), generator=g)
    return ClientData(spec.normalize(pixels), labels, "c0"), pixels


KEYS = {"mse", "psnr", "ssim", "lpips", "iip", "rec_percent", "threshold", "label_count_error",
        "label_accuracy", "num_inputs", "num_reconstructed", "nan_inputs", "psnr_per_input",
        "ssim_per_input", "assignment"}


def test_evaluate_exact_and_permuted():
    client, _ = _client()
    perm = torch.tensor([3, 0, 7, 1, 6, 2, 5, 4])
    rec = Reconstruction(client.inputs[perm].clone(), labels=client.labels[perm].clone())
    s = M.evaluate(rec, client, SPEC)
    assert KEYS <= set(s)
    json.loads(json.dumps(s, allow_nan=False))
    assert s["psnr"] == M.PSNR_CAP and all(v == M.PSNR_CAP for v in s["psnr_per_input"])
    assert s["mse"] == 0.0 and s["ssim"] == pytest.approx(1.0)
    assert s["rec_percent"] == 100.0 and s["iip"] == 1.0
    assert s["label_count_error"] == 0.0 and s["label_accuracy"] == 1.0
    assert s["threshold"] == 20.0 and s["lpips"] is None and "lpips_note" not in s
    assert s["num_inputs"] == s["num_reconstructed"] == 8 and s["nan_inputs"] == 0
    assert [perm[j].item() for j in s["assignment"]] == list(range(8))
    # without matching the permutation is scored as is
    u = M.evaluate(rec, client, SPEC, match=False)
    assert u["assignment"] == list(range(8)) and u["rec_percent"] < 100.0 and u["iip"] < 1.0


def test_evaluate_noisy_threshold_and_labels():
    client, pixels = _client(seed=1)
    g = torch.Generator().manual_seed(5)
    sigma = torch.tensor([0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4]).view(-1, 1, 1, 1)
    noisy = pixels + sigma * torch.randn(pixels.shape, generator=g)
    labels = client.labels.clone()
    labels[0] = (labels[0] + 1) % SPEC.num_classes
    s = M.evaluate(Reconstruction(SPEC.normalize(noisy), labels=labels), client, SPEC, match=False)
    per = s["psnr_per_input"]
    assert per == sorted(per, reverse=True)
    expected = M.psnr(noisy.clamp(0, 1), pixels)
    assert per == pytest.approx(expected.tolist(), abs=1e-4)
    assert s["psnr"] == pytest.approx(float(expected.mean()), abs=1e-4)
    assert s["rec_percent"] == pytest.approx(100 * sum(p > 20 for p in per) / 8)
    low = M.evaluate(Reconstruction(SPEC.normalize(noisy)), client, SPEC, threshold=5.0)
    assert low["threshold"] == 5.0 and low["rec_percent"] == 100.0
    assert low["label_count_error"] is None and low["label_accuracy"] is None
    assert s["label_count_error"] == 1.0 and s["label_accuracy"] == pytest.approx(7 / 8)
    cifar = DataSpec("CIFAR100", SPEC.shape, 100, SPEC.mean, SPEC.std)
    assert M.evaluate(Reconstruction(client.inputs), client, cifar)["threshold"] == 19.0


def test_evaluate_clip_vs_no_clip():
    client, pixels = _client(seed=2)
    over = pixels.clone()
    over[:, :, :4, :] += 0.8  # out of [0, 1] in places that are clamped away with clip=True
    rec = Reconstruction(SPEC.normalize(over))
    clipped = M.evaluate(rec, client, SPEC)
    raw = M.evaluate(rec, client, SPEC, clip=False)
    assert clipped["clip"] is True and raw["clip"] is False
    assert raw["mse"] > clipped["mse"] and raw["psnr"] < clipped["psnr"]
    assert raw["psnr_per_input"] == pytest.approx(M.psnr(over, pixels).tolist(), abs=1e-4)
    assert clipped["psnr_per_input"] == pytest.approx(M.psnr(over.clamp(0, 1), pixels).tolist(), abs=1e-4)


def test_evaluate_fewer_more_and_nan():
    client, pixels = _client(seed=3)
    # N' < N: originals 2 and 5 recovered exactly; the rest are scored against the mean image
    s = M.evaluate(Reconstruction(client.inputs[[5, 2]]), client, SPEC)
    assert s["num_reconstructed"] == 2
    assert s["assignment"] == [None, None, 1, None, None, 0, None, None]
    assert s["rec_percent"] == pytest.approx(25.0) and s["iip"] == pytest.approx(0.25)
    mean_img = SPEC.denormalize(torch.zeros(1, *SPEC.shape)).expand(8, -1, -1, -1)
    ref = M.psnr(mean_img, pixels)
    for i in (0, 1, 3, 4, 6, 7):
        assert s["psnr_per_input"][i] == pytest.approx(float(ref[i]), abs=1e-4)
    # N' > N: distractors are ignored by the matching
    extra = torch.cat([torch.randn(4, *SPEC.shape, generator=torch.Generator().manual_seed(7)), client.inputs])
    s = M.evaluate(Reconstruction(extra), client, SPEC)
    assert s["num_reconstructed"] == 12 and s["assignment"] == list(range(4, 12))
    assert s["rec_percent"] == 100.0
    # NaN reconstructions are failures, replaced by the mean image
    bad = client.inputs.clone()
    bad[1, 0, 0, 0] = float("nan")
    bad[4] = float("inf")
    s = M.evaluate(Reconstruction(bad), client, SPEC)
    assert s["nan_inputs"] == 2 and s["rec_percent"] == pytest.approx(75.0)
    json.loads(json.dumps(s, allow_nan=False))


def test_evaluate_dtype_grayscale_pool_and_lpips(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDLEAK_LPIPS_WEIGHTS", raising=False)
    spec = DataSpec("femnist", (1, 28, 28), 62, mean=(0.9,), std=(0.3,))
    client, pixels = _client(n=5, seed=4, spec=spec)
    g = torch.Generator().manual_seed(6)
    rec = Reconstruction((client.inputs + 0.05 * torch.randn(client.inputs.shape, generator=g)).half())
    s = M.evaluate(rec, client, spec, lpips=True)
    assert s["lpips"] is None and "FEDLEAK_LPIPS_WEIGHTS" in s["lpips_note"]
    assert s["threshold"] == 20.0
    # an IIP pool holding the reconstructions themselves takes every nearest neighbour
    pool = rec.inputs.float()
    s_pool = M.evaluate(rec, client, spec, iip_pool=pool)
    assert s["iip"] == 1.0 and s_pool["iip"] == 0.0
    weights = _random_lpips_file(tmp_path / "w.safetensors")
    s = M.evaluate(rec, client, spec, lpips=str(weights))
    assert s["lpips"] is not None and s["lpips"] > 0 and "lpips_note" not in s
    exact = M.evaluate(Reconstruction(client.inputs.double()), client, spec, lpips=weights)
    assert exact["lpips"] == pytest.approx(0.0, abs=1e-6)
    json.dumps(exact, allow_nan=False)


def test_evaluate_errors():
    client, _ = _client()
    with pytest.raises(FedleakError, match=r"per-image shape .*\(3, 8, 8\).*\(3, 16, 16\)"):
        M.evaluate(Reconstruction(torch.zeros(8, 3, 8, 8)), client, SPEC)
    empty = M.evaluate(Reconstruction(torch.zeros(0, 3, 16, 16)), client, SPEC)  # nothing recovered: scored, not an error
    assert empty["rec_percent"] == 0 and empty["iip"] == 0 and set(empty["assignment"]) == {None}
    with pytest.raises(FedleakError, match=r"expected \(N, 3, 16, 16\)"):
        M.evaluate(Reconstruction(torch.zeros(8, 3 * 16 * 16)), client, SPEC)
    other = DataSpec("other", (1, 16, 16), 5, (0.5,), (0.5,))
    with pytest.raises(FedleakError, match="client 'c0' inputs"):
        M.evaluate(Reconstruction(client.inputs), client, other)
    with pytest.raises(FedleakError, match="iip_pool"):
        M.evaluate(Reconstruction(client.inputs), client, SPEC, iip_pool=torch.zeros(3, 1, 16, 16))
    with pytest.raises(FedleakError, match="Reconstruction"):
        M.evaluate(client.inputs, client, SPEC)
