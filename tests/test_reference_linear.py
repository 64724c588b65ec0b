"""The linear reference instances (``*-linear``): the collapsed-mean prior's stored NUTS reference equals the
conjugate posterior, and every guide of the linear instances' models fits a network with no hidden layer.

The collapsed-mean (CM) prior ``w ~ N(mu_p, gamma)``, ``mu_p ~ N(0, alpha)`` has the Gaussian marginal
``N(0, gamma / alpha_reg)`` (Tomczak et al. 2021, App. B, Eq. 28), so a linear regression under it is
Bayesian linear regression: given the noise variance the posterior is Gaussian in closed form, and the noise
variance (``IG(a, b)`` prior) is integrated on a fine grid in ``log sigma^2``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from zoo.reference.instances import INSTANCES, get_instance
from zoo.reference.store import default_root, load_reference, stored_names

LINEAR = [n for n, i in INSTANCES.items() if i.method == "nuts" and i.hidden == ()]


def test_linear_instances_are_named_and_sampled_as_such():
    assert set(LINEAR) == {"cm-yacht-linear", "cmv-yacht-linear", "ngig-diabetes-linear"}
    for name in LINEAR:
        inst = INSTANCES[name]
        assert name.endswith("-linear") and inst.note.startswith("linear") and inst.sampler.chains >= 4


def _conjugate(x, y, prior_var, a, b, x_star, nodes=4001):
    """Posterior mean of ``f(x_star)`` and of ``sigma`` for ``y = [x, 1] theta + eps``, ``theta ~ N(0,
    diag(prior_var))``, ``sigma^2 ~ IG(a, b)``: trapezoid rule in ``u = log sigma^2`` (float64)."""
    xt = np.hstack([x, np.ones((x.shape[0], 1))])
    xs = np.hstack([x_star, np.ones((x_star.shape[0], 1))])
    n, d = xt.shape
    gram, xty, yty = xt.T @ xt, xt.T @ y, y @ y
    u = np.linspace(math.log(1e-4), math.log(1e2), nodes)
    log_w, means = np.empty(nodes), np.empty((nodes, xs.shape[0]))
    for k, s2 in enumerate(np.exp(u)):
        prec = gram / s2 + np.diag(1.0 / prior_var)
        chol = np.linalg.cholesky(prec)
        m = np.linalg.solve(prec, xty / s2)
        # log N(y; 0, s2 I + X V X^T) by Woodbury and the determinant lemma
        logdet = n * math.log(s2) + np.sum(np.log(prior_var)) + 2 * np.sum(np.log(np.diag(chol)))
        quad = (yty - xty @ m) / s2
        log_lik = -0.5 * (n * math.log(2 * math.pi) + logdet + quad)
        log_prior = a * math.log(b) - math.lgamma(a) - (a + 1) * math.log(s2) - b / s2
        log_w[k] = log_lik + log_prior + u[k]  # + log Jacobian d sigma^2 / du
        means[k] = xs @ m
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    assert w[0] < 1e-12 and w[-1] < 1e-12, "the grid must hold the noise posterior"
    return w @ means, w @ np.exp(u / 2)


def test_cm_linear_reference_equals_the_conjugate_posterior(data_dir):
    root = default_root()
    if "cm-yacht-linear" not in stored_names(root):
        pytest.skip("cm-yacht-linear is not stored (zoo reference compute cm-yacht-linear)")
    from zoo.experiments.registry import build
    from zoo.reference.compute import _standardized
    from zoo.reference.score import reference_data

    inst = get_instance("cm-yacht-linear")
    arrays, meta = load_reference(root, inst.name)
    ds = reference_data(inst, arrays, data_dir)
    model, _, _ = build(inst.model, ds.in_features, 1, ds.task, hidden=[], **inst.options)
    prior, lik = model.prior, model.likelihood
    prior_var = np.concatenate(
        [np.full(math.prod(s.shape), float(prior.gamma_for(s) / prior.alpha_reg_for(s))) for s in model.specs]
    )
    assert prior_var.shape == (ds.in_features + 1,) and [s.name for s in model.specs][-1] == "fc0.bias"
    y, mu, sd = _standardized(ds)
    f_mean, sigma_mean = _conjugate(
        np.asarray(ds.x_train, np.float64),
        y.reshape(-1),
        prior_var,
        float(lik.concentration),
        float(lik.rate),
        np.asarray(ds.x_test, np.float64),
    )
    f_mean = f_mean * sd + mu
    se = arrays["f_mean_se"]
    z = np.abs(arrays["f_mean"] - f_mean) / se
    # 31 test points, each within 4.5 Monte Carlo standard errors (a 1-in-10^4 event per point)
    assert z.max() < 4.5, f"NUTS posterior mean of f off the closed form by {z.max():.1f} MCSE"
    assert np.mean(z**2) < 2.0  # and no systematic offset (E z^2 = 1)
    z_sigma = abs(float(arrays["sigma_mean"]) - sigma_mean * sd) / float(arrays["sigma_mean_se"])
    assert z_sigma < 4.5
    # a shifted posterior is told apart: moving the closed form by one posterior sd of f fails the check
    shift = np.sqrt(np.var(arrays["f"], axis=0))
    assert (np.abs(arrays["f_mean"] - (f_mean + shift)) / se).max() > 4.5


def test_every_guide_fits_a_network_without_hidden_layer(data_dir):
    """The scoreboard fits every guide of the linear instances' models (30 steps here: shapes and sites)."""
    from zoo.experiments.config import RunConfig
    from zoo.experiments.registry import get_entry
    from zoo.experiments.runs import fit_on_dataset

    inst = get_instance("cmv-yacht-linear")
    ds = inst.dataset(data_dir)
    for guide in get_entry(inst.model).guides:
        run = fit_on_dataset(
            inst.model,
            ds,
            RunConfig(hidden=(), guide=guide, steps=30, seed=0, progress=False),
            **inst.options,
        )
        assert math.isfinite(run.metrics["rmse"]), guide
        assert torch.isfinite(torch.as_tensor(run.metrics["nll"])), guide


