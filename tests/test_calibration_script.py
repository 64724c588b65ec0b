"""``benchmarks/calibration.py``: a real (short) fit gives a calibration row whose parts are consistent, the
summary averages splits, and the report and the reliability diagram are written whole."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("matplotlib")


def test_fit_row_is_consistent(data_dir, monkeypatch, benchmark_script):
    from zoo.experiments.registry import get_entry

    mod = benchmark_script("calibration")
    monkeypatch.setitem(get_entry("mfvi-bnn").fit_defaults, "steps", 60)
    row = mod.fit_row("mfvi-bnn", "yacht", 0)
    cov = [row["coverage"][str(lv)] for lv in mod.LEVELS]
    assert all(0 <= c <= 1 for c in cov) and cov == sorted(cov)  # nested intervals cover more
    assert row["noise_ratio"] > 0 and 0 <= row["epistemic_share"] <= 1
    assert np.isfinite(row["nll"]) and row["split"] == 0
    # the noise update after the last step sets E[sigma2] to about the expected squared error under q(W):
    # training MSE plus the output spread at the training inputs (up to the weak prior and 32 draws of it)
    assert row["train_spread"] > 0 and row["mse_ratio"] > 0
    assert row["noise_ratio"] == pytest.approx(1 + row["train_spread"], abs=0.05)
    short = mod.fit_row("mfvi-bnn", "yacht", 0, label="short", steps=3)  # steps reach the fit
    assert short["model"] == "mfvi-bnn+short" and short["nll"] != row["nll"]


def test_summary_report_and_figure(tmp_path, benchmark_script):
    mod = benchmark_script("calibration")
    rows = [
        {"model": m, "dataset": d, "split": k, "coverage95": 0.9 + 0.01 * k, "nll": 1.0, "rmse": 2.0,
         "noise_ratio": 1.5, "epistemic_share": 0.1 * k,
         "coverage": {str(lv): min(1.0, lv + 0.02 * k) for lv in mod.LEVELS}, "fit_seconds": 1.0}
        for m in ("a", "b") for d in ("yacht", "energy") for k in (0, 1)
    ]  # fmt: skip
    summary = mod.summarize(rows)
    assert len(summary) == 4 and all(e["splits"] == 2 for e in summary)
    assert summary[0]["coverage95"] == pytest.approx(0.905)
    assert summary[0]["epistemic_share"] == pytest.approx(0.05)
    assert summary[0]["coverage"]["0.5"] == pytest.approx(0.51)
    assert summary[0]["fit_seconds"] == 1.0
    # ordered by model, then the data sets' order (yacht before energy), whatever the rows' order
    assert [(e["model"], e["dataset"]) for e in mod.summarize(rows[::-1])] == [
        ("a", "yacht"), ("a", "energy"), ("b", "yacht"), ("b", "energy")
    ]  # fmt: skip
    assert summary[0]["train_spread"] is None and summary[0]["mse_ratio"] is None  # rows from before them
    extra = [{**r, "train_spread": 0.5 + 0.1 * r["split"], "mse_ratio": 1.2} for r in rows]
    extra[-1].pop("mse_ratio")  # one split without it: no mean of the others
    both = mod.summarize(extra)
    assert both[0]["train_spread"] == pytest.approx(0.55) and both[0]["mse_ratio"] == pytest.approx(1.2)
    assert both[-1]["train_spread"] == pytest.approx(0.55) and both[-1]["mse_ratio"] is None
    assert "| 0.55 | 1.20 |" in mod.markdown(both, "cmd") and "| 0.55 | – |" in mod.markdown(both, "cmd")
    text = mod.markdown(summary, "cmd")
    assert "| – | – |" in text
    assert text.count("\n| a | yacht |") == 1 and text.count("\n| a | energy |") == 1 and "| 0.510 |" in text
    assert "\n| a | **0.905** (2) | **0.905** (2) | 0/2 |" in text  # the target table, both outside
    (tmp_path / "calibration.partial.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n{cut")
    out = mod.main(["--render-only", "--out", str(tmp_path)])
    assert len(out) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "calibration.json", "calibration.md", "calibration.partial.jsonl", "calibration.png"
    ]  # fmt: skip
    assert json.loads((tmp_path / "calibration.json").read_text())["summary"] == out


def test_options_need_a_label(tmp_path, capsys, benchmark_script):
    mod = benchmark_script("calibration")
    refused = (
        ("--options", '{"noise_rate": 0.1}'),
        ("--guide-options", '{"noise_update": "gradient"}'),
        ("--steps", "5000"),
    )
    for flag, value in refused:
        with pytest.raises(SystemExit):
            mod.main([flag, value, "--out", str(tmp_path)])
        assert "need --label" in capsys.readouterr().err
        assert not list(tmp_path.iterdir())  # refused before anything is written
