"""``benchmarks/scoreboard_bands.py``: the bands of the lowest seed of every fit on a 1-D instance, drawn over
the reference's into one figure, written whole; instances with more inputs are left out."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("matplotlib")


def _fit(instance, guide, seed, w2):
    return {"instance": instance, "model": "lbbnn", "guide": guide, "seed": seed, "steps": None,
            "seconds": 1.0, "scores": {"y": {"w2": w2}}}  # fmt: skip


def _toy_reference(rng, x):
    f = np.sin(x[:, 0])[None, :] + 0.1 * rng.standard_normal((400, x.shape[0]))
    return {"x_test": x, "f": f, "y": f + 0.3 * rng.standard_normal(f.shape), "y_test": np.sin(x[:, 0])}


def test_scoreboard_bands_are_drawn_for_one_dimensional_instances_only(tmp_path, benchmark_script):
    mod = benchmark_script("scoreboard_bands")
    rng = np.random.default_rng(0)
    x1, x2 = rng.uniform(-3, 3, (30, 1)), rng.uniform(-3, 3, (30, 2))
    refs = {"toy-1d": (_toy_reference(rng, x1), {}), "toy-2d": (_toy_reference(rng, x2), {})}
    from zoo.reference.score import bands

    b = bands(x1, refs["toy-1d"][0]["f"] + 0.5, refs["toy-1d"][0]["y"])
    assert bands(x2, refs["toy-2d"][0]["f"], refs["toy-2d"][0]["y"]) is None
    rows = [
        {**_fit("toy-1d", "mvn", 1, 1.0), "bands": {**b, "f_mean": [0.0] * 30}},
        {**_fit("toy-1d", "mvn", 0, 1.0), "bands": b},
        _fit("toy-2d", "mvn", 0, 1.0),
    ]
    assert mod.guide_bands(rows) == {"toy-1d": {"lbbnn:mvn": b}}  # the lowest seed's
    path = tmp_path / "bands.png"
    assert mod.plot_bands(rows, refs, path) == ["toy-1d"]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "bands.png"
    ]  # written whole: no temporary file left beside it
    assert mod.plot_bands(rows[2:], refs, tmp_path / "none.png") == []
    assert not (tmp_path / "none.png").exists()


def test_main_redraws_from_the_committed_board(tmp_path, benchmark_script, capsys):
    mod = benchmark_script("scoreboard_bands")
    (tmp_path / "scoreboard.json").write_text(json.dumps({"rows": [_fit("ss-yacht", "mvn", 0, 1.0)]}))
    assert mod.main(["--out", str(tmp_path), "--root", str(tmp_path)]) == 0
    assert "0 instance(s) drawn" in capsys.readouterr().out and not (tmp_path / mod.FIGURE).exists()
