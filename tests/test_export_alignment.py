"""The ArviZ export's groups share their draws: ``log_likelihood[s, n]`` recomputed by hand from draw ``s`` of
the ``posterior`` group (the network's weights, the noise, ``y_mean`` / ``y_std``) equals the exported value,
and ``posterior_predictive`` / ``predictions`` draw ``s`` are draws of ``y`` under the same parameters.  Also:
the bow-tie's pointwise likelihood integrates its per-row locals out, a NUTS result keeps its chains, targets
on the wrong scale warn, the likelihood is named in the attributes, and the posterior is stored in float64."""

from __future__ import annotations

import contextlib
import logging
import math
import warnings

import arviz as az
import numpy as np
import pytest
import torch

from zoo.core.architectures import ACTIVATIONS
from zoo.eval.diagnostics import to_inference_data
from zoo.experiments.registry import build
from zoo.infer.loop import fit
from zoo.infer.predict import log_likelihood, posterior_samples, predict

MU, SD = 3.0, 2.5  # the recorded target standardization of the regression fits


def _data(n: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return x, torch.sin(x[:, 0]) + 0.3 * x[:, 1] + 0.2 * torch.randn(n, generator=g)


def _fit(name: str, task: str, steps: int = 150, **options):
    x, y = _data()
    y = (y > 0).long() if task == "binary" else y
    model, guide, spec = build(name, 3, 1, task, hidden=[6], seed=0, **options)
    meta = {"y_mean": MU, "y_std": SD} if task == "regression" else {}
    res = fit(model, guide, x, y, steps=steps, lr=0.02, seed=0, progress=False, spec=spec, metadata=meta)
    y_out = y * SD + MU if task == "regression" else y  # original units, as the fit recorded them
    return res, x, y_out


def _post(idata, name: str) -> np.ndarray:
    return idata.posterior[name].values[0].astype(np.float64)  # (S, ...)


def _forward(x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]], activation: str) -> np.ndarray:
    """``f`` (S, N) of an MLP from per-draw weights (S, out, in) and biases (S, out)."""
    act = ACTIVATIONS[activation]
    h = np.broadcast_to(x, (layers[0][0].shape[0], *x.shape))
    for i, (w, b) in enumerate(layers):
        h = np.einsum("soi,sni->sno", w, h) + b[:, None, :]
        if i < len(layers) - 1:
            h = act(torch.from_numpy(h)).numpy()
    return h[..., 0]


def _gaussian_ll(idata, f: np.ndarray, y: np.ndarray, noise_var: np.ndarray) -> np.ndarray:
    mu, sd = idata.posterior.attrs["y_mean"], idata.posterior.attrs["y_std"]
    loc, scale = mu + sd * f, sd * np.sqrt(noise_var)[:, None]
    return -0.5 * np.log(2 * np.pi) - np.log(scale) - 0.5 * ((y - loc) / scale) ** 2


def _check_gaussian_draws(idata, group: str, f: np.ndarray, noise_var: np.ndarray) -> None:
    """Draw ``s`` of ``group`` is ``N(y_mean + y_std f_s, y_std^2 sigma2_s)``: the standardized residuals
    of all S x N draws have mean 0 and variance 1 to Monte Carlo error (draws from another parameter draw
    add the spread of ``f`` across draws to the variance)."""
    mu, sd = idata.posterior.attrs["y_mean"], idata.posterior.attrs["y_std"]
    draws = idata[group]["obs"].values[0].astype(np.float64)
    z = (draws - mu - sd * f[:, : draws.shape[1]]) / (sd * np.sqrt(noise_var)[:, None])
    n = z.size
    assert abs(z.mean()) < 4.0 / math.sqrt(n), z.mean()
    assert abs(z.var() - 1.0) < 4.0 * math.sqrt(2.0 / n), z.var()


