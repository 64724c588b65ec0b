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


def _fit(
    name: str,
    accelerate: str | None,
    steps: int,
    tol: float | None = None,
    hidden=(3,),
    device=None,
    **options,
):
    x, y = (t.to(device) for t in _data())
    model, guide, _ = build(name, x.shape[1], 1, "regression", hidden=hidden, seed=0, **options)
    cfg = {
        "steps": steps,
        "tol": tol,
        "patience": 1,
        "seed": 0,
        "progress": False,
        "accelerate": accelerate,
        "device": device,
    }
    res = fit(model, guide, x, y, **cfg)
    return res, x, y


def _state(res) -> np.ndarray:
    named = sorted(res.guide.named_buffers())
    bufs = [b.detach().double().flatten() for _, b in named if b.is_floating_point()]
    return torch.cat(bufs).cpu().numpy()


def test_accelerated_fixed_point_equals_the_plain_one_on_conjugate_regression(device) -> None:
    plain, _, _ = _fit("blr-cavi", None, 3000, tol=1e-14, hidden=(), device=device)
    fast, _, _ = _fit("blr-cavi", "squarem", 1000, tol=1e-14, hidden=(), device=device)
    assert fast.converged and plain.converged
    assert fast.elbo[-1] == pytest.approx(plain.elbo[-1], abs=1e-8 * abs(plain.elbo[-1]))
    np.testing.assert_allclose(_state(fast), _state(plain), atol=1e-8, rtol=1e-6)


def test_accelerated_bowtie_reaches_a_fixed_point_of_the_plain_sweep(device) -> None:
    """GVBNN 3-2-1 on 60 rows: SQUAREM converges (relative ELBO change 1e-13) where as many plain sweeps are
    still climbing; one plain sweep from the accelerated fixed point changes the ELBO by less than 1e-10
    relative and moves no entry by more than 1e-5.  (The state is pinned less tightly than the ELBO: the
    bow-tie's ELBO is flat to 1e-12 along a direction in which a sweep still moves entries by ~6e-7.)"""
    fast, x, y = _fit("bowtie", "squarem", 1000, tol=1e-13, hidden=(2,), gaussian_prior=True, device=device)
    assert fast.converged, fast.elbo[-3:]
    sweeps = fast.loop_state["sweeps"]
    before = _state(fast)
    with torch.no_grad():
        fast.guide.closed_form_update(fast.model, x, y)
        again = fast.guide.closed_form_elbo(fast.model, x, y)
    np.testing.assert_allclose(_state(fast), before, atol=1e-5, rtol=1e-6)
    assert again == pytest.approx(fast.elbo[-1], abs=1e-10 * abs(again))
    plain, _, _ = _fit("bowtie", None, sweeps, hidden=(2,), gaussian_prior=True, device=device)
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


def test_safeguard_compares_with_the_elbo_the_cycle_started_from() -> None:
    """With ``elbo0`` (the ELBO of theta0, which the loop passes from the previous cycle) an extrapolated
    state is kept when it is at least as good as theta0, and the cycle evaluates the ELBO once; without it,
    the cycle compares with theta2 and evaluates twice."""
    m = torch.nn.Module()
    m.register_buffer("t", torch.tensor([0.0], dtype=torch.float64))
    calls: list[float] = []

    def sweep() -> None:  # t -> (t + 1)/2
        m.t = 0.5 * (m.t + 1.0)

    def elbo() -> float:  # rises to t = 0.8, falls after: theta2 = .75 scores .75, F(theta') = .97 scores .63
        t = float(m.t)
        calls.append(t)
        return t if t <= 0.8 else 1.6 - t

    # from 0: theta' = 1 (alpha = -2), F(theta') = 1 scores .6: below theta2's .75 but above theta0's 0
    value, rec = squarem_cycle(sweep, elbo, (m,), max_backtracks=0, elbo0=0.0)
    assert rec["accepted"] and value == pytest.approx(0.6) and float(m.t) == pytest.approx(1.0)
    assert calls == [pytest.approx(1.0)]
    m.t = torch.tensor([0.0], dtype=torch.float64)
    calls.clear()
    value, rec = squarem_cycle(sweep, elbo, (m,), max_backtracks=0)
    assert not rec["accepted"] and float(m.t) == pytest.approx(0.75) and value == pytest.approx(0.75)
    assert len(calls) == 2


