"""``benchmarks/calibration.py``: a real (short) fit gives a calibration row whose parts are consistent, the
summary averages splits, and the report and the reliability diagram are written whole."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("matplotlib")


def test_fit_row_is_consistent(data_dir, monkeypatch, benchmark_script):
    from zoo.experiments.registry import get_entry

    mod = benchmark_script("calibration")
    monkeypatch.setitem(get_entry("mfvi-bnn").fit_defaults, "steps", 60)
    row = mod.fit_row("mfvi-bnn", "yacht", 0)
    cov = [row["coverage"][str(lv)] for lv in mod.LEVELS]
    assert all(0 <= c <= 1 for c in cov) and cov == sorted(cov)  # nested intervals cover more
    assert row["noise_ratio"] > 0 and 0 <= row["epistemic_share"] <= 1
    assert np.isfinite(row["nll"]) and row["split"] == 0
    # the noise update after the last step sets E[sigma2] to about the expected squared error under q(W):
    # training MSE plus the output spread at the training inputs (up to the weak prior and 32 draws of it)
    assert row["train_spread"] > 0 and row["mse_ratio"] > 0
    assert row["noise_ratio"] == pytest.approx(1 + row["train_spread"], abs=0.05)
    short = mod.fit_row("mfvi-bnn", "yacht", 0, label="short", steps=3)  # steps reach the fit
    assert short["model"] == "mfvi-bnn+short" and short["nll"] != row["nll"]


def test_summary_report_and_figure(tmp_path, benchmark_script):
    mod = benchmark_script("calibration")
    rows = [
        {"model": m, "dataset": d, "split": k, "coverage95": 0.9 + 0.01 * k, "nll": 1.0, "rmse": 2.0,
         "noise_ratio": 1.5, "epistemic_share": 0.1 * k,
         "coverage": {str(lv): min(1.0, lv + 0.02 * k) for lv in mod.LEVELS}, "fit_seconds": 1.0}
        for m in ("a", "b") for d in ("yacht", "energy") for k in (0, 1)
    ]  # fmt: skip
    summary = mod.summarize(rows)
    assert len(summary) == 4 and all(e["splits"] == 2 for e in summary)
    assert summary[0]["coverage95"] == pytest.approx(0.905)
    assert summary[0]["epistemic_share"] == pytest.approx(0.05)
    assert summary[0]["coverage"]["0.5"] == pytest.approx(0.51)
    assert summary[0]["fit_seconds"] == 1.0
    assert summary[0]["coverage95_sd"] == pytest.approx(0.01 / 2**0.5)  # sample sd of 0.90 and 0.91
    # ordered by model, then the data sets' order (yacht before energy), whatever the rows' order
    assert [(e["model"], e["dataset"]) for e in mod.summarize(rows[::-1])] == [
        ("a", "yacht"), ("a", "energy"), ("b", "yacht"), ("b", "energy")
    ]  # fmt: skip
    assert summary[0]["train_spread"] is None and summary[0]["mse_ratio"] is None  # rows from before them
    extra = [{**r, "train_spread": 0.5 + 0.1 * r["split"], "mse_ratio": 1.2} for r in rows]
    extra[-1].pop("mse_ratio")  # one split without it: no mean of the others
    both = mod.summarize(extra)
    assert both[0]["train_spread"] == pytest.approx(0.55) and both[0]["mse_ratio"] == pytest.approx(1.2)
    assert both[-1]["train_spread"] == pytest.approx(0.55) and both[-1]["mse_ratio"] is None
    assert "| 0.55 | 1.20 |" in mod.markdown(both, "cmd") and "| 0.55 | – |" in mod.markdown(both, "cmd")
    # a Student-t row's degrees of freedom are averaged; Gaussian rows (df None) and older rows have none
    assert summary[0]["df"] is None
    t_rows = [{**r, "df": 3.0 + r["split"]} for r in rows]
    assert mod.summarize(t_rows)[0]["df"] == pytest.approx(3.5)
    assert mod.summarize([{**r, "df": None} for r in rows])[0]["df"] is None
    text = mod.markdown(summary, "cmd")
    assert "| – | – |" in text
    assert text.count("\n| a | yacht |") == 1 and text.count("\n| a | energy |") == 1 and "| 0.510 |" in text
    # the target table, both outside, within t(0.975, 1) sd / sqrt(2) = 0.0635 of their means
    assert "\n| a | **0.905** ± 0.064 (2) | **0.905** ± 0.064 (2) | 0/2 | 0 |" in text
    (tmp_path / "calibration.partial.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n{cut")
    out = mod.main(["--render-only", "--out", str(tmp_path)])
    assert len(out) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "calibration.json", "calibration.md", "calibration.partial.jsonl", "calibration.png"
    ]  # fmt: skip
    assert json.loads((tmp_path / "calibration.json").read_text())["summary"] == out


def test_options_need_a_label(tmp_path, capsys, benchmark_script):
    mod = benchmark_script("calibration")
    refused = (
        ("--options", '{"noise_rate": 0.1}'),
        ("--guide-options", '{"noise_update": "gradient"}'),
        ("--steps", "5000"),
    )
    for flag, value in refused:
        with pytest.raises(SystemExit):
            mod.main([flag, value, "--out", str(tmp_path)])
        assert "need --label" in capsys.readouterr().err
        assert not list(tmp_path.iterdir())  # refused before anything is written


def test_holdout_refuses_a_student_t_likelihood(tmp_path, capsys, benchmark_script):
    mod = benchmark_script("calibration")
    with pytest.raises(SystemExit):
        mod.main(["--holdout", "0.2", "--options", '{"student_t_df": 4}', "--out", str(tmp_path)])
    assert "student_t_df" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_student_t_row_reads_the_t_mixture(data_dir, monkeypatch, benchmark_script):
    """A ``student_t_df`` row: its reliability diagram is the t mixture's PIT, its ``coverage95`` the same
    mixture's central interval (zoo.experiments.outputs.score_predictions), so the two agree at 0.95."""
    from zoo.experiments.registry import get_entry

    mod = benchmark_script("calibration")
    monkeypatch.setitem(get_entry("mfvi-bnn").fit_defaults, "steps", 60)
    row = mod.fit_row("mfvi-bnn", "yacht", 0, options={"student_t_df": 4}, label="t4")
    assert row["model"] == "mfvi-bnn+t4"
    assert row["coverage"]["0.95"] == pytest.approx(row["coverage95"])
    assert np.isfinite(row["nll"]) and row["noise_ratio"] > 0


