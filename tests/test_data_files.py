"""Tests of :mod:`zoo.data` core and file loaders: the ``Dataset`` container, splits and standardisation, the
data root and its errors, the UCI loaders, the idx reader and the MNIST-like image sets.

Ground truths: the shared data root's ``MANIFEST.md`` (sizes, split counts), the raw files and split index
files read directly with numpy, and idx files written by the tests.  Tests that read the shared data root take
the ``data_dir`` fixture (skip without ``ZOO_DATA_DIR``, fail under ``ZOO_REQUIRE_DATA=1``); the others run
offline on generated data and fake files.
"""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from zoo.data import (
    SPLIT_SEED_10K,
    UCI_ALIASES,
    Dataset,
    data_root,
    load_dataset,
    load_mnist_like,
    load_ood_images,
    load_uci,
    random_split,
    read_idx,
    standardize,
)

# (folder, N, n_inputs, n_train, n_test, n_splits) from shared/data/MANIFEST.md §1 / §1b
UCI_TABLE = [
    ("bostonHousing", 506, 13, 455, 51, 20),
    ("concrete", 1030, 8, 927, 103, 20),
    ("energy", 768, 8, 691, 77, 20),
    ("kin8nm", 8192, 8, 7373, 819, 20),
    ("naval-propulsion-plant", 11934, 16, 10741, 1193, 20),
    ("power-plant", 9568, 4, 8611, 957, 20),
    ("protein-tertiary-structure", 45730, 9, 41157, 4573, 5),
    ("wine-quality-red", 1599, 11, 1439, 160, 20),
    ("yacht", 308, 6, 277, 31, 20),
    ("airfoil", 1503, 5, 1353, 150, None),
]


def _write_idx(path: Path, arr: np.ndarray, *, gz: bool, magic: int | None = None) -> Path:
    arr = np.asarray(arr, dtype=np.uint8)
    if magic is None:
        magic = 0x800 + arr.ndim
    header = magic.to_bytes(4, "big") + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
    payload = header + arr.tobytes()
    path.write_bytes(gzip.compress(payload) if gz else payload)
    return path


# ------------------------------------------------------------------------------------------------ core


def test_random_split_sizes_disjoint_deterministic():
    for n in (10, 300, 1503):
        tr, te = random_split(n, seed=3)
        assert len(tr) == round(0.9 * n) and len(te) == n - round(0.9 * n)
        assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(n))
        tr2, te2 = random_split(n, seed=3)
        assert np.array_equal(tr, tr2) and np.array_equal(te, te2)
    assert not np.array_equal(random_split(300, 0)[0], random_split(300, 1)[0])
    with pytest.raises(ValueError, match="test_fraction"):
        random_split(10, 0, test_fraction=1.0)
    with pytest.raises(ValueError, match="seed"):
        random_split(10, -1)


def test_standardize_uses_train_statistics_and_handles_constant_columns():
    rng = np.random.default_rng(0)
    xtr = np.column_stack([rng.normal(5, 3, 200), np.full(200, 288.0), np.full(200, 0.998)])
    xtr[:, 2] += 1e-16 * rng.standard_normal(200)  # round-off noise, as in naval column 11
    xte = rng.normal(5, 3, (50, 3))
    a, b, mean, std = standardize(xtr, xte)
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    np.testing.assert_allclose(a[:, 0].mean(), 0, atol=1e-12)
    np.testing.assert_allclose(a[:, 0].std(), 1, rtol=1e-12)
    assert std[1] == 1.0 and std[2] == 1.0
    np.testing.assert_allclose(b, (xte - xtr.mean(0)) / std)


def test_dataset_container():
    rng = np.random.default_rng(0)
    ds = Dataset(
        "t",
        "multiclass",
        rng.normal(size=(8, 3)),
        np.arange(8) % 4,
        rng.normal(size=(2, 3)),
        np.array([0, 3]),
        n_classes=4,
    )
    assert (ds.n_train, ds.n_test, ds.in_features, ds.out_features) == (8, 2, 3, 4)
    xtr, ytr, xte, yte = ds.tensors()
    assert xtr.dtype == torch.float32 and xtr.shape == (8, 3) and ytr.dtype == torch.long
    assert ds.tensors(dtype=torch.float64)[0].dtype == torch.float64
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds.name = "other"  # type: ignore[misc]
    reg = Dataset("r", "regression", np.zeros((4, 2)), np.zeros((4, 3)), np.zeros((1, 2)), np.zeros((1, 3)))
    assert reg.out_features == 3 and reg.tensors()[1].dtype == torch.float32
    with pytest.raises(ValueError, match="task"):
        Dataset("t", "ordinal", np.zeros((2, 1)), np.zeros(2), np.zeros((1, 1)), np.zeros(1))
    with pytest.raises(ValueError, match="n_classes"):
        Dataset("t", "binary", np.zeros((2, 1)), np.zeros(2, int), np.zeros((1, 1)), np.zeros(1, int))
    with pytest.raises(ValueError, match="y_train"):
        Dataset("t", "regression", np.zeros((2, 1)), np.zeros(3), np.zeros((1, 1)), np.zeros(1))


