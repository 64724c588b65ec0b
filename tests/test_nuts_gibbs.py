"""NUTS within Gibbs: the exact scale conditionals of the horseshoe (zoo.families.horseshoe.gibbs) and the
N-GIG prior (zoo.families.bowtie.gibbs), and the sampler that alternates them with NUTS
(zoo.infer.mcmc_gibbs, ``fit_nuts(..., gibbs=True)``).

The conditionals are checked with Geweke's (2004) successive-conditional idea on the prior: start many
independent chains at exact draws of the prior, alternate ``w | scales`` (the prior's own Gaussian) with
one sweep of the scale conditionals, and the draws must stay distributed as the prior — each scale's
half-Cauchy / inverse-gamma marginal, by a Kolmogorov-Smirnov test over the independent chains.  A sweep
with one wrong shape parameter must fail the same test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from zoo.experiments.registry import build
from zoo.families.horseshoe import gibbs
from zoo.families.horseshoe.prior import group_layers, regularized_variance
from zoo.infer.mcmc import NUTSConfig, fit_nuts

from .helpers import gibbs_config

CHAINS = 4000
SWEEPS = 15


def _model(regularized: bool = False, **options):
    name = "reg-hs-bnn" if regularized else "hs-bnn"
    model, _, spec = build(name, 1, 1, "regression", hidden=[3], activation="tanh", **options)
    return model.double(), spec


def _prior_draw(prior, specs, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """CHAINS independent exact draws of the scales from the hierarchical prior (auxiliaries first)."""

    def ig(shape: float, rate: torch.Tensor) -> torch.Tensor:
        g = torch._standard_gamma(torch.full_like(rate, shape), generator=gen)
        return rate / g

    out = {}
    for layer in group_layers(specs):
        p, k = layer.prefix, layer.units
        one = torch.ones(CHAINS, dtype=torch.float64)
        if layer.output:
            out[f"{p}.rho"] = ig(0.5, one / float(prior.b_kappa) ** 2)
            out[f"{p}.kappa2"] = ig(0.5, 1 / out[f"{p}.rho"])
        else:
            out[f"{p}.lam"] = ig(0.5, torch.ones(CHAINS, k, dtype=torch.float64) / float(prior.b0) ** 2)
            out[f"{p}.tau2"] = ig(0.5, 1 / out[f"{p}.lam"])
            out[f"{p}.theta"] = ig(0.5, one / float(prior.bg) ** 2)
            out[f"{p}.v2"] = ig(0.5, 1 / out[f"{p}.theta"])
    if prior.regularized:
        out[gibbs.SLAB] = ig(float(prior.c_a), torch.full((CHAINS,), float(prior.c_b), dtype=torch.float64))
    return out


def _weights(specs, scales, gen) -> dict[str, torch.Tensor]:
    """``w | scales`` from the centered prior: rows N(0, tau2 v2 I) (hidden), N(0, kappa2 I) (output)."""
    out = {}
    for layer in group_layers(specs):
        p, k, f = layer.prefix, layer.units, layer.fan
        z = torch.randn(CHAINS, k, f, dtype=torch.float64, generator=gen)
        if layer.output:
            var = scales[f"{p}.kappa2"][:, None, None]
        else:
            c2 = scales[gibbs.SLAB][:, None] if gibbs.SLAB in scales else None
            var = regularized_variance(scales[f"{p}.tau2"], scales[f"{p}.v2"][:, None], c2)[..., None]
        out[f"{p}.w"] = z * var.sqrt()
    return out


def _successive(sweep, seed: int = 0, regularized: bool = False, **options) -> dict[str, torch.Tensor]:
    model, _ = _model(regularized, **options)
    prior, specs = model.prior, model.specs
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    scales = _prior_draw(prior, specs, gen)
    for _ in range(SWEEPS):
        w = _weights(specs, scales, gen)
        scales = sweep(prior, specs, {**w, **scales})
    return scales


def _half_cauchy_cdf(b: float):
    return lambda t: 2 / math.pi * np.arctan(np.asarray(t) / b)


def _pvalues(scales: dict[str, torch.Tensor], regularized: bool = False, **options) -> dict[str, float]:
    model, _ = _model(regularized, **options)
    prior = model.prior
    b0, bg, bk = float(prior.b0), float(prior.bg), float(prior.b_kappa)
    checks = {
        "fc0.tau2": (scales["fc0.tau2"][:, 0].sqrt(), _half_cauchy_cdf(b0)),
        "fc0.v2": (scales["fc0.v2"].sqrt(), _half_cauchy_cdf(bg)),
        "fc1.kappa2": (scales["fc1.kappa2"].sqrt(), _half_cauchy_cdf(bk)),
        "fc0.lam": (scales["fc0.lam"][:, 1], stats.invgamma(0.5, scale=1 / b0**2).cdf),
        "fc0.theta": (scales["fc0.theta"], stats.invgamma(0.5, scale=1 / bg**2).cdf),
        "fc1.rho": (scales["fc1.rho"], stats.invgamma(0.5, scale=1 / bk**2).cdf),
    }
    if regularized:
        checks[gibbs.SLAB] = (
            scales[gibbs.SLAB],
            stats.invgamma(float(prior.c_a), scale=float(prior.c_b)).cdf,
        )
    return {k: float(stats.kstest(v.numpy(), cdf).pvalue) for k, (v, cdf) in checks.items()}


def test_scale_sites_in_draw_order():
    model, _ = _model()
    assert gibbs.scale_sites(model.prior, model.specs) == [
        "fc0.tau2",
        "fc0.lam",
        "fc0.v2",
        "fc0.theta",
        "fc1.kappa2",
        "fc1.rho",
    ]


def test_conditionals_keep_the_prior_invariant():
    """15 sweeps from exact prior draws: every scale marginal still passes KS over 4000 chains (p > 1e-3;
    a correct sampler fails one of the six with probability < 0.006)."""
    p = _pvalues(_successive(gibbs.draw_scales))
    assert min(p.values()) > 1e-3, p


def test_a_wrong_conditional_is_detected():
    """The same check rejects a sweep whose unit-scale conditional counts each row's F entries twice."""

    def wrong(prior, specs, values):
        out = gibbs.draw_scales(prior, specs, values)
        for layer in group_layers(specs):
            if layer.output:
                continue
            p, f = layer.prefix, layer.fan
            ss = values[f"{p}.w"].square().sum(-1)
            rate = 1 / values[f"{p}.lam"] + ss / (2 * values[f"{p}.v2"][..., None])
            out[f"{p}.tau2"] = torch.distributions.InverseGamma(torch.full_like(rate, 0.5 + f), rate).sample()
        return out

    p = _pvalues(_successive(wrong))
    assert p["fc0.tau2"] < 1e-6, p


