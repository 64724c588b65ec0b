"""The example plugin package ``examples/zoo-dirichlet-laplace``: the Dirichlet-Laplace prior's math on real
numbers (Bhattacharya, Pati, Pillai & Dunson 2015, arXiv:1401.5398, §3), its guide, its validation."""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyro
import pytest
import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.nn import PyroParam

from zoo import BayesianModel, GaussianPrior, ParamSpec, fit
from zoo.architectures import MLP
from zoo.likelihoods import GaussianLikelihood

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "zoo-dirichlet-laplace"
MODULE_FILE = EXAMPLE / "zoo_dirichlet_laplace.py"


def _load_module():
    """The example module by path (as a user's test would), cached in ``sys.modules``."""
    name = "zoo_dirichlet_laplace"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, MODULE_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


dl = _load_module()


def _prior_draws(prior, specs, n):
    """``n`` independent prior draws of every site (a plate over draws), as a Pyro trace."""
    with torch.no_grad(), pyro.plate("draws", n, dim=-1):
        return poutine.trace(prior.sample_params).get_trace(specs)


def _gamma_moment(a: float, rate: float, k: int) -> float:
    """``E[X^k]`` of ``X ~ Gamma(a, rate)``."""
    return math.prod(a + i for i in range(k)) / rate**k


@pytest.mark.parametrize("a,sample_psi", [(0.5, False), (0.5, True), (0.2, False)])
def test_weight_variance_matches_closed_form(a, sample_psi):
    """Var(w) = c^2 E[psi] E[(phi_j tau)^2] = c^2 * 2 * 4 a (a + 1) = weight_scale^2 / fan_in, by Monte Carlo
    over independent prior draws, to 5 standard errors computed from the closed-form fourth moment."""
    pyro.set_rng_seed(0)
    n, fan_in, scale = 200_000, 4, 1.5
    prior = dl.DirichletLaplacePrior(a=a, weight_scale=scale, sample_psi=sample_psi).double()
    specs = [ParamSpec("fc0.weight", (3, fan_in), 0, "weight", fan_in, 3)]
    tr = _prior_draws(prior, specs, n)
    w = tr.nodes["fc0.weight"]["value"][:, 0, 0]
    var = float(prior.weight_variance(fan_in))
    assert math.isclose(var, scale**2 / fan_in, rel_tol=1e-12)
    c, a = float(prior.layer_scale(fan_in)), float(prior.a)  # a as stored (a float32 buffer moved to float64)
    # w = c X e with X ~ Gamma(a, 1/2) and e ~ Laplace(1) (E e^2 = 2, E e^4 = 24), in either form
    assert math.isclose(var, c**2 * 2 * _gamma_moment(a, 0.5, 2), rel_tol=1e-9)
    fourth = c**4 * 24 * _gamma_moment(a, 0.5, 4)
    tol = 5 * math.sqrt((fourth - var**2) / n)
    assert abs(float((w**2).mean()) - var) < tol, (float((w**2).mean()), var, tol)
    # the normalized-gamma property: phi_j tau ~ Gamma(a, 1/2) (mean 2a, variance 4a)
    x = tr.nodes["fc0.phi"]["value"][:, 0] * tr.nodes["fc0.tau"]["value"]
    assert abs(float(x.mean()) - 2 * a) < 5 * math.sqrt(4 * a / n)
    central4 = 3 * a * (a + 2) * 2.0**4  # Gamma(a, scale 2): mu_4 = 3 a (a + 2) scale^4
    assert abs(float(x.var()) - 4 * a) < 5 * math.sqrt((central4 - (4 * a) ** 2) / n)
    assert ("fc0.psi" in tr.nodes) == sample_psi