def test_data_root_errors_name_env_var(monkeypatch, tmp_path):
    monkeypatch.delenv("ZOO_DATA_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="ZOO_DATA_DIR") as err:
        data_root()
    assert "uci/" in str(err.value)
    with pytest.raises(FileNotFoundError, match="ZOO_DATA_DIR"):
        load_uci("boston")
    with pytest.raises(FileNotFoundError, match="ZOO_DATA_DIR"):
        load_dataset("mnist10k")
    with pytest.raises(FileNotFoundError, match="ZOO_DATA_DIR"):
        data_root(tmp_path / "does-not-exist")
    monkeypatch.setenv("ZOO_DATA_DIR", str(tmp_path / "does-not-exist"))
    with pytest.raises(FileNotFoundError, match="ZOO_DATA_DIR"):
        data_root()
    # an existing but empty root: the dataset folder is missing
    with pytest.raises(FileNotFoundError, match="ZOO_DATA_DIR") as err:
        load_uci("yacht", data_dir=tmp_path)
    assert "index_train_K.txt" in str(err.value)


def test_uci_missing_split_file_is_reported(tmp_path):
    folder = tmp_path / "uci" / "yacht"
    folder.mkdir(parents=True)
    np.savetxt(folder / "data.txt", np.arange(40.0).reshape(10, 4))
    (folder / "n_splits.txt").write_text("2\n")
    (folder / "index_features.txt").write_text("0\n1\n2\n")
    (folder / "index_target.txt").write_text("3\n")
    np.savetxt(folder / "index_train_0.txt", np.arange(8), fmt="%d")
    np.savetxt(folder / "index_test_0.txt", np.arange(8, 10), fmt="%d")
    ds = load_uci("yacht", 0, data_dir=tmp_path)
    assert ds.n_train == 8 and ds.in_features == 3
    np.testing.assert_array_equal(ds.y_test, [35.0, 39.0])  # rows 8, 9 of column 3
    with pytest.raises(FileNotFoundError, match="index_train_1.txt"):
        load_uci("yacht", 1, data_dir=tmp_path)
    with pytest.raises(ValueError, match="2 splits"):
        load_uci("yacht", 2, data_dir=tmp_path)


# ------------------------------------------------------------------------------------------ UCI (real)


@pytest.mark.data
@pytest.mark.parametrize(
    ("folder", "n", "d", "n_train", "n_test", "n_splits"), UCI_TABLE, ids=[r[0] for r in UCI_TABLE]
)
def test_uci_matches_manifest(data_dir, folder, n, d, n_train, n_test, n_splits):
    last = 0 if n_splits is None else n_splits - 1
    raw_file = data_dir / "uci" / folder / ("airfoil_self_noise.dat" if folder == "airfoil" else "data.txt")
    raw = np.loadtxt(raw_file)
    assert raw.shape[0] == n
    if folder == "airfoil":
        features, target = np.arange(5), 5
    else:
        features = np.loadtxt(data_dir / "uci" / folder / "index_features.txt", dtype=int, ndmin=1)
        target = int(np.loadtxt(data_dir / "uci" / folder / "index_target.txt"))
    for split in sorted({0, last}):
        ds = load_uci(folder, split, data_dir=data_dir)
        assert ds.name == f"uci:{folder}" and ds.task == "regression" and ds.split == split
        assert (ds.n_train, ds.n_test, ds.in_features, ds.out_features) == (n_train, n_test, d, 1)
        assert ds.meta["n_splits"] == n_splits and "protocol" in ds.meta
        tr, te = ds.meta["train_index"], ds.meta["test_index"]
        if n_splits is not None:
            np.testing.assert_array_equal(
                tr, np.loadtxt(data_dir / "uci" / folder / f"index_train_{split}.txt")
            )
            np.testing.assert_array_equal(
                te, np.loadtxt(data_dir / "uci" / folder / f"index_test_{split}.txt")
            )
        assert np.intersect1d(tr, te).size == 0
        assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(n))
        # targets in original units, read straight from the file
        assert ds.y_train.dtype == np.float64 and ds.y_train.shape == (n_train,)
        np.testing.assert_array_equal(ds.y_train, raw[tr, target])
        np.testing.assert_array_equal(ds.y_test, raw[te, target])
        assert ds.y_mean == pytest.approx(raw[tr, target].mean()) and ds.y_std == pytest.approx(
            raw[tr, target].std()
        )
        # x standardised with train statistics
        for arr in (ds.x_train, ds.x_test, ds.x_mean, ds.x_std):
            assert np.all(np.isfinite(arr))
        np.testing.assert_allclose(ds.x_mean, raw[tr][:, features].mean(0))
        np.testing.assert_allclose(ds.x_test, (raw[te][:, features] - ds.x_mean) / ds.x_std)
        np.testing.assert_allclose(ds.x_train.mean(0), 0.0, atol=1e-8)
        const = np.ptp(raw[tr][:, features], axis=0) == 0
        np.testing.assert_allclose(ds.x_train.std(0)[~const], 1.0, rtol=1e-8)
    raw_ds = load_uci(folder, 0, data_dir=data_dir, standardize=False)
    assert raw_ds.x_mean is None and raw_ds.x_std is None
    np.testing.assert_array_equal(raw_ds.x_train, raw[raw_ds.meta["train_index"]][:, features])


