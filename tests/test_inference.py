"""The training loop: minibatch scaling, seeds, stopping, callbacks, hybrid gradient + closed-form steps."""

from __future__ import annotations

import copy

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine

from guides.autoguides import make_autoguide
from zoo.core.guide import ClosedFormGuide
from zoo.infer.loop import ConvergenceMonitor, fit, make_optimizer

from .helpers import blr_data, blr_model, mlp_model


def _loglik_sum(model, guide_trace, x, y, subsample=None):
    tr = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(x, y, subsample=subsample)
    tr.compute_log_prob()
    return tr.nodes["obs"]["log_prob"].sum()  # Pyro's trace log_prob already carries the plate scale


def test_minibatch_loglik_is_scaled_to_the_full_data():
    """With weights fixed, N/B-scaled minibatch log-likelihoods over a partition average to the full sum."""
    x, y = blr_data(n=60, dtype=torch.float32)
    model = mlp_model()
    guide = make_autoguide("delta", model)
    gtr = poutine.trace(guide).get_trace(x, y)
    full = _loglik_sum(model, gtr, x, y)
    perm = torch.randperm(60)
    parts = [_loglik_sum(model, gtr, x, y, subsample=perm[i : i + 15]) for i in range(0, 60, 15)]
    assert torch.allclose(torch.stack(parts).mean(), full, rtol=1e-5)
    assert not torch.allclose(parts[0], full)  # a single batch really is scaled, not the full sum


def test_same_seed_same_run_different_seed_different_run():
    x, y = blr_data(n=50, dtype=torch.float32)
    runs = []
    for seed in (3, 3, 4):
        pyro.clear_param_store()
        model = mlp_model()
        runs.append(
            fit(
                model,
                make_autoguide("normal", model),
                x,
                y,
                steps=25,
                batch_size=10,
                seed=seed,
                progress=False,
            ).elbo
        )
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_fits_do_not_share_parameters_by_name():
    x, y = blr_data(n=40, dtype=torch.float32)
    m1, m2 = mlp_model(), mlp_model()
    r1 = fit(m1, make_autoguide("normal", m1), x, y, steps=20, progress=False, seed=1)
    before = {k: v.detach().clone() for k, v in r1.param_state["params"].items()}
    fit(m2, make_autoguide("normal", m2), x, 3 * y, steps=20, progress=False, seed=2)
    r1.predict(x, num_samples=3)
    for k, v in r1.param_state["params"].items():
        assert torch.equal(v.detach(), before[k]), k


def test_tolerance_stops_early_and_callbacks_can_stop():
    x, y = blr_data(dtype=torch.float32)
    from zoo.experiments.registry import build

    model, guide, _ = build("blr-cavi", 3, 1, "regression")
    res = fit(model, guide, x, y, steps=500, tol=1e-9, progress=False)
    assert res.converged and res.steps < 500
    seen = []

    def stop_at_7(step, elbo, result):
        seen.append(step)
        if step == 7:
            raise StopIteration

    model, guide, _ = build("blr-cavi", 3, 1, "regression")
    res = fit(model, guide, x, y, steps=100, callbacks=[stop_at_7], progress=False)
    assert res.steps == 7 and seen == list(range(1, 8))


def test_convergence_monitor_windows():
    m = ConvergenceMonitor(tol=1e-3, patience=2, window=2)
    flags = [m.update(v) for v in [-100.0, -100.0, -50.0, -50.0, -50.01, -50.0, -50.0, -50.0]]
    # window means: -100, -50, -50.005, -50 -> relative changes 1, 1e-4, 1e-4: stop at the 4th window
    assert flags == [False] * 7 + [True]
    with pytest.raises(ValueError, match="tol"):
        ConvergenceMonitor(tol=-1)


