"""Rendering for people auditing a deployment: image grids, tables, one self-contained HTML file.

* :func:`image_grid` — a batch of images as one PIL image (grayscale shown as RGB, small images
  upscaled by an integer nearest-neighbour factor so 28 px digits stay readable).
* :func:`comparison_grid` — originals above their reconstructions, optional PSNR under each pair
  (the layout of the figures in Dimitrov et al. and Geiping et al.).
* :func:`markdown_table` — paper-vs-ours tables.
* :func:`html_report` — one HTML file, images embedded as base64 PNG data URIs, inline CSS, no
  external assets, every piece of text escaped.

Images given as tensors are pixels in ``[0, 1]`` (use ``DataSpec.denormalize`` on model inputs
first); values outside are clamped and NaN shows as black.
"""

from __future__ import annotations

import base64
import html
import io
import math
import numbers
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from ..errors import FedleakError, check_options
from .style import CSS

__all__ = ["image_grid", "comparison_grid", "save_png", "markdown_table", "html_report"]

MISSING = "—"


# ----------------------------------------------------------------------------------------------
# images


def _as_batch(images: Any, what: str) -> torch.Tensor:
    """(N, C, H, W) float tensor in [0, 1] with C = 3 (grayscale repeated), NaN -> 0."""
    if isinstance(images, np.ndarray):
        images = torch.from_numpy(images)
    if not isinstance(images, torch.Tensor):
        raise FedleakError(f"{what} must be a tensor of shape (N, C, H, W), got {type(images).__name__}")
    images = images.detach().to("cpu", torch.float32)
    if images.dim() == 2:  # one grayscale image (H, W)
        images = images[None, None]
    elif images.dim() == 3:  # one image (C, H, W)
        images = images[None]
    if images.dim() != 4:
        raise FedleakError(f"{what} must have shape (N, C, H, W), got {tuple(images.shape)}")
    if images.shape[0] == 0:
        raise FedleakError(f"{what} holds no images")
    channels = images.shape[1]
    if channels == 1:
        images = images.expand(-1, 3, -1, -1)
    elif channels != 3:
        raise FedleakError(f"{what} must have 1 (grayscale) or 3 (RGB) channels, got {channels}")
    return torch.nan_to_num(images, nan=0.0).clamp(0.0, 1.0)


def _upscale_factor(height: int, width: int, scale: Optional[int], min_size: int) -> int:
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
            raise FedleakError(f"scale must be a positive integer, got {scale!r}")
        return scale
    return max(1, math.ceil(min_size / max(1, min(height, width))))


def _cells(images: torch.Tensor, factor: int) -> np.ndarray:
    """(N, 3, H, W) in [0, 1] -> (N, H·f, W·f, 3) uint8, nearest-neighbour upscaled."""
    pixels = (images * 255.0).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    if factor > 1:
        pixels = pixels.repeat(factor, axis=1).repeat(factor, axis=2)
    return pixels


def _fill(pad_value: float) -> int:
    if not isinstance(pad_value, numbers.Real) or not 0.0 <= float(pad_value) <= 1.0:
        raise FedleakError(f"pad_value must be in [0, 1], got {pad_value!r}")
    return int(round(float(pad_value) * 255))


def _check_layout(nrow: Optional[int], pad: int, default: int) -> tuple[int, int]:
    if nrow is None:
        nrow = default
    if isinstance(nrow, bool) or not isinstance(nrow, int) or nrow < 1:
        raise FedleakError(f"nrow must be a positive integer, got {nrow!r}")
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise FedleakError(f"pad must be a non-negative integer, got {pad!r}")
    return nrow, pad


def image_grid(images_01, nrow: Optional[int] = None, pad: int = 2, *, scale: Optional[int] = None,
               min_size: int = 64, pad_value: float = 1.0) -> Image.Image:
    """Tile images ``(N, C, H, W)`` in ``[0, 1]`` (clamped) into one RGB PIL image.

    ``nrow`` images per row (default ``ceil(sqrt(N))``), ``pad`` pixels of ``pad_value`` (white)
    between and around tiles. Each image is enlarged by the integer factor ``scale`` (default:
    the smallest factor making its shorter side at least ``min_size`` pixels; 28 → 84, 32 → 64)
    with nearest-neighbour sampling, so pixels stay sharp. Grayscale (C = 1) becomes RGB.
    """
    batch = _as_batch(images_01, "images")
    count, _, height, width = batch.shape
    nrow, pad = _check_layout(nrow, pad, math.ceil(math.sqrt(count)))
    factor = _upscale_factor(height, width, scale, min_size)
    cells = _cells(batch, factor)
    cell_h, cell_w = cells.shape[1:3]
    ncol = min(nrow, count)
    rows = math.ceil(count / ncol)
    canvas = np.full((rows * (cell_h + pad) + pad, ncol * (cell_w + pad) + pad, 3), _fill(pad_value), np.uint8)
    for i, cell in enumerate(cells):
        r, c = divmod(i, ncol)
        top, left = pad + r * (cell_h + pad), pad + c * (cell_w + pad)
        canvas[top:top + cell_h, left:left + cell_w] = cell
    return Image.fromarray(canvas)


