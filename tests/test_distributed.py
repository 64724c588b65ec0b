"""Data-parallel training (zoo.infer.distributed / zoo.infer.launch): 2 gloo processes on CPU against the
single-process run with the same global batch."""

from __future__ import annotations

import os

import pytest
import torch

from zoo.experiments.registry import build
from zoo.infer import checkpoint
from zoo.infer import distributed as D
from zoo.infer.loop import fit, resume


def _regression(n: int = 45, d: int = 2, seed: int = 3, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=dtype)
    return x, y


class StopAfter:
    """A picklable callback that stops the fit after ``n`` steps (run by rank 0 only under nproc > 1)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, step, elbo, result) -> None:
        if step >= self.n:
            raise StopIteration


def _bowtie_buffers(guide) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in guide.state_dict().items()}


# ---------------------------------------------------------------------------------------------- pure helpers
@pytest.mark.parametrize("n,world", [(10, 2), (11, 2), (7, 3), (2, 3), (0, 2)])
def test_shard_bounds_partition_rows(n, world):
    bounds = [D.shard_bounds(n, r, world) for r in range(world)]
    rows = [i for a, b in bounds for i in range(a, b)]
    assert rows == list(range(n))  # disjoint, contiguous, covering, in order
    sizes = [b - a for a, b in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_reductions_are_identity_outside_a_group():
    t = torch.arange(6.0).reshape(2, 3)
    assert D.active() is None
    assert D.data_sum(t) is t and D.data_count(17) == 17 and D.gather_rows(t, 2) is t


def test_nproc_is_validated_before_training():
    model, guide, _ = build("mfvi-bnn", 2, 1, "regression", hidden=[4], guide="delta")
    x, y = _regression(dtype=torch.float32)
    for bad in (0, -2, 1.5, "2"):
        with pytest.raises((ValueError, TypeError), match="nproc"):
            fit(model, guide, x, y, steps=1, nproc=bad, progress=False)


def test_closed_form_guides_without_reduction_are_refused():
    model, guide, _ = build("hs-bnn", 2, 1, "regression", hidden=[4])
    assert not getattr(guide, "data_parallel", False)
    x, y = _regression(dtype=torch.float32)
    with pytest.raises(ValueError, match=f"nproc: the guide {type(guide).__name__} has closed-form steps"):
        fit(model, guide, x, y, steps=1, nproc=2, progress=False, device="cpu")


def test_distributed_conjugate_cavi_reaches_the_exact_posterior():
    """blr-cavi on 2 ranks (X^T X, X^T y, N, residuals all-reduced): the same iterates as one process, and
    the fixed point's weight mean is the exact posterior mean of the conjugate model at E[1/sigma^2]."""
    from guides.baselines.conjugate import LinearRegressionCAVIGuide
    from tests.helpers import blr_data, blr_model

    x, y = blr_data(n=41)
    runs = []
    for nproc in (1, 2):
        model = blr_model()
        guide = LinearRegressionCAVIGuide(model)
        runs.append((fit(model, guide, x, y, steps=30, nproc=nproc, progress=False, device="cpu"), guide))
    (ref, g1), (res, g2) = runs
    tol = 1e-10 if g1.m.dtype == torch.float64 else 1e-5  # the guide's buffers follow the model's dtype
    torch.testing.assert_close(torch.tensor(res.elbo), torch.tensor(ref.elbo), rtol=tol, atol=0)
    for name in ("m", "scale_tril", "a", "b"):
        torch.testing.assert_close(getattr(g2, name), getattr(g1, name), rtol=tol, atol=tol)
    e_prec = g2.a / g2.b
    s0sq = blr_model().prior.weight_scale ** 2
    xd, yd = x.to(g2.m.dtype), y.to(g2.m.dtype)
    precision = e_prec * xd.T @ xd + torch.eye(x.shape[1], dtype=xd.dtype) / s0sq
    exact = torch.linalg.solve(precision, e_prec * xd.T @ yd)
    torch.testing.assert_close(g2.m, exact, rtol=tol, atol=tol)


def test_unpicklable_callback_is_a_type_error_before_spawning():
    model, guide, _ = build("mfvi-bnn", 2, 1, "regression", hidden=[4], guide="delta")
    x, y = _regression(dtype=torch.float32)
    lock = __import__("threading").Lock()
    with pytest.raises(TypeError, match="callbacks: nproc > 1"):
        fit(model, guide, x, y, steps=1, nproc=2, progress=False, callbacks=[lambda s, e, r: lock],
            device="cpu")  # fmt: skip


# ---------------------------------------------------------------------------------------------- 2 processes
def test_distributed_cavi_sweeps_equal_single_process():
    """Distributed CAVI: 3 bow-tie sweeps over N = 45 points on 2 gloo ranks (rows 0-22 / 23-44, sufficient
    statistics all-reduced) equal the single-process sweeps to 1e-10 (globals and gathered locals)."""
    x, y = _regression()
    ref_m, ref_g, _ = build("bowtie", 2, 1, "regression", hidden=[4, 3])
    ref = fit(ref_m, ref_g, x, y, steps=3, seed=5, progress=False, device="cpu")
    m, g, _ = build("bowtie", 2, 1, "regression", hidden=[4, 3])
    res = fit(m, g, x, y, steps=3, seed=5, progress=False, nproc=2, device="cpu")
    assert res.config["nproc"] == 2 and res.steps == 3
    a, b = _bowtie_buffers(ref_g), _bowtie_buffers(g)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].shape == b[k].shape, k
        torch.testing.assert_close(b[k], a[k], rtol=1e-10, atol=1e-10, msg=k)
    torch.testing.assert_close(torch.tensor(res.elbo), torch.tensor(ref.elbo), rtol=1e-10, atol=0)
    assert all(e2 >= e1 - 1e-8 * abs(e1) for e1, e2 in zip(res.elbo, res.elbo[1:]))  # CAVI is monotone


