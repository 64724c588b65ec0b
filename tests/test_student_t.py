"""The Student-t likelihood ``y ~ t_df(f, sigma^2)`` (zoo.core.likelihoods.StudentTLikelihood), the families'
``student_t_df`` option, and the Student-t mixture predictive (metrics, predictions, scores)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from zoo.core.likelihood_options import task_likelihood
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.student_t import StudentTLikelihood, check_student_t_df
from zoo.eval import metrics
from zoo.eval.diagnostics import to_inference_data
from zoo.experiments.ensemble import combine_predictions
from zoo.experiments.outputs import score_predictions
from zoo.experiments.registry import build
from zoo.infer.loop import fit
from zoo.infer.predict import Predictions, log_likelihood, predict


def test_density_and_moments_are_scipys_student_t():
    g = torch.Generator().manual_seed(0)
    f = torch.randn(9, 1, generator=g, dtype=torch.float64)
    y = torch.randn(9, generator=g, dtype=torch.float64)
    lik = StudentTLikelihood(df=3.5)
    s2 = torch.tensor(0.4, dtype=torch.float64)
    got = lik.log_likelihood(f, y, {"sigma2": s2}).numpy()
    want = stats.t.logpdf(y.numpy(), 3.5, loc=f[:, 0].numpy(), scale=math.sqrt(0.4))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    loc, var = lik.predictive_moments(f, {"sigma2": s2})
    np.testing.assert_allclose(var.numpy(), stats.t.var(3.5, scale=math.sqrt(0.4)), rtol=1e-12)
    np.testing.assert_allclose(loc.numpy(), f[:, 0].numpy())
    assert lik.config()["df"] == 3.5 and lik.predictive_df == 3.5 and not lik.conjugate_noise
    assert GaussianLikelihood().predictive_df is None and GaussianLikelihood().conjugate_noise


@pytest.mark.parametrize("bad", [2, 1.5, 0, -3, float("nan"), float("inf")])
def test_degrees_of_freedom_must_exceed_two(bad):
    with pytest.raises(ValueError, match="student_t_df"):
        check_student_t_df("student_t_df", bad)
    with pytest.raises(ValueError, match="student_t_df"):
        build("mfvi-bnn", 2, 1, "regression", hidden=[4], student_t_df=bad)


def test_bad_types_and_tasks_are_refused_before_training():
    with pytest.raises(TypeError, match="student_t_df"):
        build("cm-bnn", 2, 1, "regression", hidden=[4], student_t_df="4")
    for name in ("mfvi-bnn", "lbbnn", "hs-bnn"):
        with pytest.raises(ValueError, match="student_t_df.*regression"):
            build(name, 2, 1, "binary", hidden=[4], student_t_df=4.0)
    with pytest.raises(ValueError, match="regression"):
        task_likelihood("multiclass", 3, df=4.0)


@pytest.mark.parametrize("learn", [False, True])
@pytest.mark.parametrize("name", ["mfvi-bnn", "cm-bnn", "cv-bnn", "cmv-bnn", "ngig-bnn", "lbbnn"])
def test_every_gradient_noise_family_takes_the_option(name, learn):
    """A Student-t fit in every family's own training loop; a learned ``df`` moves from its start."""
    x, y = _heavy(120, 5)
    model, guide, _ = build(
        name, 1, 1, "regression", hidden=[8], seed=0, student_t_df=5, student_t_learn_df=learn
    )
    assert isinstance(model.likelihood, StudentTLikelihood) and model.likelihood.predictive_df == 5.0
    result = fit(model, guide, x, y, steps=100, seed=0, progress=False)
    pred = predict(result, x[:10], num_samples=6, seed=0)
    assert torch.isfinite(pred.scale).all()
    assert pred.df == 5.0 if not learn else abs(pred.df - 5.0) > 1e-3, pred.df
    plain, _, _ = build(name, 1, 1, "regression", hidden=[8], seed=0)
    assert type(plain.likelihood) is GaussianLikelihood