def _psnr_text(value) -> str:
    if value is None:
        return "n/a"
    value = float(value)
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf dB" if value > 0 else "-inf dB"
    return f"{value:.2f} dB"


def comparison_grid(originals, reconstructions, psnr: Optional[Sequence[Optional[float]]] = None,
                    nrow: Optional[int] = None, pad: int = 2, *, scale: Optional[int] = None,
                    min_size: int = 64, pad_value: float = 1.0) -> Image.Image:
    """Originals above their reconstructions, ``nrow`` pairs per row (default ``min(N, 8)``).

    Rows alternate: originals ``0..nrow-1``, their reconstructions, originals ``nrow..``, and so
    on. With ``psnr`` (one value per pair, ``None``/NaN shown as ``n/a``) a line of text under
    each pair gives it in dB, in PIL's default font. Both batches are ``(N, C, H, W)`` pixels in
    ``[0, 1]`` of the same shape (match reconstructions to originals first, e.g. with
    ``fedleak.metrics``); grayscale is shown as RGB, upscaling as in :func:`image_grid`.
    """
    top = _as_batch(originals, "originals")
    bottom = _as_batch(reconstructions, "reconstructions")
    if top.shape != bottom.shape:
        raise FedleakError(
            f"originals {tuple(top.shape)} and reconstructions {tuple(bottom.shape)} must have the same "
            f"shape (after grayscale → RGB); match them before plotting"
        )
    count, _, height, width = top.shape
    if psnr is not None:
        psnr = list(psnr)
        if len(psnr) != count:
            raise FedleakError(f"psnr needs one value per pair ({count}), got {len(psnr)}")
    nrow, pad = _check_layout(nrow, pad, min(count, 8))
    factor = _upscale_factor(height, width, scale, min_size)
    top_cells, bottom_cells = _cells(top, factor), _cells(bottom, factor)
    cell_h, cell_w = top_cells.shape[1:3]

    font = ImageFont.load_default()
    text_h = 0
    if psnr is not None:
        probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
        left, upper, right, lower = probe.textbbox((0, 0), "0123456789 dBn/a", font=font)
        text_h = (lower - min(upper, 0)) + 4

    ncol = min(nrow, count)
    rows = math.ceil(count / ncol)
    # One band = originals row + reconstruction row + PSNR line (or an extra gap) between bands.
    band_h = 2 * cell_h + pad + (text_h if psnr is not None else pad) + pad
    canvas = np.full((rows * band_h + pad, ncol * (cell_w + pad) + pad, 3), _fill(pad_value), np.uint8)
    for i in range(count):
        r, c = divmod(i, ncol)
        y, x = pad + r * band_h, pad + c * (cell_w + pad)
        canvas[y:y + cell_h, x:x + cell_w] = top_cells[i]
        canvas[y + cell_h + pad:y + 2 * cell_h + pad, x:x + cell_w] = bottom_cells[i]
    image = Image.fromarray(canvas)

    if psnr is not None:
        draw = ImageDraw.Draw(image)
        ink = (0, 0, 0) if _fill(pad_value) >= 128 else (255, 255, 255)
        for i, value in enumerate(psnr):
            r, c = divmod(i, ncol)
            text = _psnr_text(value)
            left, upper, right, _ = draw.textbbox((0, 0), text, font=font)
            x = pad + c * (cell_w + pad) + max(0, (cell_w - (right - left)) // 2)
            y = pad + r * band_h + 2 * cell_h + pad + 2 - min(upper, 0)
            draw.text((x, y), text, fill=ink, font=font)
    return image


def save_png(img, path) -> Path:
    """Write ``img`` (a PIL image, or an image batch for :func:`image_grid`) as PNG; returns the path."""
    if not isinstance(img, Image.Image):
        img = image_grid(img)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="PNG")
    return path


def _png_data_uri(img: Image.Image) -> str:
    buffer = io.BytesIO()
    img.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


# ----------------------------------------------------------------------------------------------
# tables