def test_mfvi_log_likelihood_and_predictive_draws_are_those_of_the_posterior_draws():
    res, x, y = _fit("mfvi-bnn", "regression")
    idata = to_inference_data(res, x[:40], y[:40], num_samples=120, train=(x, y), seed=3)
    layers = [(_post(idata, f"fc{k}.weight"), _post(idata, f"fc{k}.bias")) for k in range(2)]
    f = _forward(x.double().numpy(), layers, res.model.architecture.activation)
    s2 = _post(idata, "sigma2")
    hand = _gaussian_ll(idata, f, y.double().numpy(), s2)
    exported = idata.log_likelihood["obs"].values[0]
    assert np.abs(hand - exported).max() < 1e-4 * max(1.0, np.abs(hand).max())
    np.testing.assert_allclose(exported, hand, rtol=1e-5, atol=2e-5)
    _check_gaussian_draws(idata, "posterior_predictive", f, s2)
    _check_gaussian_draws(idata, "predictions", f, s2)


def test_the_draws_do_not_depend_on_row_chunking_and_predict_shares_them():
    res, x, y = _fit("mfvi-bnn", "regression", steps=50)
    post = posterior_samples(res, 70, seed=5)
    a = log_likelihood(res, x, y, num_samples=70, seed=5, data_chunk=7)
    b = log_likelihood(res, x, y, num_samples=70, seed=5)
    torch.testing.assert_close(a, b)
    # predict's per-draw scale is y_std sqrt(sigma2_s) of posterior draw s
    scale = predict(res, x[:3], num_samples=70, seed=5).scale[:, 0]
    torch.testing.assert_close(scale, SD * post["sigma2"].sqrt(), rtol=1e-5, atol=1e-6)


def _bernoulli_ll(f: np.ndarray, y: np.ndarray) -> np.ndarray:
    return y * -np.logaddexp(0.0, -f) + (1 - y) * -np.logaddexp(0.0, f)


def _check_label_draws(idata, group: str, f: np.ndarray) -> None:
    """Labels of draw ``s`` are ``Bernoulli(sigmoid(f_s))``: the summed deviation from the probabilities is
    within 4 standard errors (labels from other draws deviate by the spread of ``f`` across draws)."""
    labels = idata[group]["obs"].values[0].astype(np.float64)
    p = 1.0 / (1.0 + np.exp(-f[:, : labels.shape[1]]))
    z = float((labels - p).sum() / np.sqrt((p * (1 - p)).sum()))
    assert abs(z) < 4.0, z
    # the labels' log-probabilities under draw s's probabilities average to minus their entropy (labels of
    # another draw score lower wherever the draws disagree): 4 standard errors
    p = p.clip(1e-12, 1 - 1e-12)
    logit = np.log(p) - np.log1p(-p)
    score = labels * np.log(p) + (1 - labels) * np.log1p(-p)
    neg_entropy = p * np.log(p) + (1 - p) * np.log1p(-p)
    se = np.sqrt((p * (1 - p) * logit**2).sum())
    assert abs((score - neg_entropy).sum()) < 4.0 * se, ((score - neg_entropy).sum(), se)


@pytest.mark.parametrize("name", ["mfvi-bnn", "lbbnn"])
def test_classification_exports_share_the_posterior_draws(name):
    res, x, y = _fit(name, "binary", steps=300)
    idata = to_inference_data(res, x[:40], y[:40], num_samples=100, train=(x, y), seed=1)
    if name == "lbbnn":  # beta = gamma * slab (Hubin & Storvik 2019, arXiv:1903.07594, Eq. 3.3)
        weights = [_post(idata, f"fc{k}.weight.gamma") * _post(idata, f"fc{k}.weight.slab") for k in range(2)]
    else:
        weights = [_post(idata, f"fc{k}.weight") for k in range(2)]
    layers = [(weights[k], _post(idata, f"fc{k}.bias")) for k in range(2)]
    f = _forward(x.double().numpy(), layers, res.model.architecture.activation)
    hand = _bernoulli_ll(f, y.double().numpy())
    np.testing.assert_allclose(idata.log_likelihood["obs"].values[0], hand, rtol=1e-5, atol=2e-5)
    _check_label_draws(idata, "posterior_predictive", f)
    _check_label_draws(idata, "predictions", f)


