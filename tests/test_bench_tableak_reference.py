"""benchmarks/bench_tableak_reference.py: bad input (one line, exit 2), the skip without the reference code, and
the side-by-side summary (only batches both implementations finished; the CPU ratio). The run itself needs the
reference checkout and minutes of CPU: it is the benchmark, not a test."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_tableak_reference.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_tableak_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv, needle", [
    (["--settings", "adult:0"], "--settings: 'adult:0'"),
    (["--settings", "mnist:32"], "--settings: 'mnist:32'"),
    (["--settings", "adult:32:fedavg-e1-m64"], "--settings: 'adult:32:fedavg-e1-m64'"),  # m > N
    (["--settings", "adult:32:fedsgd"], "--settings: 'adult:32:fedsgd'"),
    (["--implementations", "fedleak,other"], "--implementations"),
    (["--restarts", "0"], "--restarts must be at least 1"),
    (["--settings", "adult:32:fedavg-e1-m8", "--implementations", "fedleak-bfloat16"], "FedSGD settings only"),
])
def test_bad_arguments_are_one_line_and_exit_2(bench, tmp_path, capsys, argv, needle):
    out = tmp_path / "r.json"
    assert bench.main([*argv, "--out", str(out), "--reference", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and not out.exists()


def test_a_foreign_results_file_is_refused_not_overwritten(bench, tmp_path, capsys):
    out = tmp_path / "r.json"
    out.write_text(json.dumps({"format": "something-else", "rows": []}))
    assert bench.main(["--out", str(out), "--reference", str(tmp_path)]) == 2
    assert "not a results file of this benchmark" in capsys.readouterr().err
    assert json.loads(out.read_text())["format"] == "something-else"


def test_a_folder_that_is_not_the_reference_is_bad_input(bench, tmp_path, capsys):
    assert bench.main(["--out", str(tmp_path / "r.json"), "--reference", str(tmp_path)]) == 2
    assert "not a checkout of eth-sri/tableak" in capsys.readouterr().err


def test_without_the_reference_it_says_so_and_writes_nothing(bench, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert bench.main(["--out", str(out), "--reference", str(tmp_path / "absent")]) == 0
    assert capsys.readouterr().out.startswith("skipped: the reference code is not at") and not out.exists()


def _row(impl, batch, accuracy, cpu):
    metric = {"accuracy": accuracy, "categorical_accuracy": accuracy, "continuous_accuracy": accuracy,
              "exact_match_rate": 0.0}
    return {"dataset": "adult", "records": 32, "restarts": 30, "iterations": 1500, "batch": batch,
            "implementation": impl, "reference_metric": metric,
            "fedleak_metric": {**metric, "random": {"accuracy": 0.25}, "prior": {"accuracy": 0.5}},
            "cpu_seconds": cpu, "load_average": [2.0, 2.0, 2.0]}


def test_the_summary_compares_only_batches_both_finished(bench):
    rows = [_row("fedleak", 0, 0.8, 50.0), _row("reference", 0, 0.7, 600.0), _row("fedleak", 1, 0.9, 70.0),
            _row("reference", 1, 0.8, 800.0), _row("fedleak", 2, 0.1, 60.0)]  # batch 2: the reference unfinished
    (entry,) = bench.summary(rows)
    assert entry["batches"] == [0, 1]
    assert entry["fedleak"]["reference_metric"]["accuracy"] == [0.8, 0.9]
    text = bench.table(rows)
    assert "| fedleak | 85.0 ± 7.1 |" in text and "| reference | 75.0 ± 7.1 |" in text
    assert "| 2 of 2 | 60 | 11.7× |" in text  # 700 / 60 CPU-s


def test_merge_keeps_one_row_per_batch_and_implementation_the_later_file_winning(bench, tmp_path, capsys):
    """The implementations run as separate jobs (the reference for hours), each into its own file, merged after."""
    first, second, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "m.json"
    bench._write(first, [_row("reference", 0, 0.7, 200.0), _row("fedleak", 0, 0.6, 40.0)])
    bench._write(second, [_row("fedleak", 0, 0.8, 15.0), _row("fedleak", 1, 0.75, 16.0)])
    assert bench.main(["--merge", str(first), str(second), "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert sorted((r["implementation"], r["batch"], r["cpu_seconds"]) for r in rows) == [
        ("fedleak", 0, 15.0), ("fedleak", 1, 16.0), ("reference", 0, 200.0)]
    (tmp_path / "bad.json").write_text("{}")
    assert bench.main(["--merge", str(first), str(tmp_path / "bad.json"), "--out", str(out)]) == 2


def test_other_draws_of_restarts_stay_out_of_the_side_by_side_and_get_their_own_lines(bench):
    rows = [_row("reference", 0, 0.80, 200.0), _row("fedleak", 0, 0.78, 15.0)]
    rows = [{**r, "seed": 42} for r in rows]
    rows.append({**_row("fedleak", 0, 0.82, 15.0), "seed": 42, "attack_seed": 7})
    (entry,) = bench.summary(rows)
    assert entry["fedleak"]["reference_metric"]["accuracy"] == [0.78]  # the main draw only
    assert "| adult | 32 | 30 × 1500 | 0 | fedleak: 78.0, 82.0 · reference: 80.0 |" in bench.seed_table(rows)
    assert bench.seed_table(rows[:2]) == ""


def test_fedavg_settings_parse_and_get_their_own_table_lines(bench):
    """``DATASET:N:fedavg-eE-mM`` (tableak_reference_fedavg.py): its rows are grouped apart from FedSGD's."""
    assert bench.parse_settings("adult:32,german:32:fedavg-e5-m8", 0.01, 0.05) == [
        ("adult", 32, None), ("german", 32, {"local_epochs": 5, "local_batch": 8, "lr": 0.01, "epoch_prior": 0.05})]
    local = {"local_epochs": 1, "local_batch": 8, "lr": 0.01, "epoch_prior": 0.01}
    rows = [_row("fedleak", 0, 0.8, 20.0), _row("reference", 0, 0.7, 300.0)]
    rows += [{**r, "algorithm": "fedavg", "fedavg": local} for r in (_row("fedleak", 0, 0.6, 30.0),
                                                                      _row("reference", 0, 0.65, 330.0))]
    sgd, avg = bench.summary(rows)
    assert (sgd["dataset"], sgd["reference"]["reference_metric"]["accuracy"]) == ("adult", [0.7])
    assert (avg["dataset"], avg["fedleak"]["reference_metric"]["accuracy"]) == ("adult FedAvg E 1 m 8 λ 0.01", [0.6])
    assert "| adult FedAvg E 1 m 8 λ 0.01 | 32 | 30 × 1500 | 1 | fedleak | 60.0 |" in bench.table(rows)
    assert len({bench._key(r) for r in rows}) == 4  # a FedAvg row never counts as the FedSGD one done


def test_the_bfloat16_variant_is_its_own_setting_beside_the_same_reference_rows(bench):
    rows = [_row("fedleak", 0, 0.8, 50.0), _row("reference", 0, 0.7, 600.0), _row("fedleak-bfloat16", 0, 0.75, 30.0)]
    entries = bench.summary(rows)
    assert [e["dataset"] for e in entries] == ["adult", "adult, fedleak in bfloat16"]
    variant = entries[1]
    assert variant["fedleak"]["reference_metric"]["accuracy"] == [0.75]
    assert variant["fedleak"]["cpu_seconds"] == [30.0] and variant["reference"]["cpu_seconds"] == [600.0]
    assert "fedleak in bfloat16" in bench.table(rows) and "20.0×" in bench.table(rows)
