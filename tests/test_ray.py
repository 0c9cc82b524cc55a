"""The Ray executor: same job files as the local executor, a killed worker's job is retried.

One local Ray instance (2 CPUs, 127.0.0.1, no dashboard) is shared by the module: starting Ray
costs seconds. Every job runs with one torch thread on both executors, so results are bit-equal.
"""

import os
from pathlib import Path

import pytest
import torch

from fedleak.config import parse_config
from fedleak.errors import FedleakError
from fedleak.runs.execution import KILL_ONCE_ENV, RayExecutor
from fedleak.runs.experiment import run_experiment
from test_resume import scores  # every job's numbers but its wall time, by file

ray = pytest.importorskip("ray")

RAW = {"name": "tiny-ray", "data": {"dataset": "digits", "num_clients": 2, "samples_per_client": 2},
       "model": {"name": "femnist-cnn"}, "protocol": {"algorithm": "fedsgd"}, "threat": {"labels": "counts"},
       "variants": {"ig": {"attack": "inverting-gradients", "options": {"iterations": 8}},
                    "dlg": {"attack": "dlg-adam", "options": {"iterations": 6}}}}


@pytest.fixture(scope="module")
def cluster():
    src = str(Path(__file__).resolve().parents[1] / "src")
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src + os.pathsep + (saved or "")  # the workers import this checkout's fedleak
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                 log_to_driver=False, logging_level="ERROR")
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@pytest.fixture(scope="module")
def local_scores(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_experiment(parse_config(RAW), out, show_progress=False, log=lambda *_: None)
    finally:
        torch.set_num_threads(threads)
    return scores(out)


def test_ray_jobs_equal_the_local_executors(cluster, local_scores, tmp_path):
    lines = []
    summary = run_experiment(parse_config(RAW), tmp_path, show_progress=False, log=lines.append,
                             executor=RayExecutor(cpus_per_job=1))
    assert summary["jobs"] == 4 and len(local_scores) == 4
    assert scores(tmp_path) == local_scores
    assert sum(line.startswith("[") and "/4]" in line for line in lines) == 4  # one progress line per job
    assert ray.is_initialized()  # a cluster it did not start is left running


def test_a_killed_worker_is_retried_with_equal_results(cluster, local_scores, tmp_path, monkeypatch):
    """Through the CLI: ``fedleak run --executor ray --max-retries 2`` (on the module's Ray)."""
    import yaml

    from fedleak.cli import main

    marker = tmp_path / "killed-once"
    monkeypatch.setenv(KILL_ONCE_ENV, str(marker))
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(RAW))
    assert main(["run", str(config), "--out", str(tmp_path / "out"), "--no-progress", "--executor", "ray",
                 "--cpus-per-job", "1", "--max-retries", "2"]) == 0
    victim = int(marker.read_text())  # the worker that started the first job SIGKILLed itself
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)
    assert scores(tmp_path / "out") == local_scores


def test_without_retries_a_dead_worker_stops_the_run_with_one_line(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv(KILL_ONCE_ENV, str(tmp_path / "killed-once"))
    raw = {**RAW, "variants": {"ig": RAW["variants"]["ig"]}, "data": {**RAW["data"], "num_clients": 1}}
    with pytest.raises(FedleakError, match="worker died 1 time"):
        run_experiment(parse_config(raw), tmp_path / "out", show_progress=False, log=lambda *_: None,
                       executor=RayExecutor(max_retries=0))
    assert not list((tmp_path / "out").rglob("*.json.*"))  # nothing half-written or kept aside


def test_cli_executor_errors(tmp_path, monkeypatch, capsys):
    import sys

    import yaml

    from fedleak.cli import main

    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(RAW))
    assert main(["run", str(config), "--out", str(tmp_path / "o"), "--address", "1.2.3.4:1"]) == 2
    assert "only apply to --executor ray" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    assert main(["run", str(config), "--out", str(tmp_path / "o"), "--executor", "ray"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install -e ".[ray]"' in err[0]
