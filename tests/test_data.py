"""Tests for fedleak.data: every loader on small files in the real formats written here."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import fedleak.data
from fedleak.data import partition
from fedleak.data.mnist import parse_idx
from fedleak.data.safe_pickle import load_pickle
from fedleak.errors import FedleakError
from fedleak.types import ClientData, DataSpec

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def check_clients(spec: DataSpec, clients: list[ClientData]) -> None:
    """Shapes, dtypes and the normalization round trip of every client."""
    assert clients
    for client in clients:
        assert isinstance(client, ClientData)
        assert client.inputs.dtype == torch.float32 and client.labels.dtype == torch.int64
        assert tuple(client.inputs.shape[1:]) == spec.shape
        assert 0 <= int(client.labels.min()) and int(client.labels.max()) < spec.num_classes
        pixels = spec.denormalize(client.inputs)
        assert float(pixels.min()) >= -1e-5 and float(pixels.max()) <= 1 + 1e-5


def same_clients(a: list[ClientData], b: list[ClientData]) -> bool:
    return len(a) == len(b) and all(
        x.client_id == y.client_id and torch.equal(x.inputs, y.inputs) and torch.equal(x.labels, y.labels)
        for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------
# LEAF FEMNIST


def leaf_file(users: dict[str, int], offset: float = 0.0) -> dict:
    """A LEAF JSON dict; user u's sample i has every pixel = (offset + i) / 100 and label i % 62."""
    data = {"users": list(users), "num_samples": list(users.values()), "user_data": {}}
    for user, n in users.items():
        data["user_data"][user] = {
            "x": [[(offset + i) / 100.0] * 784 for i in range(n)],
            "y": [i % 62 for i in range(n)],
        }
    return data


@pytest.fixture
def leaf_root(tmp_path: Path) -> Path:
    root = tmp_path / "femnist"
    (root / "train").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "train" / "a.json").write_text(json.dumps(leaf_file({"w_b": 5, "w_a": 3})))
    with gzip.open(root / "train" / "b.json.gz", "wt") as handle:
        json.dump(leaf_file({"w_c": 7}, offset=50.0), handle)
    (root / "test" / "t.json").write_text(json.dumps(leaf_file({"w_t": 2})))
    return root


def test_femnist_json_and_gz(leaf_root: Path) -> None:
    spec, clients = fedleak.data.load("femnist", root=leaf_root, num_clients=10, samples_per_client=4,
                                      client_order="sorted")
    check_clients(spec, clients)
    assert spec.shape == (1, 28, 28) and spec.num_classes == 62 and spec.mean == (0.9642384386141873,)
    assert [c.client_id for c in clients] == ["w_a", "w_b", "w_c"]  # fewer writers than asked
    assert [len(c) for c in clients] == [3, 4, 4]
    # First N samples in file order (Dimitrov et al. App. A.8); pixel values encode the index.
    pixels = spec.denormalize(clients[2].inputs)
    assert torch.allclose(pixels[:, 0, 0, 0], torch.tensor([0.50, 0.51, 0.52, 0.53]), atol=1e-6)
    assert clients[1].labels.tolist() == [0, 1, 2, 3]


def test_femnist_options_and_split(leaf_root: Path) -> None:
    _, everything = fedleak.data.load("femnist", root=leaf_root, samples_per_client=None, client_order="sorted")
    assert [len(c) for c in everything] == [3, 5, 7]
    _, big = fedleak.data.load("femnist", root=leaf_root, min_samples=5, client_order="sorted")
    assert [c.client_id for c in big] == ["w_b", "w_c"]
    first = fedleak.data.load("femnist", root=leaf_root, seed=3)[1]
    again = fedleak.data.load("femnist", root=leaf_root, seed=3)[1]
    assert same_clients(first, again)
    assert sorted(c.client_id for c in first) == ["w_a", "w_b", "w_c"]
    orders = {tuple(c.client_id for c in fedleak.data.load("femnist", root=leaf_root, seed=s)[1])
              for s in range(8)}
    assert len(orders) > 1  # "shuffled" depends on the seed
    _, test = fedleak.data.load("femnist", root=leaf_root, split="test")
    assert [c.client_id for c in test] == ["w_t"]
    # A folder of json files directly.
    _, direct = fedleak.data.load("femnist", root=leaf_root / "test")
    assert [c.client_id for c in direct] == ["w_t"]