def _scalar(value: Any) -> Any:
    """numpy / torch scalars -> Python numbers."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _format_cell(value: Any, floatfmt: str) -> str:
    value = _scalar(value)
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return format(value, floatfmt)
    return " ".join(str(value).split())  # one line: newlines and runs of spaces -> one space


def _is_number(value: Any) -> bool:
    value = _scalar(value)
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_rows(rows, columns) -> tuple[list[dict], list[str]]:
    if isinstance(rows, dict) or not all(isinstance(row, dict) for row in rows):
        raise FedleakError("table rows must be a list of dicts")
    rows = list(rows)
    if columns is None:
        columns = []
        for row in rows:
            columns.extend(key for key in row if key not in columns)
    columns = [str(c) for c in columns]
    if not columns:
        raise FedleakError("a table needs at least one column")
    return rows, columns


def _numeric_columns(rows: list[dict], columns: list[str]) -> set[str]:
    numeric = set()
    for column in columns:
        values = [row.get(column) for row in rows if row.get(column) is not None]
        if values and all(_is_number(v) for v in values):
            numeric.add(column)
    return numeric


def markdown_table(rows: list[dict], columns: Optional[list[str]] = None, floatfmt: str = ".2f") -> str:
    """A GitHub-flavoured Markdown table of ``rows`` (dicts) restricted to ``columns``, in order.

    Floats use ``floatfmt``; ``None`` and missing keys show as "—"; booleans as yes/no; numeric
    columns are right-aligned; ``|`` in text is escaped, ``&``, ``<`` and ``>`` become HTML
    entities (Markdown renders raw HTML, so a name like ``<script>`` must not stay live) and
    newlines become spaces. ``columns`` defaults to the keys of the rows in first-seen order.
    """
    rows, columns = _check_rows(rows, columns)
    numeric = _numeric_columns(rows, columns)

    def cell(text: str) -> str:
        return html.escape(text, quote=False).replace("|", "\\|")

    header = [cell(c) for c in columns]
    body = [[cell(_format_cell(row.get(c), floatfmt)) for c in columns] for row in rows]
    widths = [max(3, len(header[j]), *(len(r[j]) for r in body)) for j in range(len(columns))]

    def line(cells: list[str]) -> str:
        padded = [
            text.rjust(widths[j]) if columns[j] in numeric else text.ljust(widths[j])
            for j, text in enumerate(cells)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * (widths[j] - 1) + ":" if columns[j] in numeric else "-" * widths[j] for j in range(len(columns))]
    return "\n".join([line(header), "| " + " | ".join(rule) + " |", *(line(r) for r in body)])


# ----------------------------------------------------------------------------------------------
# HTML


_SECTION_KEYS = ("title", "text", "table", "columns", "floatfmt", "images")


def html_table(rows, columns, floatfmt: str) -> str:
    rows, columns = _check_rows(rows, columns)
    numeric = _numeric_columns(rows, columns)
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for c in columns:
            klass = ' class="num"' if c in numeric else ""
            cells.append(f"<td{klass}>{esc(_format_cell(row.get(c), floatfmt))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def html_images(images) -> str:
    figures = []
    for item in images:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise FedleakError("section images must be a list of (caption, PIL.Image) pairs")
        caption, img = item
        if not isinstance(img, Image.Image):
            img = image_grid(img)
        caption = "" if caption is None else str(caption)
        figures.append(
            f'<figure><img src="{_png_data_uri(img)}" width="{img.width}" height="{img.height}" '
            f'alt="{html.escape(caption)}"><figcaption>{html.escape(caption)}</figcaption></figure>'
        )
    return '<div class="figures">' + "".join(figures) + "</div>"


def html_text(text) -> str:
    paragraphs = [p.strip() for p in str(text).split("\n\n") if p.strip()]
    return "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)


def html_report(path, title: str, sections: list[dict]) -> Path:
    """Write one self-contained HTML report to ``path`` and return the path.

    Each section is a dict with ``title`` and optional ``text`` (paragraphs separated by blank
    lines), ``table`` (a list of dict rows, with optional ``columns`` and ``floatfmt`` keys in
    the section; or a dict ``{"rows": ..., "columns": ..., "floatfmt": ...}``) and ``images``
    (a list of ``(caption, PIL.Image)``; image batches are tiled with :func:`image_grid`).
    Images are embedded as base64 PNG data URIs and the CSS is inline, so the file can be mailed
    or archived alone. All text is escaped.
    """
    from ..version import __version__

    if isinstance(sections, dict):
        raise FedleakError("sections must be a list of dicts")
    esc = html.escape
    parts = []
    toc = []
    for index, section in enumerate(sections, start=1):
        if not isinstance(section, dict):
            raise FedleakError(f"report section {index} must be a dict, got {type(section).__name__}")
        check_options(f"report section {index}", section, _SECTION_KEYS)
        heading = str(section.get("title", f"Section {index}"))
        anchor = f"section-{index}"
        toc.append(f'<li><a href="#{anchor}">{esc(heading)}</a></li>')
        body = [f'<section id="{anchor}"><h2>{esc(heading)}</h2>']
        if section.get("text"):
            body.append(html_text(section["text"]))
        table = section.get("table")
        if table is not None:
            if isinstance(table, dict):
                check_options(f"report section {index} table", table, ("rows", "columns", "floatfmt"))
                rows, columns = table.get("rows", []), table.get("columns")
                floatfmt = table.get("floatfmt", section.get("floatfmt", ".2f"))
            else:
                rows, columns = table, section.get("columns")
                floatfmt = section.get("floatfmt", ".2f")
            body.append(html_table(rows, columns, floatfmt))
        if section.get("images"):
            body.append(html_images(section["images"]))
        body.append("</section>")
        parts.append("".join(body))

    nav = f'<nav><strong>Contents</strong><ol>{"".join(toc)}</ol></nav>' if len(toc) > 1 else ""
    document = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(str(title))}</title><style>{CSS}</style></head>\n"
        f"<body><main><h1>{esc(str(title))}</h1>{nav}\n"
        + "\n".join(parts)
        + f"\n<footer>Generated by fedleak {esc(__version__)}.</footer></main></body></html>\n"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document, encoding="utf-8")
    return path