def test_holdout_dataset_moves_a_seeded_share(benchmark_script):
    from zoo.data.core import from_arrays

    mod = benchmark_script("_calibration_holdout")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 3)), rng.normal(size=60)
    ds = from_arrays("toy", "regression", x[:50], y[:50], x[50:], y[50:])
    held, n_val = mod.holdout_dataset(ds, 0.2, 7)
    assert n_val == 10 and held.x_train.shape == (40, 3) and held.x_test.shape == (20, 3)
    # the held-out rows and the fit rows are the training rows, once each; the test rows follow unchanged
    rows = np.concatenate([held.x_test[:n_val], held.x_train])
    assert sorted(map(tuple, rows)) == sorted(map(tuple, ds.x_train))
    np.testing.assert_array_equal(held.x_test[n_val:], ds.x_test)
    np.testing.assert_array_equal(held.y_test[n_val:], ds.y_test)
    again, _ = mod.holdout_dataset(ds, 0.2, 7)
    other, _ = mod.holdout_dataset(ds, 0.2, 8)
    np.testing.assert_array_equal(again.x_train, held.x_train)
    assert not np.array_equal(other.x_train, held.x_train)
    for share in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="holdout"):
            mod.holdout_dataset(ds, share, 7)


def test_noise_factor_and_scale_noise(benchmark_script):
    import types

    import torch

    from zoo.infer.predict import Predictions

    mod = benchmark_script("_calibration_holdout")
    rng = np.random.default_rng(1)
    S, n_val, n_test = 20, 4000, 500
    n = n_val + n_test
    loc = rng.normal(size=n)[None, :] + 0.2 * rng.normal(size=(S, n))
    scale = np.full((S, n), 2.0)
    k = rng.integers(S, size=n)
    y = loc[k, np.arange(n)] + 0.5 * 2.0 * rng.normal(size=n)  # the noise is half the predictive's
    t = lambda a: torch.as_tensor(a)  # noqa: E731
    pred = Predictions("regression", mean=t(loc.mean(0)), var=t((scale**2).mean(0) + loc.var(0)), loc=t(loc),
                       scale=t(scale))  # fmt: skip
    c = mod.noise_factor(pred, y, n_val)
    assert abs(np.log(c) - np.log(0.5)) < 0.05  # standard error of log c about 1 / sqrt(2 * 4000) = 0.011
    shifted = y.copy()
    shifted[n_val:] += 100.0
    assert mod.noise_factor(pred, shifted, n_val) == c  # only the held-out rows choose it
    regression = types.SimpleNamespace(task="regression")
    scaled, extra = mod.scale_noise(regression, pred, y, c)
    assert extra["noise_scale"] == c and "scores" in extra
    np.testing.assert_allclose(scaled.var.numpy(), ((c * scale) ** 2).mean(0) + loc.var(0), rtol=1e-12)
    np.testing.assert_array_equal(scaled.loc.numpy(), loc)
    np.testing.assert_array_equal(scaled.mean.numpy(), pred.mean.numpy())
    assert extra["scores"]["coverage95"] < extra["coverage95_unscaled"] > 0.99
    assert extra["scores"]["nll"] < extra["nll_unscaled"]
    assert 0.93 < extra["scores"]["coverage95"] < 0.97  # 4500 rows: standard error of a coverage 0.0033
    _, same = mod.scale_noise(regression, pred, y, 1.0, 1.0)
    assert same["scores"]["nll"] == pytest.approx(same["nll_unscaled"], rel=1e-12)
    assert same["nll_predictive"] == pytest.approx(same["nll_unscaled"], rel=1e-12)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="c:"):
            mod.scale_noise(regression, pred, y, bad)
        with pytest.raises(ValueError, match="s:"):
            mod.scale_noise(regression, pred, y, 1.0, bad)


