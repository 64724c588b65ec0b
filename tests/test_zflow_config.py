"""The z-flow's options as one config (:class:`guides.flows.zflow.ZFlowConfig`), shared by the four z-flow
guides of Skaaret-Lund, Storvik & Hubin (2023, arXiv:2305.03395, Eqs. 5-11): the config and keyword forms
build the same guide, the options reach the flows, and bad options are refused before anything is built."""

from __future__ import annotations

import math

import pyro
import pytest
import torch

from guides.flows.gaussian import GaussianFlowGuide
from guides.flows.lbbnn import LBBNNFlowGuide
from guides.flows.weightspace import WeightSpaceGuide
from guides.flows.zflow import ZFLOW_DEFAULTS, ZFlowConfig
from guides.horseshoe.flow import HorseshoeFlowGuide
from zoo.core.architectures import MLP
from zoo.core.likelihoods import make_likelihood
from zoo.core.model import BayesianModel
from zoo.experiments.registry import build
from zoo.families.lbbnn.prior import SpikeSlabPrior


def _lbbnn_model() -> BayesianModel:
    arch = MLP(3, (4,), 1)
    return BayesianModel(arch, SpikeSlabPrior.for_architecture(arch), make_likelihood("binary", 1))


def _model(name: str) -> BayesianModel:
    return build(name, 3, 1, "regression", hidden=(4,))[0]


#: each z-flow guide class, its model, and the weight specs its flows sit on
GUIDES = {
    "lbbnn": (LBBNNFlowGuide, _lbbnn_model),
    "gaussian": (GaussianFlowGuide, lambda: _model("mfvi-bnn")),
    "horseshoe": (HorseshoeFlowGuide, lambda: _model("hs-bnn")),
    "weight-space": (lambda m, **kw: WeightSpaceGuide(m, "flow", **kw), lambda: _model("mfvi-bnn")),
}


def _make(kind: str, seed: int = 0, **kw):
    cls, model = GUIDES[kind]
    m = model()
    pyro.clear_param_store()
    torch.manual_seed(seed)
    return cls(m, **kw)


def _flow_specs(guide):
    return guide._zspecs if isinstance(guide, HorseshoeFlowGuide) else guide._wspecs


def _zflow_state(guide) -> list[torch.Tensor]:
    """Every z-flow tensor of ``guide`` (``μ_0``, ``logvar_0``, ``e, d_1, d_2`` and both flows' weights)."""
    out = []
    for s in _flow_specs(guide):
        for what in ("z_loc", "z_logvar", "reverse_e", "reverse_d1", "reverse_d2"):
            out.append(guide._zp(s, what).detach().clone())
        for what in ("zflow", "reverse_flow"):
            out += [p.detach().clone() for p in guide._zp(s, what).parameters()]
    return out


@pytest.mark.parametrize("kind", sorted(GUIDES))
def test_config_and_keyword_forms_build_the_same_guide(kind):
    opts = {"flow_hidden": (6, 5), "num_steps": 3, "reverse_steps": 1, "init_z_logvar": -4.0}
    by_keyword = _make(kind, **opts)
    by_config = _make(kind, zflow=ZFlowConfig(**opts))
    by_mapping = _make(kind, zflow=dict(opts))
    assert by_keyword.zflow == by_config.zflow == by_mapping.zflow == ZFlowConfig(**opts)
    a, b, c = _zflow_state(by_keyword), _zflow_state(by_config), _zflow_state(by_mapping)
    assert len(a) == len(b) == len(c) > 0
    for x, y, z in zip(a, b, c, strict=True):
        assert torch.equal(x, y) and torch.equal(x, z)


