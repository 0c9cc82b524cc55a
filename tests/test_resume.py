"""Resume never loses or silently reuses a result; names never leave --out; reports of partial runs.

A real ``fedleak run`` is SIGKILLed three times at random points and finished by a fourth run: the
results equal an uninterrupted run's. A changed attack option or a truncated job file is
recomputed and the old file kept aside. Setting and variant names that are paths stay inside the
output folder and never share a file.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedleak.config import parse_config
from fedleak.errors import FedleakError
from fedleak.runs.experiment import Runner
from fedleak.runs.naming import check_distinct, file_name
from fedleak.runs.run_report import report_run

SRC = str(Path(__file__).resolve().parents[1] / "src")


def tiny(**extra) -> dict:
    raw = {"name": "tiny", "data": {"dataset": "digits", "num_clients": 2, "samples_per_client": 2},
           "model": {"name": "femnist-cnn"}, "protocol": {"algorithm": "fedsgd"}, "threat": {"labels": "counts"},
           "variants": {"ig": {"attack": "inverting-gradients", "options": {"iterations": 6}}},
           "metrics": {"save_images": True}}
    raw.update(extra)
    return raw


def run_api(raw: dict, out: Path, log=None) -> dict:
    lines = [] if log is None else log
    return Runner(parse_config(raw), out, show_progress=False, log=lines.append).run()


def scores(out: Path) -> dict:
    """Every job's numbers except its wall time, keyed by its file."""
    rows = {}
    for path in sorted((out / "jobs").rglob("*.json")):
        record = json.loads(path.read_text())
        record.pop("seconds")
        record.pop("record_digest")  # a hash of the whole record, wall time included
        rows[str(path.relative_to(out))] = record
    assert all(path.with_suffix(".png").exists() for path in (out / "jobs").rglob("*.json"))
    return rows


def without_seconds(obj):
    if isinstance(obj, dict):
        return {k: without_seconds(v) for k, v in obj.items() if not k.startswith("seconds")}
    return obj


def test_sigkill_three_times_then_resume_equals_an_uninterrupted_run(tmp_path):
    import yaml

    raw = tiny(variants={"ig": {"attack": "inverting-gradients", "options": {"iterations": 40}},
                         "dlg": {"attack": "dlg-adam", "options": {"iterations": 30}}},
               data={"dataset": "digits", "num_clients": 3, "samples_per_client": 2})
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def command(out):
        return [sys.executable, "-m", "fedleak.cli", "--threads", "1", "run", str(config), "--out", str(out),
                "--no-progress"]

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the reference in this process, with the subprocesses' one thread
    try:
        run_api(raw, whole)
    finally:
        torch.set_num_threads(threads)
    rng = random.Random(12)
    kills = 0
    for _ in range(3):
        proc = subprocess.Popen(command(killed), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # wait for the imports (first job file or config.json), then kill at a random point
        deadline = time.monotonic() + 120
        while not (killed / "config.json").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 2.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
    assert kills >= 2, "the runs finished before they could be killed; the test no longer tests resuming"
    done = subprocess.run(command(killed), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert scores(killed) == scores(whole)
    summary, reference = (without_seconds(json.loads((d / "summary.json").read_text())) for d in (killed, whole))
    assert summary == reference and summary["jobs"] == summary["planned_jobs"] == 6


def test_a_changed_attack_option_is_recomputed_and_the_old_file_kept_aside(tmp_path):
    run_api(tiny(), tmp_path)
    job = tmp_path / "jobs" / "default" / "ig" / f"{json.loads((tmp_path / 'results.jsonl').read_text().splitlines()[0])['client']}.json"
    old = json.loads(job.read_text())
    changed = tiny(variants={"ig": {"attack": "inverting-gradients", "options": {"iterations": 7}}})
    log = []
    run_api(changed, tmp_path, log)
    new = json.loads(job.read_text())
    assert new["job_hash"] != old["job_hash"]
    assert new["attack_extras"] != old["attack_extras"] or new["psnr"] != old["psnr"]
    aside = job.with_name(job.name + ".stale")
    assert json.loads(aside.read_text()) == old
    assert any("different configuration" in line for line in log)
    # an unchanged rerun reuses everything: nothing recomputed, nothing moved aside
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "jobs").rglob("*.json")}
    log.clear()
    run_api(changed, tmp_path, log)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "jobs").rglob("*.json")} == stamps
    assert any("2 finished job(s) were reused" in line for line in log)
    assert not list((tmp_path / "jobs").rglob("*.stale-2"))


