"""``zoo.testing``: the ``[support]`` contract, the first-step hint of ``[elbo-finite]``, a guide instance
passed as a factory, and keyword settings of ``check_prior``.

Ground truth: the supports of torch/Pyro distributions (a Normal is ``real``, a Gamma ``nonnegative``, a
LogNormal ``positive``, a Beta ``unit_interval``, a Bernoulli ``boolean``), draws set by hand, a correct guide
(a LogNormal on the Gamma noise precision) that must pass every contract, and the KitConfig the kit runs with.
"""

from __future__ import annotations

import re

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.distributions.transforms import biject_to
from pyro.nn import PyroParam
from torch.distributions import constraints

from guides.autoguides import make_autoguide
from zoo.core.architectures import MLP
from zoo.core.gaussian import GaussianPrior
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.experiments.registry import available, build, get_entry
from zoo.families.horseshoe.prior import HorseshoePrior
from zoo.infer.guide_match import trace_copies
from zoo.testing import CONTRACTS, KitConfig, check_guide, check_prior
from zoo.testing import prior as kit_prior
from zoo.testing.support import check_support, support_problem

from .helpers import ToyGuide, ToyPrior, assert_breaks, toy_model, toy_param_key


def gamma_model() -> BayesianModel:
    """``toy_model`` with a Gamma(6, 6) noise precision: a latent site ``precision`` on ``[0, inf)``."""
    return BayesianModel(MLP(2, (3,), 1), GaussianPrior(), GaussianLikelihood("gamma", 6.0, 6.0))


class PrecisionGuide(ToyGuide):
    """A correct guide of :func:`gamma_model`: ToyGuide's weights and a LogNormal ``q(precision)``."""

    def __init__(self, model: BayesianModel) -> None:
        super().__init__(model)
        self.prec_loc = PyroParam(torch.zeros(()))

    def precision(self) -> dist.Distribution:
        return dist.LogNormal(self.prec_loc, 0.1)

    def forward(self, x, y=None, subsample=None):
        super().forward(x, y, subsample)
        pyro.sample("precision", self.precision())


class NormalPrecision(PrecisionGuide):
    """A Normal for the Gamma site: negative precisions (the audit's ``wrong_support="precision"``)."""

    def precision(self) -> dist.Distribution:
        return dist.Normal(self.prec_loc, 0.1)


class NegativePointPrecision(PrecisionGuide):
    """A point mass (as AutoDelta emits: support ``real``) at a negative precision."""

    def precision(self) -> dist.Distribution:
        return dist.Delta(self.prec_loc - 0.5)


# ------------------------------------------------------------------------------------------------ [support]


def test_a_guide_with_the_wrong_support_fails_support():
    assert "support" in CONTRACTS
    assert check_guide(PrecisionGuide, gamma_model()) is None  # the correct guide passes every contract
    wrong = r"^\[support\] 'precision': guide real vs model nonnegative"
    assert_breaks("support", wrong, check_guide, NormalPrecision, gamma_model())
    outside = r"'precision': the guide's draw -0\.5 lies outside the model's support nonnegative"
    assert_breaks("support", outside, check_guide, NegativePointPrecision, gamma_model())
    assert len(pyro.get_param_store()) == 0


def _site(d: dist.Distribution, value: torch.Tensor | None = None) -> dict:
    return {"fn": d, "value": d.sample() if value is None else value}


ONE, TWO = torch.ones(()), torch.full((), 2.0)
SUPPORT_CASES = [
    # (guide distribution, model distribution, None if compatible else a pattern of the problem)
    (dist.Normal(0.0, 1.0), dist.Gamma(2.0, 2.0), r"guide real vs model nonnegative"),
    (dist.Normal(torch.zeros(3), 1.0).to_event(1), dist.LogNormal(torch.zeros(3), 1.0).to_event(1),
     r"guide real vs model positive"),
    (dist.LogNormal(0.0, 1.0), dist.Gamma(2.0, 2.0), None),  # positive inside nonnegative
    (dist.Exponential(1.0), dist.HalfCauchy(1.0), None),  # nonnegative ~ positive (ends alike)
    (dist.Beta(2.0, 2.0), dist.HalfCauchy(1.0), None),  # (0, 1) inside (0, inf)
    (dist.LogNormal(0.0, 1.0), dist.Beta(2.0, 2.0), r"guide positive vs model unit_interval"),
    (dist.Uniform(0.0, 2.0), dist.Beta(2.0, 2.0), r"guide Interval\(.*upper_bound=2.0\) vs model unit_"),
    (dist.Bernoulli(0.5), dist.Normal(0.0, 1.0), None),  # anything lies in real
    (dist.Normal(0.0, 1.0), dist.Bernoulli(0.5), r"guide real vs model Boolean"),
    (dist.Poisson(1.0), dist.Bernoulli(0.5), r"guide IntegerGreaterThan.* vs model Boolean"),
    # biject_to's declared codomain is real: the draw is checked
    (dist.TransformedDistribution(dist.Normal(0.0, 1.0), biject_to(constraints.positive)),
     dist.Gamma(2.0, 2.0), None),
]  # fmt: skip


