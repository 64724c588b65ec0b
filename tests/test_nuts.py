"""NUTS on the zoo's own models (zoo.infer.mcmc): ground truth on conjugate-by-quadrature Bayesian linear
regression, replay through the zoo's predict, ArviZ export with chains, checkpoints, refusals, the CLI."""

from __future__ import annotations

import json
import math

import arviz as az
import numpy as np
import pytest
import torch

import zoo
from zoo.experiments.registry import build
from zoo.infer.checkpoint import load_nuts
from zoo.infer.mcmc import NUTSConfig, check_nuts_model, fit_nuts
from zoo.infer.mcmc_chains import default_workers, run_chains
from zoo.infer.mcmc_export import all_draws_predict, convergence_summary, to_inference_data
from zoo.infer.mcmc_result import DrawIndex, NUTSResult, PosteriorDrawsGuide

FAST = {"progress": False, "parallel": False}

# ---------------------------------------------------------------------------------------------------
# Ground truth: blr-cavi is y ~ N(Xw, s2), w ~ N(0, I), s2 ~ IG(2, 1) (BLROptions defaults).  Given s2 the
# posterior of w is Gaussian in closed form; s2 | y is one-dimensional and is integrated on a fine grid.
# ---------------------------------------------------------------------------------------------------

A0, B0, S0 = 2.0, 1.0, 1.0


