"""Displays that must not mislead (issue 23 item 3): graded PSNR labels, quick verdicts, the swept
setting in the Setup, legends inside the figure, our-only tables without empty paper columns, and a
note when fewer client grids than clients are shown."""

import json

import torch
from PIL import Image, ImageDraw, ImageFont

from fedleak.audit.report import figures
from fedleak.audit.report import page as report
from fedleak.audit.plan.threats import HONEST
from fedleak.runs.job_files import REQUIRED_FIELDS, sealed
from fedleak.runs.run_report import comparison_rows, comparison_table, report_run


def test_psnr_grades_name_the_rec_rule_not_the_eye():
    assert figures.grade(20.5, 20.0)[0] == "recognizable"
    for near in (19.6, 19.9, 17.5):  # legible digits must not read "not recovered"
        assert figures.grade(near, 20.0)[0] == "borderline"
    assert figures.grade(12.0, 20.0)[0] == "not recognizable"
    assert figures.grade(None, 20.0)[0] == "no reconstruction"


def test_grid_tiles_are_wide_enough_for_their_labels():
    originals = torch.rand(2, 1, 8, 8)
    recs = torch.stack([torch.rand(1, 8, 8), torch.full((1, 8, 8), float("nan"))])
    grid = figures.labelled_grid(originals, recs, [19.7, None], 20.0)
    text = ImageDraw.Draw(Image.new("RGB", (1, 1))).textlength("no reconstruction", font=ImageFont.load_default())
    assert grid.width >= 2 * (text + 8)  # two tiles, each as wide as the longest label


def _result(quick=True, sweep=False):
    tm = {"verdict": "low", "rec_percent": 0.0, "psnr": 12.0, "strongest": "fedavg: AGIC [agic]"}
    point = {"value": 0.0, "threat_models": {HONEST: tm}, "scenarios": {}, "epsilon": {},
             "settings": {"defense": "dp-sgd:clip=1,noise=0"}}
    points = [point]
    if sweep:
        points = [{**point, "value": v, "settings": {"defense": f"dp-sgd:clip=1,noise={v:g}"}} for v in (0, 0.5, 1)]
    return {"quick": quick, "points": points, "data": "digits",
            "sweep": {"knob": "defense", "values": [0, 0.5, 1], "label": "noise multiplier σ"} if sweep else None,
            "config": {"model": "m:build", "clients": 1, "defense": ["dp-sgd:clip=1,noise=1"], "rounds": 50}}


def test_a_low_verdict_from_quick_attacks_says_so_and_is_not_green():
    result = _result(quick=True)
    boxes = report._verdict_boxes(result["points"][0], quick=True)
    assert "LOW leakage (shortened attacks)" in boxes and "--quick" in boxes
    assert report.COLOURS["low"] not in boxes
    assert "shortened" in report.verdict_sentence(HONEST, result["points"][0]["threat_models"][HONEST], quick=True)
    table = report._sweep_verdict_table(_result(quick=True, sweep=True))
    assert "low (shortened attacks)" in table and report.COLOURS["low"] not in table
    full = report._verdict_boxes(result["points"][0], quick=False)
    assert report.COLOURS["low"] in full and "shortened" not in full


def test_setup_shows_the_swept_defense_as_swept():
    text = report._setup_text(_result(sweep=True))
    assert "Defense: swept (noise multiplier σ = 0, 0.5, 1)" in text
    assert "Defense: dp-sgd:clip=1,noise=1." not in text


def test_leakage_curve_legend_stays_inside_the_image():
    import numpy as np

    long = "fedavg: Dimitrov et al. (simulation + epoch prior)"
    img = figures.leakage_curve("noise multiplier σ", [0, 0.5, 1, 2], {"Honest-but-curious server": [80, 40, 0, 0],
                                "Malicious server": [90, 90, 90, 90]},
                                {long: [30, 20, 10, 9], "malicious: Robbing the Fed imprint": [99, 99, 99, 99]},
                                [None, 112.0, 30.0, 5.0])
    pixels = np.asarray(img.convert("L"))
    # bbox_inches="tight" grew the canvas around the legends: the right edge column is background
    assert pixels[:, -1].min() > 200 and img.width > 700


def test_own_experiment_table_has_no_empty_paper_columns():
    stats = {"default": {"ig": {"clients": 2, "psnr": 20.0, "psnr_std": 1.0}}}
    rows, columns = comparison_rows(stats, {})
    assert not any("(paper)" in c for c in columns)
    assert "No paper numbers" in comparison_table("mine", "", stats, {})
    _, columns = comparison_rows(stats, {"default": {"ig": {"psnr": 30.0}}})
    assert "psnr (paper)" in columns


def test_report_of_own_run_titles_results_and_notes_hidden_grids(tmp_path):
    folder = tmp_path / "jobs" / "default" / "ig"
    folder.mkdir(parents=True)
    for i in range(4):
        record = {k: 0 for k in REQUIRED_FIELDS} | {"setting": "default", "variant": "ig", "client": f"c{i}",
                                                     "attack": "inverting-gradients", "job_hash": "h",
                                                     "psnr": 20.0 + i, "rec_percent": 50.0}
        (folder / f"c{i}.json").write_text(json.dumps(sealed(record)))  # as fedleak writes it
        Image.new("RGB", (8, 8)).save(folder / f"c{i}.png")
    (tmp_path / "config.json").write_text(json.dumps({"name": "mine", "planned_jobs": 4, "paper": {}}))
    page = report_run(tmp_path).read_text()
    assert "Ours vs the paper" not in page and "(paper)" not in page and "Results (mean ± std over clients)" in page
    assert "the grids of 3 of its 4 clients are shown" in page


def test_what_to_change_of_a_quick_sweep_carries_the_caveat():
    lines = report.what_to_change(_result(quick=True, sweep=True))
    assert any("verdict is low" in l for l in lines) and lines[-1] == report.QUICK_CAVEAT
    assert report.QUICK_CAVEAT not in report.what_to_change(_result(quick=False, sweep=True))
