"""NUTS results through the public API: ``zoo.load`` reads a NUTS checkpoint back as a ``NUTSResult``, the
per-draw sampler statistics (energy, acceptance rate, step size, tree depth, leapfrog steps) are recorded
and right, and the ArviZ export takes the variational exporter's arguments and feeds ``az.bfmi`` /
``az.plot_energy``."""

from __future__ import annotations

import inspect
import math

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC, NUTS

import zoo
from zoo.infer.checkpoint import load_nuts
from zoo.infer.mcmc import fit_nuts
from zoo.infer.mcmc_export import to_inference_data
from zoo.infer.mcmc_result import NUTSResult, PosteriorDrawsGuide

STATS = ("energy", "energy_error", "acceptance_rate", "step_size", "tree_depth", "n_steps")
CHAINS, WARMUP, SAMPLES, DEPTH = 2, 40, 30, 4


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 2, generator=g, dtype=torch.float64)
    y = torch.sin(x[:, 0]) + 0.1 * torch.randn(30, generator=g, dtype=torch.float64)
    return x, y


@pytest.fixture(scope="module")
def tiny_fit() -> tuple[NUTSResult, torch.Tensor, torch.Tensor]:
    """A 2-2-1 ReLU network, 2 chains x 30 draws (about 7 s on one core)."""
    x, y = _data()
    torch.manual_seed(0)
    model, _, _ = zoo.build("mfvi-bnn", 2, 1, "regression", hidden=[2])
    settings = {"warmup": WARMUP, "samples": SAMPLES, "max_tree_depth": DEPTH, "jit_compile": False}
    result = fit_nuts(model, (x, y), chains=CHAINS, seed=3, progress=False, parallel=False, **settings)
    return result, x, y


def test_zoo_load_returns_the_nuts_result(tiny_fit, tmp_path) -> None:
    result, x, y = tiny_fit
    path = tmp_path / "checkpoint.pt"
    result.save(path)
    loaded = zoo.load(path)
    assert isinstance(loaded, NUTSResult) and isinstance(loaded.guide, PosteriorDrawsGuide)
    assert loaded.guide.num_chains == CHAINS and loaded.guide.num_draws == SAMPLES
    for k, v in result.samples.items():
        assert torch.equal(loaded.samples[k], v), k
    for k, v in result.guide.stats.items():
        assert torch.equal(loaded.guide.stats[k], v), k
    assert loaded.diagnostics == result.diagnostics and loaded.chain_stats == result.chain_stats
    # predictions after loading are those before: every draw once, and a random subset with one seed
    total = CHAINS * SAMPLES
    a, b = (r.predict(x, num_samples=total, sample_chunk=total) for r in (result, loaded))
    assert torch.equal(a.mean, b.mean) and torch.equal(a.var, b.var)
    a, b = (r.predict(x, num_samples=17, seed=5) for r in (result, loaded))
    assert torch.equal(a.mean, b.mean) and torch.equal(a.var, b.var)
    # load_nuts gives the same fit; so do the stable path zoo.checkpoint and a PosteriorDrawsGuide passed in
    again = load_nuts(path)
    assert torch.equal(again.samples["sigma2"], loaded.samples["sigma2"])
    assert isinstance(zoo.load(path, guide=PosteriorDrawsGuide()), NUTSResult)


def test_load_refuses_what_a_nuts_checkpoint_cannot_use(tiny_fit, tmp_path) -> None:
    result, x, y = tiny_fit
    path = tmp_path / "nuts.pt"
    result.save(path)
    with pytest.raises(ValueError, match="^guide: .*NUTS"):
        zoo.load(path, guide=pyro.infer.autoguide.AutoNormal(result.model))
    with pytest.raises(ValueError, match="^optimizer: "):
        zoo.load(path, optimizer=pyro.optim.Adam({"lr": 0.01}))
    model, guide, _ = zoo.build("mfvi-bnn", 2, 1, "regression", hidden=[2])
    vi = zoo.fit(model, guide, x.float(), y.float(), steps=2, seed=0)
    vi.save(tmp_path / "vi.pt")
    with pytest.raises(ValueError, match="^path: .*not a checkpoint of a NUTS fit"):
        load_nuts(tmp_path / "vi.pt")
    assert not isinstance(zoo.load(tmp_path / "vi.pt"), NUTSResult)