def test_draw_scales_checks_its_inputs():
    model, _ = _model()
    values = {**_prior_draw(model.prior, model.specs, torch.Generator().manual_seed(1))}
    values["fc0.w"] = torch.zeros(CHAINS, 2, 2, dtype=torch.float64)  # 3 units expected
    values["fc1.w"] = torch.zeros(CHAINS, 1, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="fc0.w"):
        gibbs.draw_scales(model.prior, model.specs, values)
    with pytest.raises(TypeError, match="HorseshoePrior"):
        gibbs.scale_sites(object(), model.specs)


# ------------------------------------------------------------------------------ regularized horseshoe
#: the layer scale b_g = 1 (not the paper's 1e-5) so that tau^2 v^2 is of the slab's size c^2 ~ IG(2, 6) in
#: the prior draws and the regularization changes every conditional
REG = {"regularized": True, "bg": 1.0}


def test_regularized_scale_sites_end_with_the_slab():
    model, _ = _model(**REG)
    assert gibbs.scale_sites(model.prior, model.specs)[-1] == gibbs.SLAB == "hs.c2"


def test_regularized_conditionals_keep_the_prior_invariant():
    """The slice-sampled tau2, v2 and c2 and the inverse-gamma auxiliaries keep every marginal of the
    regularized horseshoe (the slab's IG(c_a, c_b) included) over 4000 chains and 15 sweeps."""
    p = _pvalues(_successive(gibbs.draw_scales, **REG), **REG)
    assert len(p) == 7 and min(p.values()) > 1e-3, p


def _conjugate_slab(prior, specs, values):
    """The tempting, wrong slab update: ``c2 | w ~ IG(c_a + N/2, c_b + |w|^2/2)`` over the hidden rows, as if
    they were N(0, c2) draws (it ignores the horseshoe part of each row's precision)."""
    out = gibbs.draw_scales(prior, specs, values)
    hidden = [values[f"{layer.prefix}.w"] for layer in group_layers(specs) if not layer.output]
    n = sum(w[0].numel() for w in hidden)
    rate = prior.c_b + sum(w.square().sum((-2, -1)) for w in hidden) / 2
    out[gibbs.SLAB] = torch.distributions.InverseGamma(prior.c_a + n / 2, rate).sample()
    return out


