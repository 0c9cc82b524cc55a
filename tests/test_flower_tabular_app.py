"""``fedleak audit --flower-app examples/flower-tabular-app`` (issue 44): a Flower app of records audited like an
image app — the record table, the verdict by the tabular rule, the DP line (Flower's DP wrapper, canaries) —
through the tabular modality object (no modality branch in ``integrations/``: ``tests/test_modality.py``).

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


def _inline(app, watch, supernodes, share_truth, node_configs=None):
    """The app's ServerApp and ClientApp over fedleak's in-process grid, audited as in Flower's simulation
    (``node_configs``: each node's own, as ``flower-supernode --node-config``)."""
    from fedleak.integrations.flower import app_runtime
    from fedleak.integrations.flower.grid import run_inline

    with app_runtime.environment(share_truth), app_runtime.wrapped_start(watch):
        run_inline(app.server_app, app.client_app, supernodes, run_config=dict(app.run_config),
                   node_configs=node_configs)


@pytest.fixture(scope="module")
def one_step(tmp_path_factory):
    """The example as shipped (one local step per round), 2 nodes x 4 records, 1 round, inside Flower's server-side
    DP wrapper (noise 0.5) with 20 canaries, the first node sharing its batch and the second not (each node's own
    node config): one run for every check."""
    from fedleak.integrations.flower import app_audit

    nodes = [{"partition-id": 0, "num-partitions": 2, "share-truth": True},
             {"partition-id": 1, "num-partitions": 2, "share-truth": False}]
    patch = pytest.MonkeyPatch()
    patch.setattr(app_audit, "simulate", lambda *args: _inline(*args, node_configs=nodes))
    out = tmp_path_factory.mktemp("tabular-app") / "report"
    before = sorted(p.relative_to(EXAMPLE) for p in EXAMPLE.rglob("*") if "__pycache__" not in p.parts)
    try:
        code = main(["audit", "--flower-app", str(EXAMPLE), "--out", str(out), "--quiet",
                     "--run-config", "num-server-rounds=1 num-clients=2 records=4 batch-size=4 dp-noise=0.5 "
                                     "fedleak-canaries=20"])
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
    # both replies proved by the server alone; the one shared batch confirms every cell of its 4 records
    assert (spear["replies"], spear["proved"], spear["scored"], spear["records"]) == (2, 2, 1, 8)
    assert spear["recognizable_percent"] == 100.0 and spear["accuracy"] == 1.0
    assert spear["prior_accuracy"] < 0.7  # the marginal baseline beside it
    assert honest["truth"] == "client-reported batches of 1 of 2 attacked replies"
    # the DP line as for an image app: Flower's server-side DP wrapper, its claim tested by 20 canaries
    assert metrics["flower"]["strategies"] == ["DifferentialPrivacyServerSideFixedClipping > FedAvg"]
    assert metrics["dp_verdict"]["verdict"] == "consistent"
    assert metrics["overall"]["line"] == "honest: high · malicious: not run · DP: claim holds at 20 canaries"
    page = (out / "report.html").read_text()
    assert page.count("reconstructed (whole)") == 4  # the sharing node's records under their originals, all green
    assert page.count("<td>recovered</td>") == 4  # the other node's, decoded alone: the server never saw its data
    assert "class=bad" not in page and "native-country" in page and "United-States" in page
    assert "proved for 2 of 2 replies" in page and "prior baseline" in page


def _app_with(tmp_path, settings: str, csv: str = None, replace: tuple = ("", "")) -> Path:
    """A copy of the example whose ``[tool.fedleak] data`` line reads ``settings`` (and ``records.csv`` beside it)."""
    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = app / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('data = "adult"', settings).replace(*replace))
    if csv is not None:
        (app / "records.csv").write_text(csv)
    return app


def _audit(tmp_path, monkeypatch, app: Path, run_config: str, *flags) -> tuple[dict, Path]:
    """``fedleak audit --flower-app APP`` in-process (:func:`_inline`): its metrics and its --out."""
    from fedleak.integrations.flower import app_audit

    monkeypatch.setattr(app_audit, "simulate", _inline)
    out = tmp_path / "report"
    assert main(["audit", "--flower-app", str(app), "--out", str(out), "--quiet", "--run-config", run_config,
                 *flags]) == 0
    return json.loads((out / "metrics.json").read_text()), out


def test_several_local_steps_go_to_tableak_an_estimate(tmp_path, monkeypatch):
    """Two local epochs of batches of 2: no exact attack applies; TabLeak (its FedAvg simulation, 300 iterations)
    estimates the records, scored against the batch the node shared."""
    app = _app_with(tmp_path, 'data = "adult"\niterations = 300')
    metrics, out = _audit(tmp_path, monkeypatch, app,
                          "num-server-rounds=1 num-clients=1 records=4 batch-size=2 local-epochs=2")
    honest = metrics["threat_models"]["honest-but-curious"]
    record = json.loads((out / "flower" / "leakage.jsonl").read_text().splitlines()[0])
    assert record["attack"] == "tableak" and record["protocol"]["epochs"] == 2 and record["protocol"]["batch_size"] == 2
    tableak = honest["attacks"]["tableak"]
    assert tableak["proved"] == 0 and tableak["scored"] == 1 and honest["evidence"] == "estimated"
    # seed 0, 300 iterations (measured: 84 % of the cells, every categorical one, 1 of 4 records whole: high)
    assert tableak["accuracy"] >= 0.75 and tableak["categorical_accuracy"] >= 0.9
    assert tableak["accuracy"] - tableak["prior_accuracy"] >= 0.2 and honest["verdict"] in ("high", "medium")
    assert "not proved by recomputing the update" in honest["evidence_text"]
    page = (out / "report.html").read_text()
    assert page.count("<tr class=orig>") == 4 and "class=ok" in page


# -- bad input on the app's records: one line naming the file (row, column), exit 2, nothing written ----------------



@pytest.mark.parametrize("settings, csv, said", [
    ('data = "records.csv"', None, "[tool.fedleak] data = 'records.csv': no file"),
    ('data = "adult"\nlabel = "income"', None, "label = 'income' applies to a CSV or Parquet file of records"),
    ('data = "records.csv"\nlabel = "salary"', "age,sex,income\n30,M,yes\n41,F,no\n", "records.csv: no label column "
                                                                                     "'salary'"),
    ('data = "records.csv"\nlabel = 3', "age,sex,income\n30,M,yes\n41,F,no\n", "label must be a column name"),
    ('data = "records.csv"\nlabel = "income"', "age,sex,income\n30,M,yes\n,F,no\n",
     "records.csv: row 2, column 'age': missing value"),
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
