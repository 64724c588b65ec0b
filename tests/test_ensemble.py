"""ELBO-weighted ensembles of any registry model (paper 000 §3.6): weights, mixture moments, members fitted
in worker processes give the same result as in-process, CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch

from zoo.experiments.cli import main
from zoo.experiments.ensemble import SEED_STRIDE, combine_predictions, ensemble_weights, fit_ensemble
from zoo.experiments.runs import fit_on_dataset
from zoo.infer.predict import Predictions

FAST = {"hidden": [4], "steps": 20, "num_samples": 8}


def test_weights_are_tempered_softmax_of_elbos():
    w = ensemble_weights([-100.0, -100.0 + 10 * math.log(3.0)], zeta=0.1)
    assert w.tolist() == pytest.approx([0.25, 0.75])
    assert ensemble_weights([1.0, 500.0], zeta=0.0).tolist() == pytest.approx([0.5, 0.5])
    assert torch.isfinite(ensemble_weights([-1e6, 0.0], zeta=0.1)).all()  # no overflow
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="zeta"):
            ensemble_weights([0.0], zeta=bad)
    with pytest.raises(ValueError, match="elbos"):
        ensemble_weights([float("nan")], zeta=0.1)


def test_classification_mixture_and_draw_pooling():
    p1 = Predictions("multiclass", probs=torch.tensor([[0.9, 0.1], [0.5, 0.5]]))
    p2 = Predictions("multiclass", probs=torch.tensor([[0.1, 0.9], [0.5, 0.5]]))
    ens = combine_predictions([p1, p2], [0.0, 10 * math.log(3.0)], zeta=0.1)
    assert torch.allclose(ens.probs, torch.tensor([[0.3, 0.7], [0.5, 0.5]]))
    # regression draws are pooled in proportion to the weights (Monte Carlo, 4000 draws)
    s = 4000
    r1 = Predictions(
        "regression", mean=torch.zeros(1), var=torch.ones(1), loc=torch.zeros(s, 1), scale=torch.ones(s, 1)
    )
    r2 = Predictions(
        "regression", mean=torch.ones(1), var=torch.ones(1), loc=torch.ones(s, 1), scale=torch.ones(s, 1)
    )
    ens = combine_predictions([r1, r2], [0.0, 10 * math.log(3.0)], zeta=0.1, seed=1)
    frac = float(ens.loc.mean())  # fraction of draws from member 2, expected 0.75
    assert ens.loc.shape == (s, 1) and abs(frac - 0.75) < 4 * math.sqrt(0.75 * 0.25 / s)
    with pytest.raises(ValueError, match="mixed tasks"):
        combine_predictions([p1, r1], [0.0, 0.0])


def test_fit_ensemble_members_and_workers():
    """Member 0 is the single fit with the same seed; two worker processes give the in-process result."""
    serial = fit_ensemble("mfvi-bnn", "diabetes", k=2, jobs=1, seed=3, train_metrics=True, **FAST)
    single = fit_on_dataset("mfvi-bnn", "diabetes", seed=3, progress=False, **FAST)
    assert serial.members[0]["elbo"] == pytest.approx(single.metrics["elbo"])
    assert serial.members[0]["rmse"] == pytest.approx(single.metrics["rmse"])
    assert serial.members[0]["elbo"] != serial.members[1]["elbo"]  # different seeds
    assert sum(serial.weights) == pytest.approx(1.0) and len(serial.weights) == 2
    m = serial.metrics
    assert m["ensemble_size"] == 2 and m["nll_gap"] == pytest.approx(m["nll"] - m["train_nll"])
    assert 0 < m["rmse"] < 200 and 0 <= m["coverage95"] <= 1
    # uniform-weight columns: the RMSE of the plain average of the two members' predictive means
    other = fit_on_dataset("mfvi-bnn", "diabetes", seed=3 + SEED_STRIDE, progress=False, **FAST)
    avg = 0.5 * (single.predictions.mean + other.predictions.mean)
    _, _, _, yte = single.dataset.tensors()
    assert m["uniform_rmse"] == pytest.approx(float(((avg - yte) ** 2).mean().sqrt()), rel=1e-5)
    parallel = fit_ensemble("mfvi-bnn", "diabetes", k=2, jobs=2, seed=3, train_metrics=True, **FAST)
    for key in ("rmse", "nll", "coverage95", "train_nll"):
        assert parallel.metrics[key] == pytest.approx(m[key], rel=1e-6), key
    with pytest.raises(ValueError, match="k:"):
        fit_ensemble("mfvi-bnn", "diabetes", k=0)


def test_cli_ensemble(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "fit",
        "mfvi-bnn",
        "--dataset",
        "diabetes",
        "--steps",
        "10",
        "--hidden",
        "3",
        "--num-samples",
        "5",
    ]
    assert main([*argv, "--ensemble", "2", "--out", str(out), "--no-progress"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["ensemble_size"] == 2 and len(m["member_elbos"]) == 2
    member = json.loads((out / "member_0" / "metrics.json").read_text())
    assert m["task"] == member["task"] == "regression" and m["x_mean"] == member["x_mean"]
    assert (out / "member_0" / "checkpoint.pt").exists() and (out / "member_1" / "metrics.json").exists()
    with pytest.raises(SystemExit) as e:
        main([*argv, "--ensemble", "0", "--out", str(tmp_path / "bad")])
    assert e.value.code == 2 and not (tmp_path / "bad").exists()
    with pytest.raises(SystemExit):
        main([*argv, "--zeta", "-1", "--out", str(tmp_path / "bad")])
    assert not (tmp_path / "bad").exists()


def test_progress_false_is_accepted():
    """``fit_ensemble(progress=False)`` used to raise a duplicate-keyword ``TypeError``."""
    ens = fit_ensemble("mfvi-bnn", "diabetes", k=2, jobs=1, seed=1, progress=False, **FAST)
    assert len(ens.members) == 2 and len(ens.weights) == 2
