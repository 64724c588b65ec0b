"""Split-conformal runs (``zoo fit --conformal SHARE``, :mod:`zoo.experiments.conformal`): the held-out rows,
the fields against a direct computation, the coverage guarantee by Monte Carlo, and the refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from zoo.data import from_arrays
from zoo.eval.metrics import conformal_scale, gaussian_nll
from zoo.experiments.config import RunConfig
from zoo.experiments.conformal import (
    calibration_split,
    conformal_fields,
    min_calibration_rows,
)
from zoo.experiments.runs import fit_on_dataset
from zoo.infer.predict import Predictions

#: a prior that pins the noise variance of standardized targets near 1e-3: the fit's Gaussian intervals are
#: far too narrow, which split conformal must repair
TIGHT_NOISE = {"noise_concentration": 1000.0, "noise_rate": 1.0}


def _toy(seed: int, n: int = 160, n_test: int = 200, task: str = "regression"):
    """A linear model with Student-t(3) noise (heavier tails than the fit's Gaussian)."""
    r = np.random.default_rng(seed)
    x = r.normal(size=(n + n_test, 2))
    y = x @ np.array([1.0, -0.5]) + r.standard_t(3, size=n + n_test)
    if task != "regression":
        y = (y > 0).astype(np.int64)
    return from_arrays("toy", task, x[:n], y[:n], x[n:], y[n:])


def _rows(a: np.ndarray) -> list[tuple]:
    return sorted(map(tuple, np.round(a, 12)))


def _cli_base(tmp_path, n: int, n_test: int) -> tuple[list[str], object]:
    """``zoo fit blr-cavi`` arguments on a CSV of a toy data set (inputs as drawn) and the run folder."""
    ds = _toy(7, n=n, n_test=n_test)
    csv = tmp_path / "toy.csv"
    x = np.vstack([ds.x_train * ds.x_std + ds.x_mean, ds.x_test * ds.x_std + ds.x_mean])
    y = np.concatenate([ds.y_train, ds.y_test])
    np.savetxt(csv, np.column_stack([x, y]), delimiter=",", header="a,b,y", comments="")
    out = tmp_path / "run"
    return [
        "fit",
        "blr-cavi",
        "--dataset",
        f"csv:{csv}",
        "--target",
        "y",
        "--no-progress",
        "--out",
        str(out),
    ], out


def _assert_refused(capsys, base: list[str], out, cases) -> None:
    """Each ``(extra arguments, message)`` of ``cases`` is a usage error (exit 2) naming ``message``, and
    nothing is written to ``out``."""
    from zoo.experiments.cli import main

    for extra, msg in cases:
        with pytest.raises(SystemExit) as e:
            main([*base, *extra])
        assert e.value.code == 2
        assert msg in capsys.readouterr().err
        assert not out.exists()


def _toy_runs(first_seed: int, reps: int, **conformal) -> list[dict]:
    """The rows of ``reps`` ``blr-cavi`` runs under :data:`TIGHT_NOISE` on independent toy data sets."""
    return [
        fit_on_dataset(
            "blr-cavi", _toy(first_seed + s), seed=s, progress=False, num_samples=50, options=TIGHT_NOISE,
            **conformal,
        ).metrics
        for s in range(reps)
    ]  # fmt: skip


def test_min_calibration_rows():
    assert [min_calibration_rows(lv) for lv in (0.5, 0.8, 0.9, 0.95, 0.99)] == [1, 4, 9, 19, 99]
    for lv in (0.5, 0.8, 0.9, 0.95, 0.99):  # with one row fewer, ceil((n + 1) level) > n: unbounded
        n = min_calibration_rows(lv)
        assert math.ceil((n + 1) * lv) <= n
        assert math.ceil(n * lv) > n - 1


def test_calibration_split_partitions_the_training_rows():
    ds = _toy(0)
    fit, cal = calibration_split(ds, 0.25, seed=3)
    assert (fit.n_train, cal.n_test) == (120, 40)
    # the held-out rows and the kept rows are the training rows, each once
    assert _rows(np.vstack([fit.x_train, cal.x_test])) == _rows(ds.x_train)
    both = np.concatenate([fit.y_train, cal.y_test])
    assert np.allclose(np.sort(both), np.sort(ds.y_train))
    np.testing.assert_array_equal(fit.x_test, ds.x_test)  # the test rows are untouched
    np.testing.assert_array_equal(fit.y_test, ds.y_test)
    np.testing.assert_array_equal(cal.x_train, fit.x_train)
    np.testing.assert_array_equal(fit.x_mean, ds.x_mean)  # one fixed input map for all rows
    again, _ = calibration_split(ds, 0.25, seed=3)
    np.testing.assert_array_equal(again.x_train, fit.x_train)
    other, _ = calibration_split(ds, 0.25, seed=4)
    assert not np.array_equal(other.x_train, fit.x_train)


@pytest.mark.parametrize(
    ("share", "level", "match"),
    [
        (0.0, 0.95, "in \\(0, 1\\)"),
        (1.0, 0.95, "in \\(0, 1\\)"),
        ("0.2", 0.95, "in \\(0, 1\\)"),
        (0.1, 0.95, "holds out 16 .* at least 19"),
        (0.5, 0.99, "holds out 80 .* at least 99"),
    ],
)
def test_calibration_split_refuses(share, level, match):
    with pytest.raises(ValueError, match="conformal: .*" + match):
        calibration_split(_toy(0), share, seed=0, level=level)


def test_calibration_split_refuses_classification():
    with pytest.raises(ValueError, match="conformal: .*regression; toy is a binary dataset"):
        calibration_split(_toy(0, task="binary"), 0.25, seed=0)


def test_conformal_fields_against_a_direct_computation():
    r = np.random.default_rng(1)
    mean_c, sd_c = r.normal(size=39), r.uniform(0.5, 2.0, size=39)
    z = np.arange(1, 40) / 10.0  # normalized residuals 0.1 .. 3.9
    y_c = mean_c + r.choice([-1.0, 1.0], size=39) * z * sd_c
    mean_t, sd_t = r.normal(size=500), r.uniform(0.5, 2.0, size=500)
    y_t = mean_t + sd_t * r.standard_t(4, size=500)

    def pred(m, s):
        return Predictions("regression", mean=torch.tensor(m), var=torch.tensor(s**2))

    out = conformal_fields(pred(mean_c, sd_c), y_c, pred(mean_t, sd_t), torch.tensor(y_t), 0.2, 0.95)
    q = 3.8  # the ceil(40 * 0.95) = 38th smallest of 0.1 .. 3.9
    assert out["conformal_quantile"] == pytest.approx(q)
    assert out["conformal_factor"] == pytest.approx(q / 1.959963984540054)
    assert out["coverage_conformal"] == pytest.approx(np.mean(np.abs(y_t - mean_t) <= q * sd_t))
    wide = (q / 1.959963984540054 * sd_t) ** 2
    assert out["nll_conformal"] == pytest.approx(gaussian_nll(y_t, mean_t, wide))
    assert (out["conformal_rows"], out["conformal_share"], out["conformal_level"]) == (39, 0.2, 0.95)


def test_a_run_records_the_conformal_fields_of_its_own_predictive():
    ds = _toy(2)
    cfg = RunConfig(conformal=0.25, seed=5, progress=False, num_samples=50, options=TIGHT_NOISE)
    run = fit_on_dataset("blr-cavi", ds, cfg)
    m = run.metrics
    assert m["n_train"] == 120 and m["conformal_rows"] == 40 and m["n_test"] == 200
    fit, cal = calibration_split(ds, 0.25, seed=5)
    np.testing.assert_array_equal(run.dataset.x_train, fit.x_train)  # fitted without the held-out rows
    from zoo.infer.predict import predict

    _, _, x_cal, y_cal = cal.tensors()
    p = predict(run.result, x_cal, num_samples=50, seed=5)
    q = conformal_scale(y_cal.numpy(), p.mean.numpy(), p.var.numpy(), 0.95)
    assert m["conformal_quantile"] == pytest.approx(q, rel=1e-6)
    mean, sd = run.predictions.mean.numpy(), run.predictions.std.numpy()
    assert m["coverage_conformal"] == pytest.approx(np.mean(np.abs(ds.y_test - mean) <= q * sd))
    assert m["conformal_factor"] > 3  # the pinned noise: the Gaussian interval is several times too narrow


def test_split_conformal_covers_at_its_guaranteed_rate():
    """Over R independent data sets, the test coverage of ``mean +- q sd`` averages k / (n_cal + 1) with
    k = ceil((n_cal + 1) 0.95) (Lei et al. 2018, Thm. 2.2; exact for continuous scores), here 39 / 41, while
    the fit's own Gaussian interval covers about half; the tolerance is 4 standard errors of the mean of
    R = 100 runs' coverages."""
    rows = _toy_runs(100, 100, conformal=0.25)
    cov, gauss = np.array([m["coverage_conformal"] for m in rows]), [m["coverage95"] for m in rows]
    assert rows[-1]["conformal_rows"] == 40
    se = cov.std(ddof=1) / np.sqrt(cov.size)
    assert abs(cov.mean() - 39 / 41) < 4 * se, (cov.mean(), se)
    assert np.mean(gauss) < 0.8


def test_run_settings_refuse_bad_conformal_values():
    for bad in (0.0, 1.0, -0.1, True, "0.2", float("nan")):
        with pytest.raises(ValueError, match="conformal must be a number in \\(0, 1\\)"):
            RunConfig(conformal=bad)
    with pytest.raises(ValueError, match="conformal_level must be a number in \\(0, 1\\)"):
        RunConfig(conformal=0.2, conformal_level=1.0)
    with pytest.raises(ValueError, match="conformal: .*posttrain_steps"):
        RunConfig(conformal=0.2, posttrain_steps=3)


def test_refusals_come_before_any_fit(monkeypatch):
    import zoo.experiments.runs as runs

    def boom(*a, **k):  # pragma: no cover - a refusal must come first
        raise AssertionError("fitted")

    monkeypatch.setattr(runs, "fit", boom)
    with pytest.raises(ValueError, match="conformal: .*regression"):
        fit_on_dataset("mfvi-bnn", _toy(0, task="binary"), conformal=0.25, progress=False)
    with pytest.raises(ValueError, match="at least 19"):
        fit_on_dataset("mfvi-bnn", _toy(0), RunConfig(conformal=0.05, progress=False))
    from zoo.experiments.ensemble import fit_ensemble

    with pytest.raises(ValueError, match="conformal: .*not an ensemble"):
        fit_ensemble("mfvi-bnn", _toy(0), conformal=0.25, k=2)


def test_a_protocol_row_refuses_conformal_with_an_ensemble():
    from zoo.experiments.reproduce import RunSpec, run_config

    spec = RunSpec("v", "mfvi-bnn", "diabetes", 0, {"ensemble": 2, "conformal": 0.2})
    with pytest.raises(ValueError, match="conformal: calibrates one fit; not with ensemble"):
        run_config(spec)
    k, _, cfg = run_config(RunSpec("v", "mfvi-bnn", "diabetes", 0, {"conformal": 0.2}))
    assert (k, cfg.conformal, cfg.conformal_level) == (1, 0.2, 0.95)


def test_cli_writes_the_fields_and_refuses_before_writing(tmp_path, capsys):
    from zoo.experiments.cli import main

    base, out = _cli_base(tmp_path, 160, 40)
    cases = (
        (["--conformal", "1.5"], "argument --conformal: conformal must be a number in (0, 1)"),
        (["--conformal", "0.05"], "argument --conformal: a share of 0.05 holds out"),
        (["--conformal", "0.2", "--conformal-level", "0"], "argument --conformal-level:"),
        (["--conformal", "0.2", "--ensemble", "2"], "argument --conformal: calibrates one fit"),
    )
    _assert_refused(capsys, base, out, cases)
    assert main([*base, "--conformal", "0.25", "--option", "noise_concentration=1000"]) == 0
    assert "split conformal on" in capsys.readouterr().out
    m = json.loads((out / "metrics.json").read_text())
    assert m["conformal_share"] == 0.25 and m["conformal_rows"] == m["n_train"] // 3
    assert 0.0 <= m["coverage_conformal"] <= 1.0 and m["conformal_factor"] > 1


def test_a_nuts_run_is_calibrated_on_all_its_draws():
    from zoo.infer.mcmc_export import all_draws_predict

    ds = _toy(3, n=100, n_test=20)
    nuts = {"inference": "nuts", "chains": 1, "warmup": 20, "samples": 20, "jit_compile": False}
    run = fit_on_dataset("mfvi-bnn", ds, hidden=[2], conformal=0.2, seed=1, progress=False, fit_options=nuts)
    assert run.metrics["inference"] == "nuts" and run.metrics["conformal_rows"] == 20
    _, cal = calibration_split(ds, 0.2, seed=1)
    _, _, x_cal, y_cal = cal.tensors()
    p = all_draws_predict(run.result, x_cal, seed=1)
    q = conformal_scale(y_cal.numpy(), p.mean.numpy(), p.var.numpy(), 0.95)
    assert run.metrics["conformal_quantile"] == pytest.approx(q, rel=1e-6)


# ------------------------------------------------------------------------------------------------------
# CV+ (zoo fit --conformal-folds K, zoo.experiments.cv_plus)


def test_fold_ids_cut_a_seeded_permutation_into_near_equal_folds():
    from zoo.experiments.cv_plus import fold_ids

    f = fold_ids(23, 5, seed=1)
    assert sorted(np.bincount(f)) == [4, 4, 5, 5, 5] and f.min() == 0 and f.max() == 4
    np.testing.assert_array_equal(f, fold_ids(23, 5, seed=1))
    assert not np.array_equal(f, fold_ids(23, 5, seed=2))


def test_cv_plus_bounds_against_their_definition():
    """Barber et al. 2021, Eq. 9: the floor(a (n + 1))-th smallest of mu_-k(i)(x) - R_i sd_-k(i)(x) and the
    ceil((1 - a)(n + 1))-th smallest of mu_-k(i)(x) + R_i sd_-k(i)(x), by sorting every list."""
    from zoo.experiments.cv_plus import cv_plus_bounds

    r = np.random.default_rng(0)
    k, m, n = 4, 7, 39
    mean, sd = r.normal(size=(k, m)), r.uniform(0.5, 2.0, size=(k, m))
    scores, fold = r.exponential(size=n), r.integers(0, k, size=n)
    lo, hi = cv_plus_bounds(mean, sd, scores, fold, 0.9)
    for j in range(m):
        low = sorted(mean[fold[i], j] - scores[i] * sd[fold[i], j] for i in range(n))
        high = sorted(mean[fold[i], j] + scores[i] * sd[fold[i], j] for i in range(n))
        assert lo[j] == pytest.approx(low[3])  # floor(0.1 * 40) = 4th smallest
        assert hi[j] == pytest.approx(high[35])  # ceil(0.9 * 40) = 36th smallest
    with pytest.raises(ValueError, match="bound no interval"):
        cv_plus_bounds(mean, sd, scores[:10], fold[:10], 0.95)


def test_cv_plus_covers_at_least_its_guaranteed_rate():
    """Over R independent data sets the CV+ interval's test coverage must reach Barber et al.'s (2021,
    Thm. 4) bound 1 - 2a - min(2 (1 - 1/K) / (n/K + 1), (1 - K/n) / (K + 1)) = 0.852 for n = 160, K = 5, up
    to 4 standard errors, where the fit's own Gaussian interval covers about half; the run's own fit is on
    all 160 rows."""
    rows = _toy_runs(300, 60, conformal_folds=5)
    cov, gauss = np.array([m["coverage_cv_plus"] for m in rows]), [m["coverage95"] for m in rows]
    wide = [m["width_cv_plus"] / m["width_gaussian"] for m in rows]
    m = rows[-1]
    assert (m["n_train"], m["conformal_rows"], m["conformal_folds"]) == (160, 160, 5)
    bound = 1 - 2 * 0.05 - min(2 * (1 - 1 / 5) / (160 / 5 + 1), (1 - 5 / 160) / 6)
    assert cov.mean() >= bound - 4 * cov.std(ddof=1) / np.sqrt(cov.size), cov.mean()
    assert np.mean(gauss) < 0.8 and min(wide) > 1  # the pinned noise's intervals were too narrow


def test_cv_plus_refusals_come_before_any_fit(monkeypatch):
    import zoo.experiments.runs as runs

    def boom(*a, **k):  # pragma: no cover - a refusal must come first
        raise AssertionError("fitted")

    monkeypatch.setattr(runs, "fit", boom)
    for bad in (1, 0, 2.5, True):
        with pytest.raises(ValueError, match="conformal_folds must be an integer >= 2"):
            RunConfig(conformal_folds=bad)
    with pytest.raises(ValueError, match="not both"):
        RunConfig(conformal_folds=5, conformal=0.2)
    with pytest.raises(ValueError, match="conformal_folds: .*posttrain_steps"):
        RunConfig(conformal_folds=5, posttrain_steps=2)
    with pytest.raises(ValueError, match="conformal_folds: .*regression"):
        fit_on_dataset("mfvi-bnn", _toy(0, task="binary"), conformal_folds=5, progress=False)
    with pytest.raises(ValueError, match="in \\[2, 30\\]"):
        fit_on_dataset("mfvi-bnn", _toy(0, n=30), conformal_folds=31, progress=False)
    with pytest.raises(ValueError, match="at least 19"):
        fit_on_dataset("mfvi-bnn", _toy(0, n=15), conformal_folds=3, progress=False)
    from zoo.experiments.ensemble import fit_ensemble

    with pytest.raises(ValueError, match="not an ensemble"):
        fit_ensemble("mfvi-bnn", _toy(0), conformal_folds=3, k=2)


def test_cli_cv_plus(tmp_path, capsys):
    from zoo.experiments.cli import main

    base, out = _cli_base(tmp_path, 120, 30)
    cases = (
        (["--conformal-folds", "1"], "argument --conformal-folds: conformal_folds must be an integer >= 2"),
        (["--conformal-folds", "500"], "argument --conformal-folds: conformal_folds must be an integer in"),
        (["--conformal-folds", "3", "--conformal", "0.2"], "not both"),
        (["--conformal-folds", "3", "--ensemble", "2"], "argument --conformal-folds: calibrates one fit"),
    )
    _assert_refused(capsys, base, out, cases)
    assert main([*base, "--conformal-folds", "4"]) == 0
    assert "CV+ on 4 folds" in capsys.readouterr().out
    m = json.loads((out / "metrics.json").read_text())
    assert m["conformal_folds"] == 4 and m["conformal_rows"] == m["n_train"] == 135
    assert 0.0 <= m["coverage_cv_plus"] <= 1.0 and m["width_cv_plus"] > 0 and m["width_gaussian"] > 0
