"""What a new user hit through the Python API (issue 21 items 5 and 6): a README fit reloads with
``zoo.checkpoint.load(path)`` alone; data that does not fit the model fails before training;
``ZOO_NUM_THREADS`` applies to ``fit``; the ArviZ export follows ArviZ's schema; ``vi_summary`` summarizes
i.i.d. VI draws without warnings; a protocol run from Python records the Python call that reproduces it."""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import warnings

import arviz as az
import numpy as np
import pyro
import pytest
import torch
from arviz.data.inference_data import SUPPORTED_GROUPS

import zoo
import zoo.checkpoint
import zoo.experiments.reproduce as reproduce
from guides.autoguides import make_autoguide
from zoo.eval.diagnostics import iid_mcse_mean, iid_mcse_sd, save_netcdf, site_dims, vi_summary
from zoo.experiments import cli
from zoo.experiments.reproduce import Protocol, RunSpec, python_call, run_protocol
from zoo.infer.predict import log_likelihood, posterior_samples
from zoo.infer.threads import apply_num_threads


@pytest.fixture(scope="module")
def readme_fit():
    """README's Python example at smoke size: diabetes, ``build``, ``fit`` without ``spec=``."""
    ds = zoo.load_dataset("diabetes", split=0)
    x, y, xt, yt = ds.tensors()
    model, guide, _ = zoo.build("mfvi-bnn", ds.in_features, 1, ds.task, hidden=[20])
    ys = (y - y.mean()) / y.std()
    res = zoo.fit(model, guide, x, ys, zoo.FitConfig(steps=40, batch_size=128, seed=0, progress=False))
    return res, x, ys, xt, (yt - y.mean()) / y.std()


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _toy(n: int = 24, d: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, torch.sin(x[:, 0]) + 0.1 * torch.randn(n, generator=g)


# --- item 1: a fit through the API reloads without extra arguments -------------------------------------


def test_readme_fit_reloads_with_load_alone_and_predicts_the_same(readme_fit, tmp_path):
    res, x, ys, xt, _ = readme_fit
    assert res.spec["model"] == "mfvi-bnn" and res.spec["hidden"] == [20]
    assert res.spec["guide_class"].endswith("AutoNormal")
    res.save(tmp_path / "fit.pt")
    back = zoo.checkpoint.load(tmp_path / "fit.pt")
    assert back.steps == res.steps and back.elbo == res.elbo
    before = res.predict(xt, num_samples=30, seed=5)
    after = back.predict(xt, num_samples=30, seed=5)
    torch.testing.assert_close(after.mean, before.mean, rtol=0, atol=0)
    torch.testing.assert_close(after.var, before.var, rtol=0, atol=0)
    zoo.resume(back, x, ys, 2, progress=False)  # and it trains on
    assert back.steps == res.steps + 2


def test_a_guide_other_than_the_specs_needs_guide_and_a_custom_model_needs_both(tmp_path):
    x, y = _toy()
    model, _, _ = zoo.build("mfvi-bnn", 3, 1, "regression", hidden=[4])
    delta = make_autoguide("delta", model)  # not the entry's default guide
    res = zoo.fit(model, delta, x, y, steps=3, progress=False)
    res.save(tmp_path / "d.pt")
    with pytest.raises(ValueError, match=r"guide: .*AutoDelta.*pass guide="):
        zoo.checkpoint.load(tmp_path / "d.pt")
    model2, _, _ = zoo.build("mfvi-bnn", 3, 1, "regression", hidden=[4])
    back = zoo.checkpoint.load(tmp_path / "d.pt", guide=make_autoguide("delta", model2), model=model2)
    torch.testing.assert_close(back.predict(x, num_samples=2).mean, res.predict(x, num_samples=2).mean)
    plain = zoo.BayesianModel(zoo.MLP(3, [4], 1), zoo.GaussianPrior(1.0), zoo.GaussianLikelihood())
    res2 = zoo.fit(plain, make_autoguide("normal", plain), x, y, steps=2, progress=False)
    assert res2.spec is None
    res2.save(tmp_path / "p.pt")
    with pytest.raises(ValueError, match="no registry spec.*pass model= and guide="):
        zoo.checkpoint.load(tmp_path / "p.pt")
    with pytest.raises(TypeError, match="spec"):
        zoo.fit(model, delta, x, y, steps=1, progress=False, spec="mfvi-bnn")


# --- item 2: data that does not fit the model fails before training --------------------------------------


def test_wrong_feature_count_is_a_value_error_before_training():
    x, y = _toy(d=4)
    model, guide, _ = zoo.build("mfvi-bnn", 3, 1, "regression", hidden=[4])
    with pytest.raises(ValueError, match=r"x has 4 features .* expects 3"):
        zoo.fit(model, guide, x, y, steps=5, progress=False)
    assert list(guide.parameters()) == []  # the autoguide never ran: nothing was trained
    res = zoo.fit(model, guide, x[:, :3], y, steps=1, progress=False)
    with pytest.raises(ValueError, match=r"x has 4 features"):
        zoo.resume(res, x, y, 1, progress=False)
    assert res.steps == 1


@pytest.mark.parametrize(
    ("task", "out", "labels", "match"),
    [
        ("multiclass", 3, [0, 1, 2, 3], r"labels must lie in 0\.\.2"),
        ("binary", 1, [-1, 1, 1, -1], r"y = \(y \+ 1\) // 2"),
    ],
)
def test_invalid_targets_fail_before_training_with_pyro_validation_off(task, out, labels, match):
    x = torch.randn(4, 2)
    y = torch.tensor(labels)
    model, guide, _ = zoo.build("mfvi-bnn", 2, out, task, hidden=[3])
    with pyro.validation_enabled(False), pytest.raises(ValueError, match=match):  # as `zoo reproduce` runs
        zoo.fit(model, guide, x, y, steps=3, progress=False)
    assert list(guide.parameters()) == []


def test_regression_targets_of_the_wrong_shape_say_how_to_fix_them():
    x, y = _toy()
    model, guide, _ = zoo.build("mfvi-bnn", 3, 1, "regression", hidden=[3])
    with pytest.raises(ValueError, match=r"y must have shape \(N,\).*squeeze"):
        zoo.fit(model, guide, x, y[:, None], steps=1, progress=False)


# --- item 3: ZOO_NUM_THREADS applies to fit and to the CLI, through one function ---------------------------


def test_zoo_num_threads_applies_to_fit(monkeypatch, restore_threads):
    x, y = _toy()
    model, guide, _ = zoo.build("mfvi-bnn", 3, 1, "regression", hidden=[3])
    torch.set_num_threads(1)
    monkeypatch.setenv("ZOO_NUM_THREADS", "2")
    zoo.fit(model, guide, x, y, steps=1, progress=False)
    assert torch.get_num_threads() == 2
    monkeypatch.delenv("ZOO_NUM_THREADS")
    torch.set_num_threads(1)
    zoo.fit(model, guide, x, y, steps=1, progress=False)
    assert torch.get_num_threads() == 1  # unset: the caller's setting stays


def test_bad_zoo_num_threads_is_a_value_error_naming_it_before_training(monkeypatch, restore_threads):
    x, y = _toy()
    model, guide, _ = zoo.build("mfvi-bnn", 3, 1, "regression", hidden=[3])
    for bad in ("two", "0", "-1"):
        monkeypatch.setenv("ZOO_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="ZOO_NUM_THREADS"):
            zoo.fit(model, guide, x, y, steps=1, progress=False)
    assert list(guide.parameters()) == []
    with pytest.raises(ValueError, match="threads"):
        apply_num_threads(0)


def test_cli_threads_use_the_same_rule(monkeypatch, restore_threads):
    monkeypatch.setenv("ZOO_NUM_THREADS", "2")
    parser = argparse.ArgumentParser()
    cli._threads(parser, None)
    assert torch.get_num_threads() == 2
    cli._threads(parser, 1)  # --threads wins over the environment
    assert torch.get_num_threads() == 1
    monkeypatch.delenv("ZOO_NUM_THREADS")
    torch.set_num_threads(2)
    cli._threads(parser, None)  # the command line's default is 1
    assert torch.get_num_threads() == 1


# --- item 4: the ArviZ export follows ArviZ's schema --------------------------------------------------------


def _model_sites(res, x, y) -> tuple[set[str], str]:
    """Latent sample sites of the model and the name of its observed site, from one model trace."""
    with torch.no_grad(), res.activate():
        tr = pyro.poutine.trace(res.model).get_trace(x[:2], y[:2])
    latent = {
        n for n, s in tr.nodes.items() if s["type"] == "sample" and not s["is_observed"] and n != "data"
    }
    observed = [n for n, s in tr.nodes.items() if s["type"] == "sample" and s["is_observed"]]
    observed = [n for n in observed if not tr.nodes[n]["infer"].get("_deterministic")]
    return latent, observed[0]


def test_export_groups_names_and_values_follow_the_schema_without_warnings(readme_fit, tmp_path):
    res, x, ys, xt, yts = readme_fit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        idata = zoo.to_inference_data(res, xt, yts, num_samples=30, train=(x, ys), seed=3)
        save_netcdf(idata, tmp_path / "p.nc")
        back = az.from_netcdf(tmp_path / "p.nc")
    assert set(idata.groups()) <= set(SUPPORTED_GROUPS)
    assert set(idata.groups()) == {
        "posterior",
        "posterior_predictive",
        "log_likelihood",
        "observed_data",
        "constant_data",
        "predictions",
        "predictions_constant_data",
    }
    latent, obs = _model_sites(res, x, ys)
    assert obs == "obs" and set(idata.posterior.data_vars) == latent
    for group in ("posterior_predictive", "log_likelihood", "observed_data", "predictions"):
        assert list(idata[group].data_vars) == [obs], group
    # test-set draws are the fit's predictive draws; training log-likelihood the fit's, same seed
    pred = res.predict(xt, num_samples=30, seed=3, keep_draws=False, return_samples=True)
    np.testing.assert_array_equal(idata.predictions[obs].values[0], pred.samples.numpy())
    ll = log_likelihood(res, x, ys, num_samples=30, seed=3)
    np.testing.assert_array_equal(idata.log_likelihood[obs].values[0], ll.numpy())
    np.testing.assert_array_equal(idata.observed_data[obs].values, ys.numpy())
    np.testing.assert_array_equal(idata.predictions_constant_data["x"].values, xt.numpy())
    np.testing.assert_array_equal(idata.predictions_constant_data["y"].values, yts.numpy())
    assert idata.predictions[obs].dims == ("chain", "draw", "obs_id")
    assert idata.predictions_constant_data["x"].dims == ("obs_id", "feature")
    np.testing.assert_array_equal(back.posterior.attrs["elbo_trace"], np.asarray(res.elbo))
    assert back.posterior.attrs["steps"] == 40 and back.posterior.attrs["inference"] == "variational"
    # PSIS-LOO reads the training log-likelihood: elpd_loo <= in-sample lppd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pareto-k warnings are about the model, not the schema
        loo = az.loo(idata)
    lppd = float(np.sum(np.log(np.mean(np.exp(ll.double().numpy()), axis=0))))
    assert loo.elpd_loo <= lppd + 1e-6


def test_prior_sites_get_the_layers_named_dims():
    x, y = _toy(d=3)
    model, guide, _ = zoo.build("hs-bnn", 3, 1, "regression", hidden=[5])
    res = zoo.fit(model, guide, x, y, steps=2, progress=False)
    post = zoo.to_inference_data(res, num_samples=4).posterior
    assert post["fc0.tau2"].dims == ("chain", "draw", "fc0_out")  # node-wise scale of each hidden unit
    assert post["fc0.lam"].dims == ("chain", "draw", "fc0_out")
    assert post["fc0.beta"].dims == ("chain", "draw", "fc0_out", "fc0.beta_dim_1")  # (out, in + bias)
    assert post["fc1.beta"].dims == ("chain", "draw", "fc1_out", "fc1.beta_dim_1")
    assert post["precision"].dims == ("chain", "draw")
    assert set(post.data_vars) == set(posterior_samples(res, 2))


def test_site_dims_rule():
    layers = {"fc1": (5, 3), "fc10": (4, 4)}
    assert site_dims("fc1.psi", (5, 3), layers) == ["fc1_out", "fc1_in"]
    assert site_dims("fc1.tau2", (5,), layers) == ["fc1_out"]
    assert site_dims("fc1.s", (3,), layers) == ["fc1_in"]
    assert site_dims("fc1.beta", (5, 4), layers) == ["fc1_out", "fc1.beta_dim_1"]
    assert site_dims("fc1.z", (7,), layers) == ["fc1.z_dim_0"]
    assert site_dims("fc10.tau", (4,), layers) == ["fc10_out"]  # square layer: the receiving units
    assert site_dims("fc10.tau", (), layers) == []
    assert site_dims("sigma2", (), layers) == [] and site_dims("hs.c2", (2,), layers) == ["hs.c2_dim_0"]


def test_export_rejects_bad_input_before_drawing(readme_fit):
    res, x, ys, xt, yts = readme_fit
    with pytest.raises(ValueError, match="y: .*inputs x"):
        zoo.to_inference_data(res, y=yts)
    with pytest.raises(TypeError, match="train must be a pair"):
        zoo.to_inference_data(res, train=(x,))
    with pytest.raises(ValueError, match="train: y_train"):
        zoo.to_inference_data(res, train=(x, None))
    with pytest.raises(ValueError, match="train: x has 9 features"):
        zoo.to_inference_data(res, train=(x[:, :9], ys))
    with pytest.raises(ValueError, match="train: y has 3 rows"):
        zoo.to_inference_data(res, train=(x, ys[:3]))
    with pytest.raises(ValueError, match="^x has 9 features"):
        zoo.to_inference_data(res, xt[:, :9])


def test_classification_export_holds_labels():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 2, generator=g)
    y = (x[:, 0] > 0).long()
    model, guide, _ = zoo.build("mfvi-bnn", 2, 1, "binary", hidden=[3])
    res = zoo.fit(model, guide, x, y, steps=20, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        idata = zoo.to_inference_data(res, x[:10], y[:10], num_samples=8, train=(x, y))
    draws = idata.predictions["obs"].values
    assert draws.shape == (1, 8, 10) and set(np.unique(draws)) <= {0, 1}
    np.testing.assert_array_equal(idata.observed_data["obs"].values, y.numpy())


# --- item 5: a summary that means something for i.i.d. VI draws, without warnings --------------------------


class _ArvizLog(logging.Handler):
    """Messages of ArviZ's logger ``arviz._log``: a ``Logger`` made outside ``logging.getLogger`` that
    logs each message once per process, so ``caplog`` misses it; :meth:`clear` also resets that memory."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def clear(self) -> None:
        self.messages.clear()
        az._log.cache.clear()


@pytest.fixture
def arviz_log():
    handler = _ArvizLog()
    handler.clear()
    az._log.addHandler(handler)
    yield handler
    az._log.removeHandler(handler)


def test_vi_summary_has_iid_errors_no_rhat_and_no_warnings(readme_fit, arviz_log):
    res, x, ys, _, _ = readme_fit
    idata = zoo.to_inference_data(res, num_samples=50, seed=1)
    plain = az.summary(idata, var_names=["sigma2"])  # what the README showed: a shape warning, r_hat NaN
    assert np.isnan(plain.loc["sigma2", "r_hat"])
    # plain az.summary also logs ArviZ's "Shape validation failed" message (not in every order of the
    # suite: after the NUTS tests' exports ArviZ stays quiet); vi_summary must never log it
    arviz_log.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = vi_summary(idata, var_names=["sigma2", "fc1.bias"], round_to="none")
    assert arviz_log.messages == []
    assert list(table.columns) == ["mean", "sd", "hdi_3%", "hdi_97%", "mcse_mean", "mcse_sd", "ess"]
    draws = idata.posterior["sigma2"].values.ravel().astype(np.float64)
    row = table.loc["sigma2"]
    assert row["ess"] == 50
    assert np.isclose(row["mean"], draws.mean(), rtol=1e-6)
    assert np.isclose(row["mcse_mean"], draws.std(ddof=1) / np.sqrt(50), rtol=1e-6)
    assert np.isclose(row["mcse_sd"], iid_mcse_sd(draws), rtol=1e-6)
    assert "fc1.bias[0]" in table.index and table["mcse_sd"].gt(0).all()


def test_vi_summary_rhat_only_for_several_chains(readme_fit, arviz_log):
    res, *_ = readme_fit
    a = zoo.to_inference_data(res, num_samples=200, seed=1)
    b = zoo.to_inference_data(res, num_samples=200, seed=2)
    same = az.concat(a, b, dim="chain")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = vi_summary(same, var_names=["sigma2"])
    assert arviz_log.messages == []
    assert table.loc["sigma2", "r_hat"] < 1.05 and table.loc["sigma2", "ess"] == 400  # two draws of one q
    shifted = b.copy()
    shifted.posterior["sigma2"] = shifted.posterior["sigma2"] + 10 * float(a.posterior["sigma2"].std())
    apart = vi_summary(az.concat(a, shifted, dim="chain"), var_names=["sigma2"])
    assert apart.loc["sigma2", "r_hat"] > 1.5  # fits that disagree


def test_vi_summary_rejects_what_it_cannot_summarize():
    with pytest.raises(TypeError, match="idata"):
        vi_summary({"sigma2": np.zeros((1, 5))})
    with pytest.raises(ValueError, match="idata: no posterior"):
        vi_summary(az.from_dict(observed_data={"y": np.zeros(3)}))


@pytest.mark.parametrize("law", ["normal", "exponential"])
def test_iid_mcse_match_the_spread_over_repeated_draws(law):
    """Monte Carlo ground truth: over R repetitions of S i.i.d. draws, the sd of the sample means and of the
    sample sds equal the MCSEs (tolerance: 4 relative standard errors of an sd from R values, 1/sqrt(2(R-1)),
    plus 2 % for the O(1/S) bias of the delta method).  The exponential's fourth moment (9 sd^4) doubles the
    MCSE of the sd relative to normal draws, so a normal-theory formula fails this test."""
    rng = np.random.default_rng(7)
    r, s = 2000, 1000
    draws = rng.normal(0.0, 2.0, (r, s)) if law == "normal" else rng.exponential(1.0, (r, s))
    tol = 4 / np.sqrt(2 * (r - 1)) + 0.02
    mcse_mean = np.mean([iid_mcse_mean(d) for d in draws])
    mcse_sd = np.mean([iid_mcse_sd(d) for d in draws])
    assert abs(draws.mean(1).std(ddof=1) / mcse_mean - 1) < tol
    assert abs(draws.std(1, ddof=1).std(ddof=1) / mcse_sd - 1) < tol
    expected = 2.0 / np.sqrt(2 * s) if law == "normal" else np.sqrt(2.0 / s)  # (m4 - sd^4) / (4 sd^2 S)
    assert abs(mcse_sd / expected - 1) < tol
    assert iid_mcse_sd(np.full(10, 3.0)) == 0.0 and np.isnan(iid_mcse_mean(np.ones(1)))


# --- item 6: a protocol run from Python records the Python call ---------------------------------------------


@pytest.fixture
def tiny_protocol(monkeypatch):
    def runs(splits):
        return [
            RunSpec("mfvi", "mfvi-bnn", "diabetes", s, {"steps": 50, "hidden": [4], "num_samples": 5})
            for s in (splits if splits is not None else [0])
        ]

    name = "c2-api-smoke"
    protocol = Protocol(name, "smoke protocol of the tests", runs, ["rmse"])
    monkeypatch.setitem(reproduce.PROTOCOLS, name, protocol)
    return name


def test_protocol_from_python_records_the_call_that_reproduces_it(tiny_protocol, tmp_path):
    out = tmp_path / "proto"
    doc = run_protocol(tiny_protocol, out, splits=[0, 1], overrides={"steps": 3}, progress=False)
    call = (
        f"zoo.experiments.reproduce.run_protocol('{tiny_protocol}', '{out}', splits=[0, 1], "
        "overrides={'steps': 3})"
    )
    assert doc["command"] == call
    assert call in (out / f"{tiny_protocol}.md").read_text()
    assert json.loads((out / f"{tiny_protocol}.json").read_text())["command"] == call
    assert [r["steps"] for r in doc["rows"]] == [3, 3]
    # the record is a call that runs: evaluated, it gives the same rows
    ast.parse(call, mode="eval")
    again = eval(call, {"zoo": zoo})
    keep = ("split", "steps", "rmse", "nll", "elbo")
    assert [{k: r[k] for k in keep} for r in again["rows"]] == [{k: r[k] for k in keep} for r in doc["rows"]]


def test_python_call_leaves_out_defaults():
    assert python_call("p", "d") == "zoo.experiments.reproduce.run_protocol('p', 'd')"
    assert python_call("p", "d", splits=range(2), jobs=1, overrides={}, merge=True, variants=("a",)) == (
        "zoo.experiments.reproduce.run_protocol('p', 'd', splits=[0, 1], merge=True, variants=['a'])"
    )


def test_journal_names_the_command_and_resumes_across_commands(tiny_protocol, tmp_path, monkeypatch):
    out = tmp_path / "proto"
    real, calls = reproduce._run_one, []

    def second_fails(spec):
        calls.append(spec.split)
        if len(calls) == 2:
            raise RuntimeError("interrupted")
        return real(spec)

    monkeypatch.setattr(reproduce, "_run_one", second_fails)
    with pytest.raises(RuntimeError, match="interrupted"):
        run_protocol(tiny_protocol, out, splits=[0, 1], overrides={"steps": 3}, progress=False)
    lines = (out / f"{tiny_protocol}.partial.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    assert head["command"].startswith("zoo.experiments.reproduce.run_protocol(") and len(lines) == 2
    monkeypatch.setattr(reproduce, "_run_one", real)
    calls.clear()
    monkeypatch.setattr(reproduce, "_run_one", lambda spec: calls.append(spec.split) or real(spec))
    # the command line with the same protocol and overrides resumes the journal the Python call began
    assert cli.main(["reproduce", tiny_protocol, "--out", str(out), "--splits", "0-1", "--steps", "3"]) == 0
    assert calls == [1]
    doc = json.loads((out / f"{tiny_protocol}.json").read_text())
    assert doc["command"] == f"zoo reproduce {tiny_protocol} --out {out} --splits 0-1 --steps 3"
    assert not os.path.exists(out / f"{tiny_protocol}.partial.jsonl")