def test_sites_shapes_and_log_density():
    """Sites named by layer with the spec's shape, and the weight's log density equals the DL Laplace one."""
    pyro.set_rng_seed(1)
    model = dl.build(3, 1, "regression", (4,))
    specs = model.specs
    tr = poutine.trace(model.prior.sample_params).get_trace(specs)
    for s in specs:
        assert tuple(tr.nodes[s.name]["value"].shape) == s.shape
        assert tuple(tr.nodes[s.name]["fn"].event_shape) == s.shape
    assert tuple(tr.nodes["fc0.phi"]["value"].shape) == (3,) and tr.nodes["fc1.phi"]["value"].shape == (4,)
    assert float(tr.nodes["fc0.phi"]["value"].sum()) == pytest.approx(1.0, abs=1e-6)
    tau, phi, w = (tr.nodes[f"fc0.{k}"]["value"] for k in ("tau", "phi", "weight"))
    b = model.prior.layer_scale(3) * phi * tau  # Laplace scale per input unit (column)
    expected = float((-torch.log(2 * b) - w.abs() / b).sum())
    assert float(tr.nodes["fc0.weight"]["fn"].log_prob(w)) == pytest.approx(expected, rel=1e-5)


def test_buffers_move_with_the_prior():
    prior = dl.DirichletLaplacePrior(a=0.3).to(torch.float64)
    assert {n for n, _ in prior.named_buffers()} == {"a", "weight_scale", "bias_scale"}
    tr = poutine.trace(prior.sample_params).get_trace(MLP(2, (3,), 1).param_specs())
    assert all(tr.nodes[n]["value"].dtype == torch.float64 for n in ("fc0.weight", "fc0.tau", "fc1.phi"))
    expected = {"a": 0.3, "weight_scale": 1.0, "bias_scale": 1.0, "sample_psi": False}
    assert prior.config() == pytest.approx(expected)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="a"):
        dl.DirichletLaplacePrior(a=0.0)
    with pytest.raises(TypeError, match="sample_psi"):
        dl.DirichletLaplacePrior(sample_psi="yes")
    with pytest.raises(ValueError, match="weight_scale"):
        dl.build(3, 1, "regression", (4,), weight_scale=-1.0)
    with pytest.raises(ValueError, match="unknown option"):
        dl.build(3, 1, "regression", (4,), scale=1.0)
    with pytest.raises(ValueError, match="activation"):
        dl.DLOptions(activation="swish")
    conv = ParamSpec("conv0.weight", (4, 2, 3, 3), 0, "weight", 18, 4)
    with pytest.raises(ValueError, match="conv0.weight"):
        poutine.trace(dl.DirichletLaplacePrior().sample_params).get_trace([conv])
    gaussian = BayesianModel(MLP(3, (4,), 1), GaussianPrior(), GaussianLikelihood())
    with pytest.raises(ValueError, match="DirichletLaplacePrior.*GaussianPrior"):
        dl.DLGuide(gaussian)
    with pytest.raises(ValueError, match="init_sd"):
        dl.DLGuide(dl.build(3, 1, "regression", (4,)), init_sd=0.0)


@pytest.mark.parametrize("sample_psi", [False, True])
def test_guide_covers_the_model_and_its_elbo_is_finite(sample_psi):
    pyro.set_rng_seed(2)
    model = dl.build(3, 1, "regression", (4,), sample_psi=sample_psi)
    guide = dl.DLGuide(model)
    x, y = torch.randn(20, 3), torch.randn(20)
    with pyro.get_param_store().scope():
        g_tr = poutine.trace(guide).get_trace(x, y)
        m_tr = poutine.trace(poutine.replay(model, trace=g_tr)).get_trace(x, y)
        latent = {n for n, s in m_tr.nodes.items() if s["type"] == "sample" and not s["is_observed"]}
        latent -= {"data"}
        q_sites = {
            n for n, s in g_tr.nodes.items() if s["type"] == "sample" and not s["infer"].get("is_auxiliary")
        }
        assert latent == q_sites
        phi = g_tr.nodes["fc1.phi"]["value"].detach()
        assert bool((phi > 0).all()) and float(phi.sum()) == pytest.approx(1.0, abs=1e-5)
        elbo = -pyro.infer.Trace_ELBO(num_particles=8, vectorize_particles=True).loss(model, guide, x, y)
    assert math.isfinite(elbo)
    assert len(pyro.get_param_store()) == 0  # the guide's parameters live on the module


