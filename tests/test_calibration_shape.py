"""``zoo.eval.metrics.interval_width_ratio`` and the table of ``benchmarks/_calibration_shape.py``.

The width ratio that each level's coverage implies is the true factor at every level when only the scale
is wrong (closed form). It falls with the level for peaked, heavy-tailed residuals (Student-t) and rises
for light-tailed ones (uniform), both exact by their CDFs. Impossible levels and coverages are refused."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm, t

from zoo.eval.metrics import interval_width_ratio as width_ratio

LEVELS = (0.5, 0.8, 0.9, 0.95)


def test_a_scale_miss_gives_the_same_ratio_at_every_level():
    for c in (0.7, 1.0, 1.3, 2.0):  # intervals c times too wide: residual sd = predictive sd / c
        for a in LEVELS:
            coverage = 2 * norm.cdf(c * norm.ppf((1 + a) / 2)) - 1
            assert width_ratio(a, coverage) == pytest.approx(c, rel=1e-9)


def test_shape_misses_fall_or_rise_with_the_level():
    z = {a: norm.ppf((1 + a) / 2) for a in LEVELS}
    # unit-variance t(3) residuals under a unit-variance Gaussian predictive: peaked, heavy tails
    heavy = [width_ratio(a, 2 * t.cdf(z[a] * math.sqrt(3), 3) - 1) for a in LEVELS]
    assert heavy == sorted(heavy, reverse=True) and heavy[0] > 1.2 and heavy[-1] < 1.05
    # unit-variance uniform residuals on [-sqrt 3, sqrt 3]: light tails (all covered from 0.95 on)
    light = [width_ratio(a, min(1.0, z[a] / math.sqrt(3))) for a in (0.5, 0.8, 0.9)]
    assert light == sorted(light) and light[0] < 0.8
    assert width_ratio(0.95, min(1.0, z[0.95] / math.sqrt(3))) is None  # all inside: a bound only


def test_width_ratio_refuses_impossible_inputs():
    for level, coverage in ((0.0, 0.5), (1.0, 0.5), (0.5, -0.1), (0.5, 1.1), (math.nan, 0.5), ("x", 0.5)):
        with pytest.raises(ValueError, match="`(level|coverage)` must"):
            width_ratio(level, coverage)
    assert width_ratio(0.5, 0.0) == 0.0  # no point inside


def test_shape_table(benchmark_script):
    mod = benchmark_script("_calibration_shape")
    cov = {"0.5": 2 * norm.cdf(1.5 * norm.ppf(0.75)) - 1, "0.8": 0.9, "0.95": 1.0}
    summary = [
        {"model": "a", "dataset": "yacht", "coverage": cov},
        {"model": "b", "dataset": "energy", "coverage": cov},
        {"model": "a+t4", "dataset": "yacht", "coverage": cov},
    ]
    lines = mod.shape_table(summary, ["a", "b"])
    assert lines[2] == "| model | yacht | energy |" and lines[-1] == ""
    c80 = norm.ppf(0.95) / norm.ppf(0.9)
    assert lines[4] == f"| a | 1.50 / {c80:.2f} / – |  |"
    assert lines[5] == f"| b |  | 1.50 / {c80:.2f} / – |"
    assert mod.shape_table(summary, ["c"]) == []
