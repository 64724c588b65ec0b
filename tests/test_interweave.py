"""Ancillary moves of the horseshoe's scales (zoo.infer.interweave, zoo.families.horseshoe.gibbs.
interweave_scales) and NUTS within Gibbs with them (``fit_nuts(..., gibbs=True, interweave=True)``).

The moves condition on data, so they are checked with Geweke's (2004) successive-conditional simulator of
the *joint* law of parameters and data: 2000 independent chains start at exact prior draws ``theta``;
each iteration draws ``y | theta`` from the likelihood, then moves ``theta`` given ``y`` by the centered
Gibbs sweep and the ancillary moves.  Both leave ``p(theta | y)`` invariant, so ``(theta, y)`` stays
distributed as ``p(theta) p(y | theta)``: after the moves every scale keeps its prior marginal, and the
standardized residual sum of squares ``|y - f(x; theta)|^2 / sigma^2`` is exactly chi-square with ``n``
degrees of freedom.  A move that ignores the likelihood keeps the scales' marginals (the prior is
invariant under it) but breaks the residuals; one without the Jacobian of ``u = log s`` breaks the
marginals.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pyro import poutine
from scipy import stats

from zoo.experiments.registry import build
from zoo.families.horseshoe import gibbs
from zoo.families.horseshoe.prior import group_layers, regularized_variance
from zoo.infer.interweave import ancillary_log_scale, likelihood_of
from zoo.infer.mcmc import NUTSConfig, fit_nuts

from .helpers import gibbs_config

CHAINS = 2000
SWEEPS = 8
SIGMA = 0.3
X = torch.linspace(-1.5, 1.5, 6, dtype=torch.float64)[:, None]
#: unit prior scales, so the data inform every scale (the paper's b_g = 1e-5 would switch the network off)
SCALES = {"b0": 1.0, "bg": 1.0, "b_kappa": 1.0}


def _model(regularized: bool = False):
    name = "reg-hs-bnn" if regularized else "hs-bnn"
    model, _, spec = build(name, 1, 1, "regression", hidden=[2], activation="tanh", **SCALES)
    return model.double(), spec


def _ig(shape: float, rate: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return rate / torch._standard_gamma(torch.full_like(rate, shape), generator=gen)


def _prior(prior, specs, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """CHAINS exact draws of the hierarchical, centered prior: the scales, then the rows given them."""
    out: dict[str, torch.Tensor] = {}
    one = torch.ones(CHAINS, dtype=torch.float64)
    c2 = _ig(float(prior.c_a), float(prior.c_b) * one, gen) if prior.regularized else None
    if c2 is not None:
        out[gibbs.SLAB] = c2
    for layer in group_layers(specs):
        p, k, f = layer.prefix, layer.units, layer.fan
        if layer.output:
            out[f"{p}.rho"] = _ig(0.5, one / float(prior.b_kappa) ** 2, gen)
            out[f"{p}.kappa2"] = _ig(0.5, 1 / out[f"{p}.rho"], gen)
            var = out[f"{p}.kappa2"][:, None, None]
        else:
            out[f"{p}.lam"] = _ig(0.5, torch.ones(CHAINS, k, dtype=torch.float64) / float(prior.b0) ** 2, gen)
            out[f"{p}.tau2"] = _ig(0.5, 1 / out[f"{p}.lam"], gen)
            out[f"{p}.theta"] = _ig(0.5, one / float(prior.bg) ** 2, gen)
            out[f"{p}.v2"] = _ig(0.5, 1 / out[f"{p}.theta"], gen)
            c = None if c2 is None else c2[:, None]
            var = regularized_variance(out[f"{p}.tau2"], out[f"{p}.v2"][:, None], c)[..., None]
        out[f"{p}.w"] = torch.randn(CHAINS, k, f, dtype=torch.float64, generator=gen) * var.sqrt()
    return out


def _f(values: dict[str, torch.Tensor]) -> torch.Tensor:
    """The 1-2-1 tanh network's output at X, one row per chain (rows: incoming weights, then the bias)."""
    w0, w1 = values["fc0.w"], values["fc1.w"]
    h = torch.tanh(X[None, :, :] @ w0[..., :-1].transpose(-1, -2) + w0[:, None, :, -1])
    return (h @ w1[..., :-1].transpose(-1, -2))[..., 0] + w1[:, None, 0, -1]


def _log_lik(y: torch.Tensor):
    def log_lik(values):
        return torch.distributions.Normal(_f(values), SIGMA).log_prob(y).sum(-1)

    return log_lik


