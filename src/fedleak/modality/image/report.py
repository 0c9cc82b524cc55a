"""The image audit's report section: the verdict's sentence on recognizable images, the imprint's verbatim count,
originals beside reconstructions as labelled grids, the PSNR plots (moved here from
:mod:`fedleak.audit.report.page`, which builds the page for every modality)."""

from __future__ import annotations

def verdict_sentence(title: str, tm: dict, prefix: bool = True, quick: bool = False) -> str:
    """A threat model's verdict: its strongest attack's share of recognizable images and best mean PSNR."""
    from ...audit.report.labels import QUICK_CAVEAT, verdict_label

    head = f"{title}: {verdict_label(tm['verdict'], quick)}. " if prefix else ""
    if tm["verdict"] == "not run":
        why = tm.get("not_run_reason") or "no attack of this threat model ran"
        return f"{title}: not evaluated ({why})."
    if tm.get("sentence"):  # a result that states its own (a Flower run: what the server saw, client-reported data)
        return f"{head}{tm['sentence']}"
    caveat = f" {QUICK_CAVEAT}" if quick and tm["verdict"] in ("low", "medium") else ""
    return (f"{head}Its strongest attack, {tm['strongest']}, reconstructs {tm['rec_percent']:.0f}% of a client's "
            f"images recognizably (best mean PSNR {tm['psnr']:.1f} dB).{caveat}")


def imprint_sentence(mal: dict) -> str:
    """The malicious result, stated once: verbatim count, Rec% threshold, Proposition 1's expectation."""
    if mal.get("sentence"):
        return mal["sentence"]
    n = mal["num_inputs"]
    return (f"The server ships a {mal['bins']}-bin imprint block ({mal['added_parameters']:,} parameters) in front of "
            f"the model. From the update it reads back {mal['verbatim_count']} of {n} images verbatim (PSNR above "
            f"{mal['verbatim_db']:.0f} dB); Proposition 1 of Fowl et al. expects {mal['expected_count']:.1f} of {n} "
            f"(inputs alone in their bin). {mal['rec_percent']:.0f}% of the images are recognizable (PSNR above "
            f"{mal['threshold']:g} dB), with no optimization, in {mal['seconds']:.2f} s.")


def results_body(point: dict, examples: dict) -> list:
    """The table, the imprint's sentence and one grid per (scenario, attack) of the first target."""
    from ...audit.report import figures
    from ...audit.report.tables import attack_series, threat_series
    from ...audit.report.tables import IMAGE
    from ...report import html_images, html_text

    body = [IMAGE.html(point)]
    if "malicious" in point["scenarios"]:
        body.append(html_text(imprint_sentence(point["scenarios"]["malicious"])))
    images = [(f"{scenario}: {attack}: originals (top) vs reconstructions (bottom), each with its PSNR; "
               f"{figures.LEGEND}",
               figures.labelled_grid(ex.originals, ex.reconstructions, ex.psnr, ex.threshold))
              for (scenario, attack), ex in examples.items()]
    body.append(html_images(images))
    return body


def make_plots(result: dict, threat_titles: dict) -> dict:
    """name -> (caption, PIL image): the PSNR distribution and, with a sweep, the leakage curve."""
    from ...audit.report import figures
    from ...audit.report.tables import attack_series, threat_series

    first = result["points"][0]
    series, threshold = {}, 20.0
    for key, scenario in first["scenarios"].items():
        attacks = {scenario["attack"]: scenario} if key == "malicious" else scenario["attacks"]
        for name, s in attacks.items():
            series[f"{key}: {s['title']}"] = s["psnr_per_input"]
            threshold = s["threshold"]
    plots = {"psnr-distribution": ("Per-image PSNR of each attack" + (
        f" at {result['sweep']['label']} = {first['value']:g}" if result.get("sweep") else ""),
        figures.psnr_distribution(series, threshold))}
    sweep = result.get("sweep")
    if sweep:
        values = [p["value"] for p in result["points"]]
        curves = threat_series(result["points"], threat_titles)
        psnr_curves = attack_series(result["points"], "psnr")
        epsilon = None
        if any(p.get("epsilon") for p in result["points"]):
            epsilon = [max((e.get("epsilon_rdp") for e in p.get("epsilon", {}).values()
                            if e.get("epsilon_rdp") is not None), default=None) for p in result["points"]]
        plots["leakage-curve"] = (f"Leakage vs {sweep['label']}" + (" with ε" if epsilon else ""),
                                  figures.leakage_curve(sweep["label"], values, curves, psnr_curves, epsilon,
                                                        threshold))
    return plots


def how_to_read() -> str:
    """How to read the image grids and their labels."""
    from ...audit.report.figures import BORDERLINE_DB

    return ("Each grid pairs a client's private image (top) with what the server reconstructed from the update alone "
            "(bottom), matched by PSNR (Hungarian assignment), with the pair's PSNR. The threshold (20 dB; 19 dB for "
            "CIFAR-100) is the papers' Rec% rule (Dimitrov et al., App. A.8), a count for comparing attacks, not a "
            "verdict on what an eye can read: pairs above it are labelled 'recognizable' (green), pairs up to "
            f"{BORDERLINE_DB:g} dB below it 'borderline' (amber: often still legible), lower ones "
            "'not recognizable' (red). Identified images "
            "(IIP) is the share whose reconstruction is closer to its original than to any other of the client's "
            "images. metrics.json holds every number, the full configuration and one entry per sweep value.")