def test_resumed_squarem_fit_equals_the_uninterrupted_one(tmp_path) -> None:
    """k SQUAREM cycles, save, load, k more equals 2k at once, bit for bit: the cached ELBO of the last
    cycle and the expanded covariance buffer both survive the checkpoint."""
    from zoo.infer import checkpoint
    from zoo.infer.loop import resume

    x, y = _data()
    full, _, _ = _fit("bowtie", "squarem", 12, hidden=(3,))
    half, _, _ = _fit("bowtie", "squarem", 6, hidden=(3,))
    checkpoint.save(half, tmp_path / "c.pt")
    model, guide, _ = build("bowtie", x.shape[1], 1, "regression", hidden=(3,), seed=0)
    loaded = checkpoint.load(tmp_path / "c.pt", model=model, guide=guide)
    assert loaded.loop_state["squarem_elbo"] == half.elbo[-1]
    s_last = dict(loaded.guide.named_buffers())["S0"]
    assert s_last.stride(0) == 0  # one matrix for every row, as the sweep left it
    resumed = resume(loaded, x, y, 6, progress=False)
    assert resumed.elbo == full.elbo
    np.testing.assert_array_equal(_state(resumed), _state(full))


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
    from zoo.experiments.protocol_report import protocol_markdown, summarize

    def row(split, converged, sweeps=None):
        r = {"variant": "V", "dataset": "d", "split": split, "rmse": 1.0 + split, "fit_seconds": 2.0}
        r["converged"] = converged
        return r if sweeps is None else {**r, "sweeps": sweeps}

    p = Protocol(name="p", description="x", runs=lambda s: [], metrics=("rmse",))
    header = {"command": "c", "machine": "m", "wall_seconds": 1.0, "torch": "t"}
    closed = summarize([row(0, True, 30), row(1, False, 60), row(2, True, 90)], ("rmse",))
    assert closed["V"]["d"]["converged"] == 2 and closed["V"]["d"]["sweeps"]["mean"] == 60
    text = protocol_markdown(p, closed, header)
    assert "| converged | sweeps |" in text and "| 2/3 | 60 |" in text
    gradient = summarize([row(0, False), row(1, False)], ("rmse",))  # SVI rows: no sweeps, no column
    assert "converged" not in gradient["V"]["d"] and "converged" not in protocol_markdown(p, gradient, header)


def test_expanded_buffers_stay_compact_and_extrapolate_like_full_ones() -> None:
    """A buffer that is an expanded view (one matrix shared by every row) is snapshot as that matrix: the
    cycle's result equals the one on the same buffer materialized, and it comes back as an expanded view."""

    seen: list[int] = []

    def run(expanded: bool) -> tuple[torch.nn.Module, float, dict]:
        m = torch.nn.Module()
        base = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
        s = base.expand(5, 2, 2)
        m.register_buffer("s", s if expanded else s.clone())
        m.register_buffer("u", torch.tensor([4.0, -2.0], dtype=torch.float64))

        def sweep() -> None:  # a linear contraction on both: fixed points 0.1 * ones and 1
            seen.append(m.s.stride(0))
            m.s = (0.6 * m.s[:1] + 0.04).expand(5, 2, 2) if expanded else 0.6 * m.s + 0.04
            m.u = 0.5 * m.u + 0.5

        def elbo() -> float:
            return -float(((m.s - 0.1) ** 2).sum() + ((m.u - 1.0) ** 2).sum())

        value, rec = squarem_cycle(sweep, elbo, (m,))
        return m, value, rec

    compact, v1, r1 = run(True)
    assert r1["sweeps"] == 3 and seen == [0, 0, 0]  # the extrapolated state is handed back expanded
    full, v2, r2 = run(False)
    assert r1["accepted"] and r1["alpha"] == pytest.approx(r2["alpha"], rel=1e-12)  # norms of the full buffer
    assert v1 == pytest.approx(v2, rel=1e-12)
    assert torch.allclose(compact.s, full.s, atol=1e-14) and torch.allclose(compact.u, full.u, atol=1e-14)


def test_bowtie_moment_caches_hit_only_on_unchanged_inputs() -> None:
    """``forward_moments`` / ``layer_pre_moments`` return the cached result for the same tensors, and
    recompute after an in-place change, a rebinding, or under autograd."""
    from guides.bowtie.linalg import Memo

    calls = []
    memo = Memo(2)
    a = torch.ones(3, dtype=torch.float64)

    def f(t):
        calls.append(1)
        return t.sum().item()

    assert memo([a], lambda: f(a)) == 3.0 and memo([a], lambda: f(a)) == 3.0 and len(calls) == 1
    a.add_(1.0)  # in place: the version counter moves
    assert memo([a], lambda: f(a)) == 6.0 and len(calls) == 2
    b = a.clone()  # equal values, another tensor
    assert memo([b], lambda: f(b)) == 6.0 and len(calls) == 3
    c = torch.ones(3, dtype=torch.float64, requires_grad=True)
    memo([c], lambda: f(c))
    memo([c], lambda: f(c))
    assert len(calls) == 5  # never cached under autograd
    with torch.no_grad():
        memo([c], lambda: f(c))
        memo([c], lambda: f(c))
    assert len(calls) == 6
    # the bow-tie sweep with the caches equals the uncached one exactly
    from guides.bowtie import moments

    res_cached, _, _ = _fit("bowtie", None, 5)
    orig_forward, orig_pre = moments._FORWARD, moments._PRE
    try:
        moments._FORWARD = moments._PRE = _NoCache()
        res_plain, _, _ = _fit("bowtie", None, 5)
    finally:
        moments._FORWARD, moments._PRE = orig_forward, orig_pre
    assert res_cached.elbo == res_plain.elbo
    np.testing.assert_array_equal(_state(res_cached), _state(res_plain))


class _NoCache:
    def __call__(self, tensors, fn):
        return fn()