def test_predictive_factor_is_the_gaussian_closed_form(benchmark_script):
    import types

    import torch

    mod = benchmark_script("_calibration_holdout")
    rng = np.random.default_rng(3)
    n_val, n = 3000, 3500
    mean, var = rng.normal(size=n), rng.uniform(0.5, 2.0, size=n)
    y = mean + 0.6 * np.sqrt(var) * rng.normal(size=n)  # the predictive is 1 / 0.6 times too wide
    y[n_val:] += 50.0  # rows past n_val are test rows: they must not count
    pred = types.SimpleNamespace(mean=torch.as_tensor(mean), var=torch.as_tensor(var))
    s = mod.predictive_factor(pred, y, n_val)
    assert s == pytest.approx(np.sqrt(np.mean((y[:n_val] - mean[:n_val]) ** 2 / var[:n_val])), rel=1e-12)
    assert abs(np.log(s) - np.log(0.6)) < 0.04  # standard error of log s about 1 / sqrt(2 * 3000) = 0.013
    # it maximizes the held-out Gaussian log-likelihood of N(mean, s^2 var)
    from zoo.eval.metrics import gaussian_nll

    best = gaussian_nll(y[:n_val], mean[:n_val], s * s * var[:n_val])
    for f in (0.98, 1.02):
        assert best < gaussian_nll(y[:n_val], mean[:n_val], (f * s) ** 2 * var[:n_val])