class HybridGuide(ClosedFormGuide):
    """q(w) by gradient (pyro.param), q(sigma2) = IG(a, b) in closed form given q(w)."""

    def __init__(self, model, d):
        super().__init__()
        self.d = d
        self.register_buffer("a", model.likelihood.concentration.clone())
        self.register_buffer("b", model.likelihood.rate.clone())

    def forward(self, x, y=None, subsample=None):
        loc = pyro.param("w_loc", torch.zeros(1, self.d, dtype=x.dtype))
        scale = pyro.param(
            "w_scale", 0.1 * torch.ones(1, self.d, dtype=x.dtype), constraint=dist.constraints.positive
        )
        pyro.sample("fc0.weight", dist.Normal(loc, scale).to_event(2))
        pyro.sample("sigma2", dist.InverseGamma(self.a, self.b))

    def closed_form_update(self, model, x, y, subsample=None):
        loc, scale = pyro.param("w_loc")[0], pyro.param("w_scale")[0]
        r = y - x @ loc
        esq = r @ r + ((x**2) @ (scale**2)).sum()
        self.a.copy_(model.likelihood.concentration + 0.5 * x.shape[0])
        self.b.copy_(model.likelihood.rate + 0.5 * esq)


def test_hybrid_gradient_and_closed_form_steps_in_one_iteration():
    x, y = blr_data(n=80, dtype=torch.float64)
    model = blr_model().double()
    guide = HybridGuide(model, 3)
    res = fit(model, guide, x, y, steps=600, lr=0.05, progress=False)
    with res.activate():
        names = set(pyro.get_param_store().keys())
        loc, scale = pyro.param("w_loc")[0].detach(), pyro.param("w_scale")[0].detach()
    assert names == {"w_loc", "w_scale"}  # the closed-form buffers never reach the optimizer
    r = y - x @ loc
    expected_b = 1.0 + 0.5 * (r @ r + ((x**2) @ scale**2).sum())
    assert torch.allclose(guide.b, expected_b)  # the closed-form step ran after the last gradient step
    assert float(guide.a) == 2.0 + 40
    ols = torch.linalg.lstsq(x, y.unsqueeze(-1)).solution.squeeze(-1)
    assert torch.allclose(loc, ols, atol=0.1)


def test_make_optimizer_and_bad_arguments():
    x, y = blr_data(n=20, dtype=torch.float32)
    model = mlp_model()
    guide = make_autoguide("normal", model)
    assert make_optimizer("clipped_adam", 1e-3).pt_optim_constructor.__name__ == "ClippedAdam"
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer("lbfgs")
    with pytest.raises(ValueError, match="lr"):
        make_optimizer("adam", lr=-1.0)
    bad_x = x.clone()
    bad_x[0, 0] = float("nan")
    cases = [
        (dict(x=bad_x), ValueError, "x"),
        (dict(x=x[:, 0]), ValueError, "x"),
        (dict(x=x.numpy()), TypeError, "x"),
        (dict(y=y[:5]), ValueError, "y"),
        (dict(y=y.long()), TypeError, "y"),
        (dict(steps=-1), ValueError, "steps"),
        (dict(steps=1.5), TypeError, "steps"),
        (dict(batch_size=0), ValueError, "batch_size"),
        (dict(seed=-2), ValueError, "seed"),
        (dict(tol=0.0), ValueError, "tol"),
        (dict(optimizer=torch.optim.Adam), TypeError, "optimizer"),
        (dict(loss="elbo"), TypeError, "loss"),
        (dict(guide=3), TypeError, "guide"),
    ]
    for override, exc, name in cases:
        kw = dict(x=x, y=y, steps=2, progress=False, guide=guide)
        kw.update(override)
        with pytest.raises(exc, match=name):
            fit(model, kw.pop("guide"), kw.pop("x"), kw.pop("y"), **kw)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            fit(model, guide, x, y, steps=1, device="cuda", progress=False)


def test_classification_fit_runs_with_every_autoguide():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 4, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    for name in ("normal", "diagonal", "lowrank", "mvn", "delta"):
        pyro.clear_param_store()
        model = mlp_model(4, (5,), "multiclass", 3)
        res = fit(model, make_autoguide(name, model), x, y, steps=30, lr=0.05, progress=False)
        p = res.predict(x, num_samples=4)
        assert p.probs.shape == (60, 3)
        assert torch.allclose(p.probs.sum(-1), torch.ones(60))


