"""``fedleak audit --flower-app examples/flower-tabular-app`` (issue 44): a Flower app of records audited like an
image app — the record table, the verdict by the tabular rule, the DP line — through the tabular modality object
(no modality branch in ``integrations/``: ``tests/test_modality.py``).

The app is the shipped example, loaded and audited by the real command; only Flower's Ray runtime is replaced by
fedleak's in-process grid (:func:`fedleak.integrations.flower.grid.run_inline`: the same ServerApp, ClientApp,
Messages and node configs, no Ray actors), which keeps each run at a few CPU-seconds. The Ray path itself is run by
``tests/test_flower_app_audit.py`` (slow) and by ``benchmarks/bench_flower_app.py``'s tabular row.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("flwr.serverapp")

from fedleak.cli import main  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flower-tabular-app"


def _inline(app, watch, supernodes, share_truth):
    """The app's ServerApp and ClientApp over fedleak's in-process grid, audited as in Flower's simulation."""
    from fedleak.integrations.flower import app_runtime
    from fedleak.integrations.flower.grid import run_inline

    with app_runtime.environment(share_truth), app_runtime.wrapped_start(watch):
        run_inline(app.server_app, app.client_app, supernodes, run_config=dict(app.run_config))


@pytest.fixture(scope="module")
def one_step(tmp_path_factory):
    """The example as shipped (one local step per round), 2 nodes x 4 records, 1 round: one run for every check."""
    from fedleak.integrations.flower import app_audit

    patch = pytest.MonkeyPatch()
    patch.setattr(app_audit, "simulate", _inline)
    out = tmp_path_factory.mktemp("tabular-app") / "report"
    before = sorted(p.relative_to(EXAMPLE) for p in EXAMPLE.rglob("*") if "__pycache__" not in p.parts)
    try:
        code = main(["audit", "--flower-app", str(EXAMPLE), "--out", str(out), "--supernodes", "2",
                     "--run-config", "num-server-rounds=1 records=4 batch-size=4", "--quiet"])
    finally:
        patch.undo()
    after = sorted(p.relative_to(EXAMPLE) for p in EXAMPLE.rglob("*") if "__pycache__" not in p.parts)
    return code, out, before, after


def test_one_local_step_proves_every_record_and_the_report_shows_them(one_step):
    code, out, before, after = one_step
    assert code == 0 and after == before  # nothing written into the example
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["modality"] == "tabular" and metrics["rule"].startswith("high: the strongest attack recovers")
    honest = metrics["threat_models"]["honest-but-curious"]
    assert honest["verdict"] == "high" and honest["evidence"] == "proved" and honest["strongest"] == "spear"
    spear = honest["attacks"]["spear"]
    assert (spear["replies"], spear["proved"], spear["scored"], spear["records"]) == (2, 2, 2, 8)
    assert spear["recognizable_percent"] == 100.0 and spear["accuracy"] == 1.0
    assert spear["prior_accuracy"] < 0.7  # the marginal baseline beside it
    assert honest["truth"] == "client-reported batches of 2 of 2 attacked replies"
    assert metrics["overall"]["line"] == "honest: high · malicious: not run · DP: none configured"
    page = (out / "report.html").read_text()
    assert page.count("reconstructed (whole)") == 8  # 2 nodes x 4 records, each under its original, all cells green
    assert "class=bad" not in page and "native-country" in page and "United-States" in page
    assert "proved for 2 of 2 replies" in page and "prior baseline" in page


