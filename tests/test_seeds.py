"""Seeds mean the same thing everywhere (issue 22, item 4): ``build(...)`` then ``fit(..., seed=s)`` is the
same fit in every process, for every registry entry and guide; ``build(..., seed=s)`` fixes the initial
values itself and leaves the global generators alone."""

from __future__ import annotations

import json
import subprocess
import sys

import pyro
import pytest
import torch

from zoo.core.build_seed import check_build_seed, reseed_fresh_build
from zoo.experiments.registry import available, build, build_from_spec, get_entry
from zoo.infer.loop import fit

_PROCESS = """
import json, sys, torch
torch.set_num_threads(1)
from zoo.experiments.registry import available, build, get_entry
from zoo.infer.loop import fit
torch.randn(int(sys.argv[1]))  # a different amount of unrelated randomness before building, per process
g = torch.Generator().manual_seed(5)
x = torch.randn(24, 3, generator=g)
y = x[:, 0] + 0.3 * torch.randn(24, generator=g)
out = {}
for name in available():
    entry = get_entry(name)
    full = "batch_size" in entry.fit_defaults and entry.fit_defaults["batch_size"] is None
    for guide in entry.guides:
        hidden = [3] if entry.default_hidden else []
        try:
            model, gd, _ = build(name, 3, 1, "regression", hidden=hidden, guide=guide)
            res = fit(model, gd, x, y, steps=3, batch_size=None if full else 8, seed=7, progress=False)
            out[name + ":" + guide] = res.elbo
        except Exception as e:
            out[name + ":" + guide] = type(e).__name__ + ": " + str(e)
print(json.dumps(out))
"""


def _pairs() -> list[str]:
    return [f"{n}:{g}" for n in available() for g in get_entry(n).guides]


@pytest.fixture(scope="module")
def two_processes() -> tuple[dict, dict]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS, str(k)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for k in (1, 1000)
    ]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr.decode()[-3000:]
        outs.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return outs[0], outs[1]


@pytest.mark.parametrize("pair", _pairs())
def test_build_then_fit_seed_is_reproducible_across_processes(two_processes, pair):
    a, b = two_processes
    assert not isinstance(a[pair], str), a[pair]
    assert len(a[pair]) == 3
    assert a[pair][0] == b[pair][0]  # step 0: the same initial values
    assert a[pair] == b[pair]  # and the same fit after it


def _data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 3, generator=g)
    return x, x[:, 0] + 0.1 * torch.randn(16, generator=g)


def _state(guide) -> dict:
    """The guide's parameters (closed-form buffers are recomputed by every step)."""
    return {k: v.detach().clone() for k, v in guide.named_parameters()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_build_seed_fixes_the_initial_values_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _, g1, spec = build("hs-bnn", 3, 1, "regression", hidden=[4], seed=11)
    assert torch.equal(torch.rand(3), expected)  # the global stream did not move
    torch.randn(77)
    _, g2, _ = build("hs-bnn", 3, 1, "regression", hidden=[4], seed=11)
    _, g3, _ = build("hs-bnn", 3, 1, "regression", hidden=[4], seed=12)
    assert _same(_state(g1), _state(g2))
    assert not _same(_state(g1), _state(g3))
    assert spec["seed"] == 11
    _, g4 = build_from_spec(spec)
    assert _same(_state(g1), _state(g4))


@pytest.mark.parametrize(
    "bad,error", [(-1, ValueError), (2**32, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_bad_build_seed_is_rejected_naming_seed(bad, error):
    with pytest.raises(error, match="seed"):
        build("mfvi-bnn", 3, 1, "regression", hidden=[4], seed=bad)
    with pytest.raises(error, match="seed"):
        check_build_seed(bad)


def test_fit_seed_matches_seeding_before_build():
    """``zoo fit --seed s`` / ``fit_on_dataset`` seed the generators, then build, then fit with ``s``; the API
    pattern ``build`` then ``fit(seed=s)`` (generators anywhere) is the same fit."""
    x, y = _data()
    pyro.set_rng_seed(5)
    m1, g1, _ = build("lbbnn", 3, 1, "regression", hidden=[4])
    r1 = fit(m1, g1, x, y, steps=3, batch_size=8, seed=5, progress=False)
    torch.randn(1000)
    m2, g2, _ = build("lbbnn", 3, 1, "regression", hidden=[4])
    r2 = fit(m2, g2, x, y, steps=3, batch_size=8, seed=5, progress=False)
    assert r1.elbo == r2.elbo


def test_different_fit_seeds_draw_different_initial_values():
    x, y = _data()
    firsts = []
    for seed in (1, 2):
        m, g, _ = build("hs-bnn", 3, 1, "regression", hidden=[4])
        firsts.append(fit(m, g, x, y, steps=1, batch_size=8, seed=seed, progress=False).elbo[0])
    assert firsts[0] != firsts[1]


def test_a_pair_changed_after_build_is_not_reseeded():
    """Only untouched builds are redrawn: a value the user wrote before fitting is kept."""
    x, y = _data()
    m, g, _ = build("hs-bnn", 3, 1, "regression", hidden=[4])
    name, param = next((k, p) for k, p in g.named_parameters() if p.numel() > 1)
    with torch.no_grad():
        param.fill_(0.125)
    fit(m, g, x, y, steps=1, batch_size=8, seed=3, lr=1e-9, progress=False)
    value = dict(g.named_parameters())[name].detach()
    assert torch.allclose(value, torch.full_like(value, 0.125), atol=1e-6)


def test_fresh_build_is_redrawn_once_under_the_fit_seed():
    x, y = _data()
    m, g, _ = build("hs-bnn", 3, 1, "regression", hidden=[4])
    unseeded = _state(g)
    _, ref, _ = build("hs-bnn", 3, 1, "regression", hidden=[4], seed=9)
    target = _state(ref)
    fit(m, g, x, y, steps=1, batch_size=8, seed=9, lr=1e-12, progress=False)
    after = _state(g)
    assert not _same(after, unseeded)
    assert all(torch.allclose(after[k], target[k], atol=1e-9) for k in target)
    # the mark is consumed: a second fit continues from where the first ended, nothing is redrawn
    fit(m, g, x, y, steps=1, batch_size=8, seed=4, lr=0.5, progress=False)
    assert not reseed_fresh_build(m, g, 4, build_from_spec)