def _successive(regularized: bool = False, moves=gibbs.interweave_scales, seed: int = 0):
    model, _ = _model(regularized)
    prior, specs = model.prior, model.specs
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    values = _prior(prior, specs, gen)
    for _ in range(SWEEPS):
        y = _f(values) + SIGMA * torch.randn(CHAINS, len(X), dtype=torch.float64, generator=gen)
        values.update(gibbs.draw_scales(prior, specs, values))
        values.update(moves(prior, specs, values, _log_lik(y)))
    rss = (y - _f(values)).square().sum(-1) / SIGMA**2
    return values, rss, prior


def _pvalues(values, rss, prior) -> dict[str, float]:
    def half_cauchy(b: float):
        return lambda t: 2 / math.pi * np.arctan(np.asarray(t) / b)

    checks = {
        "rss": (rss, stats.chi2(len(X)).cdf),
        "fc0.tau2": (values["fc0.tau2"][:, 0].sqrt(), half_cauchy(float(prior.b0))),
        "fc0.v2": (values["fc0.v2"].sqrt(), half_cauchy(float(prior.bg))),
        "fc1.kappa2": (values["fc1.kappa2"].sqrt(), half_cauchy(float(prior.b_kappa))),
    }
    if prior.regularized:
        checks[gibbs.SLAB] = (
            values[gibbs.SLAB],
            stats.invgamma(float(prior.c_a), scale=float(prior.c_b)).cdf,
        )
    return {k: float(stats.kstest(v.numpy(), cdf).pvalue) for k, (v, cdf) in checks.items()}


def _successive_ncp(regularized: bool = False, restandardize: bool = True, seed: int = 0):
    """The same simulator with the rows held non-centered (``p.beta``), as the NUTS block of a
    ``centered=False`` chain holds them, and the sweep of :mod:`zoo.infer.mcmc_gibbs` (centered draw, then
    ancillary moves, then the rows standardized by the new scales)."""
    from types import SimpleNamespace

    from zoo.infer.mcmc_gibbs import _sweep

    model, _ = _model(regularized)
    prior, specs = model.prior, model.specs
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    values = _prior(prior, specs, gen)
    values.update(gibbs.reparameterize(prior, specs, values, centered=False))
    scales = set(gibbs.scale_sites(prior, specs))
    values = {k: v for k, v in values.items() if not k.endswith(".w")}
    holder = SimpleNamespace(prior=prior, specs=specs)
    for _ in range(SWEEPS):
        cen = {**values, **gibbs.reparameterize(prior, specs, values, centered=True)}
        y = _f(cen) + SIGMA * torch.randn(CHAINS, len(X), dtype=torch.float64, generator=gen)
        new = _sweep(holder, dict(values), _log_lik(y), ncp=True)
        values.update({k: v for k, v in new.items() if restandardize or k in scales})
    cen = {**values, **gibbs.reparameterize(prior, specs, values, centered=True)}
    rss = (y - _f(cen)).square().sum(-1) / SIGMA**2
    p = _pvalues(cen, rss, prior)
    p["fc0.beta"] = float(stats.kstest(values["fc0.beta"][:, 0, 0].numpy(), stats.norm.cdf).pvalue)
    return p


def test_reparameterize_round_trips():
    model, _ = _model(regularized=True)
    values = _prior(model.prior, model.specs, torch.Generator().manual_seed(2))
    beta = gibbs.reparameterize(model.prior, model.specs, values, centered=False)
    back = gibbs.reparameterize(model.prior, model.specs, {**values, **beta}, centered=True)
    for name in ("fc0.w", "fc1.w"):
        torch.testing.assert_close(back[name], values[name])
        assert beta[name.replace(".w", ".beta")].std() == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("regularized", [False, True])
def test_non_centered_sweep_keeps_the_joint_law(regularized):
    p = _successive_ncp(regularized)
    assert min(p.values()) > 1e-3, p


def test_a_non_centered_sweep_that_keeps_the_old_standardized_rows_is_detected():
    p = _successive_ncp(restandardize=False)
    assert min(p.values()) < 1e-6, p


@pytest.mark.parametrize("regularized", [False, True])
def test_ancillary_moves_keep_the_joint_law(regularized):
    """Every marginal and the residuals pass KS over 2000 chains (p > 1e-3 each; a correct sampler fails
    one of the four or five with probability < 0.005)."""
    p = _pvalues(*_successive(regularized))
    assert min(p.values()) > 1e-3, p


def test_a_move_that_ignores_the_likelihood_is_detected():
    def blind(prior, specs, values, log_lik):
        return gibbs.interweave_scales(
            prior, specs, values, lambda v: torch.zeros(CHAINS, dtype=torch.float64)
        )

    values, rss, prior = _successive(moves=blind)
    p = _pvalues(values, rss, prior)
    assert p["rss"] < 1e-6, p