def test_horseshoe_export_is_aligned_and_float64_keeps_arviz_statistics_finite():
    res, x, y = _fit("hs-bnn", "regression")
    idata = to_inference_data(res, x[:30], y[:30], num_samples=100, train=(x, y), seed=2)
    # non-centred rows (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §2.2): w = sqrt(tau2_k v2) beta for a
    # hidden layer, sqrt(kappa2) beta for the output layer; the bias is the last column
    rows0 = np.sqrt(_post(idata, "fc0.tau2") * _post(idata, "fc0.v2")[:, None])[..., None] * _post(
        idata, "fc0.beta"
    )
    rows1 = np.sqrt(_post(idata, "fc1.kappa2"))[:, None, None] * _post(idata, "fc1.beta")
    layers = [(r[..., :-1], r[..., -1]) for r in (rows0, rows1)]
    f = _forward(x.double().numpy(), layers, res.model.architecture.activation)
    noise_var = 1.0 / _post(idata, "precision")
    hand = _gaussian_ll(idata, f, y.double().numpy(), noise_var)
    np.testing.assert_allclose(idata.log_likelihood["obs"].values[0], hand, rtol=1e-5, atol=2e-5)
    _check_gaussian_draws(idata, "predictions", f, noise_var)
    assert all(v.dtype == np.float64 for v in idata.posterior.data_vars.values())
    # a scale far beyond float32's square (draws ~1e25) gives finite ArviZ moments in float64
    big = idata.posterior["fc0.theta"] * 1e25
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's "overflow encountered"
        table = az.summary(big.to_dataset(), kind="all")
    assert np.isfinite(table[["mean", "sd", "mcse_mean", "mcse_sd"]].to_numpy()).all()


# ---------------------------------------------------------------------------------- bow-tie local latents


@pytest.fixture(scope="module")
def bowtie_fit():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(80, 3, generator=g)
    y = torch.tanh(2 * x[:, 0]) + 0.1 * torch.randn(80, generator=g)
    m, gd, spec = build("bowtie", 3, 1, "regression", hidden=[4, 3])
    return fit(m, gd, x, y, steps=5, progress=False, spec=spec), x, y