@pytest.mark.data
def test_uci_naval_constant_columns_no_nan(data_dir):
    ds = load_uci("naval", 3, data_dir=data_dir)
    assert ds.name == "uci:naval-propulsion-plant"
    assert not np.isnan(ds.x_train).any() and not np.isnan(ds.x_test).any()
    assert ds.x_std[8] == 1.0 and ds.x_std[11] == 1.0  # col 8 constant, col 11 constant up to round-off
    np.testing.assert_allclose(ds.x_train[:, 8], 0.0)
    assert ds.y_train.min() >= 0.95 and ds.y_train.max() <= 1.0  # compressor decay, original units


@pytest.mark.data
def test_uci_aliases_and_split_errors(data_dir):
    assert set(UCI_ALIASES) == {
        "boston",
        "concrete",
        "energy",
        "kin8nm",
        "naval",
        "power",
        "protein",
        "wine",
        "yacht",
        "airfoil",
    }
    a = load_uci("boston", 4, data_dir=data_dir)
    b = load_uci("bostonHousing", 4, data_dir=data_dir)
    c = load_dataset("uci:boston", 4, data_dir=data_dir)
    assert a.name == b.name == c.name == "uci:bostonHousing"
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, c.y_test)
    assert not np.array_equal(a.y_test, load_uci("boston", 5, data_dir=data_dir).y_test)
    assert load_dataset("uci:wine", data_dir=data_dir).name == "uci:wine-quality-red"
    with pytest.raises(ValueError, match=r"split=20.*20 splits"):
        load_uci("boston", 20, data_dir=data_dir)
    with pytest.raises(ValueError, match=r"split=5.*5 splits"):
        load_uci("protein", 5, data_dir=data_dir)
    with pytest.raises(ValueError, match="split"):
        load_uci("boston", -1, data_dir=data_dir)
    with pytest.raises(TypeError, match="split"):
        load_uci("boston", 1.0, data_dir=data_dir)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name='housing'"):
        load_uci("housing", data_dir=data_dir)


@pytest.mark.data
def test_uci_airfoil_random_splits(data_dir):
    a0 = load_uci("airfoil", 0, data_dir=data_dir)
    assert "random 90/10" in a0.meta["protocol"]
    np.testing.assert_array_equal(a0.y_test, load_uci("airfoil", 0, data_dir=data_dir).y_test)
    a7 = load_uci("airfoil", 7, data_dir=data_dir)
    assert not np.array_equal(a0.meta["test_index"], a7.meta["test_index"])
    np.testing.assert_array_equal(a7.meta["test_index"], random_split(1503, 7)[1])
    assert 100 < a0.y_train.min() and a0.y_train.max() < 150  # SPL in dB


# ---------------------------------------------------------------------------------------------- images


def test_read_idx_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=5, dtype=np.uint8)
    for gz in (False, True):
        suffix = ".gz" if gz else ""
        img = read_idx(_write_idx(tmp_path / f"img{suffix}", images, gz=gz))
        lab = read_idx(_write_idx(tmp_path / f"lab{suffix}", labels, gz=gz))
        assert img.dtype == np.uint8 and img.shape == (5, 28, 28)
        np.testing.assert_array_equal(img, images)
        np.testing.assert_array_equal(lab, labels)
    # gzip is detected from the content, not the file name
    np.testing.assert_array_equal(read_idx(_write_idx(tmp_path / "named.gz", labels, gz=False)), labels)


