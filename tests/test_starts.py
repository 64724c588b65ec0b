"""Best of several starts (``zoo.experiments.starts``): which starts a run gets, the ELBO estimate that
compares them (against a closed form), the choice, and the fit it keeps."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch

from zoo.data.tensors import fit_tensors
from zoo.experiments.starts import best_start, elbo_estimate, resolve_starts

LCRT = {"lcrt": ({}, {"init_logit": (4.0, 5.0)})}


def test_resolve_starts_explicit_default_and_override():
    assert resolve_starts({}, {}, "normal", {}) == [{}]
    assert resolve_starts({}, {"starts": LCRT}, "lcrt", {}) == [{}, {"init_logit": (4.0, 5.0)}]
    assert resolve_starts({}, {"starts": LCRT}, "mean-field", {}) == [{}]  # defaults are per guide
    # the run's own choice of an option the starts vary wins: one fit with it
    assert resolve_starts({}, {"starts": LCRT}, "lcrt", {"init_logit": [2, 3]}) == [{}]
    assert resolve_starts({}, {"starts": LCRT}, "lcrt", {"init_scale": 0.1}) == [
        {},
        {"init_logit": (4.0, 5.0)},
    ]
    # explicit starts win over the defaults, and [{}] is one plain fit
    assert resolve_starts({"starts": [{}]}, {"starts": LCRT}, "lcrt", {}) == [{}]
    assert resolve_starts({"starts": [{"a": 1}, {"a": 2}]}, {}, "x", {}) == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize("bad", ["lcrt", [], (), [{}, 3], {"init_logit": [4, 5]}, None])
def test_resolve_starts_rejects_what_is_not_a_list_of_mappings(bad):
    with pytest.raises(TypeError, match=r"fit_options\['starts'\]"):
        resolve_starts({"starts": bad}, {}, "lcrt", {})


def _conjugate():
    """``z ~ N(0, 1)``, ``y_i ~ N(z, 1)``; guide ``q(z) = N(m, s²)``; and the closed-form ELBO."""
    m, s = 0.3, 0.4

    def model(x, y):
        z = pyro.sample("z", dist.Normal(0.0, 1.0))
        with pyro.plate("data", y.shape[0]):
            pyro.sample("y", dist.Normal(z, 1.0), obs=y)

    def guide(x, y):
        pyro.sample("z", dist.Normal(m, s))

    y = torch.tensor([0.5, -0.2, 1.1, 0.7])
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    loglik = float(sum(-half_log_2pi - 0.5 * ((yi - m) ** 2 + s**2) for yi in y.tolist()))
    logprior = -half_log_2pi - 0.5 * (m**2 + s**2)
    entropy = 0.5 * math.log(2 * math.pi * math.e * s**2)
    return model, guide, y, loglik + logprior + entropy


def test_elbo_estimate_is_unbiased_for_the_closed_form_and_leaves_the_rng_alone():
    model, guide, y, exact = _conjugate()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    est, se = elbo_estimate(model, guide, None, y, particles=400, seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    assert se > 0 and abs(est - exact) < 4 * se, (est, exact, se)
    # the standard error is the single-draw sd of log p(y, z) - log q(z), z ~ q, over sqrt(particles)
    assert se == pytest.approx(math.sqrt(_single_draw_var(y)) / math.sqrt(400), rel=0.2)
    assert elbo_estimate(model, guide, None, y, particles=400, seed=7) == (est, se)  # seeded
    with pytest.raises(ValueError, match="particles"):
        elbo_estimate(model, guide, None, y, particles=1)


def _single_draw_var(y: torch.Tensor) -> float:
    m, s = 0.3, 0.4
    z = m + s * torch.randn(200_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    yy = y.double()[:, None]
    logp = dist.Normal(z, 1.0).log_prob(yy).sum(0) + dist.Normal(0.0, 1.0).log_prob(z)
    return float((logp - dist.Normal(m, s).log_prob(z)).var())


def test_best_start_takes_the_highest_finite_elbo_and_the_first_on_ties():
    assert best_start([1.0, 3.0, 3.0]) == 1
    assert best_start([math.nan, -math.inf, 2.0]) == 2
    assert best_start([math.nan, 5.0]) == 1
    assert best_start([-math.inf, -math.inf]) == 0


def test_lbbnn_default_keeps_the_start_with_the_higher_elbo_and_it_is_that_start_s_fit():
    from zoo.experiments.runs import fit_on_dataset

    kw = {"hidden": [4], "steps": 40, "num_samples": 5, "progress": False, "seed": 2}
    run = fit_on_dataset("lbbnn", "diabetes", **kw)
    m = run.metrics
    assert m["starts"] == 2 and m["guide"] == "lcrt"
    elbos = [m["start_elbo_0"], m["start_elbo_1"]]
    assert all(math.isfinite(e) for e in elbos) and m["start"] == max(range(2), key=lambda i: elbos[i])
    assert m["start_elbo_se_0"] > 0 and m["start_elbo_se_1"] > 0
    # each start alone: pinned to one start, or setting the option the starts vary (one fit either way)
    pinned = fit_on_dataset("lbbnn", "diabetes", **kw, fit_options={"starts": [{}]})
    dense = fit_on_dataset("lbbnn", "diabetes", **kw, guide_options={"init_logit": [4.0, 5.0]})
    assert "starts" not in pinned.metrics and "starts" not in dense.metrics
    # the kept fit is that start's own fit, bit for bit, and each ELBO is its start's fit's estimate
    kept = (pinned, dense)[m["start"]]
    assert kept.metrics["rmse"] == m["rmse"] and kept.metrics["nll"] == m["nll"]
    xtr, ytr, *_ = fit_tensors(run.dataset, torch.device("cpu"), standardize_y=True)
    for i, alone in enumerate((pinned, dense)):
        r = alone.result
        with r.activate():
            assert elbo_estimate(r.model, r.guide, xtr, ytr, r.loss, seed=2)[0] == m[f"start_elbo_{i}"]


def test_a_bad_start_fails_before_any_fit(monkeypatch):
    import zoo.experiments.runs as runs

    def no_fit(*args, **kwargs):
        raise AssertionError("a fit ran before every start was built")

    monkeypatch.setattr(runs, "fit", no_fit)
    with pytest.raises((TypeError, ValueError), match="no_such_option"):
        runs.fit_on_dataset(
            "mfvi-bnn",
            "diabetes",
            hidden=[4],
            steps=5,
            progress=False,
            fit_options={"starts": [{}, {"no_such_option": 1}]},
        )
    with pytest.raises(TypeError, match=r"fit_options\['starts'\]"):
        runs.fit_on_dataset(
            "mfvi-bnn", "diabetes", hidden=[4], steps=5, progress=False, fit_options={"starts": "x"}
        )


def test_paper_protocols_fit_the_lbbnn_from_one_start():
    from zoo.experiments.registry import get_entry
    from zoo.experiments.reproduce import PROTOCOLS, available_protocols, run_config

    available_protocols()
    entry = get_entry("lbbnn")
    assert resolve_starts({}, entry.fit_defaults, entry.default_guide, {}) == [{}, {"init_logit": (4.0, 5.0)}]
    seen = 0
    for name, p in PROTOCOLS.items():
        for r in p.runs(None):
            if r.model != "lbbnn":
                continue
            _, _, cfg = run_config(r)
            guide = cfg.guide or entry.default_guide
            assert resolve_starts(cfg.fit_options, entry.fit_defaults, guide, cfg.guide_options) == [{}], (
                name,
                r.variant,
            )
            seen += guide == "lcrt"
    assert seen > 0  # the paper-003 protocols do have LCRT rows


def test_zoo_fit_reports_the_kept_start_and_one_start_fits_once(tmp_path, capsys):
    import json

    from zoo.experiments.cli import main

    argv = ["fit", "lbbnn", "--dataset", "diabetes", "--hidden", "4", "--steps", "30", "--num-samples", "5"]
    assert main([*argv, "--no-progress", "--out", str(tmp_path / "two")]) == 0
    two = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert two["starts"] == 2 and f"kept start {two['start']} of 2" in capsys.readouterr().out
    assert main([*argv, "--one-start", "--no-progress", "--out", str(tmp_path / "one")]) == 0
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert "starts" not in one and "kept start" not in capsys.readouterr().out
    assert (one["rmse"] == two["rmse"]) == (two["start"] == 0)


def test_bench_fits_every_row_from_one_start(tmp_path):
    from zoo.experiments.bench import BenchPlan, parse_spec, run_fits
    from zoo.experiments.suites import Budget, Suite

    tiny = Suite(
        name="tiny",
        description="diabetes x 1 split, 4 hidden units (tests)",
        datasets=("diabetes",),
        splits=(0,),
        hidden=(4,),
        budget=Budget(steps=3, lr=1e-2, batch_size=None, cavi_sweeps=2, num_samples=5),
    )
    plan = BenchPlan(tiny, (parse_spec("lbbnn"),))
    task = plan.tasks()[0]
    assert task.config["fit_options"]["starts"] == [{}]
    (row,) = run_fits(plan, tmp_path / "work", progress=False)["rows"]
    assert row["guide"] == "lcrt" and "starts" not in row


def test_a_closed_form_guide_is_compared_by_its_exact_elbo():
    from zoo.experiments.runs import fit_on_dataset

    kw = {"hidden": [], "steps": 5, "num_samples": 5, "progress": False}
    run = fit_on_dataset("blr-cavi", "diabetes", **kw, fit_options={"starts": [{}, {}]})
    m = run.metrics
    assert m["starts"] == 2 and m["start"] == 0  # the same start twice: a tie, the first kept
    assert m["start_elbo_se_0"] == 0.0 and m["start_elbo_0"] == m["start_elbo_1"]
    r = run.result
    xtr, ytr, *_ = fit_tensors(run.dataset, torch.device("cpu"), standardize_y=True)
    with r.activate(), torch.no_grad():
        assert m["start_elbo_0"] == pytest.approx(
            float(r.guide.closed_form_elbo(r.model, xtr, ytr)), rel=1e-12
        )