def test_factor_of_phi_is_a_density_on_the_simplex():
    """q(phi) (logistic normal by stick-breaking) integrates to 1 over the 2-simplex: a grid sum."""
    guide = dl.DLGuide(dl.build(3, 1, "regression", (2,)))
    with torch.no_grad():
        guide.fc1_phi_loc = PyroParam(torch.tensor([0.3]))
        guide.fc1_phi_sd = PyroParam(torch.tensor([0.7]), constraints.positive)
        q = guide.factor("fc1.phi")
        grid = torch.linspace(1e-4, 1 - 1e-4, 20001, dtype=torch.float64)
        pts = torch.stack([grid, 1 - grid], -1)
        dens = q.log_prob(pts.float()).double().exp()
    # the simplex's 1-d volume element is d(phi_1), the density of q is w.r.t. it
    assert float(torch.trapezoid(dens, grid)) == pytest.approx(1.0, abs=1e-3)


def test_tiny_fit_decreases_the_loss_and_finds_the_relevant_feature():
    """y depends on feature 0 only: the fit's loss falls, and fc0's DL column scale of feature 0 ends
    above those of the two irrelevant features."""
    pyro.set_rng_seed(3)
    x = torch.randn(120, 3)
    y = 2.0 * x[:, 0] + 0.1 * torch.randn(120)
    model = dl.build(3, 1, "regression", (8,))
    guide = dl.DLGuide(model)
    res = fit(model, guide, x, y, steps=300, lr=0.02, seed=0, progress=False)
    loss = -torch.tensor(res.elbo)
    assert torch.isfinite(loss).all()
    assert float(loss[-30:].mean()) < float(loss[:30].mean()) - 100
    with res.activate():
        scales = guide.column_scales(model)["fc0"]
    assert float(scales[0]) > 2 * float(scales[1:].max()), scales
    p = res.predict(x, num_samples=30, seed=0)
    assert float(((p.mean - y) ** 2).mean()) < 0.25 * float(y.var())


def test_the_entry_registers_through_the_public_registry():
    """``register()`` adds ``dl-bnn`` with its guides; the registry is restored afterwards."""
    from zoo.experiments import registry

    registry.load_plugins()
    saved = dict(registry._REGISTRY)
    registry._REGISTRY.pop(dl.NAME, None)
    try:
        entry = dl.register()
        assert entry.name == "dl-bnn" and entry.default_guide == "meanfield"
        model, guide, spec = registry.build("dl-bnn", 3, 1, "regression", hidden=[4], a=0.25)
        assert isinstance(guide, dl.DLGuide) and float(model.prior.a) == 0.25
        assert spec["options"] == {"a": 0.25}
        with pytest.raises(ValueError, match="already registered"):
            dl.register()
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved)


# --- the example as a plugin: zoo.testing, load_plugin by file, the entry point from outside the tree


@pytest.fixture
def registry_without_dl():
    """The registry without ``dl-bnn`` (it may come from an installed example package), restored after."""
    from zoo.experiments import registry

    registry.load_plugins()
    saved = dict(registry._REGISTRY)
    registry._REGISTRY.pop(dl.NAME, None)
    try:
        yield registry
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved)


@pytest.mark.parametrize("sample_psi", [False, True])
def test_the_conformance_kit_passes(sample_psi):
    from zoo.testing import check_guide, check_prior

    check_prior(dl.DirichletLaplacePrior(sample_psi=sample_psi))
    check_prior(dl.DirichletLaplacePrior(sample_psi=sample_psi), task="binary", hidden=(3, 2))
    check_guide(dl.DLGuide, dl.build(3, 1, "regression", (4,), sample_psi=sample_psi))


def test_the_conformance_kit_catches_a_broken_variant():
    """A DL prior that forgets its bias sites fails ``check_prior`` (the kit is not vacuous on this prior)."""
    from zoo.testing import check_prior

    class NoBiasSites(dl.DirichletLaplacePrior):
        def sample_params(self, specs):
            params = super().sample_params([s for s in specs if s.role == "weight"])
            return {**params, **{s.name: torch.zeros(s.shape) for s in specs if s.role == "bias"}}

    with pytest.raises(AssertionError, match="fc0.bias"):
        check_prior(NoBiasSites())


