"""Scoring against reference posteriors and reading NUTS runs: the target scale a score needs, the headline
W2(y)/sd next to the reference's own floor, the reference store found from any working directory, parallel
NUTS chains from a script without a ``__main__`` guard, and the report of a NUTS run that did not converge."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import zoo
from zoo.eval.scores import regression_scores
from zoo.experiments.cli import main
from zoo.experiments.cli_report import fit_report
from zoo.reference import get_instance, load_reference
from zoo.reference.headline import headline, reference_floor
from zoo.reference.score import fit_settings, reference_data, score_fit
from zoo.reference.store import default_root, resolve_root

REGRESSION = "hs-bowtie-tanh-w1"  # a stored regression reference: one tanh unit on the bow-tie toy


@pytest.fixture(autouse=True)
def _default_store(monkeypatch):
    monkeypatch.delenv("ZOO_REFERENCE_DIR", raising=False)


@pytest.fixture(scope="module")
def toy():
    inst = get_instance(REGRESSION)
    arrays, meta = load_reference(name=REGRESSION)
    x, y, _, _ = reference_data(inst, arrays).tensors()
    return inst, arrays, meta, x, y


def _fit(toy, y, steps: int, **kwargs):
    inst, _, _, x, _ = toy
    options = fit_settings(inst.model, inst)[0]
    model, guide, _ = zoo.build(inst.model, x.shape[1], 1, "regression", hidden=list(inst.hidden), **options)
    return zoo.fit(model, guide, x, y, steps=steps, seed=0, progress=False, **kwargs)


# ------------------------------------------------------------------------------------- 4. target scale


def test_the_instance_scale_is_the_references_not_the_subsample_statistics(toy):
    inst, _, meta, _, y = toy
    mu, sd = inst.target_scale()
    assert (mu, sd) == pytest.approx((meta["y_mean"], meta["y_std"]), rel=1e-12)
    assert abs(mu - float(y.mean())) > 0.1  # the statistics of the subsampled rows are another pair


def test_score_fit_refuses_a_fit_that_records_no_target_scale(toy):
    inst, arrays, meta, _, y = toy
    mu, sd = inst.target_scale()
    standardized = _fit(toy, (y - mu) / sd, steps=5)
    with pytest.raises(ValueError, match=r"^result: .*metadata=.*y_mean") as e:
        score_fit(standardized, inst, arrays, True, 100, 0)
    assert f"y_mean={mu:.6g}, y_std={sd:.6g}" in str(e.value) and "standardize_y" in str(e.value)
    with pytest.raises(ValueError, match="^result: "):  # raw targets, but nothing says so
        score_fit(_fit(toy, y, steps=5), inst, arrays, True, 100, 0)


def test_score_fit_scores_a_fit_that_records_its_scale(toy):
    inst, arrays, meta, _, y = toy
    mu, sd = inst.target_scale()
    fitted = _fit(toy, (y - mu) / sd, steps=300, metadata={"y_mean": mu, "y_std": sd})
    w2 = score_fit(fitted, inst, arrays, True, 400, 0)["y"]["w2"]
    # on the reference's scale the fit is close (the same draws left standardized are ~0.8 sd away)
    assert w2 / meta["y_std"] < 0.1
    raw = _fit(toy, y, steps=5, metadata={"standardize_y": False})
    assert math.isfinite(score_fit(raw, inst, arrays, True, 50, 0)["y"]["w2"])


def test_a_dataset_fit_on_raw_targets_says_so(toy):
    """fit_on_dataset without standardization records ``standardize_y: False`` (not only ``dataset``), so a
    fit's config always names its target scale; a config naming a dataset and saying nothing stays accepted
    (runs saved before the key was recorded), one that names a dataset but records standardization without
    its statistics does not."""
    inst, arrays, _, _, _ = toy
    ds = zoo.from_arrays("raw", "regression", np.zeros((4, 1)), np.arange(4.0), np.zeros((2, 1)), np.ones(2))
    assert zoo.data.tensors.fit_tensors(ds, torch.device("cpu"), standardize_y=False)[4] == {
        "standardize_y": False
    }
    assert set(zoo.data.tensors.fit_tensors(ds, torch.device("cpu"))[4]) == {"y_mean", "y_std"}
    fitted = _fit(toy, toy[4], steps=2)
    fitted.config = {"dataset": "x"}
    score_fit(fitted, inst, arrays, True, 10, 0)  # legacy: accepted
    fitted.config = {"dataset": "x", "standardize_y": True}
    with pytest.raises(ValueError, match="^result: "):
        score_fit(fitted, inst, arrays, True, 10, 0)


# ------------------------------------------------------------------------------ 5. headline and floor


def test_reference_floor_is_the_first_half_against_the_second(toy):
    _, arrays, _, _, _ = toy
    floor = reference_floor(arrays)
    half = arrays["y"].shape[0] // 2
    assert floor["draws_per_half"] == half
    assert floor["w2"] == pytest.approx(regression_scores(arrays["y"][:half], arrays["y"][half:])["w2"])
    assert reference_floor({"p": np.array([[0.2], [0.4]])})["total_variation"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="arrays"):
        reference_floor({"y": arrays["y"][:1]})


def test_headline_divides_by_the_target_sd_and_keeps_the_standard_error():
    scores = [{"y": {"w2": 0.3, "w2_se": 0.03}}, {"y": {"w2": 0.5, "w2_se": 0.05}}]
    h = headline(scores, {"w2": 0.2}, 10.0)
    assert h["mean"] == pytest.approx(0.04) and h["sd"] == pytest.approx(np.std([0.03, 0.05], ddof=1))
    assert h["se"] == pytest.approx(0.004) and h["floor"] == pytest.approx(0.02) and h["seeds"] == 2
    assert math.isnan(headline(scores[:1], {"w2": 0.2}, 10.0)["sd"])  # no spread over one seed


def test_reference_score_prints_w2_over_sd_next_to_the_floor(toy, tmp_path, capsys):
    _, arrays, meta, _, _ = toy
    out_dir = tmp_path / "score"
    argv = ["reference", "score", "hs-bnn", "--instance", REGRESSION, "--out", str(out_dir)]
    assert main([*argv, "--steps", "50", "--draws", "200"]) == 0
    printed = capsys.readouterr().out
    res = json.loads((out_dir / "scores.json").read_text())
    h, per_fit = res["headline"], res["per_seed"][0]["scores"]["y"]
    assert h["score"] == "w2_y/sd" and h["mean"] == pytest.approx(per_fit["w2"] / meta["y_std"])
    assert h["floor"] == pytest.approx(reference_floor(arrays)["w2"] / meta["y_std"])
    assert h["se"] == pytest.approx(per_fit["w2_se"] / meta["y_std"]) and per_fit["w2_se"] > 0
    assert res["reference_floor"]["w2"] == pytest.approx(reference_floor(arrays)["w2"])
    assert f"W2(y)/sd = {h['mean']:.4g} ± {h['se']:.2g} se" in printed
    assert f"reference floor {h['floor']:.4g}" in printed
    assert f"w2={per_fit['w2']:.4g}±{per_fit['w2_se']:.2g}" in printed and "±0," not in printed


def test_the_scoreboard_takes_the_floor_from_the_library():
    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "scoreboard.py").read_text()
    assert "def _floor" not in text and "reference_floor(" in text and "headline_value(" in text


# ---------------------------------------------------------------------------- 6. the default store


def test_load_reference_finds_the_default_store_from_any_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    arrays, meta = load_reference(name="gauss-221")
    assert "p" in arrays and meta["model"]
    assert resolve_root(None) == default_root().resolve()
    with pytest.raises(FileNotFoundError) as e:  # a relative root is the working directory's
        load_reference("benchmarks/reference", "gauss-221")
    msg = str(e.value)
    assert str(tmp_path / "benchmarks" / "reference") in msg and str(resolve_root(None)) in msg
    with pytest.raises(FileNotFoundError, match="zoo reference compute not-stored"):
        load_reference(name="not-stored")
    with pytest.raises(TypeError, match="^name: "):
        load_reference("benchmarks/reference")
    assert main(["reference", "list", "--root", "benchmarks/reference"]) == 0  # the CLI resolves it the same
    assert f"reference store: {tmp_path / 'benchmarks' / 'reference'}\n" in capsys.readouterr().out


# ---------------------------------------------------------------- 7. parallel chains and __main__


_SCRIPT = """
import torch, zoo
from zoo.infer.mcmc import fit_nuts
print("top-level code ran", flush=True)
x = torch.randn(20, 2, generator=torch.Generator().manual_seed(0)); y = x[:, 0]
model, _, _ = zoo.build("mfvi-bnn", 2, 1, "regression", hidden=[2])
r = fit_nuts(model, (x, y), chains=2, warmup=3, samples=3, progress=False, jit_compile=False, parallel=True)
print("draws", tuple(r.samples["sigma2"].shape), flush=True)
"""


def test_an_unguarded_script_runs_its_chains_sequentially_and_says_why(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("top-level code ran") == 1  # no worker re-ran the script
    assert "draws (2, 3)" in done.stdout
    assert "sequentially" in done.stderr and 'if __name__ == "__main__":' in done.stderr
    assert str(script) in done.stderr


def test_unguarded_main_script_reads_the_guard(tmp_path, monkeypatch):
    from zoo.infer.mcmc import unguarded_main_script

    guarded, unguarded = tmp_path / "g.py", tmp_path / "u.py"
    guarded.write_text("import zoo\n\nif '__main__' == __name__:\n    zoo.fit\n")
    unguarded.write_text("import zoo\n\ndef main():\n    if __name__ == '__main__':\n        pass\n")
    for path, expected in ((guarded, None), (unguarded, str(unguarded))):
        fake = types.ModuleType("__main__")
        fake.__file__ = str(path)
        monkeypatch.setitem(sys.modules, "__main__", fake)
        assert unguarded_main_script() == expected
    fake.__spec__ = types.SimpleNamespace(name="pkg.__main__")  # python -m pkg: not re-run by workers
    assert unguarded_main_script() is None


def test_fit_nuts_refuses_to_run_while_a_worker_imports_the_main_script(monkeypatch):
    from zoo.infer.mcmc import fit_nuts

    # what a spawned worker looks like while it re-runs the parent's main script
    monkeypatch.setattr(mp.current_process(), "name", "SpawnProcess-1")
    monkeypatch.setattr(mp.current_process(), "_inheriting", True, raising=False)
    model, _, _ = zoo.build("mfvi-bnn", 2, 1, "regression", hidden=[2])
    with pytest.raises(RuntimeError, match="NUTS worker process imported the main script.*__main__"):
        fit_nuts(model, (torch.randn(5, 2), torch.randn(5)), chains=2, warmup=1, samples=1)


# ------------------------------------------------------------------------ 8. the report of a NUTS run


def test_zoo_fit_nuts_prints_no_elbo_and_warns_when_the_chains_did_not_converge(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "fit",
        "mfvi-bnn",
        "--dataset",
        "diabetes",
        "--hidden",
        "2",
        "--inference",
        "nuts",
        "--chains",
        "2",
    ]
    argv += [
        "--warmup",
        "10",
        "--samples",
        "10",
        "--sequential",
        "--no-jit",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    m = json.loads((out / "metrics.json").read_text())
    assert "elbo=" not in printed
    assert m["rhat_max"] > 1.01 or m["ess_bulk_min"] < 400  # 2 x 10 draws cannot pass
    assert "WARNING: the NUTS chains have not converged" in printed
    assert f"min bulk ESS {m['ess_bulk_min']:.0f} (should be >= 400" in printed


def _row(**diag) -> dict:
    base = {"model": "m", "guide": "nuts", "inference": "nuts", "dataset": "d", "split": 0, "n_train": 9}
    return {**base, "n_test": 3, "rmse": 1.0, "elbo": float("nan"), "fit_seconds": 1.0, **diag}


def test_fit_report_warns_on_each_failed_check_and_only_then():
    ok = {"rhat_max": 1.004, "ess_bulk_min": 812.0, "ess_tail_min": 640.0, "divergences": 0}
    assert len(fit_report(_row(**ok), Path("o"))) == 1
    assert len(fit_report(_row(**{**ok, "rhat_max": float("nan")}), Path("o"))) == 1  # one chain: undefined
    for bad, words in (
        ({"rhat_max": 1.02}, "max R-hat 1.020"),
        ({"ess_bulk_min": 120.0}, "min bulk ESS 120"),
        ({"ess_tail_min": 399.0}, "min tail ESS 399"),
        ({"divergences": 3}, "3 divergent transitions"),
    ):
        lines = fit_report(_row(**{**ok, **bad}), Path("o"))
        assert len(lines) == 2 and lines[1].startswith("WARNING") and words in lines[1], bad
    vi = {**_row(), "inference": None, "guide": "normal", "elbo": -12.5}
    assert "elbo=-12.5" in fit_report(vi, Path("o"))[0]