def test_bowtie_rows_do_not_depend_on_their_neighbours(bowtie_fit):
    res, x, y = bowtie_fit
    xd, yd = torch.cat([x[:10], x[:10]]), torch.cat([y[:10], y[:10]])
    ll = log_likelihood(res, xd, yd, num_samples=30, seed=4)
    torch.testing.assert_close(ll[:, :10], ll[:, 10:], rtol=0, atol=1e-9)  # duplicated rows, same draw
    alone = log_likelihood(res, x[3:4], y[3:4], num_samples=30, seed=4)
    full = log_likelihood(res, x, y, num_samples=30, seed=4, data_chunk=11)
    torch.testing.assert_close(alone[:, 0], full[:, 3], rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(ll[:, 3], full[:, 3], rtol=1e-7, atol=1e-9)


def _brute_force(draw: dict[str, torch.Tensor], x: torch.Tensor, y: float, temp: float, m: int, seed: int):
    """``log p(y | theta)`` by plain Monte Carlo over the model's locals (gates and activations of every
    layer, nothing integrated), with its delta-method standard error and the relative sd of the weights."""
    g = torch.Generator().manual_seed(seed)
    h = x.double().expand(m, -1)
    for k in range(2):
        z = h @ draw[f"fc{k}.weight"].double().T + draw[f"fc{k}.bias"].double()
        gate = torch.bernoulli(torch.sigmoid(z / temp), generator=g)
        h = gate * z + draw[f"fc{k}.eta2"].double().sqrt() * torch.randn(
            z.shape, generator=g, dtype=torch.float64
        )
    f = (h @ draw["fc2.weight"].double().T + draw["fc2.bias"].double())[:, 0]
    lp = torch.distributions.Normal(f, draw["sigma2"].double().sqrt()).log_prob(torch.tensor(y).double())
    w = (lp - lp.max()).exp()
    rel_sd = float(w.std() / w.mean())
    return float(lp.max() + w.mean().log()), rel_sd / math.sqrt(m), rel_sd


def test_bowtie_pointwise_likelihood_integrates_the_locals_out(bowtie_fit):
    """Against a 200 000-draw plain Monte Carlo over the locals of draw s (Sheinkman & Wade 2025,
    arXiv:2411.11132, Eqs. 1-4): within 4 standard errors of both estimates plus the inner estimate's
    Jensen bias (its relative sd, bounded by the plain one's, squared over 2K)."""
    from zoo.families.bowtie.model import MARGINAL_DRAWS

    res, x, y = bowtie_fit
    draws = posterior_samples(res, 8, seed=6)
    ll = log_likelihood(res, x[:6], y[:6], num_samples=8, seed=6)  # y_mean/y_std not recorded: model scale
    temp = float(res.model.temperature)
    for s in (0, 5):
        for n in (0, 2, 5):
            draw = {k: v[s] for k, v in draws.items()}
            want, se, rel_sd = _brute_force(draw, x[n], float(y[n]), temp, 200_000, seed=10 * s + n)
            tol = 4 * (se + rel_sd / math.sqrt(MARGINAL_DRAWS)) + rel_sd**2 / (2 * MARGINAL_DRAWS) + 1e-6
            assert abs(float(ll[s, n]) - want) <= tol, (s, n, float(ll[s, n]), want, tol)


@contextlib.contextmanager
def caplog_warning():
    """The WARNING records of zoo.eval.diagnostics within the block."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    log = logging.getLogger("zoo.eval.diagnostics")
    log.addHandler(handler)
    try:
        yield records
    finally:
        log.removeHandler(handler)


def test_bowtie_export_draws_the_predictive_under_the_posterior_draws(bowtie_fit):
    from zoo.infer.predict import predictive_samples

    res, x, y = bowtie_fit
    idata = to_inference_data(res, num_samples=40, train=(x, y), seed=0)
    assert idata.posterior_predictive["obs"].shape == (1, 40, 80)
    assert "integrated out" in idata.log_likelihood.attrs["pointwise"]
    torch.testing.assert_close(
        torch.from_numpy(idata.posterior_predictive["obs"].values[0]),
        predictive_samples(res, x, num_samples=40, seed=0),
        check_dtype=False,
    )
    # beyond the budget of rows x draws the Monte Carlo pointwise likelihood is left out, saying so
    with caplog_warning() as records:
        big = to_inference_data(res, num_samples=40, train=(x, y), seed=0, max_marginal_values=40 * 80 - 1)
    assert "log_likelihood" not in big.groups() and "posterior_predictive" in big.groups()
    assert "max_marginal_values=3199" in big.posterior_predictive.attrs["log_likelihood"]
    assert any("log_likelihood left out" in r.getMessage() for r in records)
    with pytest.raises(ValueError, match="max_marginal_values"):
        to_inference_data(res, num_samples=4, train=(x, y), max_marginal_values=0)


# ------------------------------------------------------------------------ NUTS, target units, likelihood


def test_a_nuts_result_is_exported_with_its_chains():
    from zoo.infer.mcmc import NUTSConfig, fit_nuts

    x, y = _data(40)
    model, _, _ = build("blr-cavi", 3, 1, "regression", hidden=())
    result = fit_nuts(
        model, (x, y), NUTSConfig(chains=2, warmup=30, samples=25, seed=1, progress=False, parallel=False)
    )
    idata = to_inference_data(result, x[:5], y[:5], train=(x, y))
    assert idata.posterior.sizes["chain"] == 2 and idata.posterior.sizes["draw"] == 25
    assert idata.posterior.attrs["inference"] == "nuts" and hasattr(idata, "sample_stats")
    np.testing.assert_allclose(
        idata.posterior["sigma2"].values, result.guide.samples["sigma2"].cpu().numpy(), rtol=1e-6
    )


def test_targets_on_the_wrong_scale_warn_naming_the_argument():
    res, x, y = _fit("mfvi-bnn", "regression", steps=300)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        to_inference_data(res, x[:20], y[:20], num_samples=20, train=(x, y))  # original units: silent
    ys = (y - MU) / SD
    with pytest.warns(UserWarning, match="^train: the targets may be on the wrong scale"):
        to_inference_data(res, num_samples=20, train=(x, ys))
    with pytest.warns(UserWarning, match="^y: the targets may be on the wrong scale"):
        to_inference_data(res, x[:20], ys[:20] * 10 - 40, num_samples=20)


def test_the_likelihood_is_named_in_the_attributes():
    x, y = _data()
    model, guide, spec = build("mfvi-bnn", 3, 1, "regression", hidden=[4], seed=0, student_t_df=4.0)
    res = fit(model, guide, x, y, steps=20, progress=False, spec=spec)
    idata = to_inference_data(res, num_samples=10, train=(x, y))
    for group in (idata.posterior, idata.log_likelihood):
        assert group.attrs["likelihood"] == "StudentTLikelihood" and group.attrs["student_t_df"] == 4.0