def test_a_move_without_the_jacobian_is_detected(monkeypatch):
    """``p(s | rest)`` without the ``+ u`` of ``u = log s``: an inverse-gamma shape one too large."""
    right = gibbs._log_ig
    monkeypatch.setattr(gibbs, "_log_ig", lambda u, shape, rate: right(u, shape + 1.0, rate))
    p = _pvalues(*_successive())
    assert min(p["fc0.tau2"], p["fc0.v2"], p["fc1.kappa2"]) < 1e-6, p


def test_likelihood_of_is_the_observed_sites_log_density():
    """At a prior draw of every latent site: the Normal log-likelihood computed by hand from the rows and the
    noise precision."""
    model, _ = _model()
    model.float()
    model.prior.hierarchical, model.prior.centered = True, True
    x, y = _toy()
    torch.manual_seed(3)
    trace = poutine.trace(poutine.block(model, hide=["obs"])).get_trace(x, y)
    values = {n: s["value"] for n, s in trace.nodes.items() if s["type"] == "sample" and not s["is_observed"]}
    w0, w1 = values["fc0.w"], values["fc1.w"]
    f = torch.tanh(x @ w0[:, :-1].T + w0[:, -1]) @ w1[:, :-1].T + w1[:, -1]
    want = torch.distributions.Normal(f[:, 0], values["precision"] ** -0.5).log_prob(y).sum()
    got = likelihood_of(model, x, y)(values)
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    values["fc1.w"] = 2 * w1  # the conditioned values, not fresh draws, are used
    assert float(likelihood_of(model, x, y)(values)) != pytest.approx(float(want), rel=1e-3)


def test_ancillary_log_scale_checks_the_current_point():
    with pytest.raises(ValueError, match="finite"):
        ancillary_log_scale(
            torch.tensor(0.0),
            lambda u: -torch.inf * torch.ones_like(u),
            lambda u: {},
            lambda v: torch.tensor(0.0),
        )


def _toy(n: int = 30):
    g = torch.Generator().manual_seed(0)
    x = torch.linspace(-1, 1, n)[:, None]
    return x, (torch.tanh(2 * x[:, 0]) + 0.1 * torch.randn(n, generator=g))


def _short_fit(regularized: bool = False, **settings):
    """Ten warm-up and eight kept iterations of one NUTS-within-Gibbs chain with interweaving (trees of
    depth 5 at most: the test is of the plumbing, not of the mixing)."""
    model, spec = _model(regularized)
    model.float()
    x, y = _toy()
    cfg = gibbs_config(interweave=True, **settings)
    return fit_nuts(model, (x, y), cfg, spec=spec), x


@pytest.mark.parametrize("regularized", [False, True])
def test_fit_nuts_gibbs_with_interweaving_end_to_end(regularized):
    """Short chains run; the recorded rows and scales stay consistent draws (finite, positive scales that
    move), and the config records the scheme."""
    result, x = _short_fit(regularized)
    for n in ("fc0.tau2", "fc0.v2", "fc1.kappa2"):
        v = result.samples[n]
        assert v.shape[:2] == (1, 8) and (v > 0).all() and v.std() > 0
    assert torch.isfinite(result.samples["fc0.w"]).all()
    assert result.config["interweave"] is True
    assert torch.isfinite(result.predict(x[:3]).mean).all()


def test_fit_nuts_gibbs_non_centered_end_to_end():
    """``centered=False`` within Gibbs: NUTS moves the standardized rows ``p.beta``, which are stored, and
    the predictive replays them through the non-centered model."""
    result, x = _short_fit(centered=False)
    assert "fc0.beta" in result.samples and "fc0.w" not in result.samples
    assert result.samples["fc0.beta"].std() > 0 and result.samples["fc0.tau2"].std() > 0
    assert result.model.prior.centered is False
    assert torch.isfinite(result.predict(x[:3]).mean).all()


def test_non_centered_gibbs_is_refused_for_a_prior_without_a_map(monkeypatch):
    from zoo.core.prior import ExactScaleConditionals

    model, spec = _model()
    monkeypatch.setattr(ExactScaleConditionals, "can_reparameterize", property(lambda self: False))
    x, y = _toy()
    cfg = NUTSConfig(
        chains=1, warmup=5, samples=5, jit_compile=False, gibbs=True, centered=False, progress=False
    )
    with pytest.raises(ValueError, match="reparameterize"):
        fit_nuts(model, (x, y), cfg, spec=spec)


@pytest.mark.parametrize(
    ("settings", "match"),
    [({"gibbs": False}, "interweave=True needs gibbs=True"), ({"interweave": "yes"}, "interweave")],
)
def test_interweave_config_is_checked(settings, match):
    with pytest.raises((ValueError, TypeError), match=match):
        NUTSConfig(**{"gibbs": True, "jit_compile": False, "interweave": True, **settings})


