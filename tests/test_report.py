"""Report rendering: grid geometry, clamping, grayscale, PNG round trip, HTML, Markdown tables."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
import pytest
import torch
from PIL import Image

from fedleak import FedleakError
from fedleak.report import comparison_grid, html_report, image_grid, markdown_table, save_png


def pixels(img: Image.Image) -> np.ndarray:
    return np.asarray(img)


def test_image_grid_size_and_upscaling():
    img = image_grid(torch.rand(5, 1, 28, 28))  # 28 px -> x3 = 84 px, 3 per row (ceil sqrt 5)
    assert img.mode == "RGB"
    assert img.size == (3 * (84 + 2) + 2, 2 * (84 + 2) + 2)
    img = image_grid(torch.rand(4, 3, 32, 32), nrow=4, pad=0)  # 32 -> x2 = 64
    assert img.size == (4 * 64, 64)
    img = image_grid(torch.rand(3, 3, 100, 80), nrow=2, pad=1)  # big enough: no upscaling
    assert img.size == (2 * 81 + 1, 2 * 101 + 1)
    img = image_grid(torch.rand(2, 3, 8, 8), nrow=8, scale=1, pad=0)  # fewer images than nrow
    assert img.size == (16, 8)


def test_image_grid_clamps_and_handles_grayscale_and_nan():
    images = torch.full((2, 1, 4, 4), 0.5)
    images[0] = 7.0  # above range -> white
    images[1] = -3.0  # below range -> black
    images[1, 0, 0, 0] = float("nan")  # NaN -> black
    arr = pixels(image_grid(images, nrow=2, pad=0, scale=1))
    assert arr.shape == (4, 8, 3)
    assert (arr[:, :4] == 255).all() and (arr[:, 4:] == 0).all()
    # grayscale is replicated to equal R, G, B; colours are kept
    gray = pixels(image_grid(torch.rand(1, 1, 6, 6), scale=1, pad=0))
    assert (gray[..., 0] == gray[..., 1]).all() and (gray[..., 1] == gray[..., 2]).all()
    colour = torch.zeros(1, 3, 2, 2)
    colour[0, 0] = 1.0
    assert (pixels(image_grid(colour, scale=1, pad=0)) == [255, 0, 0]).all()
    # nearest-neighbour upscaling: every source pixel becomes a 3x3 block
    src = torch.rand(1, 1, 5, 5)
    big = pixels(image_grid(src, scale=3, pad=0))[..., 0]
    assert big.shape == (15, 15)
    assert (big[::3, ::3] == big[1::3, 1::3]).all() and (big[::3, ::3] == big[2::3, 2::3]).all()
    assert np.allclose(big[::3, ::3] / 255.0, src[0, 0].numpy(), atol=0.5 / 255 + 1e-6)


def test_image_grid_input_checks():
    assert image_grid(torch.rand(3, 10, 10), scale=1, pad=0).size == (10, 10)  # a single CHW image
    assert image_grid(np.random.rand(2, 1, 5, 5), scale=1, pad=0).size == (10, 5)
    with pytest.raises(FedleakError, match="channels"):
        image_grid(torch.rand(2, 4, 8, 8))
    with pytest.raises(FedleakError, match="no images"):
        image_grid(torch.rand(0, 3, 8, 8))
    with pytest.raises(FedleakError, match="nrow"):
        image_grid(torch.rand(2, 3, 8, 8), nrow=0)


def test_comparison_grid_layout():
    originals = torch.ones(3, 1, 28, 28)  # white
    recs = torch.zeros(3, 1, 28, 28)  # black
    img = comparison_grid(originals, recs, nrow=3, pad=2, pad_value=0.5)
    cell = 84
    band = 2 * cell + 2 + 2 + 2
    assert img.size == (3 * (cell + 2) + 2, band + 2)
    arr = pixels(img)
    # originals on top, reconstructions directly below them
    assert (arr[2:2 + cell, 2:2 + cell] == 255).all()
    assert (arr[2 + cell + 2:2 + 2 * cell + 2, 2:2 + cell] == 0).all()
    # two rows of pairs when nrow < N
    two_rows = comparison_grid(torch.rand(4, 3, 32, 32), torch.rand(4, 3, 32, 32), nrow=2, pad=2)
    assert two_rows.size == (2 * (64 + 2) + 2, 2 * (2 * 64 + 6) + 2)


def test_comparison_grid_psnr_text():
    originals, recs = torch.ones(2, 1, 28, 28), torch.ones(2, 1, 28, 28)
    plain = comparison_grid(originals, recs, nrow=2)
    labelled = comparison_grid(originals, recs, psnr=[23.456, None], nrow=2)
    assert labelled.width == plain.width and labelled.height > plain.height
    text_band = pixels(labelled)[2 + 2 * 84 + 2:, :]  # below the reconstructions
    assert (text_band < 128).any()  # dark text was drawn on the white background
    with pytest.raises(FedleakError, match="one value per pair"):
        comparison_grid(originals, recs, psnr=[1.0])
    with pytest.raises(FedleakError, match="same shape"):
        comparison_grid(torch.rand(2, 3, 8, 8), torch.rand(3, 3, 8, 8))


def test_save_png_round_trip(tmp_path):
    img = image_grid(torch.rand(4, 3, 16, 16))
    path = save_png(img, tmp_path / "sub" / "grid.png")
    assert path.is_file()
    with Image.open(path) as reread:
        assert reread.format == "PNG" and reread.size == img.size
        assert (np.asarray(reread.convert("RGB")) == pixels(img)).all()
    from_tensor = save_png(torch.rand(2, 1, 28, 28), tmp_path / "t.png")
    with Image.open(from_tensor) as reread:
        assert reread.size == image_grid(torch.rand(2, 1, 28, 28)).size


def test_markdown_table():
    rows = [
        {"setting": "E=1 | m=5", "paper": 20.3, "ours": 19.876, "clients": 100, "ok": True},
        {"setting": "E=10\nB=1", "paper": None, "ours": float("nan")},
    ]
    text = markdown_table(rows, ["setting", "paper", "ours", "clients", "ok"])
    lines = text.splitlines()
    assert len(lines) == 4
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["setting", "paper", "ours", "clients", "ok"]
    assert re.fullmatch(r"\| -+ \| -+: \| -+: \| -+: \| -+ \|", lines[1])  # numbers right-aligned
    assert "E=1 \\| m=5" in lines[2] and "20.30" in lines[2] and "19.88" in lines[2] and "yes" in lines[2]
    assert "E=10 B=1" in lines[3] and lines[3].count("—") == 3 and "nan" in lines[3]
    assert len({len(line) for line in lines}) == 1  # columns padded to equal width
    assert "19.876" in markdown_table(rows, ["ours"], floatfmt=".3f")
    assert "12" in markdown_table([{"x": np.int64(12), "y": torch.tensor(0.5)}], ["x", "y"])
    with pytest.raises(FedleakError):
        markdown_table({"a": 1}, ["a"])


def test_html_report_is_self_contained(tmp_path):
    grid = image_grid(torch.rand(2, 1, 28, 28))
    cmp = comparison_grid(torch.rand(2, 3, 32, 32), torch.rand(2, 3, 32, 32), psnr=[18.0, 25.5])
    path = html_report(
        tmp_path / "out" / "report.html",
        "Audit of <client & co>",
        [
            {"title": "Results <script>alert(1)</script>",
             "text": "First paragraph & more.\n\nSecond <b>paragraph</b>.",
             "table": [{"attack": "fedavg", "psnr": 21.234}, {"attack": "<dlg>", "psnr": None}],
             "columns": ["attack", "psnr"],
             "images": [("originals <top>", grid), ("pairs", cmp)]},
            {"title": "Second", "table": {"rows": [{"a": 1.5}], "columns": ["a", "b"], "floatfmt": ".1f"}},
        ],
    )
    assert path == tmp_path / "out" / "report.html" and path.is_file()
    doc = path.read_text(encoding="utf-8")
    assert doc.startswith("<!DOCTYPE html>") and "<style>" in doc
    assert "<script" not in doc  # every piece of text escaped
    assert "Audit of &lt;client &amp; co&gt;" in doc
    assert "Results &lt;script&gt;alert(1)&lt;/script&gt;" in doc
    assert "Second &lt;b&gt;paragraph&lt;/b&gt;." in doc and "&lt;dlg&gt;" in doc
    assert "21.23" in doc and "—" in doc and "1.5" in doc
    assert "originals &lt;top&gt;" in doc
    assert not re.search(r"""(src|href)=["'](?!data:|#)""", doc)  # no external assets
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', doc)
    assert len(uris) == 2
    decoded = [Image.open(io.BytesIO(base64.b64decode(u))) for u in uris]
    assert [d.size for d in decoded] == [grid.size, cmp.size]
    assert (np.asarray(decoded[0].convert("RGB")) == pixels(grid)).all()


def test_html_report_rejects_bad_sections(tmp_path):
    with pytest.raises(FedleakError, match="unknown option.*'image'"):
        html_report(tmp_path / "r.html", "t", [{"title": "x", "image": []}])
    with pytest.raises(FedleakError, match="pairs"):
        html_report(tmp_path / "r.html", "t", [{"title": "x", "images": [Image.new("RGB", (2, 2))]}])
    with pytest.raises(FedleakError, match="must be a dict"):
        html_report(tmp_path / "r.html", "t", ["not a section"])
