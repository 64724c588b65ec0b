"""Collapsed variational bounds (Tomczak, Swaroop, Foong & Turner 2021, NeurIPS; issue 7) as zoo models: the
argument checks of ``CollapsedPrior`` and ``CollapsedBoundGuide``, the ``cm-bnn`` / ``cv-bnn`` / ``cmv-bnn``
registry entries and the ``collapsed-uci`` protocol, a smoke fit on Boston, and ``CollapsedOptions``
(defaults, validation, and the builder's keyword, options-object and mapping forms). Ground truths: the
documented defaults and protocol grid (4 variants x 8 datasets x 10 splits, one hidden layer of 50), the three
builder forms giving the same prior, the metrics' own definition (``nll_gap = nll - train_nll``), and a tanh
network computed by hand.
"""

from __future__ import annotations

import math

import pytest
import torch

from guides.collapsed.bound import CollapsedBoundGuide
from zoo.families.collapsed.entry import build_collapsed
from zoo.families.collapsed.prior import CollapsedPrior


def test_argument_validation():
    with pytest.raises(ValueError, match="kind"):
        CollapsedPrior("cmx")
    with pytest.raises(ValueError, match="alpha_reg"):
        CollapsedPrior("cm", alpha_reg=1.5)
    with pytest.raises(ValueError, match="delta"):
        CollapsedPrior("cmv", delta=1.0)
    with pytest.raises(ValueError, match="learn_hyper"):
        CollapsedPrior("cv", learn_hyper=True, num_layers=2)
    with pytest.raises(ValueError, match="num_layers"):
        CollapsedPrior("cm", learn_hyper=True)
    from zoo.families.baselines.entry import _mfvi_build

    with pytest.raises(TypeError, match="CollapsedPrior"):
        CollapsedBoundGuide(_mfvi_build(2, 1, "regression", (3,)))


def test_registry_and_protocol():
    from zoo.experiments.registry import get_entry
    from zoo.experiments.reproduce import PROTOCOLS, available_protocols

    for name in ("cm-bnn", "cv-bnn", "cmv-bnn"):
        e = get_entry(name)
        assert e.default_guide == "collapsed" and "hierarchical" in e.guides
    assert "collapsed-uci" in available_protocols()
    runs = PROTOCOLS["collapsed-uci"].runs(None)
    assert len(runs) == 4 * 8 * 10
    assert {r.variant for r in runs} == {"mfvi-bnn", "cm-bnn", "cv-bnn", "cmv-bnn"}
    assert all(r.kwargs["hidden"] == [50] and r.kwargs["train_metrics"] for r in runs)


def test_zoo_fit_on_boston_smoke(data_dir, tmp_path):
    from zoo.experiments.runs import fit_on_dataset, write_run

    run = fit_on_dataset(
        "cmv-bnn",
        "uci:boston",
        split=0,
        steps=40,
        progress=False,
        data_dir=data_dir,
        num_samples=20,
        train_metrics=True,
    )
    paths = write_run(run, tmp_path, num_samples=20)
    assert all(p.exists() for p in paths.values())
    m = run.metrics
    assert math.isfinite(m["rmse"]) and m["rmse"] < 15 and math.isfinite(m["train_rmse"])
    assert m["nll_gap"] == pytest.approx(m["nll"] - m["train_nll"])


def test_collapsed_options_defaults_validation_and_builder():
    from zoo.experiments.registry import build, get_entry
    from zoo.families.collapsed.options import CollapsedOptions

    for name in ("cm-bnn", "cv-bnn", "cmv-bnn"):
        assert get_entry(name).options is CollapsedOptions
    assert CollapsedOptions().to_dict() == {
        "gamma_scale": 1.0,
        "alpha_reg": 0.05,
        "alpha": 0.5,
        "beta": 0.01,
        "delta": 0.1,
        "fan_in_scaling": True,
        "learn_hyper": False,
        "noise_concentration": 1.0,  # zoo.core.likelihoods.WEAK_NOISE_PRIOR
        "noise_rate": 0.01,
        "activation": "relu",
        "heteroscedastic": False,
        "student_t_df": None,
        "student_t_learn_df": False,
    }
    for field, value, err in [
        ("activation", "swish", ValueError),
        ("gamma_scale", 0.0, ValueError),
        ("alpha_reg", 1.5, ValueError),
        ("alpha_reg", 0.0, ValueError),
        ("delta", 1.0, ValueError),
        ("alpha", -1.0, ValueError),
        ("beta", float("nan"), ValueError),
        ("noise_rate", 0.0, ValueError),
        ("learn_hyper", "yes", TypeError),
        ("heteroscedastic", 1, TypeError),
        ("fan_in_scaling", None, TypeError),
    ]:
        with pytest.raises(err, match=field):
            CollapsedOptions(**{field: value})
    assert CollapsedOptions(alpha_reg=1.0).alpha_reg == 1.0  # alpha = 0: plain MF-VI with prior N(0, gamma)
    # keyword form, options object and mapping build the same prior
    configs = [
        build_collapsed("cmv", 2, 1, "regression", (3,), gamma_scale=0.5, delta=0.3).prior.config(),
        build_collapsed(
            "cmv", 2, 1, "regression", (3,), CollapsedOptions(gamma_scale=0.5, delta=0.3)
        ).prior.config(),
        build_collapsed("cmv", 2, 1, "regression", (3,), {"gamma_scale": 0.5}, delta=0.3).prior.config(),
    ]
    assert configs[0] == configs[1] == configs[2] and configs[0]["delta"] == pytest.approx([0.3, 0.3])
    with pytest.raises(ValueError, match="delta"):
        build("cmv-bnn", 2, 1, "regression", hidden=(3,), delta=2.0)
    with pytest.raises(ValueError, match="weight_scale"):
        build("cm-bnn", 2, 1, "regression", hidden=(3,), weight_scale=1.0)
    model, _, spec = build("cm-bnn", 2, 1, "regression", hidden=(3,), gamma_scale=20.0)
    assert spec["options"] == {"gamma_scale": 20.0} and float(model.prior.gamma_scale) == 20.0
    # tanh hidden units (the reference instances' networks): the architecture applies them
    tanh = build_collapsed("cm", 1, 1, "regression", (3,), activation="tanh")
    x = torch.linspace(-2, 2, 7).unsqueeze(-1)
    w0, b0, w1, b1 = torch.randn(3, 1), torch.randn(3), torch.randn(1, 3), torch.randn(1)
    params = {"fc0.weight": w0, "fc0.bias": b0, "fc1.weight": w1, "fc1.bias": b1}
    want = (torch.tanh(x @ w0.T + b0) @ w1.T + b1).squeeze(-1)
    torch.testing.assert_close(tanh.architecture.forward(x, params).squeeze(-1), want)
