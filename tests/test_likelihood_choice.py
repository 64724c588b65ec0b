"""Choosing the noise model by the ELBO (``fit_options["likelihoods"]``, ``zoo fit --likelihoods``): the
candidates' names, the choice over a grid of likelihoods x starts, and fits on data whose noise is known —
heavy-tailed noise must choose the Student-t, Gaussian noise the Gaussian against a t of 2.5 degrees of
freedom (a t's best scale on Gaussian noise costs 0.053 nats per row by quadrature, 53 nats on 1000 rows,
against ELBO standard errors of a few nats)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from zoo.data import from_arrays
from zoo.data.tensors import fit_tensors
from zoo.experiments.starts import (
    choose,
    elbo_estimate,
    likelihood_name,
    likelihood_options,
    resolve_likelihoods,
)


@pytest.mark.parametrize(
    ("given", "options"),
    [
        ("gaussian", {}),
        ("t4", {"student_t_df": 4.0}),
        (" T2.5 ", {"student_t_df": 2.5}),
        ("heteroscedastic", {"heteroscedastic": True}),
        ({"student_t_df": 5, "heteroscedastic": True}, {"student_t_df": 5, "heteroscedastic": True}),
        ({}, {}),
    ],
)
def test_likelihood_names_and_mappings(given, options):
    assert likelihood_options(given) == options


@pytest.mark.parametrize("bad", ["t", "t0", "t-3", "tinf", "tnan", "laplace", "", {"noise_rate": 1.0}])
def test_unknown_likelihoods_are_value_errors_naming_the_argument(bad):
    with pytest.raises(ValueError, match=r"fit_options\['likelihoods'\]\[1\]"):
        resolve_likelihoods({"likelihoods": ["gaussian", bad]})


@pytest.mark.parametrize("bad", ["t4", [], (), None, {"student_t_df": 4}, [3]])
def test_likelihoods_must_be_a_list_of_names_or_mappings(bad):
    with pytest.raises(TypeError, match=r"fit_options\['likelihoods'\]"):
        resolve_likelihoods({"likelihoods": bad})


def test_resolve_likelihoods_default_and_repeats():
    assert resolve_likelihoods({}) == [{}]
    assert resolve_likelihoods({"likelihoods": ["gaussian", "t4"]}) == [{}, {"student_t_df": 4.0}]
    with pytest.raises(ValueError, match="same likelihood twice"):
        resolve_likelihoods({"likelihoods": ["t4", {"student_t_df": 4.0}]})


def test_run_options_that_set_the_likelihood_clash_with_a_choice():
    # "gaussian" would inherit the run's student_t_df and be a t: refused, naming both
    with pytest.raises(ValueError, match=r"likelihoods.*student_t_df"):
        resolve_likelihoods({"likelihoods": ["gaussian", "t4"]}, {"student_t_df": 5.0})
    assert resolve_likelihoods({"likelihoods": ["gaussian"]}, {"prior_scale": 1.0}) == [{}]
    assert resolve_likelihoods({}, {"student_t_df": 5.0}) == [{}]  # no choice: the run's own likelihood


def test_likelihood_name_round_trips_the_short_names():
    for name in ("gaussian", "t4", "t2.5"):
        assert likelihood_name(likelihood_options(name)) == name
    assert likelihood_name({"heteroscedastic": True}) == "heteroscedastic=True"


def test_choose_takes_the_best_start_of_the_best_likelihood_and_records_both_levels():
    se = 0.5
    i, j, info = choose([[(10.0, se), (1.0, se)], [(2.0, se), (9.0, se)]])
    assert (i, j) == (0, 0)
    assert info == {
        "starts": 2,
        "start": 0,
        "start_elbo_0": 10.0,
        "start_elbo_se_0": se,
        "start_elbo_1": 1.0,
        "start_elbo_se_1": se,
        "likelihoods": 2,
        "likelihood": 0,
        "likelihood_elbo_0": 10.0,
        "likelihood_elbo_se_0": se,
        "likelihood_elbo_1": 9.0,
        "likelihood_elbo_se_1": se,
    }
    i, j, info = choose([[(1.0, se), (3.0, se)], [(2.0, se), (5.0, se)]])
    assert (i, j) == (1, 1) and info["start_elbo_0"] == 2.0 and info["likelihood_elbo_0"] == 3.0
    # one start: no start record; a non-finite ELBO never wins
    i, j, info = choose([[(math.nan, math.inf)], [(-5.0, 1.0)]])
    assert (i, j) == (1, 0) and "starts" not in info and info["likelihood"] == 1
    assert choose([[(1.0, 0.0)]]) == (0, 0, {})


@pytest.mark.parametrize("bad", [[], [[]], [[(1.0, 0.0)], [(1.0, 0.0), (2.0, 0.0)]]])
def test_choose_rejects_what_is_not_a_grid(bad):
    with pytest.raises(ValueError, match="grid"):
        choose(bad)


def _data(noise: str, n: int = 1000, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + 100, 1))
    if noise == "heavy":  # Student-t of 1.5 degrees of freedom: no variance
        eps = 0.1 * rng.standard_t(1.5, size=n + 100)
    else:
        eps = 0.5 * rng.normal(size=n + 100)
    y = 0.8 * x[:, 0] + eps
    return from_arrays(f"{noise}-noise", "regression", x[:n], y[:n], x[n:], y[n:])


KW = {"hidden": [8], "steps": 400, "num_samples": 10, "progress": False, "seed": 3}


def test_heavy_tailed_noise_chooses_the_t_and_the_kept_fit_is_that_likelihood_s_own():
    from zoo.experiments.runs import fit_on_dataset

    ds = _data("heavy")
    run = fit_on_dataset("mfvi-bnn", ds, **KW, fit_options={"likelihoods": ["gaussian", "t4"]})
    m = run.metrics
    assert m["likelihoods"] == 2 and m["likelihood"] == 1 and m["likelihood_name"] == "t4"
    assert "starts" not in m  # mfvi-bnn fits from one start
    assert m["likelihood_elbo_1"] - m["likelihood_elbo_0"] > 4 * math.hypot(
        m["likelihood_elbo_se_0"], m["likelihood_elbo_se_1"]
    )
    assert run.predictions.df == 4.0
    # each recorded ELBO is the estimate of that likelihood's fit alone, and the kept fit is the t's, bit
    # for bit
    xtr, ytr, *_ = fit_tensors(ds, torch.device("cpu"), standardize_y=True)
    for i, options in enumerate(({}, {"student_t_df": 4.0})):
        alone = fit_on_dataset("mfvi-bnn", ds, **KW, options=options)
        r = alone.result
        with r.activate():
            assert elbo_estimate(r.model, r.guide, xtr, ytr, r.loss, seed=3)[0] == m[f"likelihood_elbo_{i}"]
    assert alone.metrics["rmse"] == m["rmse"] and alone.metrics["nll"] == m["nll"]


def test_gaussian_noise_chooses_the_gaussian():
    from zoo.experiments.runs import fit_on_dataset

    run = fit_on_dataset(
        "mfvi-bnn", _data("gaussian"), **KW, fit_options={"likelihoods": ["t2.5", "gaussian"]}
    )
    m = run.metrics
    assert m["likelihood"] == 1 and m["likelihood_name"] == "gaussian" and run.predictions.df is None
    assert m["likelihood_elbo_1"] > m["likelihood_elbo_0"]


def test_a_bad_likelihood_fails_before_any_fit(monkeypatch):
    import zoo.experiments.runs as runs

    def no_fit(*args, **kwargs):
        raise AssertionError("a fit ran before every likelihood was built")

    monkeypatch.setattr(runs, "fit", no_fit)
    kw = {"hidden": [4], "steps": 5, "progress": False}
    # t is regression-only: the classification build refuses it before the Gaussian candidate is fitted
    both = {"likelihoods": ["gaussian", "t4"]}
    with pytest.raises(ValueError, match="student_t_df"):
        runs.fit_on_dataset("mfvi-bnn", "breast-cancer", **kw, fit_options=both)
    with pytest.raises(ValueError, match=r"likelihoods'\]\[0\]"):
        runs.fit_on_dataset("mfvi-bnn", "diabetes", **kw, fit_options={"likelihoods": ["cauchy"]})


def test_zoo_fit_likelihoods_reports_the_choice_and_refuses_bad_ones_before_writing(tmp_path, capsys):
    from zoo.experiments.cli import main

    base = ["fit", "mfvi-bnn", "--dataset", "diabetes", "--hidden", "4", "--num-samples", "5"]
    base.append("--no-progress")
    out = tmp_path / "run"
    assert main([*base, "--steps", "30", "--likelihoods", "gaussian", "t4", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["likelihoods"] == 2 and m["likelihood_name"] in ("gaussian", "t4")
    assert f"kept likelihood {m['likelihood']} ({m['likelihood_name']}) of 2" in capsys.readouterr().out
    # the run folder's checkpoint rebuilds the kept likelihood
    from zoo.infer.checkpoint import load

    result = load(out / "checkpoint.pt")
    assert result.spec["options"] == likelihood_options(m["likelihood_name"])
    assert (getattr(result.model.likelihood, "df", None) is not None) == (m["likelihood_name"] == "t4")
    for extra, flag in (
        (["--likelihoods", "gaussian", "t1"], "--likelihoods"),
        (["--likelihoods", "t4", "--inference", "nuts"], "--likelihoods"),
        (["--likelihoods", "t4", "--dataset", "breast-cancer"], "--likelihoods"),
        (["--likelihoods", "gaussian", "t4", "--option", "student_t_df=5"], "--likelihoods"),
    ):
        bad = tmp_path / "bad"
        with pytest.raises(SystemExit):
            main([*base, *extra, "--out", str(bad)])
        assert flag in capsys.readouterr().err and not bad.exists()
