"""``benchmarks/scoreboard_bands.py``: the 95 % bands are the draws' quantiles in input order, and the figure
is written whole (one panel per guide over the reference's band)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")


def test_band_is_the_quantiles_in_input_order(benchmark_script):
    mod = benchmark_script("scoreboard_bands")
    # column j holds the draws 0..1000 shifted by 10 j: quantiles 25, 500, 975 plus the shift
    draws = np.arange(1001.0)[:, None] + 10.0 * np.arange(3)[None, :]
    order = np.array([2, 0, 1])
    lo, mid, hi = mod.band(draws, order)
    np.testing.assert_allclose(lo, [45.0, 25.0, 35.0])
    np.testing.assert_allclose(mid, [520.0, 500.0, 510.0])
    np.testing.assert_allclose(hi, [995.0, 975.0, 985.0])


def test_figure_is_written_whole(tmp_path, benchmark_script):
    mod = benchmark_script("scoreboard_bands")
    rng = np.random.default_rng(0)
    x = rng.uniform(-4, 4, size=(30, 1))
    arrays = {"x_test": x, "y": x[:, 0] ** 3 + 3 * rng.standard_normal((400, 30)), "y_test": x[:, 0] ** 3}
    panels = {f"m:g{k}": arrays["y"] * (1 + 0.2 * k) for k in range(4)}
    out = tmp_path / "bands.png"
    mod.figure(panels, arrays, "test", out)
    assert out.stat().st_size > 5000 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bands.png"]
    assert mod.main(["--root", str(tmp_path), "--out", str(tmp_path)]) == []  # no stored 1-D instance
    with pytest.raises(SystemExit):
        mod.main(["--draws", "10", "--root", str(tmp_path)])
