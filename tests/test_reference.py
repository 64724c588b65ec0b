"""Reference posteriors (zoo.reference): exact draws against the enumeration, symmetry-invariant quantities on
known draws, the store (atomic, no overwrite without force), the quality gate on inputs it must reject, the
``zoo reference`` command line, and a guide scored against a stored exact reference."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from scipy import integrate

from zoo.eval.scores import regression_scores, shrinkage_factors
from zoo.experiments.cli import main
from zoo.experiments.registry import build
from zoo.infer.mcmc_result import NUTSResult, PosteriorDrawsGuide
from zoo.reference import SpikeSlabLinear, enumerate_spike_slab
from zoo.reference.compute import chain_diagnostics, compute_and_store, compute_reference
from zoo.reference.exact_draws import sample_spike_slab
from zoo.reference.instances import INSTANCES, DataSpec, ReferenceInstance, SamplerSettings, get_instance
from zoo.reference.quantities import predictive_draws, shrinkage_draws, unit_norms
from zoo.reference.store import (
    GateError,
    check_gate,
    load_attempts,
    load_reference,
    record_attempt,
    save_reference,
    stored_names,
)

# ----------------------------------------------------------------------------------------- exact draws


def _linear_data(n: int = 60, p: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p))
    x[:, 1] = 0.8 * x[:, 0] + 0.6 * x[:, 1]
    y = 0.5 * x[:, 0] + 0.3 * x[:, 2] + rng.normal(size=n)
    return x, y, rng.normal(size=(5, p))


@pytest.mark.parametrize(
    "prior",
    [SpikeSlabLinear(), SpikeSlabLinear(inclusion_prior=(1.0, 3.0), slab_prior=(2.0, 1.0), slab_nodes=21)],
    ids=["fixed", "hierarchical"],
)
def test_exact_draws_match_the_enumerated_moments(prior):
    x, y, xt = _linear_data()
    exact = enumerate_spike_slab(x, y, prior, x_test=xt)
    s = 20000
    d = sample_spike_slab(x, y, exact, prior, xt, num_draws=s, seed=1)
    # independent draws: the mean is off by sd/sqrt(S); the variance by sd(f - m)^2/sqrt(S)
    z_mean = (d.f.mean(0) - exact.pred_mean) / np.sqrt(exact.pred_var_f / s)
    dev2 = (d.f - d.f.mean(0)) ** 2
    z_var = (dev2.mean(0) - exact.pred_var_f) / (dev2.std(0) / math.sqrt(s))
    z_pip = (d.gamma.mean(0) - exact.pip) / np.sqrt(exact.pip * (1 - exact.pip) / s + 1e-12)
    assert np.abs(z_mean).max() < 5 and np.abs(z_var).max() < 5 and np.abs(z_pip).max() < 5
    dev_y = (d.y - d.y.mean(0)) ** 2
    assert np.all(np.abs(dev_y.mean(0) - exact.pred_var_y) < 5 * dev_y.std(0) / math.sqrt(s))
    np.testing.assert_allclose(
        d.weights.mean(0), exact.weight_mean, atol=5 * d.weights.std(0).max() / math.sqrt(s)
    )
    assert np.all(d.weights[~d.gamma] == 0.0)  # an excluded weight is exactly zero


def test_exact_reference_scored_against_itself_is_zero_and_a_shift_is_detected():
    x, y, xt = _linear_data(seed=2)
    prior = SpikeSlabLinear()
    exact = enumerate_spike_slab(x, y, prior, x_test=xt)
    s = 4000
    a = sample_spike_slab(x, y, exact, prior, xt, num_draws=s, seed=3).y
    b = sample_spike_slab(x, y, exact, prior, xt, num_draws=s, seed=4).y
    big = np.sort(sample_spike_slab(x, y, exact, prior, xt, num_draws=40000, seed=5).y, axis=0)
    # E W1(F_S, G_S) <= 2 ∫ sqrt(F(1 - F)/S) dx (Bobkov & Ledoux 2019, Thm 3.5), F from a large sample
    cdf = np.arange(1, big.shape[0]) / big.shape[0]
    bound = (
        2
        * np.mean([integrate.trapezoid(np.sqrt(cdf * (1 - cdf)), big[1:, j]) for j in range(xt.shape[0])])
        / math.sqrt(s)
    )
    same = regression_scores(a, b)
    assert same["w1"] < 3 * bound  # Markov: P(W1 > 3 E W1) <= 1/3 at each point, the mean concentrates
    shift = 0.5 * float(np.sqrt(exact.pred_var_y).mean())
    moved = regression_scores(a + shift, b)
    assert abs(moved["w1"] - shift) <= same["w1"] + 1e-12  # |W1(A + c, B) - c| <= W1(A, B)
    assert moved["w1"] > 10 * same["w1"]


def test_exact_draws_reject_bad_inputs():
    x, y, xt = _linear_data()
    exact = enumerate_spike_slab(x, y, SpikeSlabLinear(), x_test=xt)
    with pytest.raises(ValueError, match="num_draws"):
        sample_spike_slab(x, y, exact, SpikeSlabLinear(), xt, num_draws=0)
    with pytest.raises(ValueError, match="x_test"):
        sample_spike_slab(x, y, exact, SpikeSlabLinear(), None)
    with pytest.raises(ValueError, match="2\\^p"):
        sample_spike_slab(x[:, :5], y, exact, SpikeSlabLinear(), xt[:, :5])
    with pytest.raises(TypeError, match="exact"):
        sample_spike_slab(x, y, {"pip": 1}, SpikeSlabLinear(), xt)


# ---------------------------------------------------------------------------- invariants on known draws


def _draws_result(name: str, chains: int = 2, draws: int = 3, hidden=(4,)):
    """A NUTS-shaped result whose 'posterior draws' are prior draws of the model (known values)."""
    model, _, _ = build(name, 2, 1, "regression", hidden=list(hidden))
    x = torch.randn(3, 2)
    traces = [poutine.trace(model).get_trace(x, None) for _ in range(chains * draws)]
    names = [n for n, s in traces[0].nodes.items() if s["type"] == "sample" and not s["is_observed"]]
    names = [n for n in names if n != "data" and not n.startswith("_")]
    samples = {
        n: torch.stack([t.nodes[n]["value"].detach() for t in traces]).reshape(
            chains, draws, *traces[0].nodes[n]["value"].shape
        )
        for n in names
    }
    guide = PosteriorDrawsGuide(samples)
    return NUTSResult(model=model, guide=guide), samples


def test_quantities_of_known_draws():
    result, samples = _draws_result("mfvi-bnn")
    total = 6
    w = samples["fc0.weight"].reshape(total, 4, 2)
    want = np.sort(torch.linalg.vector_norm(w, dim=-1).double().numpy(), axis=1)
    np.testing.assert_allclose(unit_norms(result, total)["fc0"], want, rtol=1e-6)
    # the output f of draw s at x is the network evaluated with that draw's weights
    x = torch.randn(5, 2)
    pred = predictive_draws(result, x, total)
    flat = {k: v.reshape(total, *v.shape[2:]) for k, v in samples.items()}
    h = torch.relu(x @ flat["fc0.weight"].transpose(1, 2) + flat["fc0.bias"][:, None, :])
    f = (h @ flat["fc1.weight"].transpose(1, 2) + flat["fc1.bias"][:, None, :])[..., 0]
    np.testing.assert_allclose(pred["f"], f.double().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pred["sigma"], flat["sigma2"].sqrt().double().numpy(), rtol=1e-6)
    assert shrinkage_draws(result, total) == {}  # no horseshoe scales


def test_bands_of_known_draws():
    """Per test input in increasing x: the mean of f and the 2.5 / 97.5 % quantiles of y (here the draws
    0..40 at every point, so the interval is [1, 39])."""
    from zoo.reference.score import bands

    x = np.array([[2.0], [-1.0], [0.5]])
    f = np.arange(6.0).reshape(2, 3)  # means per point 1.5, 2.5, 3.5
    y = np.repeat(np.arange(41.0)[:, None], 3, axis=1) + np.array([100.0, 0.0, 200.0])
    b = bands(x, f, y)
    assert b["x"] == [-1.0, 0.5, 2.0] and b["f_mean"] == [2.5, 3.5, 1.5]
    np.testing.assert_allclose(b["y_lo"], [1.0, 201.0, 101.0])
    np.testing.assert_allclose(b["y_hi"], [39.0, 239.0, 139.0])
    assert bands(np.zeros((3, 2)), f, y) is None  # not a 1-D instance


def test_shrinkage_draws_of_known_horseshoe_draws():
    result, samples = _draws_result("reg-hs-bnn")
    total = 6
    flat = {k: v.reshape(total, *v.shape[2:]).double().numpy() for k, v in samples.items()}
    want = np.sort(shrinkage_factors(flat["fc0.tau2"], flat["fc0.v2"], flat["hs.c2"]), axis=1)
    got = shrinkage_draws(result, total)
    np.testing.assert_allclose(got["fc0"], want, rtol=1e-6)
    # relabeling the hidden units (a symmetry) changes no stored quantity
    perm = torch.tensor([2, 0, 3, 1])
    permuted = dict(samples)
    permuted["fc0.tau2"] = samples["fc0.tau2"][..., perm]
    permuted["fc0.lam"] = samples["fc0.lam"][..., perm]
    permuted["fc0.beta"] = samples["fc0.beta"][..., perm, :]
    permuted["fc1.beta"] = samples["fc1.beta"][..., torch.cat([perm, torch.tensor([4])])]  # bias stays last
    other = NUTSResult(model=result.model, guide=PosteriorDrawsGuide(permuted))
    np.testing.assert_allclose(shrinkage_draws(other, total)["fc0"], got["fc0"], rtol=1e-12)
    np.testing.assert_allclose(unit_norms(other, total)["fc0"], unit_norms(result, total)["fc0"], rtol=1e-6)
    x = torch.randn(4, 2)
    np.testing.assert_allclose(
        predictive_draws(other, x, total)["f"], predictive_draws(result, x, total)["f"], rtol=1e-5
    )


def test_chain_diagnostics_flag_disagreeing_chains():
    rng = np.random.default_rng(0)
    good = rng.normal(size=(4 * 500, 3))
    stats, mean, se = chain_diagnostics(good, 4)
    assert stats["rhat_max"] < 1.01 and stats["ess_bulk_min"] > 1000
    np.testing.assert_allclose(se, 1 / math.sqrt(2000), rtol=0.2)  # iid: sd / sqrt(draws)
    bad = good.copy()
    bad[:500] += 3.0  # chain 0 sits elsewhere
    assert chain_diagnostics(bad, 4)[0]["rhat_max"] > 1.1


# ----------------------------------------------------------------------------------------- gate, store


def _nuts_diag(**over):
    q = {"rhat_max": 1.004, "ess_bulk_min": 900.0, "ess_tail_min": 700.0}
    return {"divergences": 0, "quantities": {"f": q, "norms.fc0": {**q, **over}}}


def test_gate_accepts_and_names_each_failed_check():
    check_gate(_nuts_diag())
    check_gate({"method": "enumeration", "quadrature_error": 1e-9, "edge_mass": 0.0})
    with pytest.raises(GateError, match="R-hat of norms.fc0 = 1.0200"):
        check_gate(_nuts_diag(rhat_max=1.02))
    with pytest.raises(GateError, match="bulk ESS of norms.fc0 = 399"):
        check_gate(_nuts_diag(ess_bulk_min=399.0))
    with pytest.raises(GateError, match="tail ESS of norms.fc0 = 12"):
        check_gate(_nuts_diag(ess_tail_min=12.0))
    with pytest.raises(GateError, match="R-hat of norms.fc0 = nan"):
        check_gate(_nuts_diag(rhat_max=float("nan")))
    with pytest.raises(GateError, match="divergences = 3"):
        check_gate({**_nuts_diag(), "divergences": 3})
    with pytest.raises(GateError, match="quadrature_error"):
        check_gate({"method": "enumeration", "quadrature_error": 0.1, "edge_mass": 0.0})


def test_store_round_trip_refuses_overwrite_and_stays_whole(tmp_path):
    arrays = {"f": np.random.default_rng(0).normal(size=(10, 3)), "pip": np.array([0.1, 0.9])}
    path = save_reference(tmp_path, "r1", arrays, {"method": "nuts", "wall_seconds": 1.0}, force=False)
    got, meta = load_reference(tmp_path, "r1")
    np.testing.assert_allclose(got["f"], arrays["f"], rtol=1e-6)  # draws stored in float32
    assert got["pip"].dtype == np.float64 and meta["method"] == "nuts"
    assert json.loads((tmp_path / "index.json").read_text())["r1"]["method"] == "nuts"
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="force"):
        save_reference(tmp_path, "r1", {"f": np.zeros((2, 2))}, {}, force=False)

    class Broken:
        def __array__(self, *a, **k):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        save_reference(tmp_path, "r1", {"f": Broken()}, {}, force=True)
    assert path.read_bytes() == before  # the failed write left the old reference untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json", "r1.npz"]  # no temporary files
    with pytest.raises(ValueError, match="reserved"):
        save_reference(tmp_path, "r2", {"meta": np.zeros(1)}, {}, force=False)
    with pytest.raises(FileNotFoundError, match="zoo reference compute r3"):
        load_reference(tmp_path, "r3")


def test_instances_are_pinned_and_validated():
    assert len(INSTANCES) >= 8 and sum(i.method == "enumeration" for i in INSTANCES.values()) == 7
    for inst in INSTANCES.values():
        assert inst.method == "enumeration" or inst.sampler.chains >= 4
    with pytest.raises(ValueError, match="unknown reference instance 'nope'"):
        get_instance("nope")
    with pytest.raises(ValueError, match="chains must be >= 4"):
        SamplerSettings(chains=2)
    with pytest.raises(ValueError, match="method"):
        ReferenceInstance(name="x", model="mfvi-bnn", method="hmc", data=DataSpec("toy-bowtie"))
    with pytest.raises(ValueError, match="enumeration"):
        ReferenceInstance(name="x", model="mfvi-bnn", method="enumeration", data=DataSpec("diabetes"))
    with pytest.raises(ValueError, match="n_train"):
        DataSpec("toy-bowtie", n_train=0)
    ds = get_instance("gauss-bowtie").dataset()
    assert ds.n_train == 100 and ds.n_test == 30  # the pinned subsample
    np.testing.assert_array_equal(ds.x_train, get_instance("gauss-bowtie").dataset().x_train)


ONE_UNIT = {
    "hs-bowtie-tanh-w1": "hs-bnn",
    "reghs-bowtie-tanh-w1": "reg-hs-bnn",
    "hs-yacht-tanh-w1": "hs-bnn",
    "reghs-yacht-tanh-w1": "reg-hs-bnn",
    "ngig-bowtie-tanh-w1": "ngig-bnn",
    "ngig-diabetes-tanh-w1": "ngig-bnn",
    "cm-yacht-tanh-w1": "cm-bnn",
    "cmv-yacht-tanh-w1": "cmv-bnn",
}
MARGINAL_ONE_UNIT = (
    "hs-yacht-tanh-w1",
    "reghs-yacht-tanh-w1",
    "cm-yacht-tanh-w1",
    "cmv-yacht-tanh-w1",
    "ngig-diabetes-tanh-w1",
)


def test_gibbs_instances_have_exact_conditionals_in_every_layer():
    """Every instance sampled within Gibbs builds a model whose prior draws scales of both layers exactly
    (``fit_nuts`` would refuse it otherwise, after the data are loaded); the one-unit instances are the
    families' own priors on one tanh unit."""
    from zoo.infer.mcmc_gibbs import conditional_sites

    gibbs = {n: i for n, i in INSTANCES.items() if i.sampler.gibbs}
    assert set(ONE_UNIT) - set(gibbs) == set(MARGINAL_ONE_UNIT)
    for name, inst in gibbs.items():
        model, _, _ = build(inst.model, 3, 1, "regression", hidden=list(inst.hidden), **inst.options)
        sites = conditional_sites(model)
        assert {s.split(".")[0] for s in sites} >= {"fc0", "fc1"}, (name, sites)
        assert not inst.sampler.jit_compile and inst.sampler.chains >= 4
        assert model.architecture.activation == inst.options.get("activation", "relu"), name
    for name, model_name in ONE_UNIT.items():
        inst = INSTANCES[name]
        assert (inst.model, inst.hidden, inst.options["activation"]) == (model_name, (1,), "tanh")