def test_several_local_steps_go_to_tableak_an_estimate(tmp_path, monkeypatch):
    """Two local epochs: no exact attack applies; TabLeak (FedAvg simulation) estimates, scored against the batch."""
    from fedleak.integrations.flower import app_audit

    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = app / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("supernodes = 3", "supernodes = 1\niterations = 60"))
    monkeypatch.setattr(app_audit, "simulate", _inline)
    out = tmp_path / "report"
    assert main(["audit", "--flower-app", str(app), "--out", str(out), "--quiet",
                 "--run-config", "num-server-rounds=1 records=4 batch-size=2 local-epochs=2"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    honest = metrics["threat_models"]["honest-but-curious"]
    record = json.loads((out / "flower" / "leakage.jsonl").read_text().splitlines()[0])
    assert record["attack"] == "tableak" and record["protocol"]["epochs"] == 2 and record["protocol"]["batch_size"] == 2
    tableak = honest["attacks"]["tableak"]
    assert tableak["proved"] == 0 and tableak["scored"] == 1 and honest["evidence"] != "proved"
    assert tableak["accuracy"] > tableak["random_accuracy"]
    assert "not proved by recomputing the update" in honest["evidence_text"] or honest["verdict"] == "inconclusive"
    assert "reconstructed" in (out / "report.html").read_text()


def test_a_tabular_app_without_shared_batches_is_still_proved(tmp_path, monkeypatch):
    """No node shares its batch: the server alone proves SPEAR's records (the update recomputed from them)."""
    from fedleak.integrations.flower import app_audit

    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = app / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("share-truth = true", "share-truth = false"))
    monkeypatch.setattr(app_audit, "simulate", _inline)
    out = tmp_path / "report"
    assert main(["audit", "--flower-app", str(app), "--out", str(out), "--supernodes", "1", "--quiet",
                 "--run-config", "num-server-rounds=1 records=4 batch-size=4"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    honest = metrics["threat_models"]["honest-but-curious"]
    assert honest["verdict"] == "high" and honest["evidence"] == "proved" and honest["truth"] is None
    assert honest["attacks"]["spear"]["accuracy"] is None  # nothing to score against: the proof is the evidence
    page = (out / "report.html").read_text()
    assert page.count("<td>recovered</td>") == 4 and "<tr class=orig>" not in page


# -- bad input on the app's records: one line naming the file (row, column), exit 2, nothing written ----------------

def _app_with(tmp_path, settings: str, csv: str = None) -> Path:
    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = app / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('data = "adult"', settings))
    if csv is not None:
        (app / "records.csv").write_text(csv)
    return app


@pytest.mark.parametrize("settings, csv, said", [
    ('data = "records.csv"', None, "[tool.fedleak] data = 'records.csv': no file"),
    ('data = "adult"\nlabel = "income"', None, "label = 'income' applies to a CSV or Parquet file of records"),
    ('data = "records.csv"\nlabel = "salary"', "age,sex,income\n30,M,yes\n41,F,no\n", "records.csv: no label column "
                                                                                     "'salary'"),
    ('data = "records.csv"\nlabel = 3', "age,sex,income\n30,M,yes\n41,F,no\n", "label must be a column name"),
])
def test_the_apps_records_file_is_checked_before_any_run(tmp_path, capsys, monkeypatch, settings, csv, said):
    from fedleak.integrations.flower import app_audit

    def never(*_):
        raise AssertionError("the app ran")

    monkeypatch.setattr(app_audit, "simulate", never)
    out = tmp_path / "report"
    assert main(["audit", "--flower-app", str(_app_with(tmp_path, settings, csv)), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not (out / "metrics.json").exists() and not (out / "report.html").exists()


def test_a_records_file_of_the_app_gives_its_schema(tmp_path):
    """``data = "records.csv"`` relative to the app folder, ``label`` its label column: the schema the app's own
    ClientApp gets from ``fedleak.data.tabular.load`` (age and hours continuous, sex one-hot: 4 columns)."""
    from fedleak.data.tabular import load
    from fedleak.modality import TABULAR, of

    rows = "".join(f"{20 + i},{'MF'[i % 2]},{20 + (7 * i) % 41},{'yes' if i % 3 else 'no'}\n" for i in range(40))
    (tmp_path / "records.csv").write_text("age,sex,hours,income\n" + rows)
    spec = of("records.csv").app_spec("records.csv", tmp_path, {"label": "income"})
    assert of("records.csv") is TABULAR and spec.schema.width == 4 and spec.num_classes == 2
    assert [(c.name, c.kind) for c in spec.schema.columns] == [("age", "continuous"), ("sex", "categorical"),
                                                               ("hours", "continuous")]
    assert spec.schema == load(str(tmp_path / "records.csv"), num_clients=1, samples_per_client=1,
                               label="income")[0].schema