def test_the_horseshoes_gradient_noise_update_takes_a_student_t():
    """The paper's ``noise_update='gradient'`` runs with a Student-t likelihood (the default natural-gradient
    update: ``tests/test_student_t_noise.py``)."""
    model, guide, _ = build(
        "reg-hs-bnn",
        1,
        1,
        "regression",
        hidden=[8],
        seed=0,
        student_t_df=4,
        guide_options={"noise_update": "gradient"},
    )
    x, y = _heavy(80, 6)
    result = fit(model, guide, x, y, steps=50, seed=0, progress=False)
    assert predict(result, x[:5], num_samples=4, seed=0).df == 4.0


def test_mixture_nll_and_pit_against_quadrature():
    """NLL and PIT of the equally weighted t mixture: log-sum-exp of scipy's densities, and the mixture's
    distribution function by numerical integration of its density."""
    rng = np.random.default_rng(1)
    loc, scale, y = rng.normal(size=(3, 4)), rng.uniform(0.3, 2.0, size=(3, 4)), rng.normal(size=4)
    df = 3.0
    dens = [lambda u, n=n: np.mean(stats.t.pdf(u, df, loc=loc[:, n], scale=scale[:, n])) for n in range(4)]
    want_nll = -np.mean([math.log(dens[n](y[n])) for n in range(4)])
    assert metrics.mixture_nll(y, loc, scale, df=df) == pytest.approx(want_nll, rel=1e-12)
    want_pit = [integrate.quad(dens[n], -np.inf, y[n], epsabs=1e-12)[0] for n in range(4)]
    np.testing.assert_allclose(metrics.mixture_pit(y, loc, scale, df=df), want_pit, atol=1e-9)
    # the Gaussian mixture is the df -> infinity limit, and differs at df = 3
    gauss = metrics.mixture_nll(y, loc, scale)
    assert metrics.mixture_nll(y, loc, scale, df=1e7) == pytest.approx(gauss, rel=1e-5)
    assert abs(metrics.mixture_nll(y, loc, scale, df=df) - gauss) > 1e-2
    for bad in (0, -1.0, float("nan"), "3"):
        with pytest.raises(ValueError, match="df"):
            metrics.mixture_nll(y, loc, scale, df=bad)
        with pytest.raises(ValueError, match="df"):
            metrics.mixture_pit(y, loc, scale, df=bad)