def test_recording_kernel_keeps_pyros_draws_and_gets_the_energy_right() -> None:
    """On a standard normal in d = 5 dims: the recording kernel draws exactly what Pyro's NUTS draws (it uses
    no random numbers), its mean acceptance statistic is Pyro's running mean, and the kinetic energy of the
    selected point, energy + lp = K, is Gamma(d / 2, 1) in stationarity (mean d / 2, variance d / 2)."""
    from zoo.infer.mcmc_stats import RecordingNUTS, stack_stats

    d, n = 5, 300

    def model() -> None:
        pyro.sample("z", dist.Normal(torch.zeros(d, dtype=torch.float64), 1.0).to_event(1))

    out = {}
    for cls in (NUTS, RecordingNUTS):
        pyro.set_rng_seed(0)
        rows, lp, mean_accept = [], [], []

        def hook(kernel, params, stage, i, rows=rows, lp=lp, mean_accept=mean_accept) -> None:
            if stage.startswith("Sample"):
                lp.append(-float(kernel._potential_energy_last))
                mean_accept.append(kernel._mean_accept_prob)
                if isinstance(kernel, RecordingNUTS):
                    rows.append(dict(kernel.last_stats))

        mcmc = MCMC(cls(model), num_samples=n, warmup_steps=200, hook_fn=hook, disable_progbar=True)
        mcmc.run()
        out[cls] = mcmc.get_samples()["z"], rows, torch.tensor(lp, dtype=torch.float64), mean_accept
    draws, rows, lp, mean_accept = out[RecordingNUTS]
    assert torch.equal(draws, out[NUTS][0])
    stats = stack_stats(rows)
    assert set(stats) == set(STATS) and all(v.shape == (n,) for v in stats.values())
    assert stats["acceptance_rate"].mean().item() == pytest.approx(mean_accept[-1], abs=1e-12)
    kinetic = stats["energy"] + lp
    assert torch.isfinite(stats["energy"]).all() and kinetic.min() >= 0
    tol = 5 * math.sqrt(d / 2 / n)
    assert abs(kinetic.mean().item() - d / 2) < tol
    assert abs(kinetic.mean().item() + 1.0 - d / 2) > tol  # the check can fail: off by one is caught
    depth, steps = stats["tree_depth"], stats["n_steps"]
    assert bool(((2**depth - 1 <= steps) & (steps <= 2 ** (depth + 1) - 1)).all())
    assert az.bfmi(stats["energy"].numpy()[None])[0] > 0.5  # an exact Gaussian target: no energy problem


def test_fit_records_sampler_statistics(tiny_fit) -> None:
    result, _, _ = tiny_fit
    stats = result.guide.stats
    assert {"lp", "diverging", *STATS} == set(stats)
    assert all(v.shape == (CHAINS, SAMPLES) for v in stats.values())
    energy, lp = stats["energy"], stats["lp"]
    assert torch.isfinite(energy).all() and bool((energy + lp >= -1e-9).all())  # H = U + K, U = -lp, K >= 0
    assert bool(((stats["tree_depth"] >= 0) & (stats["tree_depth"] <= DEPTH)).all())
    steps, depth = stats["n_steps"], stats["tree_depth"]
    assert bool(((2**depth - 1 <= steps) & (steps <= 2 ** (depth + 1) - 1)).all())
    for k, chain in enumerate(result.chain_stats):
        # after warm-up the step size is fixed at the adapted value; the per-draw acceptance statistics
        # average to the running mean Pyro keeps
        assert torch.all(stats["step_size"][k] == chain["step_size"])
        assert stats["acceptance_rate"][k].mean().item() == pytest.approx(chain["mean_accept_prob"], abs=1e-9)
        assert int(stats["diverging"][k].sum()) == chain["num_divergences"]