def test_bowtie_without_hidden_layer_is_the_linear_ngig_model():
    """On ``ngig-diabetes-linear`` the bow-tie guides are fitted as the reference's own model: with the
    instance's N-GIG hyperparameters the two Pyro models have the same log joint at every point (prior draws
    of one scored under the other); on a network instance the bow-tie stays a different model."""
    from pyro import poutine

    from zoo.experiments.registry import build
    from zoo.reference.score import fit_settings

    inst = get_instance("ngig-diabetes-linear")
    options, fit_options, same = fit_settings("bowtie", inst)
    assert same and fit_options == {"standardize_y": True} and "bowtie" in inst.scored
    ngig, _, _ = build("ngig-bnn", 3, 1, "regression", hidden=[], **inst.options)
    bowtie, _, _ = build("bowtie", 3, 1, "regression", hidden=[], **options)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(20, 3, generator=gen), torch.randn(20, generator=gen)
    for seed in range(3):
        torch.manual_seed(seed)
        tr = poutine.trace(ngig).get_trace(x, y)
        values = {n: s["value"] for n, s in tr.nodes.items() if s["type"] == "sample"}
        values = {n: v for n, v in values.items() if not tr.nodes[n]["is_observed"]}
        assert set(values) == {"data", "fc0.weight", "fc0.bias", "fc0.tau", "fc0.psi", "sigma2"}  # + plate
        other = poutine.trace(poutine.condition(bowtie, data=values)).get_trace(x, y)
        assert float(other.log_prob_sum()) == pytest.approx(float(tr.log_prob_sum()), rel=1e-6)
    # a different prior is told apart
    wide, _, _ = build("bowtie", 3, 1, "regression", hidden=[], **{**options, "delta_glob": 3.0})
    other = poutine.trace(poutine.condition(wide, data=values)).get_trace(x, y)
    assert abs(float(other.log_prob_sum()) - float(tr.log_prob_sum())) > 1e-3
    assert fit_settings("bowtie", get_instance("ngig-bowtie"))[2] is False
    assert fit_settings("ngig-bnn", inst) == (dict(inst.options), {}, True)


def test_runs_take_standardize_y_as_a_fit_option():
    from zoo.data import from_arrays
    from zoo.experiments.config import RunConfig
    from zoo.experiments.runs import fit_on_dataset

    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 2))
    y = 40.0 + 10.0 * x[:, 0] + rng.standard_normal(50)
    ds = from_arrays("toy", "regression", x[:40], y[:40], x[40:], y[40:])
    for flag in (False, True):
        run = fit_on_dataset(
            "bowtie", ds, RunConfig(hidden=(), steps=50, progress=False, fit_options={"standardize_y": flag})
        )
        assert run.metrics["rmse"] < 3.0, flag  # predictions on the original scale either way
        assert ("y_std" in run.result.config) is flag
    with pytest.raises(TypeError, match="standardize_y"):
        fit_on_dataset("bowtie", ds, RunConfig(hidden=(), steps=2, fit_options={"standardize_y": 1}))
