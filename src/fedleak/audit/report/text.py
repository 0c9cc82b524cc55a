"""The text audit's report pieces: tables, sentences, original vs recovered text, plots.

:mod:`.page` hands a text result to these functions through the text modality (:mod:`fedleak.modality.text`). The
side-by-side view shows each original sequence and the recovered one matched to it (the metrics'
linear assignment), every recovered token marked right (green) or wrong (red, struck through).
"""

from __future__ import annotations

import html

import numpy as np

from ...report import html_text
from .figures import _figure_to_image, _pyplot, _wrap
from .tables import TEXT, attack_series, threat_series
from ..judge.verdict import PARTIAL_ROUGE, TEXT_RULE

COLUMNS = TEXT.columns
CSS = """
.pairs td { vertical-align: top; font-family: ui-monospace, monospace; font-size: .85rem; }
.tok-ok { background: #d1f0dc; }
.tok-bad { background: #fbd5d1; text-decoration: line-through; }
.tok-none { color: var(--muted); font-style: italic; }
.pairs details.tokens { margin-top: .25rem; font-size: .75rem; color: var(--muted); }
.pairs details.tokens summary { cursor: pointer; }
"""


def verdict_sentence(title: str, tm: dict, prefix: bool = True) -> str:
    head = f"{title}: {tm['verdict'].upper()} leakage. " if prefix else ""
    if tm["verdict"] == "not run":
        return f"{title}: not evaluated (no attack of this threat model ran)."
    sentence = (f"{head}Its strongest attack, {tm['strongest']}, recovers {tm['rec_percent']:.0f}% of a client's "
                f"sequences exactly, token for token (best mean ROUGE-1 {tm['rouge1']:.2f}).")
    if tm.get("condition_failed") and tm["verdict"] != "high":
        sentence += (f" The exact attacks' condition did not hold ({tm['condition_failed']}): they could not decide, "
                     f"which is no evidence that the text is protected.")
    member = tm.get("membership")
    if isinstance(member, dict) and member.get("evidence"):  # audit/judge/membership.py
        decided = " — it decides the verdict" if tm.get("verdict_by") == "membership" else ""
        sentence += f" Membership of candidate documents: {member['evidence']}{decided}."
    return sentence


def imprint_sentence(mal: dict) -> str:
    n = mal["num_inputs"]
    return (f"The server ships a {mal['bins']}-bin imprint block ({mal['added_parameters']:,} parameters) right after "
            f"the token embedding. From the update it reads back {mal['verbatim_count']} of {n} sequences token for "
            f"token; Proposition 1 of Fowl et al. expects {mal['expected_count']:.1f} of {n} (sequences alone in "
            f"their bin). Mean ROUGE-1 {mal['rouge1']:.2f}, with no optimization, in {mal['seconds']:.2f} s.")


def _tokens_html(tokens) -> str:
    return " ".join(html.escape(t) for t in tokens)


def _marked_html(marks) -> str:
    if not marks:
        return '<span class="tok-none">nothing recovered</span>'
    return " ".join(f'<span class="{"tok-ok" if ok else "tok-bad"}">{html.escape(tok)}</span>' for tok, ok in marks)


def _pieces(tokens) -> list[str]:
    """Display tokens as they join into words: WordPiece ``##x`` attaches to the word before it; byte-level
    BPE / SentencePiece pieces carry their own leading space (``Ġ``/``▁`` shown as a space by the audit),
    ``Ċ`` is a line break; other tokens are separated by a space."""
    spaced = any(t[:1] == " " for t in tokens)
    out = []
    for i, tok in enumerate(tokens):
        tok = tok.replace("Ċ", " ⏎ ").replace("ĉ", " ")
        if tok.startswith("##"):
            out.append(tok[2:])
        elif spaced or i == 0:
            out.append(tok)
        else:
            out.append(" " + tok)
    return out


def words_html(tokens, marks=None) -> str:
    """The sequence as words a person reads (right/wrong marks kept on each piece when given)."""
    if marks is not None:
        if not marks:
            return '<span class="tok-none">nothing recovered</span>'
        pieces = _pieces([tok for tok, _ in marks])
        return "".join(f'<span class="{"tok-ok" if ok else "tok-bad"}">{html.escape(p)}</span>'
                       for p, (_, ok) in zip(pieces, marks))
    return html.escape("".join(_pieces(list(tokens))))


def _cell(words: str, tokens: str) -> str:
    return f'{words}<details class="tokens"><summary>tokens</summary>{tokens}</details>'


def pairs_html(caption: str, ex) -> str:
    """Original and recovered sequences side by side as words (tokens a click away), recovered pieces marked."""
    body = "".join(f"<tr><td>{i + 1}{' ✓' if exact else ''}</td>"
                   f"<td>{_cell(words_html(orig), _tokens_html(orig))}</td>"
                   f"<td>{_cell(words_html(None, rec), _marked_html(rec))}</td></tr>"
                   for i, (orig, rec, exact) in enumerate(zip(ex.originals, ex.recovered, ex.exact)))
    return (f"<h3>{html.escape(caption)}</h3><div class=\"table-wrap\"><table class=\"pairs\"><thead><tr><th>#</th>"
            f"<th>Original (client)</th><th>Recovered by the server (green: right token, red: wrong)</th>"
            f"</tr></thead><tbody>{body}</tbody></table></div>")