@pytest.mark.parametrize("guide_fn,model_fn,expected", SUPPORT_CASES)
def test_support_comparison(guide_fn, model_fn, expected):
    problem = support_problem("z", _site(guide_fn), _site(model_fn))
    if expected is None:
        assert problem is None, problem
    else:
        assert problem is not None and problem.startswith("'z': ")
        assert re.search(expected, problem), problem


def test_point_masses_are_judged_by_their_draw():
    gamma = _site(dist.Gamma(2.0, 2.0))
    assert support_problem("s", _site(dist.Delta(TWO), TWO), gamma) is None
    assert support_problem("s", _site(dist.Delta(torch.zeros(())), torch.zeros(())), gamma) is None  # an edge
    bad = support_problem("s", _site(dist.Delta(-ONE), -ONE), gamma)
    assert bad == "'s': the guide's draw -1 lies outside the model's support nonnegative"


def test_every_builtin_guide_samples_inside_its_models_supports():
    """The unfitted guide of every built-in entry passes ``[support]`` (the full kit, after a fit, runs on the
    registry in ``tests/test_composition.py``)."""
    for name in available():
        entry = get_entry(name)
        for guide in entry.guides:
            hidden = [3] if tuple(entry.default_hidden) else []
            model, g, _ = build(name, 3, 1, entry.tasks[0], hidden=hidden, guide=guide)
            x = torch.randn(24, 3)
            y = torch.randn(24) if entry.tasks[0] == "regression" else (x[:, 0] > 0).long()
            g_tr, m_tr = trace_copies(model, g, x, y)
            assert m_tr is not None, (name, guide)
            check_support(g_tr, m_tr)


# ------------------------------------------------------------------------- [elbo-finite] at the first step


class HugeInit(ToyGuide):
    """Starts its first-layer weights at 1e20: the first ELBO overflows, whatever the learning rate."""

    def __init__(self, model: BayesianModel) -> None:
        super().__init__(model)
        key = toy_param_key("fc0.weight", "loc")
        setattr(self, key, PyroParam(torch.full_like(getattr(self, key), 1e20)))


def test_elbo_finite_at_step_1_names_the_initial_values_not_the_learning_rate():
    msg = assert_breaks("elbo-finite", r"diverged at step 1", check_guide, HugeInit, toy_model())
    assert "lower the learning rate" not in msg and "learning rate is not the cause" in msg
    assert f"{toy_param_key('fc0.weight', 'loc')!r} = 1e+20" in msg and "init_loc_fn" in msg


# --------------------------------------------------------------------------------- a guide, not a factory


@pytest.mark.parametrize(
    "make", [ToyGuide, lambda m: make_autoguide("normal", m)], ids=["module", "autoguide"]
)
def test_a_guide_instance_is_refused_as_a_factory(make):
    model = toy_model()
    guide = make(model)
    name = type(guide).__name__
    with pytest.raises(
        TypeError, match=rf"^guide_factory must build a guide from a model .*instance \({name}\)"
    ):
        check_guide(guide, model)


# ------------------------------------------------------------------------------------ check_prior keywords


def test_check_prior_takes_keyword_settings(monkeypatch):
    seen = []

    def spy(prior, specs, cfg):
        seen.append(cfg)

    monkeypatch.setattr(kit_prior, "conditional_contracts", spy)
    assert check_prior(HorseshoePrior(), gibbs_chains=500, gibbs_sweeps=3) is None
    assert [(c.gibbs_chains, c.gibbs_sweeps) for c in seen] == [(500, 3)]
    assert check_prior(HorseshoePrior(), config=KitConfig(gibbs_chains=7), gibbs_sweeps=2) is None
    assert (seen[-1].gibbs_chains, seen[-1].gibbs_sweeps) == (7, 2)  # keywords update the config
    with pytest.raises(ValueError, match="gibbs_chains"):
        check_prior(ToyPrior(), gibbs_chains=0)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['gibbs_chainz'\]"):
        check_prior(ToyPrior(), gibbs_chainz=500)
