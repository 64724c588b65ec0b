"""Exact resume for every registry entry x guide: k steps, save, load in a FRESH process, k more steps is bit
for bit the uninterrupted 2k-step fit (ELBO trace, every parameter of the fit's param-store scope, every guide
and model buffer).

What used to break it (issue 22, items 3 and 7): ``nn.Parameter`` s of Pyro modules (the IAF/MADE layers of
the flow and IAF guides) and the LBBNN prior's empirical-Bayes hyperparameters were registered in the loaded
param store as tensors other than the ones the modules compute with, so the optimizer stepped tensors the
loss never read (frozen flows; a different ``prior.eb_psi`` gradient); and the bow-tie guide's transposed
``B`` buffers came back contiguous, so later products rounded differently.

One subprocess loads and resumes every pair (imports once); the fits to compare against run here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyro
import pytest
import torch

from zoo.experiments.registry import available, build, get_entry
from zoo.infer import checkpoint
from zoo.infer.loop import fit, resume
from zoo.infer.optim import make_optimizer

SEED, BUILD_SEED = 3, 0


def _pairs() -> list[tuple[str, str, int | None]]:
    """``(entry, guide, batch_size)``: every guide of every entry, minibatched unless the entry fits full
    batch (closed-form CAVI); the bow-tie also minibatched (its stochastic CAVI, §3.3)."""
    out = []
    for name in available():
        entry = get_entry(name)
        full_batch = "batch_size" in entry.fit_defaults and entry.fit_defaults["batch_size"] is None
        for guide in entry.guides:
            out.append((name, guide, None if full_batch else 8))
    out.append(("bowtie", "cavi", 8))
    return out


PAIRS = _pairs()


def _key(name: str, guide: str, batch: int | None) -> str:
    return f"{name}:{guide}:{batch}"


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(24, 3, generator=g)
    y = x[:, 0] - 0.5 * x[:, 1] + 0.3 * torch.randn(24, generator=g)
    return x, y


def _build(name: str, guide: str, hidden: int):
    h = [hidden] if get_entry(name).default_hidden else []
    model, g, _ = build(name, 3, 1, "regression", hidden=h, guide=guide, seed=BUILD_SEED)
    return model, g


def _fit(name: str, guide: str, batch: int | None, steps: int, hidden: int):
    x, y = _data()
    model, g = _build(name, guide, hidden)
    return fit(model, g, x, y, steps=steps, batch_size=batch, seed=SEED, progress=False, lr=0.01)


def snapshot(result) -> dict:
    """ELBO trace, param-store scope (unconstrained), guide and model state: what must agree bit for bit."""
    with result.activate():
        params = {k: v.detach().clone() for k, v in pyro.get_param_store().named_parameters()}
    states = {}
    for label, owner in (("guide", result.guide), ("model", result.model)):
        if isinstance(owner, torch.nn.Module):
            states.update({f"{label}.{k}": v.detach().clone() for k, v in owner.state_dict().items()})
    return {"elbo": list(result.elbo), "params": params, "state": states}


_RESUMER = """
import json, sys, torch
torch.set_num_threads(1)
sys.path.insert(0, sys.argv[3])
from test_resume_exact import _data, snapshot
from zoo.infer import checkpoint
from zoo.infer.loop import resume
folder, k = sys.argv[1], int(sys.argv[2])
x, y = _data()
out = {}
for key in json.loads(open(folder + "/keys.json").read()):
    try:
        res = resume(checkpoint.load(folder + "/" + key.replace(":", "_") + ".pt"), x, y, k, progress=False)
        out[key] = snapshot(res)
    except Exception as e:
        out[key] = f"{type(e).__name__}: {e}"
