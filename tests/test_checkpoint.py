"""Save / load / resume: resuming for k more steps equals an uninterrupted run (CPU, same seed)."""

from __future__ import annotations

import os

import pytest
import torch

from zoo.experiments.registry import build
from zoo.infer.checkpoint import atomic_torch_save, load, save
from zoo.infer.loop import fit, resume

from .helpers import blr_data


def _state(result):
    with result.activate():
        return {k: v.detach().clone() for k, v in result.param_state["params"].items()}


@pytest.mark.parametrize("batch_size", [None, 16])
def test_resume_equals_uninterrupted_run(tmp_path, batch_size):
    x, y = blr_data(n=64, d=4, dtype=torch.float32)
    k = 15
    m, g, spec = build("mfvi-bnn", 4, 1, "regression", hidden=[6])
    full = fit(m, g, x, y, steps=2 * k, batch_size=batch_size, seed=11, progress=False, spec=spec)
    m, g, spec = build("mfvi-bnn", 4, 1, "regression", hidden=[6])
    half = fit(m, g, x, y, steps=k, batch_size=batch_size, seed=11, progress=False, spec=spec)
    path = tmp_path / "ckpt.pt"
    save(half, path)
    # disturb the global RNG and param store as another job would
    torch.rand(100)
    loaded = load(path)
    resumed = resume(loaded, x, y, k, progress=False)
    assert resumed.steps == 2 * k
    assert resumed.elbo == full.elbo
    a, b = _state(full), _state(resumed)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    pf = full.predict(x, num_samples=5, seed=3)
    pr = resumed.predict(x, num_samples=5, seed=3)
    assert torch.equal(pf.mean, pr.mean)


def test_resume_closed_form_guide(tmp_path):
    x, y = blr_data(dtype=torch.float64)
    m, g, spec = build("blr-cavi", 3, 1, "regression")
    m, g = m.double(), g.double()
    full = fit(m, g, x, y, steps=6, progress=False, spec=spec)
    m2, g2, _ = build("blr-cavi", 3, 1, "regression")
    m2, g2 = m2.double(), g2.double()
    half = fit(m2, g2, x, y, steps=3, progress=False, spec=spec)
    save(half, tmp_path / "c.pt")
    m3, g3 = blr_double()
    loaded = load(tmp_path / "c.pt", model=m3, guide=g3)
    resumed = resume(loaded, x, y, 3, progress=False)
    assert torch.allclose(resumed.guide.m.double(), full.guide.m, atol=1e-6)
    assert len(resumed.elbo) == 6


def blr_double():
    m, g, _ = build("blr-cavi", 3, 1, "regression")
    return m.double(), g.double()


def test_atomic_write_leaves_nothing_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "ckpt.pt"
    atomic_torch_save({"a": 1}, target)
    before = target.read_bytes()

    def boom(obj, fh, *a, **k):
        fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_torch_save({"a": 2}, target)
    assert target.read_bytes() == before  # old file intact
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # no temporary left behind


def test_atomic_write_gives_umask_permissions(tmp_path):
    """The temporary file of an atomic write is created 0600; the final file gets 0666 & ~umask."""
    from zoo.infer import checkpoint
    from zoo.infer.checkpoint import atomic_write_bytes

    atomic_write_bytes(tmp_path / "m.json", b"{}")
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o666 & ~checkpoint._UMASK
    assert (tmp_path / "m.json").stat().st_mode & 0o600 == 0o600


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="path"):
        load(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    torch.save({"hello": 1}, junk)
    with pytest.raises(ValueError, match="not a pyro-bnn-zoo checkpoint"):
        load(junk)
    with pytest.raises(TypeError, match="result"):
        save("not a result", tmp_path / "x.pt")
    with pytest.raises(ValueError, match="path"):
        atomic_torch_save({}, tmp_path / "no_such_dir" / "x.pt")


def test_checkpoint_keeps_the_loss_class(tmp_path):
    from pyro.infer import TraceMeanField_ELBO

    x, y = blr_data(n=30, d=4, dtype=torch.float32)
    m, g, spec = build("mfvi-bnn", 4, 1, "regression", hidden=[3])
    res = fit(m, g, x, y, steps=3, loss=TraceMeanField_ELBO(num_particles=2), progress=False, spec=spec)
    save(res, tmp_path / "l.pt")
    back = load(tmp_path / "l.pt")
    assert type(back.loss) is TraceMeanField_ELBO and back.loss.num_particles == 2
