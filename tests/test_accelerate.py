"""SQUAREM acceleration of closed-form sweeps (:mod:`zoo.infer.accelerate`): same fixed point as the plain
sweep, an ELBO that never decreases, fewer sweeps, and clear refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.experiments.registry import build
from zoo.infer.accelerate import squarem_cycle
from zoo.infer.loop import fit


def _data(n: int = 60, d: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.tanh(x @ torch.tensor([1.5, -1.0, 0.5], dtype=torch.float64)[:d]) + 0.2 * torch.randn(
        n, generator=g, dtype=torch.float64
    )
    return x.float(), y.float()  # the dtype the loop fits in, so a sweep here sees the same data


def _fit(name: str, accelerate: str | None, steps: int, tol: float | None = None, hidden=(3,), **options):
    x, y = _data()
    model, guide, _ = build(name, x.shape[1], 1, "regression", hidden=hidden, seed=0, **options)
    cfg = {"steps": steps, "tol": tol, "patience": 1, "seed": 0, "progress": False, "accelerate": accelerate}
    res = fit(model, guide, x, y, **cfg)
    return res, x, y


def _state(res) -> np.ndarray:
    named = sorted(res.guide.named_buffers())
    bufs = [b.detach().double().flatten() for _, b in named if b.is_floating_point()]
    return torch.cat(bufs).numpy()


def test_accelerated_fixed_point_equals_the_plain_one_on_conjugate_regression() -> None:
    plain, _, _ = _fit("blr-cavi", None, 3000, tol=1e-14, hidden=())
    fast, _, _ = _fit("blr-cavi", "squarem", 1000, tol=1e-14, hidden=())
    assert fast.converged and plain.converged
    assert fast.elbo[-1] == pytest.approx(plain.elbo[-1], abs=1e-8 * abs(plain.elbo[-1]))
    np.testing.assert_allclose(_state(fast), _state(plain), atol=1e-8, rtol=1e-6)


def test_accelerated_bowtie_reaches_a_fixed_point_of_the_plain_sweep() -> None:
    """GVBNN 3-2-1 on 60 rows: SQUAREM converges (relative ELBO change 1e-13) where as many plain sweeps are
    still climbing; one plain sweep from the accelerated fixed point changes the ELBO by less than 1e-10
    relative and moves no entry by more than 1e-5.  (The state is pinned less tightly than the ELBO: the
    bow-tie's ELBO is flat to 1e-12 along a direction in which a sweep still moves entries by ~6e-7.)"""
    fast, x, y = _fit("bowtie", "squarem", 1000, tol=1e-13, hidden=(2,), gaussian_prior=True)
    assert fast.converged, fast.elbo[-3:]
    sweeps = fast.loop_state["sweeps"]
    before = _state(fast)
    with torch.no_grad():
        fast.guide.closed_form_update(fast.model, x, y)
        again = fast.guide.closed_form_elbo(fast.model, x, y)
    np.testing.assert_allclose(_state(fast), before, atol=1e-5, rtol=1e-6)
    assert again == pytest.approx(fast.elbo[-1], abs=1e-10 * abs(again))
    plain, _, _ = _fit("bowtie", None, sweeps, hidden=(2,), gaussian_prior=True)
    assert plain.elbo[-1] < fast.elbo[-1] - 1.0  # the plain iteration is still nats below


def test_squarem_elbo_never_decreases_and_saves_sweeps_on_the_bowtie() -> None:
    fast, _, _ = _fit("bowtie", "squarem", 60)
    e = np.asarray(fast.elbo)
    assert np.all(np.diff(e) >= -1e-9 * np.abs(e[1:])), np.diff(e).min()
    assert fast.loop_state["squarem_accepted"] > 0  # the extrapolation is used, not only the fallback
    # to the same ELBO, the plain sweep needs more sweeps than SQUAREM used
    plain, _, _ = _fit("bowtie", None, fast.loop_state["sweeps"])
    assert plain.elbo[-1] <= fast.elbo[-1] + 1e-9 * abs(fast.elbo[-1])


def test_safeguard_falls_back_to_the_plain_sweeps_when_extrapolation_fails() -> None:
    """A map whose extrapolated states are rejected (the ELBO punishes leaving [0, 1]) ends on theta2."""
    m = torch.nn.Module()
    m.register_buffer("t", torch.tensor([0.0], dtype=torch.float64))

    def sweep() -> None:  # t -> (t + 1)/2: converges to 1 from below
        m.t = 0.5 * (m.t + 1.0)

    def elbo() -> float:  # an objective that refuses t > 0.9
        t = float(m.t)
        return -1e9 if t > 0.9 else t

    # from 0: theta1 = .5, theta2 = .75; r = .5, v = -.25, alpha = -2: theta' = 0 + 2 - 1 = 1 (SQUAREM is
    # exact on a linear map), F = 1 > .9: rejected; alpha = -1.5: theta' = 1.5 - .5625 = .9375, F = .97:
    # rejected; after one backtrack the cycle falls back to theta2
    value, rec = squarem_cycle(sweep, elbo, (m,), max_backtracks=1)
    assert rec["sweeps"] == 4
    assert not rec["accepted"] and float(m.t) == pytest.approx(0.75) and value == pytest.approx(0.75)


def test_accelerate_is_refused_where_it_does_not_apply() -> None:
    x, y = _data()
    model, guide, _ = build("mfvi-bnn", 3, 1, "regression", hidden=(3,))
    with pytest.raises(ValueError, match="accelerate: 'squarem' accelerates the sweeps of a closed-form"):
        fit(model, guide, x, y, steps=2, progress=False, accelerate="squarem")
    model, guide, _ = build("bowtie", 3, 1, "regression", hidden=(3,))
    with pytest.raises(ValueError, match="accelerate must be None or one of"):
        fit(model, guide, x, y, steps=2, progress=False, accelerate="anderson")
    with pytest.raises(ValueError, match="accelerate: SQUAREM extrapolates full-batch sweeps"):
        fit(model, guide, x, y, steps=2, progress=False, accelerate="squarem", batch_size=10)


def test_runs_pass_accelerate_to_the_loop_and_refuse_other_fit_options() -> None:
    from zoo.data.core import from_arrays
    from zoo.experiments.runs import RunConfig, fit_on_dataset

    x, y = _data(n=80)
    ds = from_arrays("toy", "regression", x[:60].numpy(), y[:60].numpy(), x[60:].numpy(), y[60:].numpy())
    cfg = RunConfig(steps=6, progress=False, fit_options={"accelerate": "squarem"})
    run = fit_on_dataset("blr-cavi", ds, cfg)
    assert run.result.config["accelerate"] == "squarem" and run.result.loop_state["sweeps"] > 6
    # every protocol row says whether the stopping rule fired and how many sweeps the SQUAREM cycles cost
    assert run.metrics["sweeps"] == run.result.loop_state["sweeps"]
    squarem = {"accelerate": "squarem"}
    short = fit_on_dataset("blr-cavi", ds, RunConfig(steps=1, progress=False, fit_options=squarem))
    assert short.metrics["converged"] is False  # the rule needs three small changes in a row
    done = fit_on_dataset("blr-cavi", ds, RunConfig(steps=500, progress=False, fit_options=squarem))
    assert done.metrics["converged"] is True and done.metrics["steps"] < 500
    plain = fit_on_dataset("blr-cavi", ds, RunConfig(steps=3, progress=False))
    assert plain.metrics.get("sweeps", 3) == 3 and plain.metrics["converged"] is False
    with pytest.raises(ValueError, match="fit_options: model 'blr-cavi' is fitted by zoo.infer.loop.fit"):
        fit_on_dataset("blr-cavi", ds, RunConfig(steps=2, progress=False, fit_options={"stage_lrs": "short"}))


def test_protocol_tables_count_converged_closed_form_fits() -> None:
    from zoo.experiments.protocol import Protocol
    from zoo.experiments.reproduce import _markdown, _summarize

    def row(split, converged, sweeps=None):
        r = {"variant": "V", "dataset": "d", "split": split, "rmse": 1.0 + split, "fit_seconds": 2.0}
        r["converged"] = converged
        return r if sweeps is None else {**r, "sweeps": sweeps}

    p = Protocol(name="p", description="x", runs=lambda s: [], metrics=("rmse",))
    header = {"command": "c", "machine": "m", "wall_seconds": 1.0, "torch": "t"}
    closed = _summarize([row(0, True, 30), row(1, False, 60), row(2, True, 90)], ("rmse",))
    assert closed["V"]["d"]["converged"] == 2 and closed["V"]["d"]["sweeps"]["mean"] == 60
    text = _markdown(p, closed, header)
    assert "| converged | sweeps |" in text and "| 2/3 | 60 |" in text
    gradient = _summarize([row(0, False), row(1, False)], ("rmse",))  # SVI rows: no sweeps, no column
    assert "converged" not in gradient["V"]["d"] and "converged" not in _markdown(p, gradient, header)