def _plain_unit_scales(prior, specs, values):
    """The plain horseshoe's inverse-gamma unit-scale conditional used for the regularized prior."""
    out = gibbs.draw_scales(prior, specs, values)
    for layer in group_layers(specs):
        if not layer.output:
            p, f = layer.prefix, layer.fan
            ss = values[f"{p}.w"].square().sum(-1)
            rate = 1 / values[f"{p}.lam"] + ss / (2 * values[f"{p}.v2"][..., None])
            out[f"{p}.tau2"] = torch.distributions.InverseGamma(
                torch.full_like(rate, 0.5 + f / 2), rate
            ).sample()
    return out


@pytest.mark.parametrize(("sweep", "site"), [(_conjugate_slab, "hs.c2"), (_plain_unit_scales, "fc0.tau2")])
def test_regularized_wrong_conditionals_are_detected(sweep, site):
    p = _pvalues(_successive(sweep, **REG), **REG)
    assert p[site] < 1e-6, p


def test_regularized_fit_nuts_gibbs_end_to_end():
    model, spec = _model(regularized=True)
    model.float()
    x, y = _toy()
    cfg = gibbs_config()
    result = fit_nuts(model, (x, y), cfg, spec=spec)
    c2 = result.samples[gibbs.SLAB]
    assert c2.shape[:2] == (1, 8) and (c2 > 0).all() and c2.std() > 0
    assert result.samples["fc0.tau2"].std() > 0 and torch.isfinite(result.predict(x[:3]).mean).all()


def _toy(n: int = 30):
    g = torch.Generator().manual_seed(0)
    x = torch.linspace(-1, 1, n)[:, None]
    return x, (torch.tanh(2 * x[:, 0]) + 0.1 * torch.randn(n, generator=g))


def test_fit_nuts_gibbs_end_to_end():
    """Two short chains: every site (scales included) comes back with chain dims and finite values, the
    scales stay positive, the config records the scheme, and the predictive replays the draws."""
    model, spec = _model()
    model.float()
    x, y = _toy()
    cfg = gibbs_config(chains=2, warmup=15, samples=10)
    result = fit_nuts(model, (x, y), cfg, spec=spec)
    names = {"fc0.w", "fc1.w", "fc0.tau2", "fc0.lam", "fc0.v2", "fc0.theta", "fc1.kappa2", "fc1.rho"}
    assert names <= set(result.samples)
    for n in names:
        v = result.samples[n]
        assert v.shape[:2] == (2, 10) and torch.isfinite(v).all()
    for n in names - {"fc0.w", "fc1.w"}:
        assert (result.samples[n] > 0).all()
    # the scales move between draws (they are drawn, not stuck at their starting value 1)
    assert result.samples["fc0.tau2"].std() > 0
    assert result.config["gibbs"] is True and result.config["hierarchical_form"] is True
    pred = result.predict(x[:4])
    assert torch.isfinite(pred.mean).all() and pred.mean.shape[0] == 4
    # the NUTS block's per-draw statistics, but no energy: the sweep changes the block's target between
    # transitions, so BFMI on it would compare the wrong distributions (zoo.infer.mcmc_gibbs)
    stats = result.guide.stats
    assert {"acceptance_rate", "step_size", "tree_depth", "n_steps", "energy_error"} <= set(stats)
    assert "energy" not in stats and all(v.shape == (2, 10) for v in stats.values())
    for k, chain in enumerate(result.chain_stats):
        assert stats["acceptance_rate"][k].mean().item() == pytest.approx(chain["mean_accept_prob"], abs=1e-6)
        assert torch.all(stats["step_size"][k] == chain["step_size"])


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"jit_compile": True}, "jit_compile=False"),
        ({"jit_compile": False, "gibbs": "yes"}, "gibbs"),
    ],
)
def test_gibbs_config_is_checked(settings, match):
    with pytest.raises((ValueError, TypeError), match=match):
        NUTSConfig(**{"gibbs": True, **settings})


@pytest.mark.parametrize("name", ["mfvi-bnn"])
def test_gibbs_refused_before_sampling_for_priors_without_conditionals(name):
    model, _, spec = build(name, 1, 1, "regression", hidden=[2])
    x, y = _toy()
    cfg = NUTSConfig(chains=1, warmup=5, samples=5, jit_compile=False, gibbs=True, progress=False)
    with pytest.raises(ValueError, match="gibbs"):
        fit_nuts(model, (x, y), cfg, spec=spec)


# ------------------------------------------------------------------------------------------------ N-GIG


def _ngig_model():
    model, _, spec = build("ngig-bnn", 2, 1, "regression", hidden=[3], activation="tanh")
    return model.double(), spec


