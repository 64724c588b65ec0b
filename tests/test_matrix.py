"""The composition matrix (issue 21, item 3): every check-marked pair fits, every refused pair raises a
``ValueError`` naming guide and prior, the formatted matrix lists every family; the widened guides
(weight-space factorized / tied / z-flow, the IAF autoguide, ``ngig-bnn``) against closed forms."""

from __future__ import annotations

import functools
import math

import pyro
import pytest
import torch
from pyro.distributions import constraints
from pyro.infer import Trace_ELBO
from pyro.nn import PyroParam

from guides.autoguides import IncompatiblePriorError, discrete_latent_sites, make_autoguide
from guides.flows.weightspace import WeightSpaceGuide
from zoo.core.architectures import MLP
from zoo.core.gaussian import GaussianPrior
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.experiments.matrix import GUIDE_FAMILIES, PRIOR_FAMILIES, composition_matrix, format_matrix
from zoo.experiments.registry import build
from zoo.infer.checkpoint import load, save
from zoo.infer.loop import fit
from zoo.infer.predict import posterior_samples

ROWS = composition_matrix()
CELLS = [c for r in ROWS for c in r.cells]
OK = [c for c in CELLS if c.ok]
REFUSED = [c for c in CELLS if not c.ok]
MEMBERS = [(g, m) for g in GUIDE_FAMILIES for m in g.members]


def _id(c) -> str:
    return f"{c.prior.key}-{c.guide.key}"


@functools.cache
def _rep_model(key: str):
    return next(p for p in PRIOR_FAMILIES if p.key == key).model()


def _data(n: int = 24, d: int = 2):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, d, generator=g)
    return x, torch.sin(2 * x[:, 0]) + 0.5 * x[:, 1]


@pytest.mark.parametrize("cell", OK, ids=_id)
def test_checked_pair_fits_and_predicts(cell, device):
    model, guide, spec = cell.pairing.build()
    assert isinstance(guide, tuple(m.cls for m in cell.guide.members)), type(guide).__name__
    assert type(model.prior).__name__ in cell.prior.prior
    x, y = (t.to(device) for t in _data())
    res = fit(model, guide, x, y, steps=20, lr=1e-2, progress=False, seed=0, spec=spec, device=device,
              loss=cell.pairing.loss(model, guide))  # fmt: skip
    assert len(res.elbo) == 20 and all(math.isfinite(v) for v in res.elbo)
    pred = res.predict(x[:7], num_samples=4, seed=0)
    assert pred.mean.shape == (7,) and pred.var.shape == (7,)
    assert torch.isfinite(pred.mean).all() and (pred.var > 0).all()


@pytest.mark.parametrize("cell", REFUSED, ids=_id)
def test_refused_pair_raises_naming_guide_and_prior(cell):
    model = _rep_model(cell.prior.key)
    for member in cell.guide.members:
        with pytest.raises(ValueError, match="cannot serve prior") as err:
            member.make(model)
        msg = str(err.value)
        assert member.cls.__name__ in msg and type(model.prior).__name__ in msg, msg
        assert isinstance(err.value, IncompatiblePriorError)


@pytest.mark.parametrize("family,member", MEMBERS, ids=[m.name for _, m in MEMBERS])
def test_every_zoo_guide_refuses_the_priors_it_declares(family, member):
    """Each guide class raises on every prior family it declares it cannot serve, before building anything;
    the declarations agree with the matrix: a pair is refused iff every class of the family refuses it."""
    assert member.refuses, f"{member.name} declares no prior it cannot serve"
    for key in member.refuses:
        model = _rep_model(key)
        with pytest.raises(
            ValueError, match=f"{member.cls.__name__}.*cannot serve prior {type(model.prior).__name__}"
        ):
            member.make(model)
    for row in ROWS:
        cell = next(c for c in row.cells if c.guide.key == family.key)
        refused_by_all = all(row.prior.key in m.refuses for m in family.members)
        assert refused_by_all == (not cell.ok), _id(cell)