def _blr_data(n: int = 40, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.6 * torch.randn(n, generator=g)
    return x, y


def _blr_truth(x: torch.Tensor, y: torch.Tensor, xs: torch.Tensor) -> dict[str, np.ndarray]:
    """Exact predictive mean/variance at ``xs`` and E[s2 | y]: closed form given s2, quadrature over s2."""
    X, Y, Xs = (t.double().numpy() for t in (x, y, xs))
    n = len(Y)
    t = np.linspace(math.log(1e-3), math.log(50.0), 6000)
    s2 = np.exp(t)
    logw, mu, v = np.empty_like(t), np.empty((len(t), len(Xs))), np.empty((len(t), len(Xs)))
    for i, sig2 in enumerate(s2):
        cov = S0**2 * X @ X.T + sig2 * np.eye(n)
        _, logdet = np.linalg.slogdet(cov)
        log_lik = -0.5 * (Y @ np.linalg.solve(cov, Y) + logdet + n * math.log(2 * math.pi))
        log_prior = A0 * math.log(B0) - math.lgamma(A0) - (A0 + 1) * math.log(sig2) - B0 / sig2
        logw[i] = log_lik + log_prior + t[i]  # + log Jacobian of s2 = exp(t)
        prec = X.T @ X / sig2 + np.eye(3) / S0**2
        sigma = np.linalg.inv(prec)
        m = sigma @ X.T @ Y / sig2
        mu[i], v[i] = Xs @ m, np.einsum("ij,jk,ik->i", Xs, sigma, Xs)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    mean = w @ mu
    var = w @ (v + s2[:, None]) + w @ (mu - mean) ** 2
    return {"mean": mean, "var": var, "sigma2": float(w @ s2)}


def _mcse(draws: np.ndarray) -> float:
    """Monte Carlo standard error of the mean of ``draws`` (chain, draw) from ArviZ's bulk ESS."""
    ess = float(az.ess(np.asarray(draws, dtype=np.float64)))
    return float(draws.std()) / math.sqrt(ess)


@pytest.fixture(scope="module")
def blr_fit() -> tuple[NUTSResult, torch.Tensor, torch.Tensor]:
    x, y = _blr_data()
    torch.manual_seed(0)
    model, _, _ = build("blr-cavi", 3, 1, "regression", hidden=())
    result = fit_nuts(model, (x, y), NUTSConfig(chains=2, warmup=200, samples=300, seed=1, **FAST))
    return result, x, y


def test_blr_predictive_matches_closed_form(blr_fit) -> None:
    result, x, y = blr_fit
    xs = torch.tensor([[0.5, 0.0, 0.0], [1.0, 1.0, 1.0], [-2.0, 0.5, 1.5], [3.0, -1.0, 0.0]])
    truth = _blr_truth(x, y, xs)
    pred = all_draws_predict(result, xs)
    w = result.samples["fc0.weight"][:, :, 0, :].double()  # (chain, draw, 3)
    s2 = result.samples["sigma2"].double()
    f = torch.einsum("cdk,nk->cdn", w, xs.double()).numpy()
    # the zoo's predict replays every draw exactly once: its moments are the draws' moments
    assert np.allclose(pred.mean.numpy(), f.mean((0, 1)), rtol=1e-4, atol=1e-5)
    assert np.allclose(pred.var.numpy(), s2.mean().item() + f.var((0, 1)), rtol=1e-4, atol=1e-5)
    for j in range(len(xs)):
        fj = f[..., j]
        tol_mean = 4 * _mcse(fj)
        assert abs(pred.mean[j].item() - truth["mean"][j]) < tol_mean, (j, tol_mean)
        h = s2.numpy() + (fj - truth["mean"][j]) ** 2  # E[h] = predictive variance
        tol_var = 4 * _mcse(h)
        assert abs(pred.var[j].item() - truth["var"][j]) < tol_var, (j, tol_var)
    assert abs(s2.mean().item() - truth["sigma2"]) < 4 * _mcse(s2.numpy())
    # the checker must be able to fail: a predictive shifted by 10 MCSE is rejected
    assert abs(pred.mean[1].item() + 10 * _mcse(f[..., 1]) - truth["mean"][1]) > 4 * _mcse(f[..., 1])


def test_samples_diagnostics_and_export(blr_fit) -> None:
    result, x, y = blr_fit
    assert result.samples["fc0.weight"].shape == (2, 300, 1, 3)
    assert result.samples["sigma2"].shape == (2, 300)
    d = result.diagnostics
    assert d["chains"] == 2 and d["draws"] == 300 and d["divergences"] == 0
    assert d["rhat_max"] < 1.05 and d["ess_bulk_min"] > 100 and d["ess_tail_min"] > 50
    assert len(result.chain_stats) == 2 and all(0 < c["step_size"] for c in result.chain_stats)
    idata = to_inference_data(result, x[:5], y[:5], train=(x, y))
    post = idata.posterior
    assert post.sizes["chain"] == 2 and post.sizes["draw"] == 300
    assert post["fc0.weight"].dims == ("chain", "draw", "fc0_out", "fc0_in")
    assert idata.sample_stats["diverging"].shape == (2, 300)
    assert idata.log_likelihood["obs"].shape == (2, 300, len(x))
    assert idata.predictions["obs"].shape == (2, 300, 5)
    assert post.attrs["inference"] == "nuts" and post.attrs["chains"] == 2
    # ArviZ's own R-hat on the export equals the stored diagnostics (same draws, same chain layout)
    rhat = float(az.rhat(idata, var_names=["sigma2"])["sigma2"])  # float32 export vs float64 summary
    assert rhat == pytest.approx(d["sites"]["sigma2"]["rhat_max"], rel=1e-3)
    # the log-likelihood of draw s is log N(y | x w_s, s2_s)
    w, s2 = result.samples["fc0.weight"][0, 7, 0], result.samples["sigma2"][0, 7]
    ll = torch.distributions.Normal(x @ w, s2.sqrt()).log_prob(y)
    assert np.allclose(idata.log_likelihood["obs"].values[0, 7], ll.numpy(), atol=1e-4)


def test_checkpoint_round_trip(blr_fit, tmp_path) -> None:
    result, x, _ = blr_fit
    path = tmp_path / "nuts.pt"
    result.save(path)
    loaded = load_nuts(path)
    assert isinstance(loaded, NUTSResult) and isinstance(loaded.guide, PosteriorDrawsGuide)
    for k, v in result.samples.items():
        assert torch.equal(loaded.samples[k], v)
    assert loaded.diagnostics["rhat_max"] == result.diagnostics["rhat_max"]
    a, b = result.predict(x, num_samples=50, seed=4), loaded.predict(x, num_samples=50, seed=4)
    assert torch.equal(a.mean, b.mean) and torch.equal(a.var, b.var)
    with pytest.raises(ValueError, match="not the state of a PosteriorDrawsGuide"):
        PosteriorDrawsGuide().load_state_dict({"draws_0": torch.zeros(1, 1)})


def test_draw_index_takes_all_distinct_or_resampled_draws() -> None:
    assert torch.equal(DrawIndex(6).expand((6, 1)).sample(), torch.arange(6).reshape(6, 1))
    few = DrawIndex(6).expand((4,)).sample()
    assert len(set(few.tolist())) == 4 and few.max() < 6
    many = DrawIndex(3).expand((20,)).sample()
    assert many.min() >= 0 and many.max() <= 2
    assert DrawIndex(4).log_prob(torch.tensor([0, 3])).allclose(torch.full((2,), -math.log(4)))


# ---------------------------------------------------------------------------------------------------
# What NUTS can and cannot sample
# ---------------------------------------------------------------------------------------------------

CONTINUOUS = ("mfvi-bnn", "hs-bnn", "reg-hs-bnn", "ngig-bnn", "cm-bnn", "cv-bnn", "cmv-bnn")


@pytest.mark.parametrize("name", CONTINUOUS)
def test_continuous_families_sample(name: str) -> None:
    x, y = _blr_data(n=12)
    model, _, _ = build(name, 3, 1, "regression", hidden=(2,))
    cfg = NUTSConfig(chains=1, warmup=4, samples=3, max_tree_depth=2, **FAST)
    result = fit_nuts(model, (x, y), cfg)
    sites = set(result.samples)
    assert {"fc0.weight", "fc1.weight"} <= sites or "fc0.beta" in sites
    if name.startswith(("c", "ngig")) or "hs" in name:  # marginal form: no hyper-latents, auxiliaries, psi
        hyper = (".lam", ".theta", ".rho", ".psi")
        assert not any("mu_p" in s or "tau_p" in s or s.endswith(hyper) for s in sites), sites
        assert result.config["hierarchical_form"] is False
    assert all(v.shape[:2] == (1, 3) for v in result.samples.values())
    assert result.predict(x[:4], num_samples=3).mean.shape == (4,)


@pytest.mark.parametrize("name", ["hs-bnn", "cmv-bnn", "ngig-bnn"])
def test_hierarchical_form_on_request(name: str) -> None:
    """``hierarchical=True`` samples the auxiliaries / hyper-latents, and a reloaded result keeps the form."""
    x, y = _blr_data(n=12)
    model, _, _ = build(name, 3, 1, "regression", hidden=(2,))
    cfg = NUTSConfig(chains=1, warmup=4, samples=3, max_tree_depth=2, hierarchical=True, **FAST)
    result = fit_nuts(model, (x, y), cfg)
    extra = {
        "hs-bnn": {"fc0.lam", "fc0.theta", "fc1.rho"},
        "cmv-bnn": {"fc0.weight_tau_p", "fc0.weight_mu_p"},
        "ngig-bnn": {"fc0.psi", "fc1.psi"},
    }[name]
    assert extra <= set(result.samples), set(result.samples)
    assert result.config["hierarchical_form"] is True and model.prior.hierarchical


def test_centered_parameterization_on_request(tmp_path) -> None:
    """``centered=True`` samples a non-centered horseshoe as if it had been built centered (the same draws
    from the same seed), its draws replay through predict, and a reloaded result keeps the form."""
    x, y = _blr_data(n=12)
    cfg = NUTSConfig(chains=1, warmup=6, samples=4, max_tree_depth=3, seed=5, **FAST)
    built, _, spec = build("hs-bnn", 3, 1, "regression", hidden=(2,), centered=True)
    switched, _, spec_nc = build("hs-bnn", 3, 1, "regression", hidden=(2,))
    a = fit_nuts(built, (x, y), cfg, spec=spec)
    b = fit_nuts(switched, (x, y), cfg.replace(centered=True), spec=spec_nc)
    assert {"fc0.w", "fc1.w"} <= set(b.samples) and "fc0.beta" not in b.samples
    assert set(a.samples) == set(b.samples)
    for site, v in a.samples.items():
        torch.testing.assert_close(b.samples[site], v, rtol=0, atol=0)
    assert switched.prior.centered and b.spec["nuts"]["centered"] is True
    assert a.spec["nuts"]["centered"] is True  # None keeps (and records) the form the model was built in
    b.save(tmp_path / "c.pt")
    loaded = load_nuts(tmp_path / "c.pt")
    assert loaded.model.prior.centered
    mean = b.predict(x[:3], num_samples=4).mean
    torch.testing.assert_close(loaded.predict(x[:3], num_samples=4).mean, mean)
    with pytest.raises(TypeError, match="centered must be a bool"):
        NUTSConfig(centered="yes")


@pytest.mark.parametrize("name, site", [("lbbnn", "gamma"), ("bowtie", "gamma")])
def test_refuses_discrete_latents(name: str, site: str) -> None:
    x, y = _blr_data(n=8)
    model, _, _ = build(name, 3, 1, "regression", hidden=(2,))
    with pytest.raises(ValueError, match=rf"model: {name} has discrete latent sites \[.*{site}"):
        fit_nuts(model, (x, y), NUTSConfig(chains=1, warmup=1, samples=1, **FAST))


def test_checker_accepts_continuous_and_rejects_local_latents() -> None:
    x, y = _blr_data(n=8)
    model, _, _ = build("mfvi-bnn", 3, 1, "regression", hidden=(2,))
    sites = {"fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias", "sigma2"}
    assert set(check_nuts_model(model, x, y)) == sites

    class Local(torch.nn.Module):  # a per-datapoint latent inside the data plate
        def forward(self, x, y=None):
            import pyro
            import pyro.distributions as dist

            with pyro.plate("data", x.shape[0]):
                z = pyro.sample("z", dist.Normal(0.0, 1.0))
                pyro.sample("obs", dist.Normal(z, 1.0), obs=y)

    with pytest.raises(ValueError, match=r"model: Local has per-datapoint latent sites \['z'\]"):
        check_nuts_model(Local(), x, y)


@pytest.mark.parametrize(
    "field, value",
    [
        ("chains", 0),
        ("warmup", -1),
        ("samples", 0),
        ("max_tree_depth", 0),
        ("target_accept", 1.5),
        ("init", "x"),
        ("threads", 0),
    ],
)
def test_bad_config_names_the_field(field: str, value) -> None:
    with pytest.raises(ValueError, match=field):
        NUTSConfig(**{field: value})


def test_bad_input_fails_before_sampling(monkeypatch) -> None:
    import zoo.infer.mcmc as mcmc

    monkeypatch.setattr(mcmc, "run_chains", lambda *a: pytest.fail("sampled despite bad input"))
    x, y = _blr_data(n=8)
    model, _, _ = build("blr-cavi", 3, 1, "regression", hidden=())
    with pytest.raises(ValueError, match="chains"):
        fit_nuts(model, (x, y), chains=0)
    with pytest.raises(ValueError, match="y: NUTS needs the training targets"):
        fit_nuts(model, (x, None), **FAST)
    with pytest.raises(ValueError, match="x has 2 features"):
        fit_nuts(model, (x[:, :2], y), **FAST)
    with pytest.raises(TypeError, match="data must be"):
        fit_nuts(model, x, **FAST)


def test_float64_data_samples_in_float64() -> None:
    x, y = _blr_data(n=10)
    model, _, _ = build("blr-cavi", 3, 1, "regression", hidden=())
    cfg = NUTSConfig(chains=1, warmup=3, samples=4, max_tree_depth=2, **FAST)
    result = fit_nuts(model, (x.double(), y.double()), cfg)
    assert result.samples["sigma2"].dtype == torch.float64
    assert result.predict(x[:2].double(), num_samples=4).mean.dtype == torch.float64


def test_scheduling() -> None:
    assert default_workers(1, None) == 1 and default_workers(4, False) == 1
    assert default_workers(4, True) >= 2


def test_chains_stay_in_process_inside_a_fanned_out_worker() -> None:
    """A NUTS fit dispatched to a loky worker (``zoo reproduce mfvi-uci`` with its ``nuts`` variant) runs its
    chains in that worker: spawned children of a loky worker fail to start ('cannot find context')."""
    from joblib import Parallel, delayed

    got = Parallel(n_jobs=2, backend="loky")(delayed(default_workers)(4, None) for _ in range(2))
    assert got == [1, 1]


def test_parallel_chains_equal_sequential_chains() -> None:
    """Chain k is seeded from (seed, k) only: worker processes give the sequential draws."""
    x, y = _blr_data(n=12)
    model, _, _ = build("blr-cavi", 3, 1, "regression", hidden=())
    cfg = NUTSConfig(chains=2, warmup=15, samples=10, max_tree_depth=3, progress=True)
    par = run_chains(model, x, y, cfg.replace(parallel=True))
    seq = run_chains(model, x, y, cfg.replace(parallel=False, progress=False))
    for a, b in zip(par, seq):
        assert a["seed"] == b["seed"]
        assert all(torch.equal(a["samples"][k], b["samples"][k]) for k in a["samples"])
    assert not torch.equal(par[0]["samples"]["sigma2"], par[1]["samples"]["sigma2"])


def test_convergence_summary_flags_disagreeing_chains() -> None:
    g = torch.Generator().manual_seed(0)
    same = torch.randn(4, 500, generator=g)
    apart = same + torch.tensor([0.0, 0.0, 0.0, 5.0])[:, None]
    ok = convergence_summary({"a": same}, torch.zeros(4, 500, dtype=torch.bool))
    bad = convergence_summary({"a": apart}, torch.ones(4, 500, dtype=torch.bool))
    assert ok["rhat_max"] < 1.02 and ok["ess_bulk_min"] > 1000
    assert bad["rhat_max"] > 1.5 and bad["divergences"] == 2000


# ---------------------------------------------------------------------------------------------------
# The hierarchical Gaussian prior of the paper-000 HMC baseline, protocols, CLI
# ---------------------------------------------------------------------------------------------------


def test_hierarchical_scale_prior_moments() -> None:
    """W | gamma ~ N(0, gamma / sqrt(fan_in)) with gamma ~ IG(2, 1): W^2 / gamma = z^2 / sqrt(fan_in)."""
    import pyro
    from pyro import poutine

    model, _, _ = build("mfvi-bnn", 16, 1, "regression", hidden=(8,), hierarchical_scale=True)
    n = 20000
    with pyro.plate("draws", n, dim=-2):
        tr = poutine.trace(model).get_trace(torch.zeros(1, 16), None)
    w = tr.nodes["fc0.weight"]["value"].reshape(n, -1)[:, 0].double()
    gamma = tr.nodes["gauss.gamma"]["value"].reshape(n).double()
    ratio = w**2 / gamma  # z^2 / 4 with z ~ N(0, 1): mean 1/4, sd sqrt(2)/4
    assert abs(ratio.mean().item() - 0.25) < 4 * (math.sqrt(2) / 4) / math.sqrt(n)
    assert abs((1 / gamma).mean().item() - 2.0) < 4 * math.sqrt(2.0) / math.sqrt(n)  # 1/gamma ~ Gamma(2, 1)
    with pytest.raises(ValueError, match="fan_in_scaling"):
        build("mfvi-bnn", 3, 1, "regression", hidden=(2,), hierarchical_scale=True, fan_in_scaling=True)


@pytest.mark.parametrize("protocol, model", [("mfvi-uci", "mfvi-bnn"), ("hs-uci", "hs-bnn")])
def test_nuts_protocol_variants(protocol: str, model: str) -> None:
    from zoo.experiments.nuts_runs import nuts_config
    from zoo.experiments.reproduce import PROTOCOLS, available_protocols, run_config

    available_protocols()
    from zoo.experiments.reproduce import select_variants

    runs = [r for r in PROTOCOLS[protocol].runs(None) if r.variant == "nuts"]
    assert {r.dataset for r in runs} == {"uci:yacht", "uci:bostonHousing"}
    # hours per fit: the nuts rows run only when named
    p = PROTOCOLS[protocol]
    assert "nuts" not in {r.variant for r in select_variants(p.runs(None), None, p.opt_in)}
    assert select_variants(p.runs(None), ["nuts"], p.opt_in) == runs
    assert sorted({r.split for r in runs}) == [0, 1, 2, 3, 4] and {r.model for r in runs} == {model}
    for r in runs:
        _, _, cfg = run_config(r)
        assert cfg.hidden == (50,) and cfg.fit_options["inference"] == "nuts"
        assert nuts_config(cfg).chains >= 2
    if protocol == "mfvi-uci":
        hmc = {"hierarchical_scale": True, "noise_concentration": 2.0, "noise_rate": 0.5}
        assert all(r.kwargs["options"] == hmc for r in runs)


def test_cli_fit_nuts_end_to_end(data_dir, tmp_path, capsys) -> None:
    from zoo.experiments.cli import main

    out = tmp_path / "run"
    args = ["fit", "mfvi-bnn", "--inference", "nuts", "--dataset", "uci:yacht", "--hidden", "10"]
    tiny = ["--chains", "2", "--warmup", "15", "--samples", "10", "--max-tree-depth", "3", "--sequential"]
    assert main([*args, *tiny, "--no-progress", "--data-dir", str(data_dir), "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["inference"] == "nuts" and m["chains"] == 2 and m["samples"] == 10
    assert {"rmse", "nll", "rhat_max", "ess_bulk_min", "divergences", "pred_rhat_max"} <= set(m)
    idata = az.from_netcdf(out / "posterior.nc")
    assert idata.posterior.sizes["chain"] == 2 and idata.posterior.sizes["draw"] == 10
    assert {"energy", "acceptance_rate", "step_size", "tree_depth", "n_steps"} <= set(idata.sample_stats)
    assert np.isfinite(az.bfmi(idata)).all()
    loaded = zoo.load(out / "checkpoint.pt")  # the public loader knows a NUTS checkpoint
    assert isinstance(loaded, NUTSResult) and loaded.samples["sigma2"].shape == (2, 10)
    assert np.array_equal(idata.sample_stats["energy"].values, loaded.guide.stats["energy"].numpy())
    # the reloaded fit scores the test set as the run did
    from zoo.data import load_dataset
    from zoo.experiments.runs import score_predictions

    ds = load_dataset("uci:yacht", 0, data_dir=data_dir)
    _, _, xte, yte = ds.tensors()
    again = score_predictions(ds, all_draws_predict(loaded, xte, seed=0), yte)
    assert again["rmse"] == pytest.approx(m["rmse"]) and again["nll"] == pytest.approx(m["nll"])


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--inference", "nuts", "--steps", "10"], "--steps"),
        (["--inference", "nuts", "--chains", "0"], "--chains"),
        (["--inference", "nuts", "--warmup", "-1"], "--warmup"),
        (["--chains", "2"], "--chains"),
        (["--full-mass"], "--full-mass"),
        (["--hierarchical"], "--hierarchical"),
        (["--centered"], "--centered"),
        (["--gibbs"], "--gibbs"),
        (["--interweave"], "--interweave"),
        (["--inference", "nuts", "--interweave"], "--interweave"),
        (["--non-centered"], "--non-centered"),
        (["--inference", "nuts", "--centered", "--non-centered"], "--non-centered"),
    ],
)
def test_cli_refuses_bad_nuts_arguments(tmp_path, capsys, extra, flag) -> None:
    from zoo.experiments.cli import main

    with pytest.raises(SystemExit):
        main(["fit", "mfvi-bnn", "--dataset", "uci:yacht", *extra, "--out", str(tmp_path / "o")])
    assert f"argument {flag}" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_form_and_mass_flags_reach_the_sampler_settings(tmp_path) -> None:
    from zoo.experiments.cli import build_parser
    from zoo.experiments.cli_checks import validate_fit

    parser = build_parser()
    base = ["fit", "hs-bnn", "--dataset", "uci:yacht", "--inference", "nuts", "--out", str(tmp_path / "o")]
    for extra, want in (
        ([], {}),
        (["--full-mass", "--hierarchical"], {"full_mass": True, "hierarchical": True}),
        (["--centered"], {"centered": True}),
        (["--gibbs"], {"gibbs": True, "jit_compile": False}),
        (["--gibbs", "--interweave"], {"gibbs": True, "jit_compile": False, "interweave": True}),
        (["--gibbs", "--non-centered"], {"gibbs": True, "jit_compile": False, "centered": False}),
    ):
        a = parser.parse_args([*base, *extra])
        validate_fit(parser, a)
        opts = a.config.fit_options
        assert opts["inference"] == "nuts"
        keys = ("full_mass", "hierarchical", "centered", "gibbs", "jit_compile", "interweave")
        assert {k: opts[k] for k in keys if k in opts} == want
    assert not (tmp_path / "o").exists()


def test_full_mass_matrix_samples_a_correlated_posterior_exactly() -> None:
    """``full_mass=True`` (dense mass matrix, for the small reference networks): on a nearly collinear
    design — the posterior of w1, w2 is correlated at about -0.99 — the predictive mean still equals the
    closed form within 4 Monte Carlo standard errors, and the kernel really is the dense one."""
    from zoo.infer.mcmc_chains import make_kernel

    x, y = _blr_data()
    x = torch.cat([x[:, :1], x[:, :1] + 0.05 * x[:, 1:2], x[:, 2:]], dim=1)
    model, _, _ = build("blr-cavi", 3, 1, "regression", hidden=())
    cfg = NUTSConfig(chains=2, warmup=300, samples=300, seed=2, full_mass=True, **FAST)
    dense = make_kernel(model, cfg)._adapter.dense_mass
    assert dense and not make_kernel(model, cfg.replace(full_mass=False))._adapter.dense_mass
    result = fit_nuts(model, (x, y), cfg)
    xs = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, -1.0]])
    truth = _blr_truth(x, y, xs)
    w = result.samples["fc0.weight"][:, :, 0, :].double()
    f = torch.einsum("cdk,nk->cdn", w, xs.double()).numpy()
    for j in range(len(xs)):
        assert abs(f[..., j].mean() - truth["mean"][j]) < 4 * _mcse(f[..., j]), j
    with pytest.raises(TypeError, match="full_mass"):
        NUTSConfig(full_mass="yes")
