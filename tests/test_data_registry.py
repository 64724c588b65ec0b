"""Tests of :mod:`zoo.data` sets that need no files: the embedded scikit-learn sets, the synthetic generators,
the dataset registry (``load_dataset`` names and split protocols) and the ``cv10:`` K-fold sets.

Ground truths: the generators' known mean functions and noise variances (tolerances from the standard error of
the sample variance), the Wald z statistics of an unpenalised logistic MLE, a logistic regression on the
nearly linear 2-2-1 toy, scikit-learn's ``KFold`` folds, and the documented sizes of each protocol.  Only the
``cv10:uci:`` case reads the shared data root (``data_dir`` fixture).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.data import (
    DATASETS,
    LOGISTIC_SUPPORT,
    LOGISTIC_WEAK_SIGNAL,
    TOY_221_WEIGHTS,
    load_breast_cancer,
    load_dataset,
    load_diabetes,
    load_digits,
    make_221_toy,
    make_bowtie_toy,
    make_cubic_toy,
    make_logistic_selection,
    make_sinusoid_toy,
    random_split,
)
from zoo.data.synthetic import bowtie_mean


def _var_tolerance(var: float, n: int, k: float = 4.0) -> float:
    """k standard errors of the sample variance of n Gaussian draws with variance ``var``."""
    return k * var * np.sqrt(2.0 / (n - 1))


def _logistic_wald_z(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Wald z statistics of an unpenalised logistic MLE with intercept (Newton-Raphson)."""
    X = np.hstack([np.ones((x.shape[0], 1)), x])
    w = np.zeros(X.shape[1])
    for _ in range(30):
        p = 1.0 / (1.0 + np.exp(-X @ w))
        H = X.T @ (X * (p * (1 - p))[:, None])
        w = w + np.linalg.solve(H, X.T @ (y - p))
    return (w / np.sqrt(np.diag(np.linalg.inv(H))))[1:]


# -------------------------------------------------------------------------------------------- embedded


@pytest.mark.parametrize(
    ("loader", "name", "task", "n_train", "n_test", "d", "k"),
    [
        (load_diabetes, "diabetes", "regression", 398, 44, 10, 1),
        (load_breast_cancer, "breast-cancer", "binary", 512, 57, 30, 1),
        (load_digits, "digits", "multiclass", 1617, 180, 64, 10),
    ],
)
def test_embedded_sets(loader, name, task, n_train, n_test, d, k):
    ds = loader(0)
    assert (ds.name, ds.task) == (name, task)
    assert (ds.n_train, ds.n_test, ds.in_features, ds.out_features) == (n_train, n_test, d, k)
    assert np.all(np.isfinite(ds.x_train)) and np.all(np.isfinite(ds.x_test))
    np.testing.assert_allclose(ds.x_train.mean(0), 0.0, atol=1e-10)
    np.testing.assert_array_equal(ds.x_test, loader(0).x_test)  # deterministic by split
    np.testing.assert_array_equal(ds.x_test, load_dataset(name, 0).x_test)
    other = loader(1)
    assert not np.array_equal(ds.meta["test_index"], other.meta["test_index"])
    np.testing.assert_array_equal(ds.meta["test_index"], random_split(ds.n_train + ds.n_test, 0)[1])
    if task == "regression":
        assert ds.y_train.dtype == np.float64 and ds.n_classes is None
    else:
        assert ds.y_train.dtype == np.int64 and set(np.unique(ds.y_train)) == set(range(ds.n_classes))


def test_diabetes_raw_units():
    ds = load_diabetes(2, standardize=False)
    assert set(np.unique(ds.x_train[:, 1])) == {1.0, 2.0}  # sex coded 1/2 (scaled=False)
    y = np.concatenate([ds.y_train, ds.y_test])
    assert y.min() == 25 and y.max() == 346
    assert ds.y_mean == pytest.approx(ds.y_train.mean())


# ------------------------------------------------------------------------------------------- synthetic


def test_bowtie_toy():
    x, y = make_bowtie_toy()
    assert x.shape == (300, 2) and y.shape == (300,)
    assert np.all(np.abs(x) <= 2.0)
    resid = y - bowtie_mean(x[:, 0])
    assert abs(resid.var() - 0.5) < _var_tolerance(0.5, 300)  # noise_var is a variance
    assert abs(np.corrcoef(resid, x[:, 1])[0, 1]) < 4 / np.sqrt(300)  # x2 is irrelevant
    x2, y2 = make_bowtie_toy(seed=0)
    np.testing.assert_array_equal(y, y2)
    assert not np.array_equal(y, make_bowtie_toy(seed=1)[1])
    big_x, big_y = make_bowtie_toy(n=20000, seed=5, noise_var=2.0)
    assert abs((big_y - bowtie_mean(big_x[:, 0])).var() - 2.0) < _var_tolerance(2.0, 20000)


