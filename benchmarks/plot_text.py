"""Plot recovery (exact sequences) against batch × length from ``results/text_grid.json`` with the
exactness boundary N·L = width − 1 (the effective width of a bias-free LayerNorm's output) drawn."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).parent / "results"
WIDTHS = {"gpt2-tiny": 127, "minilm": 384}


def main() -> None:
    cases = json.loads((RESULTS / "text_grid.json").read_text())["cases"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    for ax, (model, attack) in zip(axes, (("gpt2-tiny", "dager"), ("minilm", "dager"), ("minilm", "tiger"))):
        for length, marker in ((16, "o"), (32, "s"), (64, "^")):
            pts = sorted((c["batch"], c.get("exact_sequences") or 0.0) for c in cases.values()
                         if c.get("model") == model and c.get("attack") == attack and c.get("length") == length
                         and "error" not in c)
            if pts:
                ax.plot([p[0] * length for p in pts], [p[1] for p in pts], marker=marker, label=f"L = {length}")
        ax.axvline(WIDTHS[model], color="red", linestyle="--", label=f"N·L = {WIDTHS[model]} (exactness limit)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens in the step N·L (batch × length)")
        ax.set_title(f"{attack} on {model}")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("exact sequences")
    fig.tight_layout()
    fig.savefig(RESULTS / "text_grid.png", dpi=110)


if __name__ == "__main__":
    main()
