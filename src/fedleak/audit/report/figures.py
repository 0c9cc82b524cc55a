"""The audit report's figures: labelled image grids and matplotlib plots (saved as PNG).

* :func:`labelled_grid` — each original above its matched reconstruction (via
  :func:`fedleak.report.comparison_grid`), with the PSNR under the pair and a graded label
  (:func:`grade`): "recognizable" above the threshold δ (the papers' Rec% rule, green),
  "borderline" within :data:`BORDERLINE_DB` below it (amber: such images are often still legible),
  "not recognizable" lower (red), "no reconstruction" when the attack returned none.
* :func:`psnr_distribution` — per-image PSNR of every attack (one strip of points per attack, a box
  behind it) with the threshold δ as a line.
* :func:`leakage_curve` — the strongest attack's Rec% and mean PSNR per threat model against the
  sweep knob; with DP-SGD, ε on a second axis.
"""

from __future__ import annotations

import io
import math
from typing import Optional

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from ...report import comparison_grid

RED = (180, 35, 24)
GREEN = (6, 118, 71)
AMBER = (181, 71, 8)
#: how far below the Rec% threshold a pair is still called "borderline" rather than "not recognizable"
BORDERLINE_DB = 3.0
LEGEND = (f"green: recognizable (PSNR above the Rec% threshold), amber: borderline (within {BORDERLINE_DB:g} dB "
          "below it), red: not recognizable")


def grade(psnr, threshold: float) -> tuple[str, tuple]:
    """The label and colour of one pair: recognizable / borderline / not recognizable (or no reconstruction)."""
    if psnr is None or psnr != psnr:
        return "no reconstruction", RED
    if psnr > threshold:
        return "recognizable", GREEN
    if psnr > threshold - BORDERLINE_DB:
        return "borderline", AMBER
    return "not recognizable", RED