def test_loads_as_a_file_plugin(registry_without_dl):
    from zoo.experiments.plugins import load_plugin

    assert load_plugin(str(MODULE_FILE)) == [dl.NAME]
    entry = registry_without_dl.get_entry(dl.NAME)
    assert entry.plugin == str(MODULE_FILE.resolve()) and entry.plugin_module == "zoo_dirichlet_laplace"
    assert load_plugin(str(MODULE_FILE)) == [dl.NAME]  # the same file again: a no-op
    assert registry_without_dl.get_entry(dl.NAME) is entry
    model, guide, spec = registry_without_dl.build(dl.NAME, 3, 1, "regression", hidden=[4])
    assert type(model.prior).__name__ == "DirichletLaplacePrior" and spec["plugin"]
    from zoo.testing import check_entry

    check_entry(dl.NAME, guide="meanfield")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``pip install`` the example into a private target folder (not the test environment); returns the
    environment of a fresh interpreter that sees it."""
    root = tmp_path_factory.mktemp("dl-install")
    src, site = root / "src", root / "site"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--root-user-action=ignore",
    ]
    subprocess.run([*pip, "--no-build-isolation", "--no-deps", "--target", str(site), str(src)], check=True)
    eps = (site / "zoo_dirichlet_laplace-0.1.0.dist-info" / "entry_points.txt").read_text()
    assert "[pyro_bnn_zoo.models]" in eps and "dl-bnn = zoo_dirichlet_laplace:register" in eps
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "MPLBACKEND": "Agg", "ZOO_NUM_THREADS": "1"}


ZOO = [sys.executable, "-m", "zoo.experiments.cli"]


def test_installed_package_registers_through_its_entry_point(installed, tmp_path):
    """The entry point adds ``dl-bnn`` to ``zoo list`` with no ``--plugin``, from outside the source tree."""
    listed = subprocess.run([*ZOO, "list"], env=installed, capture_output=True, text=True, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert "dl-bnn" in listed.stdout and "hs-bnn" in listed.stdout
    # the same module given as --plugin too: the same identity, a no-op rather than a clash
    again = [*ZOO, "list", "--plugin", str(MODULE_FILE)]
    both = subprocess.run(again, env=installed, capture_output=True, text=True, cwd=tmp_path)
    assert both.returncode == 0 and both.stdout.count("dl-bnn") == listed.stdout.count("dl-bnn"), both.stderr


def test_installed_package_benches_at_smoke_size(installed, tmp_path, data_dir):
    """``zoo bench dl-bnn --suite uci-small`` at smoke size writes a leaderboard holding the plugin's row."""
    env = {**installed, "ZOO_DATA_DIR": str(data_dir)}
    out = tmp_path / "bench"
    bench = [
        *ZOO,
        "bench",
        "dl-bnn",
        "--suite",
        "uci-small",
        "--out",
        str(out),
        "--steps",
        "3",
        "--splits",
        "0-0",
    ]
    done = subprocess.run(bench, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert {"leaderboard.md", "leaderboard.json", "leaderboard.png"} <= {p.name for p in out.iterdir()}
    assert "dl-bnn" in (out / "leaderboard.md").read_text()


def test_likelihood_options_come_from_the_zoo():
    """``DLOptions`` derives from :class:`zoo.LikelihoodOptions`: the plugin takes the zoo's Student-t and
    input-dependent noise without code of its own, and fits with them."""
    from zoo import LikelihoodOptions, StudentTLikelihood, fit

    assert issubclass(dl.DLOptions, LikelihoodOptions)
    assert dl.DLOptions().noise_concentration == 6.0  # its own default over the base's
    with pytest.raises(ValueError, match="student_t_df"):
        dl.DLOptions(student_t_df=1.5)
    t = dl.build(3, 1, "regression", (4,), student_t_df=4.0)
    assert isinstance(t.likelihood, StudentTLikelihood) and t.likelihood.predictive_df == 4.0
    het = dl.build(3, 1, "regression", (4,), heteroscedastic=True)
    assert het.likelihood.network_outputs == 2 and het.architecture.out_features == 2
    assert dl.build(3, 1, "binary", (4,)).architecture.out_features == 1
    torch.manual_seed(0)
    x = torch.randn(40, 3)
    y = x[:, 0] + 0.1 * torch.randn(40)
    for model in (t, het):
        result = fit(model, dl.DLGuide(model), x, y, steps=5, seed=0)
        pred = result.predict(x[:5], num_samples=4)
        assert torch.isfinite(pred.mean).all() and (pred.var > 0).all()