def test_sinusoid_and_cubic_toys():
    x, y = make_sinusoid_toy(n=2000, seed=3)
    assert x.shape == (2000, 1) and np.all(np.abs(x) <= 4)
    assert abs((y - np.sin(x[:, 0])).var() - 0.1) < _var_tolerance(0.1, 2000)
    xtr, ytr, xte, yte = make_cubic_toy()
    assert xtr.shape == (100, 1) and ytr.shape == (100,) and xte.shape == (400, 1) and yte.shape == (400,)
    assert np.all(np.abs(np.concatenate([xtr, xte])) <= 4)
    resid = np.concatenate([ytr - xtr[:, 0] ** 3, yte - xte[:, 0] ** 3])
    assert abs(resid.var() - 9.0) < _var_tolerance(9.0, 500)
    assert not np.array_equal(ytr, make_cubic_toy(seed=1)[1])


def test_221_toy():
    x, y, w = make_221_toy(n=2000, seed=0)
    assert x.shape == (2000, 2) and y.dtype == np.int64 and np.all(np.abs(x) <= 1)
    assert set(np.unique(y)) == {0, 1} and 0.3 < y.mean() < 0.7
    f = np.maximum(x @ w["W1"].T + w["b1"], 0) @ w["W2"].T + w["b2"]
    np.testing.assert_array_equal(y, (f[:, 0] > 0).astype(int))
    w["W1"][0, 0] = 99.0  # a copy: the module constant is untouched
    assert TOY_221_WEIGHTS["W1"][0, 0] == 1.0
    # "nearly linear": a linear boundary already classifies almost everything
    from sklearn.linear_model import LogisticRegression

    acc = LogisticRegression(C=1e4).fit(x, y).score(x, y)
    assert 0.9 < acc < 1.0


def test_logistic_selection():
    x, y, beta = make_logistic_selection()
    assert x.shape == (2000, 20) and y.shape == (2000,) and y.dtype == np.int64
    assert set(np.flatnonzero(beta) + 1) == set(LOGISTIC_SUPPORT) == {1, 3, 7, 11, 13, 16, 17, 18, 19}
    assert np.all(np.isin(x[:, :6], [0.0, 1.0]))
    np.testing.assert_allclose(x[:, 6:].mean(0), 0.0, atol=1e-10)
    np.testing.assert_allclose(x[:, 6:].std(0), 1.0, rtol=1e-10)
    assert 0.3 < y.mean() < 0.7
    corr = np.corrcoef(x.T)
    i, j = np.triu_indices(20, 1)
    strong = np.abs(corr[i, j]) > 0.7
    assert strong.sum() >= 3
    assert np.any(strong & (i < 6) & (j >= 6))  # a strong binary-continuous pair
    z = np.abs(_logistic_wald_z(x, y))
    support = np.array(LOGISTIC_SUPPORT) - 1
    null = np.setdiff1d(np.arange(20), support)
    assert (z[support] > 2.5).sum() >= 8  # learnable ...
    assert z[support].min() < 6  # ... but not trivially so for every coefficient
    assert (z[null] > 2.5).sum() <= 2
    np.testing.assert_array_equal(y, make_logistic_selection(seed=0)[1])
    assert not np.array_equal(y, make_logistic_selection(seed=1)[1])


def test_logistic_selection_weak_signal():
    """``signal`` scales the coefficients only: same design, weaker effects (the MLE's Wald |z| shrink by
    roughly the same factor), and the registered ``logistic-sim-weak`` set uses the documented scale."""
    x1, y1, b1 = make_logistic_selection()
    xw, yw, bw = make_logistic_selection(signal=LOGISTIC_WEAK_SIGNAL)
    np.testing.assert_array_equal(x1, xw)
    np.testing.assert_allclose(bw, LOGISTIC_WEAK_SIGNAL * b1)
    support = np.array(LOGISTIC_SUPPORT) - 1
    z1, zw = np.abs(_logistic_wald_z(x1, y1)), np.abs(_logistic_wald_z(xw, yw))
    assert np.median(zw[support]) < 0.7 * np.median(z1[support])
    assert (zw[support] < 3).sum() >= 2  # weak effects at the selection boundary exist
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="signal"):
            make_logistic_selection(signal=bad)
    ds = load_dataset("logistic-sim-weak", 2, standardize=False)
    assert ds.name == "logistic-sim-weak" and ds.meta["signal"] == LOGISTIC_WEAK_SIGNAL
    np.testing.assert_allclose(ds.meta["beta_true"], bw)
    np.testing.assert_array_equal(ds.x_test, xw[ds.meta["test_index"]])
    np.testing.assert_array_equal(ds.y_test, yw[ds.meta["test_index"]])


# -------------------------------------------------------------------------------------------- registry