def test_marginal_one_unit_instances_use_plain_nuts_with_a_dense_mass_matrix():
    """On yacht the one-unit instances follow the output weight-bias ridge with a dense mass matrix, which
    NUTS within Gibbs cannot adapt: plain NUTS on the marginal form (no collapsed hyper-latent sites); the
    N-GIG unit on diabetes, whose Gibbs run diverged, the same way (psi integrated out).  The horseshoes are
    sampled centered (the data pin the unit's seven incoming weights down), at .95; the others at .99 or
    more."""
    for name in MARGINAL_ONE_UNIT:
        s = INSTANCES[name].sampler
        assert (s.gibbs, s.full_mass, s.jit_compile, s.hierarchical) == (False, True, True, False), name
        horseshoe = INSTANCES[name].model in ("hs-bnn", "reg-hs-bnn")
        assert s.centered is (True if horseshoe else None), name
        assert s.target_accept >= (0.95 if horseshoe else 0.99), name
        assert ("sampled centered" in INSTANCES[name].note) is horseshoe, name
    for name in ("cm-yacht-tanh-w1", "cmv-yacht-tanh-w1"):
        inst = INSTANCES[name]
        model, _, _ = build(inst.model, 6, 1, "regression", hidden=list(inst.hidden), **inst.options)
        nodes = poutine.trace(model).get_trace(torch.zeros(5, 6), torch.zeros(5)).nodes
        latent = {n for n, site in nodes.items() if site["type"] == "sample" and not site["is_observed"]}
        assert {"fc0.weight", "fc1.weight"} <= latent, (name, latent)
        assert not any(n.endswith(("_mu_p", "_tau_p")) for n in latent), (name, latent)