def test_a_truncated_job_file_is_recomputed_not_dropped(tmp_path):
    run_api(tiny(), tmp_path)
    job = sorted((tmp_path / "jobs").rglob("*.json"))[0]
    whole = job.read_text()
    job.write_text(whole[: len(whole) // 2])
    summary = run_api(tiny(), tmp_path)
    assert summary["jobs"] == summary["planned_jobs"] == 2
    assert json.loads(job.read_text())["psnr"] == json.loads(whole)["psnr"]
    assert job.with_name(job.name + ".stale").read_text() == whole[: len(whole) // 2]


def test_path_like_names_stay_inside_out_and_never_collide(tmp_path):
    out = tmp_path / "a" / "out"
    raw = tiny(settings=[{"name": ".."}, {"name": "../../escape"}, {"name": "/abs"}],
               variants={"a/b": {"attack": "inverting-gradients", "options": {"iterations": 3}},
                         "a b": {"attack": "inverting-gradients", "options": {"iterations": 3}},
                         "<b>x</b>": {"attack": "inverting-gradients", "options": {"iterations": 3}}},
               data={"dataset": "digits", "num_clients": 1, "samples_per_client": 2},
               description="<script>alert(1)</script>")
    summary = run_api(raw, out)
    assert summary["jobs"] == 9
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(out in p.parents for p in files), [p for p in files if out not in p.parents]
    assert len(list((out / "jobs").rglob("*.json"))) == 9
    assert {p.parent.parent.name for p in (out / "jobs").rglob("*.json")} == {"%2E.", "%2E.%2F..%2Fescape", "%2Fabs"}
    table = (out / "table.md").read_text()
    assert "<script>" not in table and "<b>" not in table and "&lt;b&gt;x&lt;/b&gt;" in table
    html = report_run(out).read_text()
    assert "<script>alert" not in html and "&lt;script&gt;" in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert html.count("<img ") == 9  # every job's picture, although every name needed escaping


@pytest.mark.parametrize("names", [["A", "a"], ["x", "x"]])
def test_colliding_or_duplicate_names_are_refused(tmp_path, names):
    raw = tiny(settings=[{"name": n} for n in names])
    with pytest.raises(FedleakError, match="setting"):
        run_api(raw, tmp_path)
    assert not (tmp_path / "jobs").exists()


def test_file_name_is_injective_and_one_plain_component():
    names = ["..", ".", "a/b", "a b", "a_b", "a%2Fb", "a%b", "ä", "a\\b", "a\x00b", ".hidden", "x" * 500,
             "x" * 499 + "y", "con", "lr0.1", "%2E."]
    mapped = [file_name(n) for n in names]
    assert len(set(mapped)) == len(names)
    for safe in mapped:
        assert safe not in (".", "..") and "/" not in safe and "\\" not in safe and "\x00" not in safe
        assert not safe.startswith(".") and len(safe) <= 120
    assert file_name("lr0.1") == "lr0.1" and file_name("a/b") == "a%2Fb"
    with pytest.raises(FedleakError, match="empty"):
        file_name("")
    check_distinct(["a", "b"], "variant")


def test_report_of_a_partial_run(tmp_path):
    raw = tiny(paper={"default": {"ig": {"psnr": 30.0}}})
    run_api(raw, tmp_path)
    (tmp_path / "summary.json").unlink()
    sorted((tmp_path / "jobs").rglob("*.json"))[0].unlink()
    html = report_run(tmp_path).read_text()
    assert "1 of 2 planned jobs finished" in html and "partial" in html
    assert "<table>" in html and "|---" not in html and "psnr (paper)" in html and ">30.00<" in html
    assert html.count("<img ") == 1
    with pytest.raises(FedleakError, match="not a `fedleak run` output folder"):
        report_run(tmp_path / "jobs" / "nothing")


def test_report_cli_on_a_partial_run(tmp_path, capsys):
    from fedleak.cli import main

    run_api(tiny(), tmp_path)
    (tmp_path / "summary.json").write_text('{"experiment": "ti')  # truncated as by a kill
    assert main(["report", str(tmp_path)]) == 0
    assert "2 of 2 planned jobs finished" in (tmp_path / "report.html").read_text()