# ----------------------------------------------------------------------- fused optimizer (zoo.infer.optim)


def _fit_with(optim, steps=30, seed=5, x=None, y=None):
    from guides.lbbnn.meanfield import MeanFieldLBBNNGuide  # a guide with several parameter tensors per layer
    from zoo.core.architectures import MLP
    from zoo.core.likelihoods import make_likelihood
    from zoo.core.model import BayesianModel
    from zoo.families.lbbnn.prior import SpikeSlabPrior

    arch = MLP(3, (6,), 1)
    model = BayesianModel(
        arch, SpikeSlabPrior.for_architecture(arch, hyper="fixed"), make_likelihood("regression")
    )
    pyro.set_rng_seed(seed)
    guide = MeanFieldLBBNNGuide(model)
    return fit(model, guide, x, y, steps=steps, optimizer=optim, batch_size=16, seed=seed, progress=False)


def test_fused_optimizer_matches_pyro_per_parameter_adam():
    """zoo.infer.optim.FusedPyroOptim (the default ``adam``) takes the same steps as ``pyro.optim.Adam``'s one
    optimizer per tensor, including per-parameter learning rates from a callable."""
    from zoo.infer.optim import FusedPyroOptim

    x, y = blr_data(n=64, dtype=torch.float32)
    a = _fit_with(pyro.optim.Adam({"lr": 0.01}), x=x, y=y)
    b = _fit_with(make_optimizer("adam", 0.01), x=x, y=y)
    assert isinstance(b.optim, FusedPyroOptim)
    torch.testing.assert_close(torch.tensor(a.elbo), torch.tensor(b.elbo), rtol=1e-5, atol=1e-4)

    def per_param(name):  # the inclusion logits learn 10x faster
        return {"lr": 0.05 if "omega" in name or "logit" in name else 0.005}

    c = _fit_with(pyro.optim.Adam(per_param), x=x, y=y)
    d = _fit_with(FusedPyroOptim(torch.optim.Adam, per_param), x=x, y=y)
    torch.testing.assert_close(torch.tensor(c.elbo), torch.tensor(d.elbo), rtol=1e-5, atol=1e-4)
    assert len(d.optim._opt.param_groups) == 2
    assert abs(c.elbo[-1] - a.elbo[-1]) > 1e-3  # the per-parameter rates did change the run


def test_fused_optimizer_skips_parameters_absent_from_the_step_and_round_trips_state():
    """A parameter not in a step's trace keeps its value even with a stale gradient (as with
    per-parameter optimizers); ``get_state``/``set_state`` use PyroOptim's per-parameter format, so a
    state saved by one class resumes in the other."""
    from zoo.infer.optim import FusedPyroOptim

    pyro.clear_param_store()
    p1 = pyro.param("p1", torch.ones(3))
    p2 = pyro.param("p2", torch.ones(2))
    opt = FusedPyroOptim(torch.optim.Adam, {"lr": 0.1})
    for p in (p1, p2):
        p.grad = torch.ones_like(p)
    opt([p1.unconstrained(), p2.unconstrained()])
    before = p2.detach().clone()
    p1.grad, p2.grad = torch.ones(3), torch.ones(2)  # p2 has a stale gradient but is not in the step
    opt([pyro.get_param_store()._params["p1"]])
    torch.testing.assert_close(pyro.param("p2").detach(), before)
    # Adam's first steps with a constant gradient move by exactly lr each
    torch.testing.assert_close(pyro.param("p1").detach(), torch.full((3,), 0.8))
    state = opt.get_state()
    assert set(state) == {"p1", "p2"} and int(state["p1"]["state"][0]["step"]) == 2
    # the same state in pyro.optim.Adam: the next step is identical
    ref = pyro.optim.Adam({"lr": 0.1})
    ref.set_state(copy.deepcopy(state))  # torch loads without copying: give each its own tensors
    fused = FusedPyroOptim(torch.optim.Adam, {"lr": 0.1})
    fused.set_state(copy.deepcopy(state))
    u = pyro.get_param_store()._params["p1"]
    start = u.detach().clone()
    u.grad = torch.full_like(u, 0.5)
    ref([u])
    after_ref = u.detach().clone()
    with torch.no_grad():
        u.copy_(start)
    u.grad = torch.full_like(u, 0.5)
    fused([u])
    torch.testing.assert_close(u.detach(), after_ref)
    with pytest.raises(TypeError, match="optim_constructor"):
        FusedPyroOptim(pyro.optim.Adam, {"lr": 0.1})


