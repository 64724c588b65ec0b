"""The conformance kit's ``conditionals`` contract (zoo.testing.check_conditionals, run by check_prior for a
prior with exact scale conditionals): it accepts every zoo prior that has them and rejects priors whose
conditionals are wrong, return the wrong shapes or name sites the prior does not have."""

from __future__ import annotations

import pytest
import torch

from zoo.core.gaussian import GaussianPrior
from zoo.families.bowtie.prior import NGIGPrior
from zoo.families.collapsed.prior import CollapsedPrior, hyper_site
from zoo.families.horseshoe.prior import HorseshoePrior, group_layers
from zoo.testing import KitConfig, check_conditionals, check_prior

IG = torch.distributions.InverseGamma


@pytest.mark.parametrize(
    "prior",
    [
        HorseshoePrior(),
        HorseshoePrior(regularized=True, bg=1.0),
        NGIGPrior(),
        CollapsedPrior("cm"),
        CollapsedPrior("cv"),
        CollapsedPrior("cmv"),
    ],
    ids=lambda p: f"{type(p).__name__}-{getattr(p, 'kind', getattr(p, 'regularized', ''))}",
)
def test_accepts_the_zoo_conditionals(prior):
    p = check_conditionals(prior, hidden=(3, 2))
    assert len(p) >= 8 and min(p.values()) > 0


class UnitShapeTwiceF(HorseshoePrior):
    """The unit scale's inverse-gamma shape 1/2 + F, not 1/2 + F/2 (each row's entries counted twice)."""

    def draw_conditionals(self, specs, values):
        out = super().draw_conditionals(specs, values)
        layer = group_layers(specs)[0]
        ss = values[f"{layer.prefix}.w"].square().sum(-1)
        rate = 1 / values[f"{layer.prefix}.lam"] + ss / (2 * values[f"{layer.prefix}.v2"][..., None])
        out[f"{layer.prefix}.tau2"] = IG(torch.full_like(rate, 0.5 + layer.fan), rate).sample()
        return out


class ConjugateSlab(HorseshoePrior):
    """The regularized slab drawn as if the hidden rows were N(0, c^2): IG(c_a + N/2, c_b + |w|^2/2)."""

    def draw_conditionals(self, specs, values):
        out = super().draw_conditionals(specs, values)
        rows = [values[f"{la.prefix}.w"] for la in group_layers(specs) if not la.output]
        n = sum(w.shape[-2] * w.shape[-1] for w in rows)
        rate = self.c_b + sum(w.square().sum((-2, -1)) for w in rows) / 2
        out["hs.c2"] = IG(self.c_a + n / 2, rate).sample()
        return out


class CMVForgetsTheMeanPrior(CollapsedPrior):
    """CMV's tau_p from the likelihood term alone, forgetting that mu_p's prior depends on tau_p."""

    def draw_conditionals(self, specs, values):
        out = super().draw_conditionals(specs, values)
        for s in specs:
            r = values[s.name] - values[hyper_site(s, "mu_p")]
            tau = torch.distributions.Gamma(self.alpha + 0.5, self.beta + r.square() / 2).sample()
            out[hyper_site(s, "tau_p")] = tau
        return out


@pytest.mark.parametrize(
    ("prior", "site"),
    [
        (UnitShapeTwiceF(), "fc0.tau2"),
        (ConjugateSlab(regularized=True, bg=1.0), "hs.c2"),
        (CMVForgetsTheMeanPrior("cmv"), "_mu_p"),  # the wrong tau_p shows in mu_p | tau_p
    ],
    ids=["unit-shape", "conjugate-slab", "cmv-mean-prior"],
)
def test_rejects_wrong_conditionals(prior, site):
    with pytest.raises(AssertionError, match=rf"^\[conditionals\].*{site}"):
        check_conditionals(prior)


def test_check_prior_runs_the_contract():
    with pytest.raises(AssertionError, match=r"^\[conditionals\].*fc0.tau2"):
        check_prior(UnitShapeTwiceF())


class WrongShape(HorseshoePrior):
    def draw_conditionals(self, specs, values):
        out = super().draw_conditionals(specs, values)
        out["fc0.v2"] = out["fc0.v2"].squeeze(-1)  # drops the chains' trailing batch dim
        return out


class UnknownSite(HorseshoePrior):
    def conditional_sites(self, specs):
        return [*super().conditional_sites(specs), "fc0.nu"]


@pytest.mark.parametrize(
    ("prior", "match"), [(WrongShape(), "fc0.v2.*expected shape"), (UnknownSite(), "fc0.nu")]
)
def test_rejects_broken_declarations(prior, match):
    with pytest.raises(AssertionError, match=rf"^\[conditionals\].*{match}"):
        check_conditionals(prior)


def test_bad_arguments_are_refused_before_any_check():
    with pytest.raises(TypeError, match="declares no exact conditionals"):
        check_conditionals(GaussianPrior())
    with pytest.raises(TypeError, match="zoo Prior"):
        check_conditionals(object())
    with pytest.raises(ValueError, match="gibbs_level"):
        check_conditionals(HorseshoePrior(), gibbs_level=1.5)
    with pytest.raises(ValueError, match="gibbs_chains"):
        KitConfig(gibbs_chains=0)


def test_the_original_prior_is_left_alone():
    prior = HorseshoePrior()
    assert prior.hierarchical and not prior.centered
    check_conditionals(prior)
    assert prior.hierarchical and not prior.centered  # the Gibbs form was set on a copy