def _tiny_instance() -> ReferenceInstance:
    """A NUTS instance far too short for the gate (40 draws), for the machinery's tests."""
    return ReferenceInstance(
        name="tiny",
        model="mfvi-bnn",
        method="nuts",
        data=DataSpec("toy-bowtie", n_train=20, n_test=4),
        hidden=(2,),
        sampler=SamplerSettings(warmup=10, samples=10, max_tree_depth=3, jit_compile=False),
        draws=8,
    )


def test_failing_nuts_reference_is_not_stored(tmp_path):
    inst = _tiny_instance()
    arrays, meta = compute_reference(inst, gate=False)
    assert arrays["f"].shape == (8, 4) and arrays["f_mean"].shape == (4,) and np.all(arrays["f_mean_se"] > 0)
    assert arrays["norms.fc0"].shape == (8, 2) and np.all(np.diff(arrays["norms.fc0"], axis=1) >= 0)
    assert set(meta["diagnostics"]["quantities"]) == {"f", "sigma", "norms.fc0"}
    assert meta["diagnostics"]["draws_total"] == 40 and meta["versions"]["pyro"] == pyro.__version__
    with pytest.raises(GateError, match="ESS"):  # 40 draws cannot have an ESS of 400
        compute_and_store(inst, tmp_path)
    assert stored_names(tmp_path) == []
    # only the attempt's diagnostics are kept; a later stored reference clears them
    attempt = load_attempts(tmp_path)["tiny"]
    assert "ESS" in attempt["error"] and attempt["diagnostics"]["draws_total"] == 40
    record_attempt(tmp_path, "tiny", None, None)
    assert load_attempts(tmp_path) == {}