def _ngig_successive(sweep, seed: int = 0) -> tuple[dict[str, torch.Tensor], object]:
    """CHAINS exact prior draws of (tau, psi), then SWEEPS of ``W | tau, psi`` (prior) and one scale sweep."""
    from zoo.families.bowtie.gibbs import _weights

    model, _ = _ngig_model()
    prior, specs = model.prior, model.specs
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)

    def ig(a: torch.Tensor, b: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        g = torch._standard_gamma(torch.full(shape, float(a), dtype=torch.float64), generator=gen)
        return float(b) / g

    scales = {}
    num_hidden = max(s.layer for s in specs)
    for s in _weights(prior, specs):
        p = s.name.rsplit(".", 1)[0]
        nu_g, d_g, _ = prior.glob_params(num_hidden)
        nu, d, _ = prior.loc_params(s.fan_in)
        scales[f"{p}.tau"] = ig(-nu_g, d_g**2 / 2, (CHAINS,))
        scales[f"{p}.psi"] = ig(-nu, d**2 / 2, (CHAINS, *s.shape))
    for _ in range(SWEEPS):
        w = {}
        for s in _weights(prior, specs):
            p = s.name.rsplit(".", 1)[0]
            var = scales[f"{p}.tau"][:, None, None] * scales[f"{p}.psi"]
            w[s.name] = torch.randn(CHAINS, *s.shape, dtype=torch.float64, generator=gen) * var.sqrt()
        scales = sweep(prior, specs, {**w, **scales})
    return scales, prior


def _ngig_pvalues(scales, prior) -> dict[str, float]:
    out = {}
    for name, fan_in in (("fc0", 2), ("fc1", 3)):
        nu_g, d_g, _ = prior.glob_params(1)
        nu, d, _ = prior.loc_params(fan_in)
        tau_law = stats.invgamma(float(-nu_g), scale=float(d_g) ** 2 / 2)
        psi_law = stats.invgamma(float(-nu), scale=float(d) ** 2 / 2)
        out[f"{name}.tau"] = float(stats.kstest(scales[f"{name}.tau"].numpy(), tau_law.cdf).pvalue)
        psi = scales[f"{name}.psi"].reshape(CHAINS, -1)[:, 0].numpy()
        out[f"{name}.psi"] = float(stats.kstest(psi, psi_law.cdf).pvalue)
    return out


def test_ngig_conditionals_keep_the_prior_invariant():
    """As for the horseshoe: 15 sweeps from exact prior draws keep every N-GIG scale's inverse-gamma
    marginal (App. D.1 scaling included) over 4000 independent chains (KS p > 1e-3 for all four)."""
    from zoo.families.bowtie import gibbs as ngig

    model, _ = _ngig_model()
    assert ngig.scale_sites(model.prior, model.specs) == ["fc0.psi", "fc0.tau", "fc1.psi", "fc1.tau"]
    p = _ngig_pvalues(*_ngig_successive(ngig.draw_scales))
    assert min(p.values()) > 1e-3, p


def test_ngig_wrong_conditional_is_detected():
    """A global-scale conditional that forgets the D.1 scaling of delta_glob (here: the unscaled delta of a
    one-input layer applied to the three-input layer's local scales) fails the same check."""
    from zoo.families.bowtie import gibbs as ngig
    from zoo.families.bowtie.prior import gig_distribution

    def wrong(prior, specs, values):
        out = ngig.draw_scales(prior, specs, values)
        w2 = values["fc1.weight"].square()
        nu, delta, lam = prior.loc_params(1)  # should be loc_params(3)
        tau = values["fc1.tau"][..., None, None]
        out["fc1.psi"] = gig_distribution(nu - 0.5, (delta**2 + w2 / tau).sqrt(), lam.expand_as(w2)).sample()
        return out

    p = _ngig_pvalues(*_ngig_successive(wrong))
    assert p["fc1.psi"] < 1e-6, p


def test_ngig_fit_nuts_gibbs_end_to_end():
    model, spec = _ngig_model()
    model.float()
    x, y = _toy()
    x = torch.cat([x, x.square()], 1)
    cfg = gibbs_config()
    result = fit_nuts(model, (x, y), cfg, spec=spec)
    for n in ("fc0.psi", "fc0.tau", "fc1.psi", "fc1.tau", "fc0.weight", "fc1.bias"):
        assert result.samples[n].shape[:2] == (1, 8) and torch.isfinite(result.samples[n]).all()
    assert (result.samples["fc0.psi"] > 0).all() and result.samples["fc1.tau"].std() > 0
    assert torch.isfinite(result.predict(x[:3]).mean).all()