def test_holdout_row(data_dir, monkeypatch, benchmark_script):
    from zoo.experiments.registry import get_entry

    mod = benchmark_script("calibration")
    monkeypatch.setitem(get_entry("mfvi-bnn").fit_defaults, "steps", 60)
    row = mod.fit_row("mfvi-bnn", "yacht", 0, label="holdout", holdout=0.2)
    assert row["model"] == "mfvi-bnn+holdout" and row["noise_scale"] > 0
    assert np.isfinite(row["nll"]) and "scores" not in row
    # the scaled fit is the usual fit on all training rows: unscaled, it is the default's row
    plain = mod.fit_row("mfvi-bnn", "yacht", 0)
    assert row["nll_unscaled"] == plain["nll"] and row["coverage95_unscaled"] == plain["coverage95"]
    assert row["rmse"] == plain["rmse"] and row["train_spread"] == plain["train_spread"]
    assert row["predictive_scale"] > 0 and 0 <= row["coverage95_predictive"] <= 1
    # split conformal: the held-out fit's factor, its test coverage, and the factor on the full fit
    assert row["conformal_quantile"] > 0 and 0 <= row["coverage95_conformal"] <= 1
    assert 0 <= row["coverage95_conformal_full"] <= 1
    assert np.isfinite(row["nll_conformal"]) and row["rmse_conformal"] > 0


def test_holdout_table(benchmark_script):
    mod = benchmark_script("calibration")
    cov = {str(lv): 0.99 for lv in mod.LEVELS}
    base = {"dataset": "yacht", "coverage95": 0.99, "nll": 1.3, "rmse": 1.0, "noise_ratio": 1.5,
            "epistemic_share": 0.3, "coverage": cov, "fit_seconds": 1.0}  # fmt: skip
    rows = [{**base, "model": "m", "split": k} for k in (0, 1)] + [
        {**base, "model": "m+holdout", "split": k, "coverage95": 0.95, "nll": 1.1,
         "noise_scale": 0.5 + 0.1 * k, "coverage95_unscaled": 1.0, "nll_unscaled": 1.4}
        for k in (0, 1)
    ]  # fmt: skip
    summary = mod.summarize(rows)
    assert summary[1]["noise_scale"] == pytest.approx(0.55) and summary[0]["noise_scale"] is None
    text = mod.markdown(summary, ["cmd"])
    assert "| m+holdout | yacht | 2 | held-out | 0.55 | – | 1.000 → 0.950 → – | 1.400 → 1.100 → – |" in text
    both = [
        {**r, "predictive_scale": 0.8, "coverage95_predictive": 0.96, "nll_predictive": 1.0} for r in rows
    ]
    line = "| m+holdout | yacht | 2 | held-out | 0.55 | 0.80 | 1.000 → 0.950 → 0.960 | 1.400 → 1.100 → 1.000 "
    assert line + "|" in mod.markdown(mod.summarize(both), ["cmd"])
    assert mod.holdout_table(mod.summarize(rows[:2])) == []  # no held-out rows: no table
    # --train-noise rows say where their c was chosen
    own = [{**r, "model": "m+train-noise", "noise_scale_rows": "training"} for r in rows[2:]]
    text = mod.markdown(mod.summarize(rows + own), ["cmd"])
    assert "| m+train-noise | yacht | 2 | training | 0.55 | – | 1.000 → 0.950 → – |" in text
    assert "| m+holdout | yacht | 2 | held-out | 0.55 |" in text
    assert "Split conformal" not in text  # rows without conformal fields: no table
    conf = [
        {**r, "conformal_quantile": 1.959964 * (0.7 + 0.1 * r["split"]), "coverage95_conformal": 0.96,
         "coverage95_conformal_full": 0.94, "nll_conformal": 1.2, "rmse_conformal": 1.5}
        for r in rows[2:]
    ]  # fmt: skip
    text = mod.markdown(mod.summarize(rows[:2] + conf), ["cmd"])
    assert "| m+holdout | yacht | 2 | 0.75 | 1.000 → 0.960 → 0.940 | 1.400 → 1.200 | 1 → 1.5 |" in text


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--holdout", "0.2", "--train-noise"], "one of them"),
        (["--train-noise", "--options", '{"student_t_df": 4}'], "student_t_df"),
        (["--train-noise", "--likelihoods", "gaussian", "t4", "--label", "x"], "--likelihoods"),
        (["--verify", "--train-noise"], "--train-noise"),
    ],
)
def test_train_noise_refusals(flags, message, tmp_path, capsys, monkeypatch, benchmark_script):
    monkeypatch.setenv("ZOO_DATA_DIR", str(tmp_path))
    mod = benchmark_script("calibration")
    with pytest.raises(SystemExit):
        mod.main([*flags, "--out", str(tmp_path / "out")])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_train_noise_row(data_dir, monkeypatch, benchmark_script):
    """``train_noise``: the fit is the default's; only the noise scale of its draws changes, by the factor
    that maximizes the training rows' own mixture predictive likelihood."""
    from zoo.eval.metrics import mixture_nll
    from zoo.experiments.registry import get_entry

    mod = benchmark_script("calibration")
    monkeypatch.setitem(get_entry("mfvi-bnn").fit_defaults, "steps", 60)
    row = mod.fit_row("mfvi-bnn", "yacht", 0, label="train-noise", train_noise=True)
    plain = mod.fit_row("mfvi-bnn", "yacht", 0)
    assert row["model"] == "mfvi-bnn+train-noise" and row["noise_scale_rows"] == "training"
    assert row["recipe"]["train_noise"] is True and plain["recipe"]["train_noise"] is False
    assert row["nll_unscaled"] == plain["nll"] and row["coverage95_unscaled"] == plain["coverage95"]
    assert row["rmse"] == plain["rmse"] and "predictive_scale" not in row
    c = row["noise_scale"]
    assert 0 < c and c != 1.0
    # c is the optimum of the training rows' mixture NLL: 2 % either way is worse
    import torch

    from zoo.experiments.runs import RunConfig, fit_on_dataset

    cfg = RunConfig(split=0, seed=0, hidden=(50,), progress=False)
    cfg = RunConfig.from_dict({**cfg.to_dict(), "train_metrics": True})
    run = fit_on_dataset("mfvi-bnn", "uci:yacht", cfg)
    ytr = run.dataset.tensors(device=torch.device("cpu"))[1].reshape(-1).double().numpy()
    loc, scale = (t.double().numpy() for t in (run.train_predictions.loc, run.train_predictions.scale))
    best = mixture_nll(ytr, loc, c * scale)
    assert all(best < mixture_nll(ytr, loc, f * c * scale) for f in (0.98, 1.02))