def _heavy(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y = sin(2x) + 0.1 e with e ~ t_2.5: heavy-tailed errors."""
    g = torch.Generator().manual_seed(seed)
    x = 2 * torch.rand(n, 1, generator=g) - 1
    u, w = torch.randn(n, generator=g), torch.distributions.Gamma(1.25, 1.25).sample((n,))
    return x, torch.sin(2 * x[:, 0]) + 0.1 * u / w.sqrt()


@pytest.fixture(scope="module")
def heavy_fits():
    torch.manual_seed(0)  # the Gamma draws of _heavy use the global stream
    x, y = _heavy(500, 0)
    out = {}
    for df in (None, 4.0):
        model, guide, _ = build("mfvi-bnn", 1, 1, "regression", hidden=[16], seed=0, student_t_df=df)
        out[df] = fit(model, guide, x, y, steps=2000, lr=1e-2, seed=0, progress=False)
    return out


def test_the_student_t_fits_heavy_tailed_errors_better(heavy_fits):
    """On fresh heavy-tailed data (t_2.5 errors) the Student-t fit's test NLL is lower than the Gaussian's
    and its 95 % intervals cover about 95 %, while the Gaussian's single sd, set by the few large errors,
    over-covers the bulk (measured: NLL -0.43 against 0.04; coverage .952 against .992)."""
    torch.manual_seed(1)
    x, y = _heavy(2000, 1)

    class Task:
        task = "regression"

    scores = {
        df: score_predictions(Task, predict(r, x, num_samples=100, seed=0), y) for df, r in heavy_fits.items()
    }
    assert scores[4.0]["nll"] < scores[None]["nll"] - 0.2, scores
    assert scores[None]["coverage95"] > 0.98, scores
    # 2000 points: a binomial standard error of 0.005 at 0.95; the margin allows VI's bias
    assert 0.93 <= scores[4.0]["coverage95"] <= 0.97, scores
    # the noise factor was refit after the last step, through the t's weights (tests/test_student_t_noise.py)
    assert heavy_fits[4.0].loop_state.get("noise_train") is not None


def test_predictive_draws_carry_the_t_scale_and_tails(heavy_fits):
    """``scale`` is the t's scale (the moment-matched variance is ``E[scale^2] df / (df - 2) + Var[loc]``),
    joint samples have t tails, and pointwise log-likelihoods are the t densities of the draws."""
    result = heavy_fits[4.0]
    x, y = _heavy(200, 2)
    pred = predict(result, x, num_samples=100, seed=3, return_samples=True)
    var = (pred.scale.double() ** 2).mean(0) * 2.0 + pred.loc.double().var(0, unbiased=False)
    torch.testing.assert_close(pred.var.double(), var, rtol=1e-4, atol=1e-9)
    z = ((pred.samples - pred.loc) / pred.scale).abs().reshape(-1).numpy()
    # 20000 draws: P(|t_4| > 2.776) = .05 with a standard error of .0015; a normal gives .0055
    assert float(np.mean(z > stats.t.ppf(0.975, 4))) == pytest.approx(0.05, abs=0.008)
    ll = log_likelihood(result, x[:7], y[:7], num_samples=5, seed=1)
    p7 = predict(result, x[:7], num_samples=5, seed=1)
    want = stats.t.logpdf(y[:7].numpy(), 4.0, loc=p7.loc.numpy(), scale=p7.scale.numpy())
    np.testing.assert_allclose(ll.numpy(), want, rtol=1e-4, atol=1e-5)
    idata = to_inference_data(result, train=(x[:30], y[:30]), num_samples=10)
    assert np.isfinite(idata.log_likelihood["obs"].values).all()


def test_scores_use_the_t_mixture_and_ensembles_refuse_mixed_shapes():
    rng = np.random.default_rng(4)
    loc = torch.tensor(rng.normal(size=(5, 30)))
    scale = torch.tensor(rng.uniform(0.5, 1.5, size=(5, 30)))
    y = rng.normal(size=30) * 1.5
    var = (scale**2).mean(0) * 3.0 + loc.var(0, unbiased=False)
    pred = Predictions("regression", mean=loc.mean(0), var=var, loc=loc, scale=scale, df=3.0)

    class Task:
        task = "regression"

    s = score_predictions(Task, pred, y)
    assert s["nll"] == pytest.approx(metrics.mixture_nll(y, loc.numpy(), scale.numpy(), df=3.0), rel=1e-12)
    pit = metrics.mixture_pit(y, loc.numpy(), scale.numpy(), df=3.0)
    assert s["coverage95"] == pytest.approx(float(np.mean(np.abs(pit - 0.5) <= 0.475)))
    plain = Predictions("regression", mean=pred.mean, var=var, loc=loc, scale=scale)
    gauss = score_predictions(Task, plain, y)
    assert gauss["nll"] == pytest.approx(metrics.gaussian_nll(y, pred.mean.numpy(), var.numpy()))
    both = combine_predictions([pred, pred], [0.0, 0.0])
    assert both.df == 3.0
    with pytest.raises(ValueError, match="members"):
        combine_predictions([pred, plain], [0.0, 0.0])


def test_a_checkpoint_restores_the_student_t(heavy_fits, tmp_path):
    from zoo.checkpoint import load, save

    save(heavy_fits[4.0], tmp_path / "t.pt")
    back = load(tmp_path / "t.pt")
    lik = back.model.likelihood
    assert isinstance(lik, StudentTLikelihood) and lik.predictive_df == 4.0
    x, _ = _heavy(20, 7)
    a, b = (predict(r, x, num_samples=5, seed=2) for r in (heavy_fits[4.0], back))
    assert b.df == 4.0 and torch.equal(a.loc, b.loc) and torch.equal(a.scale, b.scale)


def test_fit_and_predict_on_the_device(device):
    """The Student-t path on ``device``: training, predictive draws and t-tailed joint samples there."""
    x, y = _heavy(120, 8)
    x, y = x.to(device), y.to(device)
    model, guide, _ = build("mfvi-bnn", 1, 1, "regression", hidden=[8], seed=0, student_t_df=4)
    result = fit(model, guide, x, y, steps=100, seed=0, progress=False, device=device)
    pred = predict(result, x[:6], num_samples=5, seed=1, return_samples=True)
    assert pred.samples.device.type == device.type and pred.df == 4.0
    ll = log_likelihood(result, x[:6], y[:6], num_samples=5, seed=1)
    want = torch.distributions.StudentT(4.0, pred.loc, pred.scale).log_prob(y[:6])
    assert torch.allclose(ll, want, atol=1e-4)


def test_the_conjugate_linear_cavi_refuses_a_student_t():
    """``blr-cavi``'s guide is the conjugate Gaussian update: a linear model with a Student-t likelihood (a
    plugin could build one) is refused; the same model with the Gaussian is served."""
    from guides.baselines.conjugate import LinearRegressionCAVIGuide
    from zoo.core.architectures import MLP
    from zoo.core.gaussian import GaussianPrior
    from zoo.core.model import BayesianModel

    def linear(lik):
        return BayesianModel(MLP(3, (), 1, bias=False), GaussianPrior(1.0), lik)

    with pytest.raises(ValueError, match="cavi"):
        LinearRegressionCAVIGuide(linear(StudentTLikelihood(df=4.0)))
    LinearRegressionCAVIGuide(linear(GaussianLikelihood()))


def test_learned_degrees_of_freedom_follow_the_tails():
    """``student_t_learn_df``: the fit moves ``df`` from its start (4) by maximizing the ELBO, down towards
    the truth for t_2.5 errors and up for Gaussian ones (measured: 2.50 and 15.6 after 2000 steps)."""
    torch.manual_seed(0)
    x, y_heavy = _heavy(500, 10)
    g = torch.Generator().manual_seed(11)
    y_gauss = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(500, generator=g)
    learned = {}
    for name, y in (("heavy", y_heavy), ("gauss", y_gauss)):
        model, guide, _ = build(
            "mfvi-bnn", 1, 1, "regression", hidden=[16], seed=0, student_t_df=4, student_t_learn_df=True
        )
        assert model.likelihood.config()["learn_df"] is True
        result = fit(model, guide, x, y, steps=2000, lr=1e-2, seed=0, progress=False)
        learned[name] = result.model.likelihood.predictive_df
        assert predict(result, x[:5], num_samples=3, seed=0).df == learned[name]
    assert learned["heavy"] < 3.5 and learned["gauss"] > 8.0, learned


def test_learning_needs_a_start_and_a_bool():
    with pytest.raises(ValueError, match="student_t_learn_df"):
        build("mfvi-bnn", 1, 1, "regression", hidden=[4], student_t_learn_df=True)
    with pytest.raises(TypeError, match="student_t_learn_df"):
        build("lbbnn", 1, 1, "regression", hidden=[4], student_t_df=4, student_t_learn_df="yes")
    with pytest.raises(TypeError, match="learn_df"):
        StudentTLikelihood(df=4.0, learn_df=1)
    with pytest.raises(ValueError, match="learn_df"):
        task_likelihood("regression", 1, learn_df=True)


def test_a_checkpoint_restores_the_learned_df(tmp_path):
    from zoo.checkpoint import load, save

    x, y = _heavy(100, 12)
    model, guide, _ = build(
        "cm-bnn", 1, 1, "regression", hidden=[8], seed=0, student_t_df=5, student_t_learn_df=True
    )
    result = fit(model, guide, x, y, steps=200, lr=2e-2, seed=0, progress=False)
    df = result.model.likelihood.predictive_df
    assert df != pytest.approx(5.0, abs=1e-3)  # the fit moved it
    save(result, tmp_path / "t.pt")
    assert load(tmp_path / "t.pt").model.likelihood.predictive_df == pytest.approx(df, rel=1e-6)
