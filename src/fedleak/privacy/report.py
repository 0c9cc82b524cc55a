"""The DP audit's sentences and plot, in the verdict vocabulary of fedleak.

The rigorous one-run lower bound is *proved* privacy loss (at its confidence level, under the stated
hypothesis family); the Gaussian fit of Andrew et al. is *estimated*; both stand beside the
accountants' ε. A sentence never calls a federation safe: an audit can show that privacy is lost, and
how much at least, never that it is not.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    if x > 1000:  # a fit of perfectly separated canaries: the digits mean nothing
        return "> 1000"
    return f"{x:.2f}"


def summary_lines(result: dict) -> list[str]:
    """The verdict first (:mod:`.verdict`), then proved, estimated and claimed ε, then the estimated findings: every
    sentence follows from the one verdict, so none contradicts it."""
    from .verdict import verdict_lines

    acc, v = result["epsilon_accountant"], result["verdict"]
    est = result["epsilon_estimate"]
    lines = verdict_lines(v, result["threat"], result["delta"],
                          f"one-run audit of {result['canaries']} canary clients")
    lines.append(f"Claimed by the accountants for σ = {result['setting']['noise']:g}, {result['rounds']} rounds: "
                 f"ε = {_fmt(acc.get('opacus_prv'))} (Opacus PRV), {_fmt(acc.get('opacus_rdp'))} (Opacus RDP), "
                 f"{_fmt(acc.get('flower_rdp'))} (Flower RDP), {_fmt(acc['gdp_exact'])} (exact GDP).")
    lines.extend(_ratio(v, est))
    lines.extend(result["misconfiguration"]["findings"])
    return lines


def _ratio(v: dict, est: float) -> list[str]:
    claim, low = v["epsilon_claimed"], v["epsilon_proved"]
    if not (claim and math.isfinite(claim) and claim > 0 and low is not None and math.isfinite(low)):
        return []
    interval = v.get("epsilon_estimate_interval") or []
    spread = (f" (99 % interval {interval[0] / claim:.0%}–{interval[1] / claim:.0%})"
              if len(interval) == 2 and all(math.isfinite(x) and x < 1000 for x in interval) else "")
    return [f"The proved ε is {low / claim:.0%} of the claimed ε ({v['claim']})"
            + (f"; the estimate is {est / claim:.0%} of it{spread}." if math.isfinite(est) and est < 1000 else ".")]


def sgd_summary_lines(result: dict) -> list[str]:
    """The example-level audit's sentences (:mod:`.sgd_audit`): the verdict, proved, estimated, claimed, findings."""
    from .verdict import verdict_lines

    acc, s, v = result["epsilon_accountant"], result["setting"], result["verdict"]
    lines = verdict_lines(v, result["threat"], result["delta"],
                          f"one-run audit of {result['canaries']} gradient canaries")
    lines.append(f"Claimed by Opacus for σ = {s['noise']:g}, q = {s['sample_rate']:.3g}, {result['steps']} steps: "
                 f"ε = {_fmt(acc.get('opacus_prv'))} (PRV), {_fmt(acc.get('opacus_rdp'))} (RDP)"
                 + (f", {_fmt(acc['gdp_exact'])} (exact GDP)." if acc.get("gdp_exact") is not None else "."))
    lines.extend(_ratio(v, result["epsilon_estimate"]))
    lines.extend(result["misconfiguration"]["findings"])
    return lines


def plot(result: dict, scores: dict, included: np.ndarray, path: Path) -> None:
    """Histograms of the canary statistics (seen, unseen) beside the null N(0, 1) and the claimed μ-GDP's N(μ, 1)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from scipy.stats import norm

    mu_claim = result["misconfiguration"]["mu_claimed"]
    if mu_claim is None and result.get("level") == "example":  # LLR statistics (q < 1): no closed-form null curve
        scores = {t: v for t, v in scores.items() if t == "final-model"}
    threats = list(scores)
    fig, axes = plt.subplots(1, len(threats), figsize=(5.2 * len(threats), 3.6), squeeze=False)
    for ax, threat in zip(axes[0], threats):
        s = scores[threat]
        low, high = min(s.min(), -4.0), max(s.max(), (mu_claim or 0.0) + 4.0)
        bins = np.linspace(low, high, 50)
        ax.hist(s[~included], bins=bins, density=True, alpha=0.55, label="canaries not inserted")
        ax.hist(s[included], bins=bins, density=True, alpha=0.55, label="canaries inserted")
        x = np.linspace(low, high, 400)
        ax.plot(x, norm.pdf(x), "k--", lw=1, label="null N(0, 1)")
        eps = result["epsilon_accountant"].get("opacus_prv") or result["epsilon_accountant"].get("gdp_exact") or math.nan
        if mu_claim is not None:  # a Gaussian claim (q = 1); a subsampled DP-SGD claim has no such curve
            ax.plot(x, norm.pdf(x, mu_claim), "r-", lw=1.2, label=f"accountant: N(μ={mu_claim:.2f}, 1), ε={eps:.2f}")
        lb = result["lower_bounds"][threat]
        gaussian = not result["verdict"]["assumption"].startswith("assumption-free")
        ax.set_title(f"{threat}: proved ε ≥ {lb['epsilon_gdp' if gaussian else 'epsilon_approx_dp']:.2f}, "
                     f"estimated {result['estimates'][threat]['epsilon']:.2f}", fontsize=9)
        ax.set_xlabel("canary statistic (null standard deviations)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
