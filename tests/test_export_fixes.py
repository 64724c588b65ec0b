"""The ArviZ export of a run (``posterior.nc``): file permissions that follow the umask, the target
standardization recorded next to groups on different scales, and the bow-tie's Monte Carlo predictive
draws computed over chunks of rows (bounded memory on large training sets, e.g. protein's 41k rows)."""

from __future__ import annotations

import os
import stat

import arviz as az
import numpy as np
import pytest
import torch
from pyro.infer.autoguide import AutoNormal

import guides.bowtie.predict as bowtie_predict
import zoo
from zoo.eval.diagnostics import save_netcdf, to_inference_data
from zoo.experiments.registry import build
from zoo.infer.loop import fit

# ------------------------------------------------------------------------------------------ permissions


@pytest.fixture(scope="module")
def standardized_fit():
    """mfvi-bnn on standardized targets far from zero mean and unit sd, the standardization recorded."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 2, generator=g)
    y = 40.0 + 7.0 * torch.sin(x[:, 0]) + 0.5 * torch.randn(60, generator=g)
    mu, sd = float(y.mean()), float(y.std())
    m, gd, spec = build("mfvi-bnn", 2, 1, "regression", hidden=[4])
    meta = {"y_mean": mu, "y_std": sd}
    res = fit(m, gd, x, (y - mu) / sd, steps=100, lr=0.02, progress=False, spec=spec, metadata=meta)
    return res, x, y, (mu, sd)


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["umask022", "umask027"])
def test_posterior_nc_gets_the_permissions_of_any_new_file(standardized_fit, tmp_path, umask):
    res, x, y, _ = standardized_fit
    idata = to_inference_data(res, num_samples=10, train=(x, y))
    old = os.umask(umask)
    try:
        save_netcdf(idata, tmp_path / "posterior.nc")
        with open(tmp_path / "plain.txt", "w") as fh:  # what open() gives under the same umask
            fh.write("x")
    finally:
        os.umask(old)
    mode = stat.S_IMODE(os.stat(tmp_path / "posterior.nc").st_mode)
    assert mode == 0o666 & ~umask == stat.S_IMODE(os.stat(tmp_path / "plain.txt").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt", "posterior.nc"]  # no temporary left
    assert az.from_netcdf(tmp_path / "posterior.nc").posterior["sigma2"].shape == (1, 10)


# ------------------------------------------------------------------------------------------------ units


def test_groups_record_the_target_standardization_of_the_fit(standardized_fit, tmp_path):
    res, x, y, (mu, sd) = standardized_fit
    save_netcdf(to_inference_data(res, x[:20], y[:20], num_samples=30, train=(x, y)), tmp_path / "p.nc")
    idata = az.from_netcdf(tmp_path / "p.nc")
    post = idata.posterior
    assert post.attrs["y_mean"] == pytest.approx(mu) and post.attrs["y_std"] == pytest.approx(sd)
    assert "standardized" in post.attrs["target_scaling"]
    for group in ("observed_data", "posterior_predictive", "log_likelihood", "predictions"):
        attrs = idata[group].attrs
        assert attrs["y_mean"] == pytest.approx(mu) and attrs["y_std"] == pytest.approx(sd), group
        assert "original" in attrs["target_scaling"], group
    # the recorded numbers are the fit's standardization: they map the original-unit observed data onto the
    # targets the fit saw (mean 0, sd 1)
    z = (idata.observed_data["obs"].values - post.attrs["y_mean"]) / post.attrs["y_std"]
    assert abs(z.mean()) < 1e-5 and z.std(ddof=1) == pytest.approx(1.0, rel=1e-5)


def test_a_fit_without_recorded_standardization_gets_no_scale_attributes(standardized_fit):
    _, x, y, _ = standardized_fit
    m, gd, spec = build("mfvi-bnn", 2, 1, "regression", hidden=[4])
    res = fit(m, gd, x, y, steps=5, progress=False, spec=spec)
    idata = to_inference_data(res, num_samples=5, train=(x, y))
    assert not {"y_mean", "y_std", "target_scaling"} & set(idata.posterior.attrs)


# ------------------------------------------------------------------------------- bow-tie predictive draws


@pytest.fixture(scope="module")
def bowtie_fit():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 3, generator=g)
    y = torch.tanh(x[:, 0]) + 0.1 * torch.randn(120, generator=g)
    m, gd, spec = build("bowtie", 3, 1, "regression", hidden=[4, 3])
    return fit(m, gd, x, y, steps=5, progress=False, spec=spec), x, y


@pytest.fixture
def cholesky_rows(monkeypatch):
    """``[(storage, rows)]`` of every batched Cholesky factorization made in the bow-tie's predict module:
    the memory the draws were taken from and its batch size."""
    rows: list[tuple[int, int]] = []
    real = torch.linalg.cholesky

    def spy(a, *args, **kwargs):
        rows.append((a.untyped_storage().data_ptr(), a.shape[0] if a.dim() == 3 else 1))
        return real(a, *args, **kwargs)

    monkeypatch.setattr(bowtie_predict.torch.linalg, "cholesky", spy)
    return rows


def _locals(bowtie_fit, n: int):
    res, x, _ = bowtie_fit
    with torch.no_grad():
        loc, _, _ = res.guide.fit_locals(res.model, x[:n])
    return res.guide.q, loc, x[:n]


def test_monte_carlo_draws_factorize_at_most_row_chunk_rows_at_a_time(bowtie_fit, cholesky_rows):
    q, loc, x = _locals(bowtie_fit, 50)
    locs, scales, samples = bowtie_predict.monte_carlo_draws(q, loc, x, 30, row_chunk=7)
    assert locs.shape == scales.shape == samples.shape == (30, 50, 1)
    for j in range(2):  # each hidden layer's activation covariances, 7 rows at a time, every row once
        sizes = [n for ptr, n in cholesky_rows if ptr == loc.S[j].untyped_storage().data_ptr()]
        assert sizes == [7] * 7 + [1], j
    assert torch.isfinite(samples).all()


def test_chunked_draws_match_unchunked_ones(bowtie_fit):
    q, loc, x = _locals(bowtie_fit, 40)
    torch.manual_seed(3)
    whole = bowtie_predict.monte_carlo_draws(q, loc, x, 4000)
    torch.manual_seed(3)
    parts = bowtie_predict.monte_carlo_draws(q, loc, x, 4000, row_chunk=6)
    # draw j uses one noise scale at every row, chunked or not
    assert (parts[1] == parts[1][:, :1]).all() and (whole[1] == whole[1][:, :1]).all()
    # the draws differ, their distribution does not: per-row mean and sd agree to Monte Carlo error
    for a, b in ((parts[0], whole[0]), (parts[1], whole[1]), (parts[2], whole[2])):
        assert ((a.mean(0) - b.mean(0)).abs() <= 5 * b.std(0) * (2 / 4000) ** 0.5).all()
        torch.testing.assert_close(a.std(0), b.std(0), rtol=0.1, atol=0.0)


def _eq25_unchunked(q, loc, x, num_samples):
    """Eq. (25) over all rows at once, in the order of the draws before chunking (every hidden layer's
    local noise, then the output rows, then sigma2, then the observation noise)."""
    k = q.num_hidden
    h = x.to(torch.float64).expand(num_samples, -1, -1)
    for j in range(k):
        eps = torch.randn(num_samples, *loc.t[j].shape, 1, dtype=torch.float64)
        h = (
            loc.t[j]
            + (loc.M[j] @ h.unsqueeze(-1)).squeeze(-1)
            + (torch.linalg.cholesky(loc.S[j]) @ eps)[..., 0]
        )
    rows = torch.distributions.MultivariateNormal(q.m[k], covariance_matrix=q.B[k]).sample((num_samples,))
    locs = rows[:, None, :, 0] + (h.unsqueeze(-2) * rows[:, None, :, 1:]).sum(-1)
    s2 = torch.distributions.InverseGamma(q.alpha[-1], q.beta[-1]).sample((num_samples,))
    return locs, locs + s2.sqrt()[:, None, None] * torch.randn_like(locs)


def test_draws_within_one_chunk_keep_the_unchunked_random_stream(bowtie_fit):
    """Committed bow-tie rows (NLL and coverage of the Monte Carlo mixture) keep their numbers."""
    q, loc, x = _locals(bowtie_fit, 40)
    torch.manual_seed(11)
    locs, samples = _eq25_unchunked(q, loc, x, 50)
    torch.manual_seed(11)
    got = bowtie_predict.monte_carlo_draws(q, loc, x, 50)
    torch.testing.assert_close(got[0], locs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[2], samples, rtol=1e-12, atol=1e-12)


def test_the_export_of_a_bowtie_fit_draws_from_the_model_under_the_posterior_draws(bowtie_fit, monkeypatch):
    """The export draws ``y`` from the model under each posterior draw (the locals from the model given the
    draw: :func:`zoo.infer.predict.predictive_samples`, in chunks of rows), never through the
    test-time local CAVI of :meth:`BowtieCAVIGuide.predictive` (its draws are not the posterior group's)."""
    res, x, y = bowtie_fit
    monkeypatch.setattr(
        type(res.guide), "predictive", lambda *a, **k: pytest.fail("the guide's predictive was used")
    )
    idata = to_inference_data(res, num_samples=20, train=(x, y))
    assert idata.posterior_predictive["obs"].shape == (1, 20, 120)
    assert np.isfinite(idata.posterior_predictive["obs"].values).all()


# ------------------------------------------------------------------------------ custom guide checkpoints


class MyAutoNormal(AutoNormal):
    """A guide class of the user's own (not the one the registry spec rebuilds)."""


def test_a_custom_guide_checkpoint_loads_with_its_class_or_a_factory(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g)
    y = x[:, 0] + 0.1 * torch.randn(40, generator=g)
    m, _, spec = build("mfvi-bnn", 3, 1, "regression", hidden=[4])
    res = fit(m, MyAutoNormal(m), x, y, steps=30, progress=False, spec=spec)
    res.save(tmp_path / "custom.pt")
    expected = res.predict(x, num_samples=20, seed=0).mean
    with pytest.raises(ValueError, match=r"MyAutoNormal.*pass guide=<your guide class or instance>"):
        zoo.load(tmp_path / "custom.pt")
    for guide in (MyAutoNormal, lambda model: MyAutoNormal(model)):
        loaded = zoo.load(tmp_path / "custom.pt", guide=guide)
        assert type(loaded.guide) is MyAutoNormal
        torch.testing.assert_close(loaded.predict(x, num_samples=20, seed=0).mean, expected)
    with pytest.raises(TypeError, match="^guide: calling"):
        zoo.load(tmp_path / "custom.pt", guide=lambda model: MyAutoNormal())


def test_the_nuts_export_records_the_target_standardization_too():
    from zoo.infer.mcmc import NUTSConfig, fit_nuts
    from zoo.infer.mcmc_export import to_inference_data as nuts_to_inference_data

    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 3, generator=g)
    y = x[:, 0] + 0.1 * torch.randn(12, generator=g)
    model, _, _ = build("mfvi-bnn", 3, 1, "regression", hidden=(2,))
    cfg = NUTSConfig(
        chains=1, warmup=4, samples=3, max_tree_depth=2, progress=False, parallel=False,
        metadata={"y_mean": 2.5, "y_std": 4.0},
    )  # fmt: skip
    idata = nuts_to_inference_data(fit_nuts(model, (x, y), cfg), train=(x, y))
    for group in ("posterior", "observed_data", "log_likelihood"):
        attrs = idata[group].attrs
        assert (attrs["y_mean"], attrs["y_std"]) == (2.5, 4.0), group
        assert "standardized" in attrs["target_scaling"]