def labelled_grid(originals: torch.Tensor, reconstructions: torch.Tensor, psnr: list, threshold: float,
                  per_row: int = 8) -> Image.Image:
    """Pairs (original over reconstruction) in rows of ``per_row``, each captioned; unrecovered ones framed red."""
    font = ImageFont.load_default()
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    tiles = []
    for i in range(originals.shape[0]):
        rec = reconstructions[i:i + 1]
        missing = bool(torch.isnan(rec).all())
        value = psnr[i] if i < len(psnr) else None
        status, colour = grade(None if missing else value, threshold)
        pair = comparison_grid(originals[i:i + 1], torch.nan_to_num(rec, nan=1.0), pad=0)
        caption = ("-" if missing else f"{value:.1f} dB" if value is not None else "n/a")
        # the tile is as wide as its longest caption: no label is ever cut
        width = max(pair.width + 8, *(int(measure.textlength(t, font=font)) + 8 for t in (caption, status)))
        tile = Image.new("RGB", (width, pair.height + 34), (255, 255, 255))
        tile.paste(pair, ((width - pair.width) // 2, 4))
        draw = ImageDraw.Draw(tile)
        draw.rectangle([1, 1, tile.width - 2, pair.height + 6], outline=colour, width=2 if colour == GREEN else 3)
        draw.text((4, pair.height + 8), caption, fill=(0, 0, 0), font=font)
        draw.text((4, pair.height + 20), status, fill=colour, font=font)
        tiles.append(tile)
    if not tiles:
        return Image.new("RGB", (1, 1), (255, 255, 255))
    w, h = max(t.width for t in tiles), max(t.height for t in tiles)
    cols = min(per_row, len(tiles))
    rows = math.ceil(len(tiles) / cols)
    canvas = Image.new("RGB", (cols * (w + 4) + 4, rows * (h + 4) + 4), (255, 255, 255))
    for i, tile in enumerate(tiles):
        r, c = divmod(i, cols)
        canvas.paste(tile, (4 + c * (w + 4), 4 + r * (h + 4)))
    return canvas


def _figure_to_image(fig) -> Image.Image:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    buffer.seek(0)
    with Image.open(buffer) as img:
        return img.convert("RGB")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


#: PSNR shown at most (verbatim imprint readouts reach 100+ dB and would flatten the rest)
PLOT_CAP_DB = 60.0


def psnr_distribution(series: dict, threshold: float) -> Image.Image:
    """``series``: attack label -> per-image PSNR values (dB), drawn capped at :data:`PLOT_CAP_DB` ("≥ 60")."""
    plt = _pyplot()
    labels = list(series)
    fig, ax = plt.subplots(figsize=(max(5.5, 1.6 * len(labels) + 2), 3.6))
    rng = np.random.default_rng(0)
    for i, label in enumerate(labels):
        values = np.minimum(np.array([v for v in series[label] if v is not None], dtype=float), PLOT_CAP_DB)
        if values.size == 0:
            continue
        ax.boxplot([values], positions=[i], widths=0.5, showfliers=False, patch_artist=True,
                   boxprops={"facecolor": "#dbe8f5", "edgecolor": "#0b5cad"}, medianprops={"color": "#0b5cad"})
        colours = ["#067647" if v > threshold else "#b54708" if v > threshold - BORDERLINE_DB else "#b42318"
                   for v in values]
        ax.scatter(i + rng.uniform(-0.15, 0.15, values.size), values, s=18, c=colours, zorder=3)
    ax.axhline(threshold, color="#59636e", linestyle="--", linewidth=1)
    ax.text(len(labels) - 0.5, threshold, f" Rec% threshold {threshold:g} dB", va="bottom", ha="right",
            fontsize=8, color="#59636e")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels([_wrap(l) for l in labels], fontsize=8)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylabel(f"PSNR per image (dB, shown up to {PLOT_CAP_DB:.0f})")
    ax.set_title(f"Per-image PSNR (green: recognizable, amber: borderline, within {BORDERLINE_DB:g} dB, "
                 "red: not recognizable)", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return _figure_to_image(fig)


def _wrap(text: str, width: int = 18) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    return "\n".join(lines)


def leakage_curve(knob_label: str, values: list, curves: dict, psnr_curves: dict,
                  epsilon: Optional[list] = None, threshold: float = 20.0) -> Image.Image:
    """Rec% (top) and mean PSNR (bottom) of each threat model against the knob; ε on a twin axis."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 5.6), sharex=True)
    x = list(range(len(values)))
    markers = "osD^v"
    for i, (label, ys) in enumerate(curves.items()):
        top.plot(x, [np.nan if y is None else y for y in ys], marker=markers[i % 5], label=_wrap(label, 30))
    for i, (label, ys) in enumerate(psnr_curves.items()):
        bottom.plot(x, [np.nan if y is None else min(y, PLOT_CAP_DB) for y in ys], marker=markers[i % 5],
                    label=_wrap(label, 30))
    top.set_ylabel("recognizable images (%)")
    top.set_ylim(-5, 105)
    top.grid(alpha=0.3)
    # legends beside the axes (outside, right of ε's axis), wrapped: never over the curves or past the figure
    beside = 1.16 if epsilon is not None else 1.02
    top.legend(fontsize=7, loc="upper left", bbox_to_anchor=(beside, 1.0), borderaxespad=0.0)
    bottom.axhline(threshold, color="#59636e", linestyle="--", linewidth=1)
    bottom.set_ylabel(f"mean PSNR (dB, up to {PLOT_CAP_DB:.0f})")
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    bottom.set_xticks(x)
    bottom.set_xticklabels([f"{v:g}" for v in values])
    bottom.set_xlabel(knob_label)
    if epsilon is not None:
        twin = top.twinx()
        twin.plot(x, [np.nan if e is None else e for e in epsilon], color="#6e40c9", linestyle=":", marker="x",
                  label="ε (RDP)")
        twin.set_ylabel("ε (Opacus RDP accountant)", color="#6e40c9")
        finite = [e for e in epsilon if e is not None]
        if finite and max(finite) / max(min(finite), 1e-9) > 50:
            twin.set_yscale("log")
        twin.legend(fontsize=7, loc="lower left", bbox_to_anchor=(beside, 0.0), borderaxespad=0.0)
    top.set_title(f"Leakage vs {knob_label}", fontsize=10)
    return _figure_to_image(fig)


def roc_plot(entry: dict):
    """The ROC curve (log-scaled FPR with the 1 % and 0.1 % marks) as a PIL image."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 3.6))
    fpr, tpr = entry["roc"]["fpr"], entry["roc"]["tpr"]
    floor = min(0.5 * entry["fpr_resolution"], 1e-3)
    ax.step([max(f, floor) for f in fpr], tpr, where="post", color="#0b5cad",
            label=f"gradient alignment (AUC {entry['auc']:.3f})")
    grid = [floor * (1 / floor) ** (i / 50) for i in range(51)]
    ax.plot(grid, grid, color="#8c959f", linestyle=":", label="chance")
    for x, name in ((0.01, "1% FPR"), (0.001, "0.1% FPR")):
        ax.axvline(x, color="#d1242f", linewidth=0.7, alpha=0.6)
        ax.text(x, 0.02, name, rotation=90, fontsize=7, color="#d1242f", ha="right", va="bottom")
    ax.set_xscale("log")
    ax.set_xlim(floor, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"false-positive rate (resolution 1/{entry['non_members']})")
    ax.set_ylabel("true-positive rate")
    ax.set_title(f"Membership of {entry['candidates']} candidate documents", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return _figure_to_image(fig)