def test_formatted_matrix_lists_every_family_and_fits_110_columns():
    text = format_matrix(ROWS)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 110
    head = lines[0].split()
    assert head[-len(GUIDE_FAMILIES):] == [g.abbrev for g in GUIDE_FAMILIES]  # fmt: skip
    for i, row in enumerate(ROWS, start=1):
        assert lines[i].startswith(row.prior.label)
        marks = lines[i][len(row.prior.label):].split()  # fmt: skip
        assert len(marks) == len(GUIDE_FAMILIES)
        assert [m == "✓" for m in marks] == [c.ok for c in row.cells]
        for m, c in zip(marks, row.cells, strict=True):
            if not c.ok:
                assert f"  {m}: {c.reason[:40]}" in text.replace("\n     ", " ")
    for g in GUIDE_FAMILIES:
        assert g.label in text
    for p in PRIOR_FAMILIES:
        assert p.label in text and p.entry in text
    # the pairs the issue names
    cell = {(c.prior.key, c.guide.key): c for c in CELLS}
    assert not cell["hs", "bowtie"].ok and "Pólya-Gamma" in cell["hs", "bowtie"].reason
    assert not cell["ss", "normal"].ok and "discrete" in cell["ss", "normal"].reason
    for prior in ("gaussian", "ngig", "hs", "reghs", "cm", "cv", "cmv"):
        for guide in ("normal", "lowrank", "iaf", "zflow", "factorized", "tied"):
            assert cell[prior, guide].ok, (prior, guide)
    assert sum(c.ok for c in CELLS) == 59


def test_discrete_sites_found_without_touching_global_state():
    pyro.get_param_store().clear()
    rng = torch.get_rng_state()
    assert discrete_latent_sites(_rep_model("ss")) == ["fc0.weight.gamma", "fc1.weight.gamma"]
    assert discrete_latent_sites(build("bowtie", 2, 1, "regression", hidden=[3])[0]) == ["fc0.gamma"]
    for key in ("gaussian", "ngig", "hs", "cmv"):
        assert discrete_latent_sites(_rep_model(key)) == []
    assert torch.equal(torch.get_rng_state(), rng) and not list(pyro.get_param_store().keys())
    with pytest.raises(ValueError, match=r"'normal' \(AutoNormal\).*SpikeSlabPrior.*fc0\.weight\.gamma"):
        make_autoguide("normal", _rep_model("ss"))


def _linear_gaussian(d: int = 3, s0: float = 1.5, sigma: float = 0.5):
    model = BayesianModel(
        MLP(d, (), 1, bias=False), GaussianPrior(s0), GaussianLikelihood("fixed", scale=sigma)
    )
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, d, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64) + sigma * torch.randn(
        30, generator=g, dtype=torch.float64
    )
    return model.double(), x, y


def _mc_elbo(model, guide, x, y, batches: int = 20, particles: int = 250) -> tuple[float, float]:
    loss = Trace_ELBO(num_particles=particles, vectorize_particles=True, max_plate_nesting=1)
    v = torch.tensor([-loss.loss(model, guide, x, y) for _ in range(batches)], dtype=torch.float64)
    return float(v.mean()), float(v.std() / math.sqrt(batches))


@pytest.mark.parametrize("family", ["factorized", "tied"])
def test_weight_space_elbo_equals_the_closed_form(family):
    """E_q log N(y | Xw, σ²) - KL(q || p) in closed form vs Trace_ELBO with the guide's factor."""
    model, x, y = _linear_gaussian()
    s0, sigma = 1.5, 0.5
    guide = WeightSpaceGuide(model, family)
    assert guide.rest is None  # no latent besides the weights
    m = torch.tensor([[0.8, -0.3, 0.1]], dtype=torch.float64)
    s = (
        torch.tensor([[0.2, 0.1, 0.3]], dtype=torch.float64)
        if family == "factorized"
        else torch.tensor(0.15, dtype=torch.float64)
    )
    guide.fc0_weight_loc = PyroParam(m)
    guide.fc0_weight_sd = PyroParam(s, constraints.positive)
    s2 = s.expand(1, 3) ** 2
    resid = y - (x @ m.T).squeeze(-1)
    loglik = -0.5 * len(y) * math.log(2 * math.pi * sigma**2) - ((resid**2).sum() + (x**2 @ s2.T).sum()) / (
        2 * sigma**2
    )
    kl = (torch.log(s0 / s2.sqrt()) + (s2 + m**2) / (2 * s0**2) - 0.5).sum()
    exact = float(loglik - kl)
    est, se = _mc_elbo(model, guide, x, y)
    assert abs(est - exact) < 4 * se + 1e-6, (est, exact, se)


def test_weight_space_flow_bound_is_below_the_log_evidence():
    model, x, y = _linear_gaussian()
    cov = 0.25 * torch.eye(len(y), dtype=torch.float64) + 1.5**2 * x @ x.T
    log_evidence = float(torch.distributions.MultivariateNormal(torch.zeros_like(y), cov).log_prob(y))
    guide = WeightSpaceGuide(model, "flow", flow_hidden=(8,))
    res = fit(model, guide, x, y, steps=150, lr=2e-2, progress=False, seed=0)
    with res.activate():
        est, se = _mc_elbo(model, guide, x, y, batches=10, particles=100)
    assert est - 4 * se < log_evidence, (est, log_evidence)
    assert est > log_evidence - 15.0, (est, log_evidence)  # trained: not a vacuous bound


