"""The ``logistic-hs18`` generator (zoo.data.selection_sim): marginals, designed correlations within Monte
Carlo tolerance, seeding, preprocessing, argument checks, the registered data set, and the fixed-order
minibatches and faithful settings of the ``-paper`` selection rows (Skaaret-Lund, Storvik & Hubin 2023,
arXiv:2305.03395, §5.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from zoo.data import load_dataset
from zoo.data import selection_sim as sim

N_BIG = 40_000  # large draw for the design checks: the tolerances below shrink as 1/sqrt(n)


@pytest.fixture(scope="module")
def big():
    return sim.make_hs18_covariates(N_BIG, seed=123)


def test_marginals_binary_columns_trend_and_continuous(big):
    bins = [c - 1 for c in sim.BINARY_COLUMNS]
    assert set(np.unique(big[:, bins])) == {0.0, 1.0}
    tol = 4 * 0.5 / math.sqrt(N_BIG)  # 4 sd of a frequency of 1/2
    np.testing.assert_allclose(big[:, bins].mean(0), 0.5, atol=tol)
    trend = big[:, sim.TREND_COLUMN - 1]
    np.testing.assert_array_equal(trend, np.arange(1, N_BIG + 1, dtype=float) ** 2)
    cont = [j for j in range(20) if j not in bins and j != sim.TREND_COLUMN - 1]
    np.testing.assert_allclose(big[:, cont].mean(0), 0.0, atol=4 / math.sqrt(N_BIG))
    np.testing.assert_allclose(big[:, cont].std(0), 1.0, atol=4 * math.sqrt(0.5 / N_BIG))
    assert len(np.unique(big[:, cont[0]])) == N_BIG  # continuous, not discretised


def test_designed_correlations_within_monte_carlo_tolerance(big):
    design = sim.design_correlation()
    assert np.allclose(design, design.T) and np.all(np.linalg.eigvalsh(sim.LATENT_CORRELATION) > 0)
    emp = np.corrcoef(big, rowvar=False)
    keep = [j for j in range(20) if j != sim.TREND_COLUMN - 1]  # the trend is a fixed column, not a draw
    # sd of a sample correlation is at most ~1/sqrt(n) for these bounded / Gaussian columns; 5 sd
    tol = 5 / math.sqrt(N_BIG)
    np.testing.assert_allclose(emp[np.ix_(keep, keep)], design[np.ix_(keep, keep)], atol=tol)
    # the designed structure itself: decoys of true covariates and the binary blocks are strong
    assert design[0, 1] == pytest.approx(2 / math.pi * math.asin(0.9))  # X1-X2 phi 0.71
    assert design[2, 4] == pytest.approx(2 / math.pi * math.asin(-0.9))  # X3-X5 phi -0.71
    assert design[12, 14] == pytest.approx(-0.9) and design[10, 8] == pytest.approx(0.85)
    assert design[0, 15] == pytest.approx(0.5 * math.sqrt(2 / math.pi))  # binary-continuous X1-X16
    nulls = [k for k in keep if sim.BETA[k] == 0]
    for j in (1, 3, 7, 11, 13, 16, 18):  # true covariates with a correlated null decoy (X19: only X16, X1)
        assert max(abs(design[j - 1, k]) for k in nulls) >= 0.35, j
    assert max(abs(design[18, k]) for k in nulls) < 0.2 and design[18, 15] == pytest.approx(0.4)


def test_response_and_support():
    x, y, beta = sim.make_logistic_hs18()
    assert x.shape == (2000, 20) and y.shape == (2000,) and y.dtype == np.int64
    assert set(np.unique(y)) == {0, 1}
    np.testing.assert_array_equal(beta, sim.BETA)
    assert sim.SUPPORT == (1, 3, 7, 11, 13, 16, 17, 18, 19)
    assert beta[16] == -0.00005 and beta[15] == 50 and beta[12] == 37.1
    # y follows the printed model on the raw covariates: without noise the labels agree with sign(x beta)
    _, y0, _ = sim.make_logistic_hs18(noise_var=0.0)
    eta = x @ beta
    sure = np.abs(eta) > 10  # P(y = 1) within 5e-5 of 0 or 1
    assert sure.mean() > 0.5
    np.testing.assert_array_equal(y0[sure], (eta[sure] > 0).astype(int))


def test_seeding_reproducible_and_seeds_differ():
    a = sim.make_logistic_hs18(n=300, seed=4)
    b = sim.make_logistic_hs18(n=300, seed=4)
    c = sim.make_logistic_hs18(n=300, seed=5)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[1], c[1])
    np.testing.assert_array_equal(a[0], sim.make_hs18_covariates(300, 4))  # covariates apart from y


def test_reference_preprocessing_standardises_continuous_columns_only():
    x, _, _ = sim.make_logistic_hs18(n=500, seed=1)
    xs, (mean, sd) = sim.standardize_continuous(x)
    np.testing.assert_array_equal(xs[:, :6], x[:, :6])
    np.testing.assert_allclose(xs[:, 6:].mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(xs[:, 6:].std(0), 1.0, atol=1e-12)
    xt, _, _ = sim.make_logistic_hs18(n=50, seed=2)
    xts, used = sim.standardize_continuous(xt, (mean, sd))
    np.testing.assert_allclose(xts[:, 6:], (xt[:, 6:] - mean) / sd)
    assert used[0] is mean


@pytest.mark.parametrize(
    ("call", "arg"),
    [
        (lambda: sim.make_logistic_hs18(n=1), "n"),
        (lambda: sim.make_logistic_hs18(n=2.5), "n"),
        (lambda: sim.make_logistic_hs18(n=True), "n"),
        (lambda: sim.make_logistic_hs18(seed=-1), "seed"),
        (lambda: sim.make_logistic_hs18(seed="0"), "seed"),
        (lambda: sim.make_logistic_hs18(noise_var=-0.1), "noise_var"),
        (lambda: sim.make_logistic_hs18(noise_var=float("nan")), "noise_var"),
        (lambda: sim.make_hs18_covariates(n=0), "n"),
        (lambda: sim.standardize_continuous(np.zeros((3, 19))), "x"),
    ],
)
def test_bad_arguments_are_value_errors_naming_them(call, arg):
    with pytest.raises(ValueError, match=rf"^{arg}\b"):
        call()


def test_registered_dataset_trains_on_all_rows_in_order():
    ds = load_dataset("logistic-hs18", split=7)
    x, y, beta = sim.make_logistic_hs18()
    xs, stats = sim.standardize_continuous(x)
    assert ds.name == "logistic-hs18" and ds.task == "binary" and ds.split == 7
    assert ds.n_train == 2000 and ds.n_test == 2000
    np.testing.assert_allclose(ds.x_train, xs)  # row order kept, binary columns raw
    np.testing.assert_array_equal(ds.y_train, y)
    np.testing.assert_array_equal(ds.true_support, beta != 0)
    xt, yt, _ = sim.make_logistic_hs18(seed=1)
    np.testing.assert_allclose(ds.x_test, sim.standardize_continuous(xt, stats)[0])
    np.testing.assert_array_equal(ds.y_test, yt)
    np.testing.assert_array_equal(load_dataset("logistic-hs18", split=0).x_train, ds.x_train)


# ---------------------------------------------------------------------------------- fixed-order batches


def test_fixed_order_minibatches_walk_the_rows_in_order():
    from zoo.infer.loop import _next_batch

    state = {"gen": torch.Generator().manual_seed(0), "perm": None, "pos": 0, "shuffle": False}
    got = [_next_batch(state, 10, 4, torch.device("cpu")).tolist() for _ in range(4)]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3], [4, 5, 6, 7]]  # partial batch dropped
    assert state["epoch"] == 2
    state = {"gen": torch.Generator().manual_seed(0), "perm": None, "pos": 0}  # default: shuffled epochs
    assert _next_batch(state, 10, 9, torch.device("cpu")).tolist() != list(range(9))


def test_shuffle_setting_is_checked_and_recorded():
    from zoo import build
    from zoo.infer.config import FitConfig
    from zoo.infer.loop import fit

    with pytest.raises(TypeError, match="shuffle"):
        FitConfig(shuffle="no")
    model, guide, _ = build("lbbnn", 4, 1, "binary", hidden=[], hyper="fixed")
    x = torch.randn(20, 4)
    y = (x[:, 0] > 0).float()
    res = fit(model, guide, x, y, steps=3, batch_size=5, shuffle=False, progress=False)
    assert res.config["shuffle"] is False and res.loop_state["shuffle"] is False
    assert res.loop_state["perm"].tolist() == list(range(20))


def test_paper_rows_carry_the_reference_settings():
    from zoo.experiments.reproduce import PROTOCOLS
    from zoo.families.lbbnn.flows import PAPER_FLOW_INIT, PAPER_SELECTION_INIT, paper_selection_settings

    runs = PROTOCOLS["lbbnn-flow-selection-hs18"].runs([0])
    by = {r.variant: r for r in runs}
    assert set(by) == {f"lbbnn-{g}{t}" for g in ("mf", "lcrt", "flow") for t in ("", "-paper")}
    flow = by["lbbnn-flow-paper"].kwargs
    assert flow["batch_size"] == 400 and flow["steps"] == 2500 and flow["fit_options"]["shuffle"] is False
    assert flow["guide_options"] == {**PAPER_SELECTION_INIT, **PAPER_FLOW_INIT}
    assert flow["options"] == {"hyper": "fixed", "inclusion": 0.25, "slab_var": 1.0, "eb_steps": 1250}
    lrs = flow["fit_options"]["stage_lrs"]
    assert set(lrs["pretrain"].values()) == {1e-2}
    np.testing.assert_allclose(list(lrs["train"].values()), 1e-3)
    lcrt = by["lbbnn-lcrt-paper"].kwargs
    assert "stage_lrs" not in lcrt["fit_options"] and lcrt["guide_options"] == PAPER_SELECTION_INIT
    # today's row keeps today's settings, from the paper's one start (not the entry's best of two)
    assert by["lbbnn-lcrt"].kwargs["fit_options"] == {"starts": [{}]}
    assert by["lbbnn-lcrt"].kwargs["batch_size"] == 400
    old = {r.variant: r for r in PROTOCOLS["lbbnn-flow-selection"].runs([0])}
    assert old["lbbnn-flow-paper"].kwargs["batch_size"] == 360  # 1800 rows: still 5 batches per epoch
    with pytest.raises(ValueError, match="guide"):
        paper_selection_settings("mvn", 2000)
    with pytest.raises(ValueError, match="n_train"):
        paper_selection_settings("lcrt", 3)