def rouge_distribution(series: dict):
    """Per-sequence ROUGE-1 of each attack (box + points; green: exact-looking ≥ 0.99)."""
    plt = _pyplot()
    labels = list(series)
    fig, ax = plt.subplots(figsize=(max(5.5, 1.6 * len(labels) + 2), 3.6))
    rng = np.random.default_rng(0)
    for i, label in enumerate(labels):
        values = np.array([v for v in series[label] if v is not None], dtype=float)
        if values.size == 0:
            continue
        ax.boxplot([values], positions=[i], widths=0.5, showfliers=False, patch_artist=True,
                   boxprops={"facecolor": "#dbe8f5", "edgecolor": "#0b5cad"}, medianprops={"color": "#0b5cad"})
        colours = ["#067647" if v >= 0.99 else "#b42318" for v in values]
        ax.scatter(i + rng.uniform(-0.15, 0.15, values.size), values, s=18, c=colours, zorder=3)
    ax.axhline(PARTIAL_ROUGE, color="#59636e", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels([_wrap(label) for label in labels], fontsize=8)
    ax.set_xlim(-0.6, max(0.4, len(labels) - 0.4))
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("ROUGE-1 per sequence")
    ax.set_title("Per-sequence ROUGE-1 of each attack", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return _figure_to_image(fig)


def leakage_curve(knob_label: str, values: list, exact: dict, rouge: dict, failed=None):
    """Exact sequences (%) per threat model (top) and mean ROUGE-1 per attack (bottom) against the knob;
    settings where an exact attack's condition failed (tokens beyond the span limit) are shaded grey."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 5.6), sharex=True)
    x = list(range(len(values)))
    for i, (label, ys) in enumerate(exact.items()):
        top.plot(x, [np.nan if y is None else y for y in ys], marker="osD^v"[i % 5], label=label)
    for i, (label, ys) in enumerate(rouge.items()):
        bottom.plot(x, [np.nan if y is None else y for y in ys], marker="osD^v"[i % 5], label=label)
    top.set_ylabel("sequences recovered exactly (%)")
    top.set_ylim(-5, 105)
    top.grid(alpha=0.3)
    top.legend(fontsize=8, loc="best")
    bottom.set_ylabel("mean ROUGE-1")
    bottom.set_ylim(-0.05, 1.05)
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=7, loc="best")
    bottom.set_xticks(x)
    bottom.set_xticklabels([f"{v:g}" for v in values])
    bottom.set_xlabel(knob_label)
    for axis in (top, bottom):
        for i, bad in enumerate(failed or []):
            if bad:
                axis.axvspan(i - 0.4, i + 0.4, color="#59636e", alpha=0.12, linewidth=0)
    if failed and any(failed):
        top.text(0.99, 0.02, "grey: the exact attacks' precondition fails (span full or noise-filled)", transform=top.transAxes,
                 ha="right", va="bottom", fontsize=7, color="#59636e")
    top.set_title(f"Text leakage vs {knob_label}", fontsize=10)
    return _figure_to_image(fig)


def make_plots(result: dict, threat_titles: dict) -> dict:
    first = result["points"][0]
    series = {}
    for key, scenario in first["scenarios"].items():
        attacks = {scenario["attack"]: scenario} if key == "malicious" else scenario["attacks"]
        for s in attacks.values():
            series[f"{key}: {s['title']}"] = s.get("rouge1_per_input", [])
    plots = {"rouge-distribution": ("Per-sequence ROUGE-1 of each attack", rouge_distribution(series))}
    if isinstance(result.get("membership"), dict):  # membership of candidate documents (audit/execute/membership.py)
        from .figures import roc_plot

        by = result["membership"].get("headline_statistic") or "the membership score"
        plots["membership-roc"] = (f"Membership of candidate documents: ROC of {by} (the stronger of the attacks run)",
                                   roc_plot(result["membership"]))
    sweep = result.get("sweep")
    if sweep:
        values = [p["value"] for p in result["points"]]
        exact = threat_series(result["points"], threat_titles)
        rouge = attack_series(result["points"], "rouge1")
        failed = [any(isinstance(a.get("exactness"), dict) and a["exactness"].get("holds") is False
                      for key, sc in p["scenarios"].items() if key != "malicious" for a in sc["attacks"].values())
                  for p in result["points"]]
        plots["leakage-curve"] = (f"Text leakage vs {sweep['label']}",
                                  leakage_curve(sweep["label"], values, exact, rouge, failed))
    return plots


HOW_TO_READ = ("Each table pairs a client's private sequence (left) with what the server recovered from the update "
               "alone (right), matched by the most equal tokens at equal positions (Hungarian assignment); ✓ marks a "
               "sequence recovered token for token. ROUGE-1/2/L are the F-measures of unigram, bigram and longest "
               "common subsequence overlap (rouge-score, on the decoded text); exact sequences is the share of "
               "sequences recovered token for token; padding is not scored. An exact attack states its condition "
               "(e.g. tokens in the step versus the layer's width or the LoRA rank) in the table. metrics.json "
               "holds every number, the full configuration and one entry per sweep value. Rule: " + TEXT_RULE)


def results_body(point: dict, examples: dict) -> list[str]:
    body = [TEXT.html(point)]
    if "malicious" in point["scenarios"]:
        body.append(html_text(imprint_sentence(point["scenarios"]["malicious"])))
    training = (point.get("settings") or {}).get("training")
    if isinstance(training, dict) and training.get("statement"):
        body.append(html_text(f"Client training: {training['statement']}."))
    if isinstance(point.get("membership"), dict) and point["membership"].get("sentence"):
        body.append(html_text(point["membership"]["sentence"]))
    for (scenario, attack), ex in examples.items():
        body.append(pairs_html(f"{scenario}: {attack}", ex))
    return body