def test_iaf_autoguide_starts_at_the_zoo_init_and_recovers_the_posterior_mean():
    model, x, y = _linear_gaussian()
    guide = make_autoguide("iaf", model)
    guide(x, y)
    assert guide.loc.shape == (3,) and float(guide.scale.detach().max()) == pytest.approx(1e-2)
    res = fit(model, guide, x, y, steps=1500, lr=1e-2, progress=False, seed=0)
    prec = x.T @ x / 0.25 + torch.eye(3, dtype=torch.float64) / 1.5**2
    exact = torch.linalg.solve(prec, x.T @ y / 0.25)
    post_sd = torch.linalg.inv(prec).diagonal().sqrt()
    draws = posterior_samples(res, 4000, seed=1)["fc0.weight"].reshape(4000, 3)
    # SVI's own noise (lr 1e-2) leaves the mean ~0.2 posterior sd off; the MC error of 4000 draws is
    # 0.016 sd.  Half a posterior sd in the mean and 25 % in the sd is a trained guide, not its start.
    assert ((draws.mean(0) - exact).abs() < 0.5 * post_sd).all(), (draws.mean(0), exact, post_sd)
    assert ((draws.std(0) / post_sd - 1).abs() < 0.25).all(), (draws.std(0), post_sd)


def test_ngig_bnn_entry_prior_options_and_checkpoint(tmp_path):
    model, guide, spec = build("ngig-bnn", 4, 1, "regression", hidden=[3], guide="flow", delta_loc=2.0)
    tr = pyro.poutine.trace(model.prior.sample_params).get_trace(model.specs)
    psi = tr.nodes["fc0.psi"]["fn"].base_dist
    assert psi.event_shape == () and tr.nodes["fc0.psi"]["fn"].event_shape == (3, 4)
    # IG(-nu_loc, delta_loc^2 / (2 fan_in)) (App. D.1 scaling); the global scale IG(1.5, 1 / (2 L))
    assert float(psi.concentration.flatten()[0]) == 1.5 and float(psi.rate.flatten()[0]) == pytest.approx(0.5)
    assert float(tr.nodes["fc1.tau"]["fn"].rate) == pytest.approx(0.5)
    assert set(discrete_latent_sites(model)) == set() and isinstance(guide, WeightSpaceGuide)
    for bad, match in (
        ({"nu_glob": 0.5}, "nu_glob"),
        ({"bias_scale": 0.0}, "bias_scale"),
        ({"depth": 2}, "depth"),
    ):
        with pytest.raises(ValueError, match=match):
            build("ngig-bnn", 4, 1, "regression", **bad)
    x, y = _data(d=4)
    res = fit(model, guide, x, y, steps=5, progress=False, seed=0, spec=spec)
    save(res, tmp_path / "ngig.pt")
    back = load(tmp_path / "ngig.pt")
    assert torch.allclose(
        back.predict(x, num_samples=5, seed=2).mean, res.predict(x, num_samples=5, seed=2).mean
    )


def test_iaf_registry_guide_round_trips_through_a_checkpoint(tmp_path):
    model, guide, spec = build("cmv-bnn", 2, 1, "regression", hidden=[3], guide="iaf")
    x, y = _data()
    res = fit(model, guide, x, y, steps=5, progress=False, seed=0, spec=spec)
    save(res, tmp_path / "iaf.pt")
    back = load(tmp_path / "iaf.pt")
    assert torch.allclose(
        back.predict(x, num_samples=5, seed=2).mean, res.predict(x, num_samples=5, seed=2).mean
    )


def test_weight_space_guide_validates_its_arguments():
    model = _rep_model("gaussian")
    with pytest.raises(ValueError, match="family"):
        WeightSpaceGuide(model, "structured")
    with pytest.raises(ValueError, match="init_sd"):
        WeightSpaceGuide(model, "tied", init_sd=0.0)
    with pytest.raises(TypeError, match="flow_hidden"):
        WeightSpaceGuide(model, "tied", flow_hidden=(4,))
    with pytest.raises(ValueError, match=r"'flow' \(WeightSpaceGuide\).*HorseshoePrior.*fc0\.weight"):
        WeightSpaceGuide(_rep_model("hs"), "flow")
    with pytest.raises(TypeError, match="BayesianModel"):
        WeightSpaceGuide(object(), "tied")
    tied, fact = WeightSpaceGuide(model, "tied"), WeightSpaceGuide(model, "factorized")
    assert tied.fc0_weight_sd.shape == () and fact.fc0_weight_sd.shape == (3, 2)
