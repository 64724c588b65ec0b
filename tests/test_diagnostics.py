"""ArviZ export round trip: posterior, predictive and log-likelihood groups; az.summary, loo, plot_ppc."""

from __future__ import annotations

import warnings

import arviz as az
import matplotlib
import numpy as np
import pytest
import torch

from zoo.eval.diagnostics import save_netcdf, to_inference_data
from zoo.experiments.registry import build
from zoo.infer.loop import fit

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def regression_fit(device):
    """A fit on the suite's device (the export must bring every array to the host)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(80, 3, generator=g)
    y = torch.sin(x[:, 0]) + 0.1 * torch.randn(80, generator=g)
    x, y = x.to(device), y.to(device)
    m, gd, spec = build("mfvi-bnn", 3, 1, "regression", hidden=[8])
    return fit(m, gd, x, y, steps=200, lr=0.02, progress=False, spec=spec, device=device), x, y


def test_groups_dims_and_shapes(regression_fit):
    res, x, y = regression_fit
    idata = to_inference_data(res, x[:30], y[:30], num_samples=40, train=(x, y))
    for group in ("posterior", "posterior_predictive", "log_likelihood", "observed_data", "predictions"):
        assert hasattr(idata, group), group
    post = idata.posterior
    assert post["fc0.weight"].dims == ("chain", "draw", "fc0_out", "fc0_in")
    assert post["fc0.bias"].dims == ("chain", "draw", "fc0_out")
    assert post["fc0.weight"].shape == (1, 40, 8, 3)
    assert post["sigma2"].shape == (1, 40)
    assert idata.log_likelihood["obs"].shape == (1, 40, 80)
    assert idata.posterior_predictive["obs"].shape == (1, 40, 80)
    assert idata.predictions["obs"].shape == (1, 40, 30)
    np.testing.assert_allclose(idata.observed_data["obs"].values, y.cpu().numpy())
    np.testing.assert_allclose(idata.predictions_constant_data["y"].values, y[:30].cpu().numpy())
    np.testing.assert_allclose(post.attrs["elbo_trace"], res.elbo)
    assert post.attrs["inference"] == "variational" and post.attrs["steps"] == 200


def test_arviz_functions_run_and_netcdf_round_trip(regression_fit, tmp_path):
    res, x, y = regression_fit
    idata = to_inference_data(res, num_samples=60, train=(x, y))
    summary = az.summary(idata, var_names=["sigma2"], kind="stats")
    assert summary.loc["sigma2", "mean"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(idata, pointwise=True)
    # elpd_loo can not exceed the in-sample lppd
    ll = idata.log_likelihood["obs"].values[0]
    lppd = float(np.sum(np.log(np.mean(np.exp(ll), axis=0))))
    assert np.isfinite(loo.elpd_loo) and loo.elpd_loo <= lppd + 1e-6
    az.plot_ppc(idata, num_pp_samples=10)
    path = tmp_path / "posterior.nc"
    save_netcdf(idata, path)
    back = az.from_netcdf(path)
    np.testing.assert_allclose(back.posterior["sigma2"].values, idata.posterior["sigma2"].values)
    np.testing.assert_allclose(back.posterior.attrs["elbo_trace"], res.elbo)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isclose(az.loo(back).elpd_loo, loo.elpd_loo)


def test_weights_left_out_for_big_networks_and_bad_input(regression_fit, tmp_path):
    res, x, y = regression_fit
    idata = to_inference_data(res, x, None, num_samples=5, max_weight_params=10)
    assert "fc0.weight" not in idata.posterior and "sigma2" in idata.posterior
    assert not hasattr(idata, "log_likelihood")
    with pytest.raises(ValueError, match="num_samples"):
        to_inference_data(res, x, y, num_samples=0)
    with pytest.raises(ValueError, match="path"):
        save_netcdf(idata, tmp_path / "missing" / "p.nc")