def test_registry_names_and_errors():
    expected = {
        "diabetes",
        "breast-cancer",
        "digits",
        "mnist10k",
        "kmnist10k",
        "toy-bowtie",
        "toy-hs",
        "toy-hs-221",
        "toy-sinusoid",
        "logistic-sim",
        "logistic-hs18",
        "uci:bostonHousing",
        "uci:airfoil",
        "uci:protein-tertiary-structure",
    }
    assert expected <= set(DATASETS) and len(DATASETS) == len(set(DATASETS)) == 22
    with pytest.raises(ValueError, match=r"name='nope'.*toy-bowtie"):
        load_dataset("nope")
    with pytest.raises(ValueError, match="name='boston'"):
        load_dataset("boston")  # UCI sets need the uci: prefix
    with pytest.raises(ValueError, match="split"):
        load_dataset("toy-bowtie", -1)
    with pytest.raises(TypeError, match="split"):
        load_dataset("toy-bowtie", "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="split"):
        load_dataset("toy-bowtie", True)
    with pytest.raises(TypeError, match="name"):
        load_dataset(3)  # type: ignore[arg-type]


def test_registry_synthetic_protocols():
    b0, b1 = load_dataset("toy-bowtie", 0), load_dataset("toy-bowtie", 1)
    assert (b0.n_train, b0.n_test, b0.in_features) == (270, 30, 2)
    pool0 = np.sort(np.concatenate([b0.y_train, b0.y_test]))
    np.testing.assert_array_equal(pool0, np.sort(np.concatenate([b1.y_train, b1.y_test])))  # same data
    assert not np.array_equal(b0.y_test, b1.y_test)  # different split
    np.testing.assert_allclose(b0.x_train.mean(0), 0, atol=1e-12)
    assert b0.y_mean == pytest.approx(b0.y_train.mean())
    raw = load_dataset("toy-bowtie", 0, standardize=False)
    assert raw.x_mean is None and np.all(np.abs(raw.x_train) <= 2)
    h0, h1 = load_dataset("toy-hs", 0), load_dataset("toy-hs", 1)
    assert (h0.n_train, h0.n_test) == (100, 400) and not np.array_equal(h0.y_train, h1.y_train)
    s = load_dataset("toy-sinusoid", 2)
    assert (s.n_train, s.n_test, s.in_features) == (200, 1000, 1)
    c = load_dataset("toy-hs-221", 3)
    assert c.task == "binary" and c.n_classes == 2 and (c.n_train, c.n_test) == (900, 100)
    assert c.tensors()[1].dtype == torch.long
    lg = load_dataset("logistic-sim", 1, standardize=False)
    assert (lg.n_train, lg.n_test, lg.in_features, lg.out_features) == (1800, 200, 20, 1)
    assert tuple(lg.meta["support"]) == LOGISTIC_SUPPORT and lg.meta["beta_true"].shape == (20,)
    x_all, _, _ = make_logistic_selection(n=2000, seed=0)
    np.testing.assert_array_equal(lg.x_test, x_all[lg.meta["test_index"]])


def test_cv10_folds_partition_every_row_and_stratify(data_dir):
    """``cv10:<name>``: the 10 held-out folds partition all rows of the base set (file order), stratified for
    classification, with x standardised by the training folds only."""
    from zoo.data.cv import kfold_indices

    base = load_dataset("breast-cancer", 0, standardize=False)
    n = base.n_train + base.n_test
    y_all = np.concatenate([base.y_train, base.y_test])
    seen = np.zeros(n, dtype=int)
    prop = y_all.mean()
    for k in range(10):
        ds = load_dataset("cv10:breast-cancer", k)
        tr, te = ds.meta["train_index"], ds.meta["test_index"]
        assert len(np.intersect1d(tr, te)) == 0 and len(tr) + len(te) == n
        seen[te] += 1
        assert ds.name == "cv10:breast-cancer" and ds.split == k and ds.n_test in (56, 57)
        assert abs(ds.y_test.mean() - prop) < 0.03  # stratified: every fold has the base class balance
        np.testing.assert_allclose(ds.x_train.mean(0), 0.0, atol=1e-10)
        assert np.abs(ds.x_test.mean(0)).max() > 1e-6  # test rows use the training statistics
    assert (seen == 1).all()
    # regression: plain K-fold over every row, same folds as sklearn's KFold(shuffle, random_state=1)
    reg = load_dataset("cv10:uci:boston", 4, data_dir=data_dir)
    tr, te = kfold_indices(np.zeros(506), "regression", 4)
    np.testing.assert_array_equal(reg.meta["test_index"], te)
    assert reg.n_train == 455 and reg.n_test == 51 and reg.y_mean is not None
    with pytest.raises(ValueError, match="out of range"):
        load_dataset("cv10:breast-cancer", 10)
    with pytest.raises(ValueError, match="tabular base"):
        load_dataset("cv10:mnist10k", 0)