def test_two_process_map_svi_equals_single_process_and_resumes(tmp_path):
    """Delta (MAP) guide, global batch 16 of N = 45: 2 ranks x 8 rows = the single-process run to float
    tolerance; saving, loading and resuming under nproc = 2 equals the uninterrupted single-process run."""
    x, y = _regression()
    x, y = x.float(), y.float()
    kw = dict(batch_size=16, lr=0.02, seed=1, progress=False, device="cpu")  # gloo ranks
    ref_m, ref_g, _ = build("mfvi-bnn", 2, 1, "regression", hidden=[5], guide="delta")
    ref = fit(ref_m, ref_g, x, y, steps=12, **kw)
    m, g, _ = build("mfvi-bnn", 2, 1, "regression", hidden=[5], guide="delta")
    res = fit(m, g, x, y, steps=6, nproc=2, **kw)
    path = os.path.join(tmp_path, "half.pt")
    checkpoint.save(res, path)
    assert sorted(os.listdir(tmp_path)) == ["half.pt"]  # the ranks wrote nothing next to it
    loaded = checkpoint.load(path, device="cpu")
    assert loaded.config["nproc"] == 2
    out = resume(loaded, x, y, 6, progress=False)
    assert out is loaded and out.steps == 12
    torch.testing.assert_close(torch.tensor(out.elbo), torch.tensor(ref.elbo), rtol=1e-5, atol=1e-4)
    with ref.activate():
        want = {k: v.detach().clone() for k, v in __import__("pyro").get_param_store().items()}
    with out.activate():
        got = {k: v.detach().clone() for k, v in __import__("pyro").get_param_store().items()}
    assert want.keys() == got.keys() and want
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-5, msg=k)


def test_two_process_stochastic_global_guide_equals_single_process():
    """Mean-field normal guide (all latents global): every rank draws the single process's reparameterized
    noise from the common seed, so the 2-rank run equals the single-process run to float tolerance.  A
    rank-0 callback that stops the fit stops every rank (after 5 of 8 steps)."""
    x, y = _regression()
    x, y = x.float(), y.float()
    kw = dict(batch_size=20, lr=0.02, seed=2, progress=False, steps=8, callbacks=[StopAfter(5)], device="cpu")
    ref_m, ref_g, _ = build("mfvi-bnn", 2, 1, "regression", hidden=[5], guide="normal")
    ref = fit(ref_m, ref_g, x, y, **kw)
    m, g, _ = build("mfvi-bnn", 2, 1, "regression", hidden=[5], guide="normal")
    res = fit(m, g, x, y, nproc=2, **kw)
    assert ref.steps == res.steps == 5
    torch.testing.assert_close(torch.tensor(res.elbo), torch.tensor(ref.elbo), rtol=1e-5, atol=1e-3)


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine has 2 GPUs")
def test_more_cuda_ranks_than_gpus_is_refused_before_spawning():
    model, guide, _ = build("mfvi-bnn", 2, 1, "regression", hidden=[4], guide="delta")
    x, y = _regression(dtype=torch.float32)
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA to reach the check (device='cuda' is refused earlier without it)")
    with pytest.raises(ValueError, match="nproc: 2 CUDA ranks need 2 GPUs"):
        fit(model, guide, x, y, steps=1, nproc=2, progress=False, device="cuda")


def test_cli_fit_nproc_2_equals_nproc_1(tmp_path, capsys, data_dir):
    """``zoo fit bowtie --nproc 2``: the same metrics as one process, only the run files written (boston
    comes from the data root: without one the test skips, saying why)."""
    import json

    from zoo.experiments.cli import main

    argv = ["fit", "bowtie", "--dataset", "uci:bostonHousing", "--steps", "2", "--num-samples", "5",
            "--device", "cpu", "--no-progress"]  # fmt: skip
    assert main([*argv, "--out", str(tmp_path / "one")]) == 0
    assert main([*argv, "--nproc", "2", "--out", str(tmp_path / "two")]) == 0
    assert sorted(os.listdir(tmp_path / "two")) == sorted(os.listdir(tmp_path / "one"))
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    two = json.loads((tmp_path / "two" / "metrics.json").read_text())
    for key in ("elbo", "rmse", "nll"):
        assert two[key] == pytest.approx(one[key], rel=1e-9), key


@pytest.mark.parametrize("extra", [["--nproc", "0"], ["--nproc", "2", "--ensemble", "2"]])
def test_cli_bad_nproc_is_a_usage_error(tmp_path, extra, capsys):
    from zoo.experiments.cli import main

    with pytest.raises(SystemExit) as e:
        main(["fit", "bowtie", "--dataset", "uci:bostonHousing", "--out", str(tmp_path / "o"), *extra])
    assert e.value.code == 2 and "--nproc" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