torch.save(out, folder + "/resumed.pt")
"""


def _run(folder: Path, k: int, hidden: int) -> dict:
    """Fit 2k here and k + save here; load and resume k in one fresh process; both sides per pair."""
    full, keys = {}, []
    for name, guide, batch in PAIRS:
        key = _key(name, guide, batch)
        try:
            full[key] = snapshot(_fit(name, guide, batch, 2 * k, hidden))
            checkpoint.save(_fit(name, guide, batch, k, hidden), folder / f"{key.replace(':', '_')}.pt")
            keys.append(key)
        except Exception as e:  # noqa: BLE001 - reported by the pair's own test
            full[key] = f"{type(e).__name__}: {e}"
    (folder / "keys.json").write_text(json.dumps(keys))
    tests_dir = str(Path(__file__).parent)
    proc = subprocess.run(
        [sys.executable, "-c", _RESUMER, str(folder), str(k), tests_dir],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = torch.load(folder / "resumed.pt", weights_only=False)
    return {key: (full[key], resumed.get(key, "not resumed")) for key in full}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    return _run(tmp_path_factory.mktemp("resume"), k=3, hidden=3)


def _assert_same(full, resumed) -> None:
    assert not isinstance(full, str), f"the uninterrupted fit failed: {full}"
    assert not isinstance(resumed, str), f"load/resume in a fresh process failed: {resumed}"
    assert resumed["elbo"] == full["elbo"]
    for part in ("params", "state"):
        assert resumed[part].keys() == full[part].keys(), part
        for name, value in full[part].items():
            other = resumed[part][name]
            assert other.dtype == value.dtype and other.shape == value.shape, name
            same = torch.equal(other, value) or torch.allclose(other, value, rtol=0, atol=0, equal_nan=True)
            assert same, f"{part}: {name}"


@pytest.mark.parametrize("name,guide,batch", PAIRS, ids=[_key(*p) for p in PAIRS])
def test_k_plus_k_equals_2k_in_a_fresh_process(outcomes, name, guide, batch):
    full, resumed = outcomes[_key(name, guide, batch)]
    _assert_same(full, resumed)


def test_every_entry_and_guide_is_covered():
    keys = {(n, g) for n, g, _ in PAIRS}
    for name in available():
        for guide in get_entry(name).guides:
            assert (name, guide) in keys


def test_the_check_sees_a_lost_optimizer_state(tmp_path):
    """The comparison is sharp: resuming with the optimizer state thrown away (what happened to the flows'
    MADE layers) gives a different trace."""
    x, y = _data()
    full = _fit("mfvi-bnn", "flow", 8, 6, 3)
    part = _fit("mfvi-bnn", "flow", 8, 3, 3)
    checkpoint.save(part, tmp_path / "c.pt")
    loaded = checkpoint.load(tmp_path / "c.pt")
    loaded.optim = make_optimizer("adam", 0.01)  # fresh Adam: step counts and moments lost
    resume(loaded, x, y, 3, progress=False)
    assert loaded.elbo[:3] == full.elbo[:3]
    assert loaded.elbo[3:] != full.elbo[3:]


def test_flow_weights_keep_training_after_load(tmp_path):
    """Issue 22 item 7 directly: after load + resume every z-flow (MADE) parameter has moved and its Adam
    step count advanced."""
    x, y = _data()
    part = _fit("mfvi-bnn", "flow", 8, 3, 3)
    checkpoint.save(part, tmp_path / "c.pt")
    loaded = checkpoint.load(tmp_path / "c.pt")
    before = snapshot(loaded)["params"]
    resume(loaded, x, y, 2, progress=False)
    after = snapshot(loaded)["params"]
    flow = [n for n in before if "zflow" in n]
    assert flow
    for n in flow:
        assert not torch.equal(before[n], after[n]), n
    with loaded.activate():
        store = pyro.get_param_store()
        steps = {store.param_name(p): int(s["step"]) for p, s in loaded.optim._opt.state.items()}
    assert all(steps[n] == 5 for n in flow), steps


@pytest.mark.slow
def test_k_plus_k_equals_2k_longer_and_wider(tmp_path):
    """The fuller version: 20 + 20 steps of hidden-8 nets, every pair."""
    outcomes = _run(tmp_path, k=20, hidden=8)
    failed = []
    for key, (full, resumed) in outcomes.items():
        try:
            _assert_same(full, resumed)
        except AssertionError as e:
            failed.append(f"{key}: {e}")
    assert not failed, "\n".join(failed)


# ------------------------------------------------------------------------------- checkpoint validation
@pytest.mark.parametrize("name,guide", [("mfvi-bnn", "normal"), ("hs-bnn", "factorized"), ("bowtie", "cavi")])
def test_a_checkpoint_of_other_shapes_is_rejected_at_load(tmp_path, name, guide):
    """Issue 22 item 6: a hidden-8 checkpoint loaded into a hidden-16 build used to predict with 8-unit
    parameters; now it is a ValueError naming the first parameter (or buffer) that disagrees."""
    x, y = _data()
    batch = None if name == "bowtie" else 8
    model, g, _ = build(name, 3, 1, "regression", hidden=[8], guide=guide, seed=0)
    res = fit(model, g, x, y, steps=2, batch_size=batch, seed=0, progress=False)
    checkpoint.save(res, tmp_path / "c.pt")
    wide, wide_guide, _ = build(name, 3, 1, "regression", hidden=[16], guide=guide, seed=0)
    before = dict(pyro.get_param_store().named_parameters())
    pattern = r"parameter '.*' has shape .*8.* in the checkpoint but .*16|guide does not match.*size mismatch"
    with pytest.raises(ValueError, match=pattern):
        checkpoint.load(tmp_path / "c.pt", model=wide, guide=wide_guide)
    assert dict(pyro.get_param_store().named_parameters()) == before  # nothing half-loaded globally
    checkpoint.load(tmp_path / "c.pt")  # its own spec still loads


def test_resume_on_other_data_is_rejected(tmp_path):
    x, y = _data()
    res = _fit("mfvi-bnn", "normal", 8, 2, 3)
    checkpoint.save(res, tmp_path / "c.pt")
    loaded = checkpoint.load(tmp_path / "c.pt")
    with pytest.raises(
        ValueError, match=r"x: this fit was trained on x of shape \(24, 3\) but resume got \(20, 3\)"
    ):
        resume(loaded, x[:20], y[:20], 1, progress=False)
    with pytest.raises(ValueError, match=r"x: this fit was trained on .* but resume got \(30, 3\)"):
        resume(loaded, torch.cat([x, x[:6]]), torch.cat([y, y[:6]]), 1, progress=False)
    with pytest.raises(ValueError, match="x has 2 features"):
        resume(loaded, x[:, :2], y, 1, progress=False)
    assert loaded.steps == 2  # nothing ran
    resume(loaded, x, y, 1, progress=False)  # the training data itself is fine
    assert loaded.steps == 3
    with pytest.raises(ValueError, match=r"x: this fit was trained on"):  # same process too
        resume(res, x[:12], y[:12], 1, progress=False)


def test_a_float64_fit_reloads_in_float64_and_resumes_exactly(tmp_path):
    """A model converted after build (``model.double()``) is rebuilt from its spec in the saved dtype."""
    x, y = (t.double() for t in _data())
    runs = []
    for steps in (4, 2):
        model, g, _ = build("hs-bnn", 3, 1, "regression", hidden=[3], seed=0)
        model.double(), g.double()
        runs.append(fit(model, g, x, y, steps=steps, batch_size=8, seed=1, progress=False))
    checkpoint.save(runs[1], tmp_path / "c.pt")
    loaded = checkpoint.load(tmp_path / "c.pt")
    assert next(iter(loaded.guide.parameters())).dtype == torch.float64
    resume(loaded, x, y, 2, progress=False)
    assert loaded.elbo == runs[0].elbo