def test_read_idx_malformed(tmp_path):
    labels = np.arange(6, dtype=np.uint8)
    bad = _write_idx(tmp_path / "bad-magic", labels, gz=True, magic=0x0D01)
    with pytest.raises(ValueError, match="bad-magic") as err:
        read_idx(bad)
    assert "magic" in str(err.value)
    trunc = tmp_path / "truncated"
    trunc.write_bytes(_write_idx(tmp_path / "tmp", labels, gz=False).read_bytes()[:-2])
    with pytest.raises(ValueError, match="truncated"):
        read_idx(trunc)
    broken = tmp_path / "broken.gz"
    broken.write_bytes(gzip.compress(b"\x00\x00\x08\x01" + b"\x00" * 20)[:15])
    with pytest.raises(ValueError, match="broken.gz"):
        read_idx(broken)
    with pytest.raises(ValueError, match="short"):
        (tmp_path / "empty").write_bytes(b"")
        read_idx(tmp_path / "empty")


def test_mnist_60k_path_with_fake_files(tmp_path):
    rng = np.random.default_rng(1)
    folder = tmp_path / "mnist"
    folder.mkdir()
    tr_img = rng.integers(0, 256, size=(12, 28, 28), dtype=np.uint8)
    tr_lab = np.arange(12, dtype=np.uint8) % 10
    te_img = rng.integers(0, 256, size=(4, 28, 28), dtype=np.uint8)
    te_lab = np.array([3, 1, 4, 1], dtype=np.uint8)
    _write_idx(folder / "t10k-images-idx3-ubyte.gz", te_img, gz=True)
    _write_idx(folder / "t10k-labels-idx1-ubyte", te_lab, gz=False)  # raw, un-gzipped name also accepted
    _write_idx(folder / "train-labels-idx1-ubyte.gz", tr_lab, gz=True)
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        load_mnist_like("mnist", subset="60k", data_dir=tmp_path)
    _write_idx(folder / "train-images-idx3-ubyte.gz", tr_img, gz=True)
    ds = load_mnist_like("mnist", subset="60k", data_dir=tmp_path, scale=126.0)
    assert (ds.n_train, ds.n_test, ds.in_features, ds.out_features) == (12, 4, 784, 10)
    assert ds.task == "multiclass" and ds.y_train.dtype == np.int64 and ds.x_mean is None
    np.testing.assert_allclose(ds.x_train, tr_img.reshape(12, -1) / 126.0)
    np.testing.assert_array_equal(ds.y_test, te_lab)
    # the 10k protocol needs the full 10000 test images
    with pytest.raises(ValueError, match="10000"):
        load_mnist_like("mnist", subset="10k", data_dir=tmp_path)
    with pytest.raises(ValueError, match="subset"):
        load_mnist_like("mnist", subset="1k", data_dir=tmp_path)
    with pytest.raises(ValueError, match="name"):
        load_mnist_like("cifar10", data_dir=tmp_path)
    with pytest.raises(ValueError, match="scale"):
        load_mnist_like("mnist", data_dir=tmp_path, scale=0)


@pytest.mark.data
@pytest.mark.parametrize("name", ["mnist", "kmnist"])
def test_mnist10k_fixed_split(data_dir, name):
    ds = load_dataset(f"{name}10k", data_dir=data_dir)
    again = load_mnist_like(name, subset="10k", data_dir=data_dir)
    assert ds.name == f"{name}10k" and ds.task == "multiclass" and ds.n_classes == 10
    assert (ds.n_train, ds.n_test, ds.in_features, ds.out_features) == (8000, 2000, 784, 10)
    assert ds.x_train.dtype == np.float64 and ds.y_train.dtype == np.int64 and ds.x_mean is None
    np.testing.assert_array_equal(ds.x_train, again.x_train)
    np.testing.assert_array_equal(ds.y_test, again.y_test)
    assert ds.meta["split_seed"] == SPLIT_SEED_10K
    tr, te = ds.meta["train_index"], ds.meta["test_index"]
    np.testing.assert_array_equal(tr, np.random.default_rng(SPLIT_SEED_10K).permutation(10000)[:8000])
    assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(10000))
    raw = read_idx(data_dir / name / "t10k-images-idx3-ubyte.gz")
    np.testing.assert_array_equal(ds.x_test, raw[te].reshape(2000, -1) / 255.0)
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    counts_tr, counts_te = np.bincount(ds.y_train, minlength=10), np.bincount(ds.y_test, minlength=10)
    assert counts_tr.min() > 600 and counts_tr.max() < 1000  # ~800 per class expected
    assert counts_te.min() > 140 and counts_te.max() < 260  # ~200 per class expected
    ood, labels = load_ood_images(name, data_dir=data_dir, with_labels=True)
    np.testing.assert_array_equal(ood, ds.x_test)
    np.testing.assert_array_equal(labels, ds.y_test)
    with pytest.raises(ValueError, match="split"):
        load_dataset(f"{name}10k", 1, data_dir=data_dir)
