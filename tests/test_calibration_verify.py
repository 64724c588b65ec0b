"""``benchmarks/calibration.py --verify``: a committed default row is re-fitted and compared; a row the code
does not give back, a labelled model, a missing record, options beside ``--verify`` and a bad tolerance are
refused or reported, and nothing is written."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("matplotlib")

ROW = dict(model="m", dataset="yacht", split=0, rmse=0.8, nll=1.2, coverage95=0.96, noise_ratio=1.3)


def test_committed_rows_selects_and_refuses(benchmark_script):
    mod = benchmark_script("_calibration_verify")
    recipe = {"options": {"student_t_df": 4}, "guide_options": {}, "steps": None, "holdout": 0.0,
              "likelihoods": None}  # fmt: skip
    rows = [
        {**ROW, "model": m, "dataset": d, "split": k, **({"recipe": recipe} if m == "a+t4" else {})}
        for m in ("a", "a+t4", "a+old", "b") for d in ("yacht", "energy") for k in (0, 1, 2)
    ]  # fmt: skip
    got = mod.committed_rows(rows, ["a", "a+t4"], ["energy"], [0, 2])
    assert [(r["model"], r["split"]) for r in got] == [("a", 0), ("a", 2), ("a+t4", 0), ("a+t4", 2)]
    with pytest.raises(ValueError, match="no recipe"):
        mod.committed_rows(rows, ["a+old"], ["yacht"], [0])
    with pytest.raises(ValueError, match="no committed row"):
        mod.committed_rows(rows, ["c"], ["yacht"], [0])
    # a labelled row is fitted again from its recipe under its label; a default's row with none
    where = {"spec": "a", "dataset": "energy", "split": 0, "label": "t4"}
    assert mod.refit_arguments(got[2]) == {**where, **recipe}
    assert mod.refit_arguments({**ROW, "model": "hs-bnn:factorized"}) == {
        "spec": "hs-bnn:factorized", "dataset": "yacht", "split": 0, "label": ""}  # fmt: skip


def test_verify_counts_rows_beyond_the_tolerance(benchmark_script):
    mod = benchmark_script("_calibration_verify")
    here, there = {"cpu": "A", "isa": "AVX512"}, {"cpu": "B", "isa": "AVX2"}
    rows = [{**ROW, "host": here}, {**ROW, "split": 1, "host": here}, {**ROW, "split": 2}]
    refit = {
        0: {**ROW, "host": here},
        1: {**ROW, "split": 1, "coverage95": 0.97, "host": here},
        2: {**ROW, "split": 2, "rmse": 0.81, "host": there},
    }
    lines, counts = mod.verify(rows, lambda r: refit[r["split"]], tolerance=1e-6)
    assert counts == {"rows": 3, "beyond": 2, "beyond_same_host": 1} and len(lines) == 5
    assert "**beyond**" not in lines[2] and lines[2].endswith("| same |")
    assert "0.96 → 0.97" in lines[3] and "**beyond** | same |" in lines[3]
    assert "0.8 → 0.81" in lines[4] and lines[4].endswith("**beyond** | not recorded |")
    _, counts = mod.verify(rows, lambda r: refit[r["split"]], tolerance=0.02)  # .97/.96 - 1 = .0104
    assert counts["beyond"] == 0
    for tolerance in (-1e-6, math.nan, math.inf):
        with pytest.raises(ValueError, match="tolerance"):
            mod.verify(rows, lambda r: r, tolerance)


def test_verify_refuses_before_any_fit(tmp_path, monkeypatch, capsys, benchmark_script):
    mod = benchmark_script("calibration")
    monkeypatch.setenv("ZOO_DATA_DIR", str(tmp_path / "data"))  # no data is read before these refusals
    with pytest.raises(SystemExit):
        mod.main(["--verify", "--out", str(tmp_path)])
    assert "no committed rows" in capsys.readouterr().err
    (tmp_path / "calibration.json").write_text(json.dumps({"rows": [ROW]}))
    refused = (["--options", '{"noise_rate": 0.1}', "--label", "x"], ["--holdout", "0.2"], ["--label", "x"])
    for extra in refused:
        with pytest.raises(SystemExit):
            mod.main(["--verify", "--models", "m", "--out", str(tmp_path), *extra])
        assert "--verify re-fits committed rows from their recipe" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mod.main(["--verify", "--models", "m", "--datasets", "energy", "--out", str(tmp_path)])
    assert "no committed row" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.json"]


def test_verify_refits_a_committed_row(data_dir, tmp_path, monkeypatch, capsys, benchmark_script):
    """A default's row and a labelled row from ``fit_row`` are given back bit for bit (one thread, seeded;
    the labelled one from its recipe); the default's row with its RMSE moved in the 4th digit is reported
    beyond the default tolerance, on the same host, and the exit status is 1."""
    from zoo.experiments.registry import get_entry

    mod = benchmark_script("calibration")
    monkeypatch.setitem(get_entry("mfvi-bnn").fit_defaults, "steps", 60)
    row = mod.fit_row("mfvi-bnn", "yacht", 0)
    short = mod.fit_row("mfvi-bnn", "yacht", 0, options={"weight_scale": 0.5}, label="short", steps=5)
    assert short["recipe"]["steps"] == 5 and short["rmse"] != row["rmse"]
    record = tmp_path / "calibration.json"
    record.write_text(json.dumps({"rows": [row, short]}))
    argv = "--verify --models mfvi-bnn mfvi-bnn+short --datasets yacht --splits 0".split()
    argv += ["--out", str(tmp_path)]
    assert mod.main(argv) == [row, short]
    out = capsys.readouterr().out
    assert "2 of 2 rows reproduced" in out and out.count("| same |") == 2  # the rows record this host
    record.write_text(json.dumps({"rows": [{**row, "rmse": row["rmse"] * 1.0003}, short]}))
    before = record.read_text()
    with pytest.raises(SystemExit) as exit_:
        mod.main(argv)
    assert exit_.value.code == 1
    out = capsys.readouterr().out
    assert "1 of 2 rows reproduced" in out and "1 on the same host (other code)" in out
    assert record.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["calibration.json"]