def test_femnist_errors(leaf_root: Path, tmp_path: Path) -> None:
    with pytest.raises(FedleakError, match="needs root"):
        fedleak.data.load("femnist")
    with pytest.raises(FedleakError, match="does not exist"):
        fedleak.data.load("femnist", root=tmp_path / "nowhere")
    with pytest.raises(FedleakError, match="client_order"):
        fedleak.data.load("femnist", root=leaf_root, client_order="random")
    with pytest.raises(FedleakError, match="no writer"):
        fedleak.data.load("femnist", root=leaf_root, min_samples=100)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json.gz").write_bytes(b"this is not gzip")
    with pytest.raises(FedleakError, match=r"corrupt gzip file .*x\.json\.gz"):
        fedleak.data.load("femnist", root=bad)
    (bad / "x.json.gz").unlink()
    (bad / "x.json").write_text("{not json")
    with pytest.raises(FedleakError, match=r"corrupt JSON file .*x\.json"):
        fedleak.data.load("femnist", root=bad)
    short = leaf_file({"u": 2})
    short["user_data"]["u"]["x"][1] = [0.5] * 100
    (bad / "x.json").write_text(json.dumps(short))
    with pytest.raises(FedleakError, match="784"):
        fedleak.data.load("femnist", root=bad)


def test_femnist_real_sample() -> None:
    root = SHARED / "femnist_leaf" / "leaf-torch_niid_sf0.05"
    if not (root / "train").is_dir():
        pytest.skip(f"shared FEMNIST sample not found at {root}")
    spec, clients = fedleak.data.load("femnist", root=root, num_clients=3)
    check_clients(spec, clients)
    assert len(clients) == 3 and all(1 <= len(c) <= 50 for c in clients)
    assert abs(float(spec.denormalize(clients[0].inputs).mean()) - spec.mean[0]) < 0.05


# ---------------------------------------------------------------------------------------------
# CIFAR pickles and npz


def write_pickle(path: Path, obj, protocol: int = pickle.DEFAULT_PROTOCOL) -> None:
    with open(path, "wb") as handle:
        pickle.dump(obj, handle, protocol=protocol)


def cifar_rows(n: int, start: int) -> np.ndarray:
    """Rows of 3072 uint8 whose red plane is the global index (for order checks)."""
    rows = np.zeros((n, 3072), dtype=np.uint8)
    rows[:, :1024] = (np.arange(start, start + n) % 256)[:, None]
    rows[:, 1024:2048] = 200  # green plane
    return rows


@pytest.fixture
def cifar10_root(tmp_path: Path) -> Path:
    folder = tmp_path / "c10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for k in range(1, 6):
        labels = [(k + i) % 10 for i in range(8)]
        write_pickle(folder / f"data_batch_{k}", {b"batch_label": b"batch", b"data": cifar_rows(8, 8 * (k - 1)),
                                                  b"labels": labels}, protocol=2 if k == 1 else 5)
    write_pickle(folder / "test_batch", {b"data": cifar_rows(6, 100), b"labels": list(range(6))})
    return tmp_path / "c10"