@pytest.mark.parametrize("kind", sorted(GUIDES))
def test_the_options_reach_the_flows(kind):
    cfg = ZFlowConfig(flow_hidden=(7,), num_steps=3, reverse_steps=1, init_z_loc=0.5, init_reverse_scale=0.0)
    guide = _make(kind, zflow=cfg, sigmoid_bias=0.0)  # a keyword overrides the config's field
    assert guide.zflow == cfg.replace(sigmoid_bias=0.0)
    for s in _flow_specs(guide):
        q, r = guide._zp(s, "zflow"), guide._zp(s, "reverse_flow")
        assert (len(q.steps), len(r.steps)) == (3, 1)
        for flow in (q, r):
            assert all(step.arn.hidden_dims == [7] for step in flow.steps)
            assert all(step.sigmoid_bias == 0.0 for step in flow.steps)
        z_loc = guide._zp(s, "z_loc").detach()  # init_z_loc + 0.01 N(0, 1)
        assert float((z_loc - 0.5).abs().max()) < 0.01 * 6, z_loc
        for what in ("reverse_e", "reverse_d1", "reverse_d2"):  # scale 0: r starts at N(0, 1) exactly
            assert torch.count_nonzero(guide._zp(s, what)) == 0


def test_defaults_are_the_papers_flow_and_round_trip_through_plain_data():
    cfg = ZFlowConfig()
    assert (
        ZFLOW_DEFAULTS
        == cfg.to_dict()
        == {
            "flow_hidden": [50, 50],
            "num_steps": 2,
            "reverse_steps": 2,
            "sigmoid_bias": 2.0,
            "init_z_loc": 1.0,
            "init_z_logvar": -9.0,
            "init_reverse_scale": 1.0,
        }
    )
    assert ZFlowConfig.from_dict(cfg.to_dict()) == cfg  # a JSON guide_options list becomes the tuple again
    assert ZFlowConfig(flow_hidden=[3, 4]).flow_hidden == (3, 4)
    guide = _make("lbbnn")
    assert guide.zflow == cfg


@pytest.mark.parametrize(
    "options, error, match",
    [
        ({"flow_hidden": []}, ValueError, "flow_hidden"),
        ({"flow_hidden": [4, 0]}, ValueError, "flow_hidden"),
        ({"flow_hidden": "50"}, TypeError, "flow_hidden"),
        ({"num_steps": 0}, ValueError, "num_steps"),
        ({"reverse_steps": 1.5}, TypeError, "reverse_steps"),
        ({"sigmoid_bias": math.nan}, ValueError, "sigmoid_bias"),
        ({"init_z_loc": True}, TypeError, "init_z_loc"),
        ({"init_z_logvar": -math.inf}, ValueError, "init_z_logvar"),
        ({"init_reverse_scale": -1.0}, ValueError, "init_reverse_scale"),
    ],
)
@pytest.mark.parametrize("form", ["config", "keyword"])
def test_bad_options_are_refused_naming_them(options, error, match, form):
    with pytest.raises(error, match=match):
        if form == "config":
            ZFlowConfig(**options)
        else:
            _make("gaussian", **options)


@pytest.mark.parametrize("kind", sorted(GUIDES))
def test_a_zflow_that_is_not_a_config_is_refused(kind):
    with pytest.raises(TypeError, match="zflow must be a ZFlowConfig or a mapping, got tuple"):
        _make(kind, zflow=(50, 50))  # e.g. flow_hidden passed where zflow now sits
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['hidden'\]"):
        _make(kind, zflow={"hidden": [5]})


def test_unknown_keywords_and_zflow_off_the_flow_family_are_refused():
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['hidden'\]"):
        _make("gaussian", hidden=[5])
    with pytest.raises(TypeError, match="hidden"):
        _make("weight-space", hidden=[5])
    with pytest.raises(TypeError, match=r"WeightSpaceGuide\('tied'\).*\['zflow'\]"):
        WeightSpaceGuide(_model("mfvi-bnn"), "tied", zflow=ZFlowConfig())
    with pytest.raises(TypeError, match="num_steps"):
        WeightSpaceGuide(_model("mfvi-bnn"), "factorized", num_steps=2)


def test_registry_guide_options_reach_the_config():
    _, guide, spec = build(
        "mfvi-bnn",
        3,
        1,
        "regression",
        hidden=(4,),
        guide="flow",
        guide_options={"flow_hidden": [5], "num_steps": 1},
    )
    assert guide.zflow == ZFlowConfig(flow_hidden=(5,), num_steps=1)
    assert spec["guide_options"] == {"flow_hidden": [5], "num_steps": 1}
