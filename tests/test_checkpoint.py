"""Save / load / resume: resuming for k more steps equals an uninterrupted run (CPU, same seed)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

import numpy as np
import pyro.distributions as dist
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
def test_resume_equals_uninterrupted_run(tmp_path, batch_size, device):
    x, y = blr_data(n=64, d=4, dtype=torch.float32, device=device)
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


def _umask() -> int:
    old = os.umask(0o022)  # the test reads the umask the only portable way; the library never does
    os.umask(old)
    return old


def test_atomic_write_gives_umask_permissions(tmp_path):
    """An atomic write's file gets the permissions of a plain ``open(..., "w")``: 0666 & ~umask."""
    from zoo.infer.checkpoint import atomic_write_bytes

    atomic_write_bytes(tmp_path / "m.json", b"{}")
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert (tmp_path / "m.json").stat().st_mode & 0o600 == 0o600
    old = os.umask(0o077)
    try:
        atomic_write_bytes(tmp_path / "private.json", b"{}")
    finally:
        os.umask(old)
    assert (tmp_path / "private.json").stat().st_mode & 0o777 == 0o600


def test_importing_the_writers_never_touches_the_umask():
    """No module changes (or reads through os.umask) the process umask at import time."""
    code = (
        "import os\n"
        "def boom(*a):\n"
        "    raise AssertionError('os.umask called at import')\n"
        "os.umask = boom\n"
        "import zoo.io, zoo.infer.checkpoint, zoo.experiments.runs, zoo.experiments.reproduce\n"
        "import zoo.experiments.cli, zoo.checkpoint\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="path"):
        load(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    torch.save({"hello": 1}, junk)
    with pytest.raises(ValueError, match="not a pyro-bnn-zoo checkpoint") as e:
        load(junk)
    assert str(junk) in str(e.value)
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


# --------------------------------------------------------------------------- safe to share (weights_only)


def _small_fit(steps=3, **kw):
    x, y = blr_data(n=30, d=4, dtype=torch.float32)
    m, g, spec = build("mfvi-bnn", 4, 1, "regression", hidden=[3])
    return fit(m, g, x, y, steps=steps, progress=False, spec=spec, **kw), x, y


def test_checkpoint_loads_with_weights_only_and_names_its_version(tmp_path):
    from zoo.infer.snapshot import VERSION

    res, _, _ = _small_fit(batch_size=8, tol=1e-3, config={"y_mean": 1.5})
    save(res, tmp_path / "c.pt")
    ckpt = torch.load(tmp_path / "c.pt", weights_only=True)
    assert ckpt["version"] == VERSION and ckpt["format"] == f"pyro-bnn-zoo/checkpoint-{VERSION}"
    assert ckpt["config"]["y_mean"] == 1.5 and ckpt["config"]["batch_size"] == 8
    assert ckpt["loss"]["class"] == "Trace_ELBO" and ckpt["loop"]["monitor"]["tol"] == 1e-3
    back = load(tmp_path / "c.pt")
    assert back.fit_config == res.fit_config and back.fit_config.metadata == {"y_mean": 1.5}


def test_rng_states_round_trip_through_a_checkpoint(tmp_path):
    """numpy and Python RNG states are stored as tensors/numbers and restored by ``load``."""
    res, _, _ = _small_fit()
    np.random.seed(5)  # noqa: NPY002 - the legacy global RNG is what pyro.set_rng_seed seeds
    random.seed(6)
    save(res, tmp_path / "r.pt")
    expected = (np.random.rand(3).tolist(), random.random(), torch.rand(2))  # noqa: NPY002
    load(tmp_path / "r.pt")
    assert (np.random.rand(3).tolist(), random.random()) == expected[:2]  # noqa: NPY002
    assert torch.equal(torch.rand(2), expected[2])


def test_old_format_versions_are_a_clear_error(tmp_path):
    """A file of another format version names its version and the supported one, whether or not torch can
    read it with ``weights_only`` (format 1 pickled numpy RNG states)."""
    from zoo.infer.snapshot import VERSION

    v1 = tmp_path / "v1.pt"
    torch.save({"format": "pyro-bnn-zoo/checkpoint-1", "rng": {"numpy": np.random.get_state()}}, v1)  # noqa: NPY002
    v1_plain = tmp_path / "v1_plain.pt"
    torch.save({"format": "pyro-bnn-zoo/checkpoint-1", "steps": 3}, v1_plain)
    for path in (v1, v1_plain):
        with pytest.raises(ValueError, match=rf"format version 1; .* format version {VERSION}") as e:
            load(path)
        assert str(path) in str(e.value)
    v9 = tmp_path / "v9.pt"
    torch.save({"format": "pyro-bnn-zoo/checkpoint-9", "version": 9}, v9)
    with pytest.raises(ValueError, match="version 9"):
        load(v9)


def test_truncated_and_foreign_files_are_a_value_error_naming_the_path(tmp_path):
    res, _, _ = _small_fit()
    save(res, tmp_path / "good.pt")
    data = (tmp_path / "good.pt").read_bytes()
    cases = {
        "truncated.pt": data[: len(data) // 2],
        "empty.pt": b"",
        "text.pt": b"just some text\n",
        "random.pt": bytes(range(256)) * 4,
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    with open(tmp_path / "objects.pt", "wb") as fh:  # a pickle of objects weights_only must refuse
        torch.save({"model": torch.nn.Linear(2, 2)}, fh)
    for name in [*cases, "objects.pt"]:
        with pytest.raises(ValueError, match="not a (readable )?pyro-bnn-zoo checkpoint") as e:
            load(tmp_path / name)
        assert str(tmp_path / name) in str(e.value), name


def test_constraints_are_stored_by_name_and_an_unnamed_one_is_an_error_at_save_time(tmp_path):
    from torch.distributions import constraints

    from zoo.infer.codec import decode_constraint, encode_constraint

    named = [
        constraints.real,
        constraints.positive,
        constraints.unit_interval,
        constraints.simplex,
        constraints.lower_cholesky,
        dist.constraints.softplus_positive,
        dist.constraints.unit_lower_cholesky,
        constraints.interval(-1.0, 2.0),
        constraints.greater_than(0.5),
        constraints.greater_than_eq(torch.tensor(0.1)),
        constraints.less_than(3.0),
        constraints.independent(constraints.positive, 2),
    ]
    for c in named:
        back = decode_constraint(encode_constraint(c))
        assert type(back) is type(c), c
        assert {k: str(v) for k, v in vars(back).items()} == {k: str(v) for k, v in vars(c).items()}
    assert decode_constraint(encode_constraint(constraints.positive)) is constraints.positive

    class Odd(constraints.Constraint):
        def check(self, value):
            return value > 0

    res, _, _ = _small_fit()
    res.param_state["params"]["odd_param"] = torch.ones(2)
    res.param_state["constraints"]["odd_param"] = Odd()
    with pytest.raises(ValueError, match="odd_param.*Odd"):
        save(res, tmp_path / "odd.pt")
    assert not (tmp_path / "odd.pt").exists()


def test_an_object_in_the_checkpoint_is_a_type_error_naming_it(tmp_path):
    res, _, _ = _small_fit()
    res.spec = {**res.spec, "options": {"prior": object()}}
    with pytest.raises(TypeError, match=r"\['spec'\]\['options'\]\['prior'\]"):
        save(res, tmp_path / "obj.pt")
    res.config["scale"] = np.float64(2.0)  # numpy scalars are pickled objects too
    res.spec = None
    with pytest.raises(TypeError, match="scale"):
        save(res, tmp_path / "obj.pt")


_KILLED_SAVE = """
import os, signal, sys, torch
from zoo.io import atomic_torch_save

def killed(obj, fh, *a, **k):
    fh.write(b"partial")
    fh.flush()
    os.kill(os.getpid(), signal.SIGKILL)

torch.save = killed
atomic_torch_save({"new": 1}, sys.argv[1])
"""


def test_killed_save_leaves_the_old_file_and_the_next_save_removes_its_orphan(tmp_path):
    res, x, y = _small_fit()
    path = tmp_path / "ckpt.pt"
    save(res, path)
    r = subprocess.run([sys.executable, "-c", _KILLED_SAVE, str(path)], capture_output=True)
    assert r.returncode == -signal.SIGKILL
    orphans = [p for p in os.listdir(tmp_path) if p.startswith(".ckpt.pt.") and p.endswith(".tmp")]
    assert len(orphans) == 1
    assert load(path).steps == 3  # the old checkpoint is intact
    live = tmp_path / f".ckpt.pt.{os.getpid()}-abc.tmp"  # a write in progress in a live process: kept
    legacy = tmp_path / ".ckpt.pt.k2j_8xq1.tmp"  # an older zoo's mkstemp name: orphaned
    other = tmp_path / ".other.pt.1-abc.tmp"  # another file's temporary: not ours to remove
    for p in (live, legacy, other):
        p.write_bytes(b"x")
    resume(res, x, y, 2, progress=False)
    save(res, path)
    assert sorted(os.listdir(tmp_path)) == sorted(["ckpt.pt", live.name, other.name])
    assert load(path).steps == 5
