"""Exact hyper-latent conditionals of the collapsed CM / CV / CMV priors (zoo.families.collapsed.gibbs),
checked as the horseshoe's are (tests/test_nuts_gibbs.py): from exact prior draws, alternating
``w | hyper`` (the prior's Gaussian) with one conditional sweep must keep the prior's marginals (KS over
independent chains), a wrong conditional must fail the same check, and ``fit_nuts(gibbs=True)`` runs end
to end."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from zoo.experiments.registry import build
from zoo.families.collapsed import gibbs
from zoo.families.collapsed.prior import hyper_site
from zoo.infer.mcmc import fit_nuts

from .helpers import gibbs_config

CHAINS = 4000
SWEEPS = 15


def _model(kind: str):
    model, _, spec = build(f"{kind}-bnn", 1, 1, "regression", hidden=[3], activation="tanh")
    return model.double(), spec


def _hyper(prior, s):
    """``(alpha_var, t)`` of spec ``s``: CM's prior variance of ``mu_p``; CMV's ``t = delta/(1 - delta)``."""
    a_reg, gamma = float(prior.alpha_reg_for(s)), float(prior.gamma_for(s))
    delta = float(prior.delta_for(s))
    return gamma * (1 - a_reg) / a_reg, (delta / (1 - delta) if delta < 1 else float("inf"))


def _prior_draw(prior, specs, gen):
    out = {}
    for s in specs:
        shape = (CHAINS, *s.shape)
        alpha_var, t = _hyper(prior, s)
        if prior.kind == "cm":
            out[hyper_site(s, "mu_p")] = alpha_var**0.5 * torch.randn(
                shape, generator=gen, dtype=torch.float64
            )
            continue
        g = torch._standard_gamma(torch.full(shape, float(prior.alpha), dtype=torch.float64), generator=gen)
        out[hyper_site(s, "tau_p")] = g / float(prior.beta)
        if prior.kind == "cmv":
            z = torch.randn(shape, generator=gen, dtype=torch.float64)
            out[hyper_site(s, "mu_p")] = z * (t * out[hyper_site(s, "tau_p")]).rsqrt()
    return out


def _weights(prior, specs, hyper, gen):
    out = {}
    for s in specs:
        z = torch.randn(CHAINS, *s.shape, generator=gen, dtype=torch.float64)
        if prior.kind == "cm":
            out[s.name] = hyper[hyper_site(s, "mu_p")] + float(prior.gamma_for(s)) ** 0.5 * z
        else:
            mu = hyper.get(hyper_site(s, "mu_p"), 0.0)
            out[s.name] = mu + z * hyper[hyper_site(s, "tau_p")].rsqrt()
    return out


def _pvalues(kind: str, sweep, seed: int = 0) -> dict[str, float]:
    model, _ = _model(kind)
    prior, specs = model.prior, model.specs
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed + 1)  # the sweep's draws: a stream other than gen's (same seed, same normals)
    hyper = _prior_draw(prior, specs, gen)
    for _ in range(SWEEPS):
        hyper = sweep(prior, specs, {**_weights(prior, specs, hyper, gen), **hyper})
    out = {}
    for s in specs:  # every entry of every chain is an independent draw
        alpha_var, t = _hyper(prior, s)
        if kind == "cm":
            mu = hyper[hyper_site(s, "mu_p")].flatten() / alpha_var**0.5
            out[hyper_site(s, "mu_p")] = stats.kstest(mu.numpy(), stats.norm.cdf).pvalue
            continue
        tau = hyper[hyper_site(s, "tau_p")]
        law = stats.gamma(float(prior.alpha), scale=1 / float(prior.beta))
        out[hyper_site(s, "tau_p")] = stats.kstest(tau.flatten().numpy(), law.cdf).pvalue
        if kind == "cmv":  # mu_p sqrt(t tau_p) ~ N(0, 1), independently of tau_p
            z = (hyper[hyper_site(s, "mu_p")] * (t * tau).sqrt()).flatten()
            out[hyper_site(s, "mu_p")] = stats.kstest(z.numpy(), stats.norm.cdf).pvalue
    return {k: float(v) for k, v in out.items()}


@pytest.mark.parametrize("kind", ["cm", "cv", "cmv"])
def test_conditionals_keep_the_prior_invariant(kind):
    p = _pvalues(kind, gibbs.draw_scales)
    assert len(p) == {"cm": 4, "cv": 4, "cmv": 8}[kind] and min(p.values()) > 1e-3, p


def _cmv_forgets_the_mean_prior(prior, specs, values):
    """``tau_p | w, mu_p`` from the likelihood term alone, ``Gamma(alpha + 1/2, beta + (w - mu_p)^2/2)``:
    it forgets that ``mu_p``'s prior ``N(0, 1/(t tau_p))`` depends on ``tau_p`` too (the right one is
    ``Gamma(alpha + 1, beta + ((w - mu_p)^2 + t mu_p^2)/2)``)."""
    out = gibbs.draw_scales(prior, specs, values)
    for s in specs:
        r = values[s.name] - values[hyper_site(s, "mu_p")]
        out[hyper_site(s, "tau_p")] = torch.distributions.Gamma(
            prior.alpha + 0.5, prior.beta + r**2 / 2
        ).sample()
    return out


def _cm_without_shrinkage(prior, specs, values):
    """``mu_p | w ~ N(w, gamma)``: the likelihood alone, without ``mu_p``'s ``N(0, alpha)`` prior."""
    out = gibbs.draw_scales(prior, specs, values)
    for s in specs:
        w = values[s.name]
        out[hyper_site(s, "mu_p")] = w + float(prior.gamma_for(s)) ** 0.5 * torch.randn_like(w)
    return out


@pytest.mark.parametrize(
    ("kind", "sweep"), [("cmv", _cmv_forgets_the_mean_prior), ("cm", _cm_without_shrinkage)]
)
def test_a_wrong_conditional_is_detected(kind, sweep):
    p = _pvalues(kind, sweep)
    assert min(p.values()) < 1e-6, p


def test_sites_and_inputs_are_checked():
    model, _ = _model("cmv")
    names = gibbs.scale_sites(model.prior, model.specs)
    assert names[:2] == ["fc0.weight_tau_p", "fc0.weight_mu_p"] and len(names) == 8
    with pytest.raises(ValueError, match="fc0.weight"):
        gibbs.draw_scales(model.prior, model.specs, {"fc0.weight": torch.zeros(2, 2)})
    with pytest.raises(TypeError, match="CollapsedPrior"):
        gibbs.scale_sites(object(), model.specs)
    cm, _ = _model("cm")
    cm.prior.alpha_reg.fill_(1.0)
    with pytest.raises(ValueError, match="alpha_reg"):
        gibbs.scale_sites(cm.prior, cm.specs)


@pytest.mark.parametrize("kind", ["cm", "cmv"])
def test_fit_nuts_gibbs_end_to_end(kind):
    model, spec = _model(kind)
    model.float()
    g = torch.Generator().manual_seed(0)
    x = torch.linspace(-1, 1, 30)[:, None]
    y = torch.tanh(2 * x[:, 0]) + 0.1 * torch.randn(30, generator=g)
    cfg = gibbs_config()
    result = fit_nuts(model, (x, y), cfg, spec=spec)
    mu = result.samples["fc0.weight_mu_p"]
    assert mu.shape[:2] == (1, 8) and torch.isfinite(mu).all() and mu.std() > 0
    assert result.config["gibbs"] is True and torch.isfinite(result.predict(x[:3]).mean).all()