def test_parallel_chains_give_the_same_reference(monkeypatch):
    """``zoo reference compute --parallel`` runs the chains in worker processes: the same draws, and the flag
    reaches the sampler."""
    inst = _tiny_instance()
    asked = []
    original = SamplerSettings.nuts_config

    def spy(self, seed, progress=False, parallel=False):
        asked.append(parallel)
        return original(self, seed, progress=progress, parallel=parallel)

    monkeypatch.setattr(SamplerSettings, "nuts_config", spy)
    seq, _ = compute_reference(inst, gate=False)
    par, _ = compute_reference(inst, gate=False, parallel=True)
    assert asked == [False, True]
    assert set(seq) == set(par)
    for k in seq:
        np.testing.assert_allclose(par[k], seq[k], rtol=1e-6, atol=1e-8, err_msg=k)
    seen = {}

    def fake(instance, root, **kw):
        seen.update(kw, name=instance.name)
        return root

    monkeypatch.setattr("zoo.reference.compute.compute_and_store", fake)
    assert main(["reference", "compute", "gauss-221", "--root", "unused", "--parallel"]) == 0
    assert seen["parallel"] is True and seen["name"] == "gauss-221" and "--parallel" in seen["command"]


# --------------------------------------------------------------------------------------- command line


def test_cli_reference_list_compute_score(tmp_path, capsys):
    root = str(tmp_path / "ref")
    assert main(["reference", "compute", "ss-diabetes", "--root", root]) == 0
    assert stored_names(root) == ["ss-diabetes"]
    assert main(["reference", "list", "--root", root]) == 0
    out = capsys.readouterr().out
    assert (
        "ss-diabetes" in out
        and "exact, 1024 models" in out
        and "gauss-bowtie" in out
        and "[not stored]" in out
    )
    before = (tmp_path / "ref" / "ss-diabetes.npz").read_bytes()
    for argv, flag in (
        (["reference", "compute", "ss-diabetes", "--root", root], "--force"),
        (["reference", "compute", "nope", "--root", root], "unknown reference instance"),
        (
            ["reference", "score", "mfvi-bnn", "--instance", "ss-diabetes", "--out", "x", "--root", root],
            "not scored",
        ),
        (
            ["reference", "score", "lbbnn:nope", "--instance", "ss-diabetes", "--out", "x", "--root", root],
            "offers",
        ),
        (["reference", "score", "lbbnn", "--instance", "ss-diabetes", "--out", "x", "--seeds", "0"], "seeds"),
        (
            ["reference", "score", "hs-bnn", "--instance", "hs-cubic", "--out", "x", "--root", root],
            "not stored",
        ),
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and flag in capsys.readouterr().err
    assert (tmp_path / "ref" / "ss-diabetes.npz").read_bytes() == before
    assert not (tmp_path / "x").exists()  # nothing fitted or written for a bad argument
    out_dir = tmp_path / "score"
    argv = ["reference", "score", "lbbnn:mean-field", "--instance", "ss-diabetes", "--out", str(out_dir)]
    assert main([*argv, "--root", root, "--steps", "300", "--draws", "200"]) == 0
    res = json.loads((out_dir / "scores.json").read_text())
    assert set(res["scores"]) == {"y", "f", "inclusion"} and res["same_model"]
    assert 0 <= res["scores"]["inclusion"]["mae"]["mean"] <= 1 and res["scores"]["y"]["w2"]["mean"] > 0
    assert "inclusion" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # no overwrite without --overwrite
        main([*argv, "--root", root, "--steps", "300"])
    arrays, meta = load_reference(root, "ss-diabetes")  # a reference of other test inputs is refused
    save_reference(root, "ss-diabetes", {**arrays, "x_test": arrays["x_test"] + 1.0}, meta, force=True)
    with pytest.raises(SystemExit) as e:
        main([*argv, "--root", root, "--overwrite"])
    assert e.value.code == 2 and "test inputs differ" in capsys.readouterr().err


def test_enumerated_inclusion_probabilities_stay_in_the_unit_interval():
    """A covariate that is certainly in the model gets PIP 1 exactly, not 1 + 2e-16 (the softmax-weighted
    mean of 0/1 rounds above 1 on 16 of 40 such designs; inclusion scores refuse values outside [0, 1])."""
    threads = torch.get_num_threads()
    try:
        for seed, n_threads in itertools.product((1, 4, 5), (1, 2)):  # summation order moves with threads
            torch.set_num_threads(n_threads)
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(277, 6, generator=g, dtype=torch.float64)
            y = 3 * x[:, 5] + 0.3 * torch.randn(277, generator=g, dtype=torch.float64)
            res = enumerate_spike_slab(x, y, SpikeSlabLinear())
            assert res.pip.max() == 1.0 and res.pip.min() >= 0.0, res.pip
            # the same probabilities as the model masses summed directly
            codes = np.arange(res.model_probs.size)
            direct = [res.model_probs[(codes >> j) & 1 == 1].sum() for j in range(6)]
            np.testing.assert_allclose(res.pip, direct, rtol=1e-12, atol=1e-15)
    finally:
        torch.set_num_threads(threads)


def test_score_spec_keeps_the_bands_of_a_one_dimensional_instance():
    """On a 1-D regression instance every seed's row keeps its predictive bands (the scoreboard's figure):
    the guide's own draws, in increasing x, with a 95 % interval of y around the mean of f."""
    from zoo.reference.instances import DataSpec, ReferenceInstance
    from zoo.reference.score import ScoreConfig, score_spec

    inst = ReferenceInstance(
        name="toy-1d", model="mfvi-bnn", method="nuts", data=DataSpec("toy-hs", n_train=40, n_test=12),
        hidden=(3,),
    )  # fmt: skip
    ds = inst.dataset()
    rng = np.random.default_rng(0)
    f = rng.standard_normal((200, ds.n_test))
    arrays = {"x_test": np.asarray(ds.x_test, float), "y_test": np.asarray(ds.y_test, float), "f": f, "y": f}
    cfg = ScoreConfig(steps=20, draws=300)
    res = score_spec("mfvi-bnn", "normal", inst, (arrays, {"method": "nuts"}), cfg)
    b = res["per_seed"][0]["bands"]
    assert b["x"] == sorted(np.asarray(ds.x_test)[:, 0].tolist()) and len(b["f_mean"]) == ds.n_test
    assert all(lo < m < hi for lo, m, hi in zip(b["y_lo"], b["f_mean"], b["y_hi"]))
    assert "y" in res["scores"] and "f" in res["scores"]