@pytest.mark.parametrize("name", ["cm-bnn", "cmv-bnn"])
def test_interweave_refused_before_sampling_for_priors_without_moves(name):
    model, _, spec = build(name, 1, 1, "regression", hidden=[2])
    x, y = _toy()
    cfg = NUTSConfig(
        chains=1, warmup=5, samples=5, jit_compile=False, gibbs=True, interweave=True, progress=False
    )
    with pytest.raises(ValueError, match="interweave"):
        fit_nuts(model, (x, y), cfg, spec=spec)


# ------------------------------------------------------------------------------------------------ N-GIG


def _ngig_successive(moves, seed: int = 0):
    """The joint simulator for the N-GIG prior (inverse-gamma scales, lam = 0) on the 1-2-1 tanh network:
    exact draws of ``(tau, psi, W, b)``, then SWEEPS of ``y | theta``, the scale sweep and ``moves``."""
    from zoo.families.bowtie import gibbs as ngig

    model, _, _ = build("ngig-bnn", 1, 1, "regression", hidden=[2], activation="tanh")
    prior, specs = model.double().prior, model.specs
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    num_hidden = max(s.layer for s in specs)
    values: dict[str, torch.Tensor] = {}
    for s in specs:
        if s.role == "bias":
            z = torch.randn(CHAINS, *s.shape, dtype=torch.float64, generator=gen)
            values[s.name] = z * float(prior.bias_scale)
            continue
        p = s.name.rsplit(".", 1)[0]
        nu_g, d_g, _ = prior.glob_params(num_hidden)
        nu, d, _ = prior.loc_params(s.fan_in)
        values[f"{p}.tau"] = _ig(
            float(-nu_g), float(d_g) ** 2 / 2 * torch.ones(CHAINS, dtype=torch.float64), gen
        )
        psi_rate = float(d) ** 2 / 2 * torch.ones(CHAINS, *s.shape, dtype=torch.float64)
        values[f"{p}.psi"] = _ig(float(-nu), psi_rate, gen)
        var = values[f"{p}.tau"][:, None, None] * values[f"{p}.psi"]
        values[s.name] = torch.randn(CHAINS, *s.shape, dtype=torch.float64, generator=gen) * var.sqrt()

    def f(v):
        h = torch.tanh(X[None] @ v["fc0.weight"].transpose(-1, -2) + v["fc0.bias"][:, None, :])
        return (h @ v["fc1.weight"].transpose(-1, -2))[..., 0] + v["fc1.bias"][:, None, 0]

    def log_lik(y):
        return lambda v: torch.distributions.Normal(f(v), SIGMA).log_prob(y).sum(-1)

    for _ in range(SWEEPS):
        y = f(values) + SIGMA * torch.randn(CHAINS, len(X), dtype=torch.float64, generator=gen)
        values.update(ngig.draw_scales(prior, specs, values))
        values.update(moves(prior, specs, values, log_lik(y)))
    rss = (y - f(values)).square().sum(-1) / SIGMA**2
    p = {"rss": float(stats.kstest(rss.numpy(), stats.chi2(len(X)).cdf).pvalue)}
    nu_g, d_g, _ = prior.glob_params(num_hidden)
    tau_law = stats.invgamma(float(-nu_g), scale=float(d_g) ** 2 / 2)
    for name in ("fc0", "fc1"):
        p[f"{name}.tau"] = float(stats.kstest(values[f"{name}.tau"].numpy(), tau_law.cdf).pvalue)
    return p


def test_ngig_ancillary_moves_keep_the_joint_law():
    from zoo.families.bowtie import gibbs as ngig

    p = _ngig_successive(ngig.interweave_scales)
    assert min(p.values()) > 1e-3, p


def test_ngig_moves_that_ignore_the_likelihood_or_the_prior_are_detected():
    from zoo.families.bowtie import gibbs as ngig

    def blind(prior, specs, values, log_lik):
        return ngig.interweave_scales(
            prior, specs, values, lambda v: torch.zeros(CHAINS, dtype=torch.float64)
        )

    assert _ngig_successive(blind)["rss"] < 1e-6

    def flat_prior(prior, specs, values, log_lik):  # the scale's prior left out: only the likelihood
        out = {}
        for name, weight in (("fc0.tau", "fc0.weight"), ("fc1.tau", "fc1.weight")):
            cur = {**values, **out}

            def moved(u, name=name, weight=weight, cur=cur):
                return {
                    **cur,
                    name: u.exp(),
                    weight: cur[weight] * (u.exp() / cur[name]).sqrt()[:, None, None],
                }

            out.update(moved(ancillary_log_scale(cur[name].log(), lambda u: 0 * u, moved, log_lik)))
        return out

    p = _ngig_successive(flat_prior)
    assert min(p["fc0.tau"], p["fc1.tau"]) < 1e-6, p
