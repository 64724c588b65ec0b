"""Tests for the validators of :mod:`zoo.core.validation`: what they convert and pass, and that every
refusal names the argument."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

# ----------------------------------------------------------------------------------------------------------
# the array validators of zoo.core.validation that the metrics use
# ----------------------------------------------------------------------------------------------------------


def test_array_validators_convert_and_pass_good_input():
    from zoo.core import validation as V

    assert V.to_numpy("x", torch.ones(2, dtype=torch.bfloat16)).dtype == np.float64
    assert V.to_numpy("x", torch.tensor([1, 2])).dtype == np.int64
    assert V.check_float_array("x", [1, 2]).dtype == np.float64
    arr = np.zeros(3)
    assert V.check_shape("x", arr, (3,), "ref") is arr
    assert V.check_broadcastable("x", np.ones(1), (3,), "ref").shape == (3,)
    assert V.check_draws("loc", np.zeros((4, 3)), (3,)).shape == (4, 3)
    assert V.check_positive_array("x", np.ones(2)) is not None
    np.testing.assert_array_equal(V.check_labels("y", [True, False]), [1, 0])
    np.testing.assert_array_equal(V.check_labels("y", [2.0, 0.0]), [2, 0])
    np.testing.assert_array_equal(V.check_class_probs("p", [0.25, 1.0], 2), [[0.75, 0.25], [0.0, 1.0]])
    np.testing.assert_array_equal(V.check_bool_array("m", [0.0, 1.0]), [False, True])
    assert V.check_level("level", np.float32(0.5)) == 0.5
    assert V.check_level("threshold", 1, allow_one=True) == 1.0
    assert V.check_count("n", np.int64(3), minimum=1) == 3
    assert V.check_probability("alpha_reg", 1.0, allow_one=True) == 1.0
    assert V.check_bool("flag", True) is True


ARRAY_CHECKS = [
    ("none", lambda V: V.to_numpy("x", None), "x"),
    ("complex", lambda V: V.to_numpy("x", torch.ones(2, dtype=torch.complex64)), "x"),
    ("ragged", lambda V: V.to_numpy("x", [[1.0], [1.0, 2.0]]), "x"),
    ("non-numeric", lambda V: V.check_float_array("x", ["a"]), "x"),
    ("too-few-dims", lambda V: V.check_float_array("x", 1.0, min_ndim=1), "x"),
    ("empty", lambda V: V.check_float_array("x", []), "x"),
    ("nan", lambda V: V.check_float_array("x", [np.nan]), "x"),
    ("shape", lambda V: V.check_shape("x", np.zeros(2), (3,), "ref"), "x"),
    ("broadcast-enlarges", lambda V: V.check_broadcastable("x", np.zeros((3, 1)), (3,), "ref"), "x"),
    ("broadcast-fails", lambda V: V.check_broadcastable("x", np.zeros(2), (3,), "ref"), "x"),
    ("draws", lambda V: V.check_draws("loc", np.zeros((2, 4)), (3,)), "loc"),
    ("positive", lambda V: V.check_positive_array("var", np.array([1.0, 0.0])), "var"),
    ("labels-2d", lambda V: V.check_labels("y", np.zeros((2, 2), dtype=int)), "y"),
    ("labels-empty", lambda V: V.check_labels("y", np.zeros(0, dtype=int)), "y"),
    ("labels-fraction", lambda V: V.check_labels("y", [0.5]), "y"),
    ("labels-inf", lambda V: V.check_labels("y", [np.inf]), "y"),
    ("labels-strings", lambda V: V.check_labels("y", ["a"]), "y"),
    ("label-range", lambda V: V.check_label_range("y", np.array([0, 3]), 3), "y"),
    ("probs-rows", lambda V: V.check_class_probs("probs", np.ones((2, 2)) / 2, 3), "probs"),
    ("probs-3d", lambda V: V.check_class_probs("probs", np.ones((2, 2, 1)), 2), "probs"),
    ("probs-range", lambda V: V.check_class_probs("probs", [1.5, 0.5], 2), "probs"),
    ("probs-sum", lambda V: V.check_class_probs("probs", [[0.5, 0.6]], 1), "probs"),
    ("bool-values", lambda V: V.check_bool_array("m", [0.5]), "m"),
    ("bool-dtype", lambda V: V.check_bool_array("m", ["a"]), "m"),
    ("level-zero", lambda V: V.check_level("level", 0.0), "level"),
    ("level-one", lambda V: V.check_level("level", 1.0), "level"),
    ("level-string", lambda V: V.check_level("level", "high"), "level"),
    ("threshold-big", lambda V: V.check_level("threshold", 1.5, allow_one=True), "threshold"),
    ("count-float", lambda V: V.check_count("n_bins", 2.5, minimum=1), "n_bins"),
    ("count-bool", lambda V: V.check_count("n_bins", True, minimum=1), "n_bins"),
    ("count-small", lambda V: V.check_count("ddof", -1), "ddof"),
]


@pytest.mark.parametrize(
    "call, name", [(c, n) for _, c, n in ARRAY_CHECKS], ids=[i for i, _, _ in ARRAY_CHECKS]
)
def test_array_validators_raise_value_error_naming_the_argument(call, name):
    from zoo.core import validation as V

    with pytest.raises(ValueError, match=rf"^`{name}`"):
        call(V)


def test_scalar_validators_added_for_the_builders():
    from zoo.core.validation import check_bool, check_probability

    with pytest.raises(TypeError, match="^fan_in_scaling"):
        check_bool("fan_in_scaling", 1)
    with pytest.raises(ValueError, match=r"^alpha_reg must lie in \(0, 1\]"):
        check_probability("alpha_reg", 1.5, allow_one=True)
    with pytest.raises(ValueError, match=r"^delta must lie in \(0, 1\)"):
        check_probability("delta", 1.0)


def test_check_real_passes_finite_numbers_and_refuses_the_rest_naming_them():
    from zoo.core.validation import check_real

    assert check_real("sigmoid_bias", -2) == -2.0 and isinstance(check_real("x", np.float64(0.5)), float)
    for bad, error in ((math.nan, ValueError), (-math.inf, ValueError), (True, TypeError), ("1", TypeError)):
        with pytest.raises(error, match="^sigmoid_bias must be"):
            check_real("sigmoid_bias", bad)