def test_export_feeds_arvizs_energy_diagnostics(tiny_fit) -> None:
    result, x, y = tiny_fit
    idata = result.to_inference_data(x[:5], y[:5], train=(x, y))
    ss = idata.sample_stats
    assert {"lp", "diverging", *STATS} <= set(ss.data_vars)
    assert ss["energy"].dims == ("chain", "draw")
    assert np.array_equal(ss["energy"].values, result.guide.stats["energy"].numpy())
    bfmi = az.bfmi(idata)
    assert bfmi.shape == (CHAINS,) and np.isfinite(bfmi).all() and (bfmi > 0).all()
    # BFMI by its definition (Betancourt 2016, arXiv:1604.00695, eq. 5) on the exported energies
    e = ss["energy"].values
    by_hand = np.square(np.diff(e, axis=1)).sum(axis=1) / np.square(e - e.mean(1, keepdims=True)).sum(axis=1)
    assert np.allclose(bfmi, by_hand)
    assert az.plot_energy(idata) is not None
    assert idata.posterior.sizes["chain"] == CHAINS and idata.posterior.sizes["draw"] == SAMPLES


def test_export_takes_the_variational_exporters_arguments(tiny_fit) -> None:
    result, x, y = tiny_fit
    vi = inspect.signature(zoo.to_inference_data).parameters
    nuts = inspect.signature(to_inference_data).parameters
    names = [[(p.name, p.kind) for p in list(params.values())[1:]] for params in (vi, nuts)]
    assert names[0] == names[1]
    full = to_inference_data(result, x[:4], y[:4], train=(x, y))
    thin = to_inference_data(
        result,
        x[:4],
        y[:4],
        10,
        train=(x, y),
        include_weights=False,
        max_weight_params=50_000,
        max_input_values=100_000,
        seed=0,
    )
    # at most 10 draws: every 6th draw of each chain, the chains kept as chains (never resampled)
    assert thin.posterior.sizes["chain"] == CHAINS and thin.posterior.sizes["draw"] == 5
    assert thin.posterior.attrs["thinning_stride"] == 6
    assert np.array_equal(thin.posterior["sigma2"].values, result.samples["sigma2"][:, ::6].numpy())
    assert np.array_equal(thin.sample_stats["energy"].values, result.guide.stats["energy"][:, ::6].numpy())
    # draw s of the thinned export is draw 6 s of the full one in every group
    assert np.allclose(thin.log_likelihood["obs"].values, full.log_likelihood["obs"].values[:, ::6])
    assert not any(k.startswith("fc") for k in thin.posterior.data_vars)  # include_weights=False
    assert "fc0.weight" in full.posterior.data_vars
    assert thin.predictions["obs"].shape == (CHAINS, 5, 4)


def test_export_rejects_bad_arguments(tiny_fit) -> None:
    result, x, y = tiny_fit
    with pytest.raises(ValueError, match="^num_samples: at least one draw per chain"):
        to_inference_data(result, num_samples=1)
    with pytest.raises(ValueError, match="num_samples"):
        to_inference_data(result, num_samples=0)
    with pytest.raises(TypeError, match="^train must be an"):
        to_inference_data(result, train=(x,))
    with pytest.raises(ValueError, match="^y has 3 rows but x has 4"):
        to_inference_data(result, x[:4], y[:3])
    vi = zoo.FitResult(model=result.model, guide=pyro.infer.autoguide.AutoNormal(result.model))
    with pytest.raises(TypeError, match="^result must be a NUTS fit"):
        to_inference_data(vi)