def test_cifar10_pickles(cifar10_root: Path) -> None:
    spec, clients = fedleak.data.load("cifar10", root=cifar10_root, num_clients=4, samples_per_client=10,
                                      partition="sequential")
    check_clients(spec, clients)
    assert spec.shape == (3, 32, 32) and spec.class_names[0] == "airplane"
    assert [len(c) for c in clients] == [10, 10, 10, 10]
    red = spec.denormalize(clients[0].inputs)[:, 0, 0, 0] * 255
    assert torch.allclose(red, torch.arange(10, dtype=torch.float32), atol=1e-3)  # file order, CHW rows
    green = spec.denormalize(clients[0].inputs)[:, 1]
    assert torch.allclose(green, torch.full_like(green, 200 / 255), atol=1e-5)
    assert clients[0].labels.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 2, 3]
    # The batches folder itself works too, and the test split.
    _, test = fedleak.data.load("cifar10", root=cifar10_root / "cifar-10-batches-py", split="test",
                                samples_per_client=4)
    assert [len(c) for c in test] == [4, 2]
    assert [c.client_id for c in test] == ["client-0", "client-1"]


def test_cifar100_pickle(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    write_pickle(folder / "train", {b"data": cifar_rows(20, 0), b"fine_labels": [99 - i for i in range(20)],
                                    b"coarse_labels": [0] * 20})
    write_pickle(folder / "test", {b"data": cifar_rows(3, 0), b"fine_labels": [1, 2, 3]})
    spec, clients = fedleak.data.load("cifar100", root=tmp_path, num_clients=2, samples_per_client=10)
    check_clients(spec, clients)
    assert spec.num_classes == 100 and spec.mean == (0.5071, 0.4867, 0.4408)
    labels = sorted(torch.cat([c.labels for c in clients]).tolist())
    assert labels == list(range(80, 100))


def py2_batch_pickle(data: np.ndarray, labels: list[int]) -> bytes:
    """A CIFAR batch as Python 2's cPickle (protocol 2) writes it: py2 ``str`` for bytes."""
    def binstring(raw: bytes) -> bytes:
        return b"T" + struct.pack("<i", len(raw)) + raw

    n, width = data.shape
    return b"".join([
        b"\x80\x02}(", binstring(b"data"),
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85", binstring(b"b"), b"\x87R(K\x01",
        b"J" + struct.pack("<i", n), b"J" + struct.pack("<i", width), b"\x86",
        b"cnumpy\ndtype\n", binstring(b"u1"), b"K\x00K\x01\x87R(K\x03", binstring(b"|"),
        b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89", binstring(data.tobytes()), b"tb",
        binstring(b"labels"), b"(", b"".join(b"K" + bytes([v]) for v in labels), b"lu.",
    ])


def test_cifar_python2_pickle(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "test_batch").write_bytes(py2_batch_pickle(cifar_rows(3, 7), [4, 5, 6]))
    spec, clients = fedleak.data.load("cifar10", root=folder, split="test", partition="sequential")
    assert clients[0].labels.tolist() == [4, 5, 6]
    red = spec.denormalize(clients[0].inputs)[:, 0, 5, 5] * 255
    assert torch.allclose(red, torch.tensor([7.0, 8.0, 9.0]), atol=1e-3)


def test_malicious_pickle_is_refused(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    write_pickle(folder / "test_batch", {b"data": Evil(), b"labels": [0]})
    with pytest.raises(FedleakError, match="refusing to load .*test_batch.*system"):
        fedleak.data.load("cifar10", root=tmp_path, split="test")
    with pytest.raises(FedleakError, match="refusing"):
        load_pickle(folder / "test_batch")
    assert not (tmp_path / "pwned").exists()


def test_cifar_bad_files(tmp_path: Path, cifar10_root: Path) -> None:
    folder = cifar10_root / "cifar-10-batches-py"
    (folder / "test_batch").write_bytes(b"\x80\x04garbage")
    with pytest.raises(FedleakError, match="corrupt pickle file .*test_batch"):
        fedleak.data.load("cifar10", root=cifar10_root, split="test")
    write_pickle(folder / "test_batch", {b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]})
    with pytest.raises(FedleakError, match="3072"):
        fedleak.data.load("cifar10", root=cifar10_root, split="test")
    (folder / "data_batch_3").unlink()
    with pytest.raises(FedleakError, match="missing file.*data_batch_3"):
        fedleak.data.load("cifar10", root=cifar10_root)
    with pytest.raises(FedleakError, match="cifar-10-batches-py"):
        fedleak.data.load("cifar10")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FedleakError, match="found no data"):
        fedleak.data.load("cifar10", root=tmp_path / "empty")


def test_cifar_npz(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    train_y = rng.integers(0, 10, size=100).astype(np.uint8)
    train_idx = np.arange(0, 60, 2)
    path = tmp_path / "cifar10_small.npz"
    np.savez(path, train_x=rng.integers(0, 256, size=(30, 32, 32, 3), dtype=np.uint8), train_idx=train_idx,
             train_y=train_y, test_x=rng.integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8),
             test_idx=np.arange(5), test_y=np.arange(10, dtype=np.uint8),
             label_names=np.array(["a"] * 10))
    spec, clients = fedleak.data.load("cifar10", root=path, num_clients=3, samples_per_client=10,
                                      partition="sequential")
    check_clients(spec, clients)
    assert torch.cat([c.labels for c in clients]).tolist() == train_y[train_idx].tolist()
    with np.load(path) as archive:  # NHWC -> NCHW
        expected = torch.from_numpy(archive["train_x"][:10].transpose(0, 3, 1, 2).astype(np.float32) / 255)
    assert torch.allclose(spec.denormalize(clients[0].inputs), expected, atol=1e-5)
    _, same_folder = fedleak.data.load("cifar10", root=tmp_path, split="test")  # folder with the npz
    assert sorted(torch.cat([c.labels for c in same_folder]).tolist()) == list(range(5))
    # cifar100 layout: fine labels, no train pixels.
    np.savez(tmp_path / "cifar100_sub.npz", test_x=np.zeros((4, 32, 32, 3), np.uint8), test_idx=np.array([3, 2, 1, 0]),
             test_fine_y=np.array([10, 20, 30, 40], np.uint8), test_coarse_y=np.zeros(4, np.uint8))
    _, c100 = fedleak.data.load("cifar100", root=tmp_path, split="test", partition="sequential")
    assert c100[0].labels.tolist() == [40, 30, 20, 10]
    with pytest.raises(FedleakError, match="no train images"):
        fedleak.data.load("cifar100", root=tmp_path)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "cifar10.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(FedleakError, match="corrupt npz file"):
        fedleak.data.load("cifar10", root=tmp_path / "broken")


def test_real_cifar_npz_subsets() -> None:
    c10 = SHARED / "cifar10" / "cifar10_exact_subset.npz"
    c100 = SHARED / "cifar100" / "cifar100_exact_subset.npz"
    if not (c10.is_file() and c100.is_file()):
        pytest.skip("shared CIFAR npz subsets not found")
    spec, clients = fedleak.data.load("cifar10", root=SHARED, split="test", num_clients=1, samples_per_client=3,
                                      partition="sequential")
    assert clients[0].labels.tolist() == [3, 8, 8]  # cat, ship, ship: the official test order
    spec, clients = fedleak.data.load("cifar100", root=c100, split="test", num_clients=2, samples_per_client=5)
    check_clients(spec, clients)


# ---------------------------------------------------------------------------------------------
# MNIST IDX


def idx_bytes(array: np.ndarray) -> bytes:
    codes = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C}
    header = struct.pack(">HBB", 0, codes[array.dtype], array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.tobytes()


def write_mnist(folder: Path, n: int, gz: bool, prefix: str = "train") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    images = np.zeros((n, 28, 28), dtype=np.uint8)
    images[:, 0, 0] = np.arange(n)
    images[:, 27, 27] = 255
    labels = (np.arange(n) % 10).astype(np.uint8)
    for name, array in ((f"{prefix}-images-idx3-ubyte", images), (f"{prefix}-labels-idx1-ubyte", labels)):
        data = idx_bytes(array)
        if gz:
            (folder / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (folder / name).write_bytes(data)


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx(tmp_path: Path, gz: bool) -> None:
    write_mnist(tmp_path, 30, gz)
    write_mnist(tmp_path, 7, gz, prefix="t10k")
    spec, clients = fedleak.data.load("mnist", root=tmp_path, num_clients=5, samples_per_client=8,
                                      partition="sequential")
    check_clients(spec, clients)
    assert spec.mean == (0.1307,) and spec.std == (0.3081,)
    assert [len(c) for c in clients] == [8, 8, 8, 6]  # the pool runs out: 4 clients, last one smaller
    first = spec.denormalize(clients[1].inputs)
    assert torch.allclose(first[:, 0, 0, 0] * 255, torch.arange(8, 16, dtype=torch.float32), atol=1e-3)
    assert torch.allclose(first[:, 0, 27, 27], torch.ones(8), atol=1e-5)
    assert clients[1].labels.tolist() == [8, 9, 0, 1, 2, 3, 4, 5]
    _, test = fedleak.data.load("mnist", root=tmp_path, split="test", samples_per_client=None, num_clients=2)
    assert sorted(len(c) for c in test) == [3, 4]


def test_mnist_torchvision_layout_and_errors(tmp_path: Path) -> None:
    write_mnist(tmp_path / "MNIST" / "raw", 12, gz=True)
    _, clients = fedleak.data.load("mnist", root=tmp_path, num_clients=2, samples_per_client=6)
    assert len(clients) == 2
    raw = tmp_path / "MNIST" / "raw"
    data = gzip.decompress((raw / "train-images-idx3-ubyte.gz").read_bytes())
    (raw / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x07\x03" + data[4:]))
    with pytest.raises(FedleakError, match="bad magic number"):
        fedleak.data.load("mnist", root=tmp_path)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(data)[:-20])
    with pytest.raises(FedleakError, match=r"corrupt gzip file .*train-images-idx3-ubyte\.gz"):
        fedleak.data.load("mnist", root=tmp_path)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(data[:-5]))
    with pytest.raises(FedleakError, match="data bytes"):
        fedleak.data.load("mnist", root=tmp_path)
    (raw / "train-images-idx3-ubyte.gz").unlink()
    with pytest.raises(FedleakError, match="no train images file"):
        fedleak.data.load("mnist", root=tmp_path)
    with pytest.raises(FedleakError, match="train-images-idx3-ubyte"):
        fedleak.data.load("mnist")


def test_parse_idx_types() -> None:
    values = np.arange(6, dtype=">i4").reshape(2, 3)
    parsed = parse_idx(idx_bytes(values))
    assert parsed.dtype == np.int32 and parsed.tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(FedleakError, match="not an IDX file"):
        parse_idx(b"\x00\x00")


def test_real_mnist() -> None:
    if not (SHARED / "mnist" / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip("shared MNIST not found")
    spec, clients = fedleak.data.load("mnist", root=SHARED / "mnist", split="test", num_clients=1,
                                      samples_per_client=5, partition="sequential")
    check_clients(spec, clients)
    assert clients[0].labels.tolist() == [7, 2, 1, 0, 4]


# ---------------------------------------------------------------------------------------------
# Image folders


@pytest.fixture
def image_root(tmp_path: Path) -> Path:
    root = tmp_path / "images"
    colours = {"red": (255, 0, 0), "blue": (0, 0, 255)}
    for name, colour in colours.items():
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (40 + 10 * i, 30), colour).save(root / name / f"{i}.png")
    Image.new("RGB", (8, 8), (0, 255, 0)).save(root / "blue" / "3.BMP")
    (root / "blue" / "notes.txt").write_text("not an image")
    return root


def test_imagefolder(image_root: Path) -> None:
    spec, clients = fedleak.data.load("imagefolder", root=image_root, num_clients=3, samples_per_client=3, seed=1)
    check_clients(spec, clients)
    assert spec.class_names == ("blue", "red") and spec.shape == (3, 32, 32)
    assert sum(len(c) for c in clients) == 7
    # Per-channel statistics come from the data: 4 blue-ish (one green), 3 red.
    assert spec.mean == pytest.approx((3 / 7, 1 / 7, 3 / 7), abs=1e-4)
    for client in clients:
        pixels = spec.denormalize(client.inputs)
        for image, label in zip(pixels, client.labels):
            if label == 1:
                assert torch.allclose(image[0], torch.ones(32, 32), atol=1e-4)
    grey, _ = fedleak.data.load("imagefolder", root=image_root, channels=1, image_size=16, mean=0.5, std=0.25)
    assert grey.shape == (1, 16, 16) and grey.mean == (0.5,) and grey.std == (0.25,)
    folder_spec = fedleak.data.spec_for("imagefolder", root=image_root, mean=0.5, std=0.5, channels=1)
    assert folder_spec.class_names == ("blue", "red") and folder_spec.shape == (1, 32, 32)


def test_imagefolder_errors(image_root: Path, tmp_path: Path) -> None:
    with pytest.raises(FedleakError, match="channels"):
        fedleak.data.load("imagefolder", root=image_root, channels=2)
    with pytest.raises(FedleakError, match="no test/ folder"):
        fedleak.data.load("imagefolder", root=image_root, split="test")
    (image_root / "red" / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(FedleakError, match=r"cannot read image .*broken\.png"):
        fedleak.data.load("imagefolder", root=image_root)
    (tmp_path / "flat").mkdir()
    with pytest.raises(FedleakError, match="no class sub-folders"):
        fedleak.data.load("imagefolder", root=tmp_path / "flat")
    with pytest.raises(FedleakError, match="root"):
        fedleak.data.spec_for("imagefolder")


# ---------------------------------------------------------------------------------------------
# Embedded data, registry


def test_digits_default() -> None:
    spec, clients = fedleak.data.load("digits")
    check_clients(spec, clients)
    assert len(clients) == 10 and all(len(c) == 50 for c in clients)
    assert spec.num_classes == 62 and spec.shape == (1, 28, 28) and spec.mean == (0.9642384386141873,)
    labels = torch.cat([c.labels for c in clients])
    assert int(labels.max()) <= 9 and len(set(labels.tolist())) == 10
    pixels = spec.denormalize(clients[0].inputs)
    assert float(pixels[:, :, :3].min()) > 0.999  # white border (FEMNIST style)
    assert float(pixels.min()) < 0.2  # dark ink
    default_spec, default_clients = fedleak.data.load("default", num_clients=2, samples_per_client=5)
    assert default_spec == fedleak.data.spec_for("digits")
    assert same_clients(default_clients, fedleak.data.load("digits", num_clients=2, samples_per_client=5)[1])
    other = fedleak.data.load("digits", num_clients=2, samples_per_client=5, seed=1)[1]
    assert not same_clients(default_clients, other)
    test_ids = fedleak.data.load("digits", split="test", samples_per_client=None, num_clients=1)[1][0]
    assert len(test_ids) == 1797 // 5


def test_digits_read_without_importing_sklearn_are_load_digits(monkeypatch) -> None:
    """The digits file read directly (no scikit-learn import: ``sklearn.datasets`` blocked) gives load_digits'
    arrays; without that file, load_digits itself."""
    import importlib.util
    import sys

    from sklearn.datasets import load_digits

    from fedleak.data import embedded

    reference = load_digits()
    with monkeypatch.context() as blocked:
        blocked.setitem(sys.modules, "sklearn.datasets", None)  # an import of it raises ImportError
        images, target = embedded._load_digits()
    assert images.dtype == reference.images.dtype and target.dtype == np.int64
    assert np.array_equal(images, reference.images) and np.array_equal(target, reference.target)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # no file found: load_digits' own
    images, target = embedded._load_digits()
    assert np.array_equal(images, reference.images) and np.array_equal(target, reference.target)
    spec, clients = fedleak.data.load("photos")
    check_clients(spec, clients)
    assert spec.shape == (3, 32, 32) and spec.num_classes == len(spec.class_names) <= 10
    assert len(clients) == 10 and all(len(c) == 50 for c in clients)
    assert spec == fedleak.data.spec_for("photos")
    assert same_clients(clients, fedleak.data.load("photos")[1])


def test_registry_errors() -> None:
    assert {"digits", "photos", "femnist", "cifar10", "cifar100", "mnist", "imagefolder"} <= set(fedleak.data.DATASETS)
    with pytest.raises(FedleakError, match="unknown dataset 'cifar11'.*Did you mean"):
        fedleak.data.load("cifar11")
    with pytest.raises(FedleakError, match="unknown option.*'colour'"):
        fedleak.data.load("digits", colour=True)
    with pytest.raises(FedleakError, match="unknown partition"):
        fedleak.data.load("digits", partition="random")
    with pytest.raises(FedleakError, match="unknown split"):
        fedleak.data.load("digits", split="validation")
    with pytest.raises(FedleakError, match="num_clients"):
        fedleak.data.load("digits", num_clients=0)
    for name in ("femnist", "cifar10", "cifar100", "mnist", "digits", "photos"):
        assert isinstance(fedleak.data.spec_for(name), DataSpec)
    assert fedleak.data.spec_for("CIFAR-10").num_classes == 10


# ---------------------------------------------------------------------------------------------
# Partitions


def test_partition_iid_and_sequential() -> None:
    parts = partition.iid(23, num_clients=3, per_client=5, seed=0)
    assert [len(p) for p in parts] == [5, 5, 5]
    assert len(set(np.concatenate(parts).tolist())) == 15
    assert all(np.array_equal(a, b) for a, b in zip(parts, partition.iid(23, 3, 5, seed=0)))
    assert not all(np.array_equal(a, b) for a, b in zip(parts, partition.iid(23, 3, 5, seed=1)))
    assert [len(p) for p in partition.iid(12, num_clients=10, per_client=5)] == [5, 5, 2]
    assert [len(p) for p in partition.iid(10, num_clients=3, per_client=None)] == [4, 3, 3]
    assert [p.tolist() for p in partition.sequential(7, 2, 3)] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(FedleakError):
        partition.iid(0, 2, 2)


def test_partition_dirichlet() -> None:
    labels = np.repeat(np.arange(10), 40)
    parts = partition.dirichlet(labels, num_clients=8, per_client=30, alpha=0.1, seed=0)
    assert [len(p) for p in parts] == [30] * 8
    flat = np.concatenate(parts)
    assert len(set(flat.tolist())) == len(flat)  # no sample in two clients
    skewed = np.mean([np.bincount(labels[p], minlength=10).max() / len(p) for p in parts])
    flat_parts = partition.dirichlet(labels, num_clients=8, per_client=30, alpha=1000.0, seed=0)
    even = np.mean([np.bincount(labels[p], minlength=10).max() / len(p) for p in flat_parts])
    assert skewed > even
    again = partition.dirichlet(labels, num_clients=8, per_client=30, alpha=0.1, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    whole = partition.dirichlet(labels, num_clients=4, per_client=None, alpha=0.5, seed=0)
    assert sorted(np.concatenate(whole).tolist()) == list(range(400))
    tiny = partition.dirichlet(np.array([0, 0, 1]), num_clients=5, per_client=2, alpha=0.5, seed=0)
    assert sorted(np.concatenate(tiny).tolist()) == [0, 1, 2]  # the pool runs out
    _, clients = fedleak.data.load("digits", num_clients=4, samples_per_client=20, partition="dirichlet", alpha=0.2)
    assert [len(c) for c in clients] == [20] * 4
    with pytest.raises(FedleakError, match="alpha"):
        fedleak.data.load("digits", partition="dirichlet", alpha=-1)