def test_conformal_fields_use_held_out_rows_for_q_and_the_rest_for_coverage(benchmark_script):
    """The first ``n_val`` rows choose ``q`` (the ceil(0.95 (n + 1))-th smallest normalized residual); the
    coverage counts only the rows after them; on another fit ``q`` is applied to that fit's sd."""
    import torch

    from zoo.infer.predict import Predictions

    mod = benchmark_script("_calibration_holdout")
    n_val = 19  # k = 19: q is the largest held-out score
    held = np.arange(1, n_val + 1) / 10.0  # scores 0.1 ... 1.9 with sd 1
    test = np.array([0.5, 1.8, 1.95, -3.0])  # with sd 2: scores 0.25, 0.9, 0.975, 1.5
    y = np.concatenate([held, test])
    sd = np.concatenate([np.ones(n_val), 2 * np.ones(4)])
    pred = Predictions("regression", mean=torch.zeros(y.size), var=torch.tensor(sd**2))
    q, cov = mod.conformal_scale_on(pred, y, n_val)
    assert q == pytest.approx(1.9) and cov == 1.0  # every test score is below 1.9
    full = Predictions("regression", mean=torch.zeros(4), var=torch.ones(4))
    factors = {"conformal": q, "conformal_coverage": cov, "conformal_nll": 1.0, "conformal_rmse": 2.0}
    fields = mod.conformal_fields(full, test, factors)
    assert fields["coverage95_conformal_full"] == 0.5  # |0.5|, |1.8| inside 1.9; 1.95, 3.0 outside
    assert fields["conformal_quantile"] == q and fields["coverage95_conformal"] == cov
    assert fields["nll_conformal"] == 1.0 and fields["rmse_conformal"] == 2.0
    with pytest.raises(ValueError, match="at least 19"):
        mod.conformal_scale_on(pred, y, 18)