# --------------------------------------------------------------------------- FitConfig (zoo.infer.config)


def test_fit_config_object_and_keywords_give_the_same_run():
    from zoo.infer.config import FitConfig

    x, y = blr_data(n=40, dtype=torch.float32)
    runs = []
    for how in ("keywords", "config", "mapping", "config+keywords"):
        pyro.clear_param_store()
        model = mlp_model()
        guide = make_autoguide("normal", model)
        settings = {"steps": 12, "batch_size": 8, "seed": 4, "lr": 0.02, "progress": False}
        if how == "keywords":
            res = fit(model, guide, x, y, **settings)
        elif how == "config":
            res = fit(model, guide, x, y, FitConfig(**settings))
        elif how == "mapping":
            res = fit(model, guide, x, y, config=settings)
        else:
            res = fit(model, guide, x, y, FitConfig(**{**settings, "lr": 1.0}), lr=0.02)
        runs.append(res)
    assert all(r.elbo == runs[0].elbo for r in runs)
    cfg = runs[0].fit_config
    assert cfg == FitConfig(**{**settings, "window": 50})  # the effective window is recorded
    assert runs[0].config["batch_size"] == 8 and runs[0].config["optimizer"] == "adam"
    assert FitConfig.from_dict(cfg.to_dict()) == cfg


def test_fit_config_metadata_and_legacy_config_mapping():
    """``config={"y_mean": ...}`` (the pre-config form) records the non-field entries as metadata, which
    ``FitResult.config`` keeps at top level; a metadata key may not shadow a field."""
    from zoo.infer.config import FitConfig

    x, y = blr_data(n=20, dtype=torch.float32)
    model = mlp_model()
    legacy = {"y_mean": 1.0, "y_std": 2.0, "steps": 3}
    guide = make_autoguide("normal", model)
    res = fit(model, guide, x, y, steps=2, progress=False, config=legacy, metadata={"dataset": "toy"})
    assert res.steps == 2  # keywords override the config
    assert res.config["y_mean"] == 1.0 and res.config["dataset"] == "toy"
    assert res.fit_config.metadata == {"y_mean": 1.0, "y_std": 2.0, "dataset": "toy"}
    with pytest.raises(ValueError, match="metadata"):
        FitConfig(metadata={"steps": 3})


def test_fit_config_validation_names_the_field():
    from zoo.infer.config import FitConfig

    cases = [
        ({"steps": -1}, ValueError, "steps"),
        ({"optimizer": "lbfgs"}, ValueError, "optimizer"),
        ({"lr": 0.0}, ValueError, "lr"),
        ({"num_particles": 0}, ValueError, "num_particles"),
        ({"patience": 0}, ValueError, "patience"),
        ({"window": 1.5}, TypeError, "window"),
        ({"device": "tpu9"}, ValueError, "device"),
        ({"progress": "yes"}, TypeError, "progress"),
        ({"metadata": [1]}, TypeError, "metadata"),
    ]
    for kw, exc, name in cases:
        with pytest.raises(exc, match=name):
            FitConfig(**kw)
    with pytest.raises(ValueError, match="stepz"):
        FitConfig.from_dict({"stepz": 3})
    x, y = blr_data(n=20, dtype=torch.float32)
    model = mlp_model()
    with pytest.raises(ValueError, match="stepz"):
        fit(model, make_autoguide("normal", model), x, y, stepz=3)
    assert FitConfig(device=torch.device("cpu")).device == "cpu"
