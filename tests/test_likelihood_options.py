"""The shared regression likelihood options (zoo.core.likelihood_options.LikelihoodOptions) of the families'
builder options: the fields, defaults and checks each family inherits, and its own checks after them."""

from __future__ import annotations

import dataclasses
import math

import pytest

from zoo.core.config import Config
from zoo.core.likelihood_options import LikelihoodOptions, options_likelihood, student_t_options
from zoo.core.likelihoods import WEAK_NOISE_PRIOR
from zoo.experiments.starts import LIKELIHOOD_KEYS
from zoo.families.baselines.options import BLROptions, MFVIOptions
from zoo.families.bowtie.options import BowtieOptions, NGIGOptions
from zoo.families.collapsed.options import CollapsedOptions
from zoo.families.horseshoe.options import HorseshoeOptions
from zoo.families.lbbnn.entry import LBBNNOptions

BASE_DEFAULTS = {
    "noise_concentration": WEAK_NOISE_PRIOR[0],
    "noise_rate": WEAK_NOISE_PRIOR[1],
    "heteroscedastic": False,
    "student_t_df": None,
    "student_t_learn_df": False,
}

#: each family's options class and one invalid family-specific option (field, value)
FAMILIES = {
    MFVIOptions: ("weight_scale", 0.0),
    CollapsedOptions: ("delta", 1.0),
    NGIGOptions: ("bias_scale", -1.0),
    LBBNNOptions: ("hyper", "no-such-mode"),
    HorseshoeOptions: ("b0", 0),
}
CLASSES = pytest.mark.parametrize("cls", list(FAMILIES), ids=lambda c: c.__name__)

INVALID = [
    ("noise_rate", 0, ValueError, "noise_rate"),
    ("noise_rate", -1, ValueError, "noise_rate"),
    ("noise_concentration", math.nan, ValueError, "noise_concentration"),
    ("heteroscedastic", 1, TypeError, "heteroscedastic"),
    ("student_t_df", 2.0, ValueError, "student_t_df must be > 2"),
    ("student_t_learn_df", "yes", TypeError, "student_t_learn_df"),
]


def test_base_fields_defaults_and_checks():
    opts = LikelihoodOptions()
    assert issubclass(LikelihoodOptions, Config)
    assert opts.to_dict() == BASE_DEFAULTS
    assert LikelihoodOptions.from_dict(opts.to_dict()) == opts
    with pytest.raises(ValueError, match="noise_rate"):
        LikelihoodOptions(noise_rate=0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.noise_rate = 1.0  # type: ignore[misc]
    assert LIKELIHOOD_KEYS <= set(LikelihoodOptions.field_names())


@CLASSES
def test_family_derives_the_base_fields_with_its_defaults(cls):
    assert issubclass(cls, LikelihoodOptions)
    names = cls.field_names()
    assert names[: len(BASE_DEFAULTS)] == tuple(BASE_DEFAULTS)
    assert len(set(names)) == len(names)
    opts = cls()
    assert {k: getattr(opts, k) for k in BASE_DEFAULTS} == BASE_DEFAULTS


def test_other_options_classes_stay_apart():
    # the bow-tie's noise options mean something else (a data-dependent rate, hidden-unit noise)
    assert not issubclass(BowtieOptions, LikelihoodOptions)
    assert not issubclass(BLROptions, LikelihoodOptions)
    assert BowtieOptions().noise_concentration == 2.0 and BowtieOptions().noise_rate is None
    assert student_t_options("regression", BowtieOptions()) == {}  # no Student-t options: Gaussian


@CLASSES
@pytest.mark.parametrize("field, value, error, message", INVALID, ids=lambda v: repr(v))
def test_invalid_likelihood_option_is_rejected_by_name(cls, field, value, error, message):
    with pytest.raises(error, match=message):
        cls(**{field: value})
    with pytest.raises(error, match=message):
        cls().replace(**{field: value})


@CLASSES
def test_valid_non_defaults_round_trip(cls):
    chosen = {
        "noise_concentration": 2.0,
        "noise_rate": 0.5,
        "heteroscedastic": True,
        "student_t_df": 4.0,
        "student_t_learn_df": True,
    }
    opts = cls(**chosen)
    data = opts.to_dict()
    assert {k: data[k] for k in chosen} == chosen
    back = cls.from_dict(data)
    assert back == opts and back.to_dict() == data
    assert cls(noise_concentration=3, noise_rate=1).noise_rate == 1  # ints are real numbers
    assert student_t_options("regression", opts) == {"df": 4.0, "learn_df": True}


@CLASSES
def test_family_checks_run_after_the_base(cls):
    field, value = FAMILIES[cls]
    with pytest.raises(ValueError, match=field):
        cls(**{field: value})
    # both invalid: the base's check comes first and names its field
    with pytest.raises(ValueError, match="noise_rate"):
        cls(**{field: value, "noise_rate": 0.0})


def test_options_likelihood_reads_the_base_fields():
    opts = MFVIOptions(noise_concentration=2.0, noise_rate=0.5, heteroscedastic=True)
    lik = options_likelihood("regression", 1, "inverse_gamma", opts)
    assert lik.network_outputs == 2  # a second output per target for the noise
    t = options_likelihood("regression", 1, "gamma", HorseshoeOptions(student_t_df=5.0))
    assert type(t).__name__ == "StudentTLikelihood"
