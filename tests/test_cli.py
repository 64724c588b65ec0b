"""The command line: ``zoo list``, ``zoo fit``, ``zoo reproduce``; usage errors exit 2 and write nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import arviz as az
import pytest

from zoo.experiments.cli import main

FIT_KEYS = {"model", "guide", "dataset", "split", "n_train", "n_test", "fit_seconds", "elbo"}


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mfvi-bnn" in out and "blr-cavi" in out


def test_fit_regression_writes_three_files(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ZOO_DATA_DIR", raising=False)
    out = tmp_path / "run"
    assert (
        main(
            [
                "fit",
                "mfvi-bnn",
                "--dataset",
                "diabetes",
                "--steps",
                "60",
                "--num-samples",
                "20",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    line = capsys.readouterr().out
    assert "rmse=" in line and "nll=" in line and "coverage95=" in line
    assert sorted(os.listdir(out)) == ["checkpoint.pt", "metrics.json", "posterior.nc"]
    m = json.loads((out / "metrics.json").read_text())
    assert FIT_KEYS | {"rmse", "nll", "coverage95"} <= set(m)
    assert m["n_train"] == 398 and m["n_test"] == 44 and m["dataset"] == "diabetes"
    assert 0 < m["rmse"] < 200 and 0 <= m["coverage95"] <= 1
    idata = az.from_netcdf(out / "posterior.nc")
    assert az.loo(idata).elpd_loo < 0


def test_fit_classification_keys(tmp_path):
    out = tmp_path / "cls"
    assert (
        main(
            [
                "fit",
                "mfvi-bnn",
                "--dataset",
                "breast-cancer",
                "--steps",
                "40",
                "--hidden",
                "8",
                "--option",
                "weight_scale=0.5",
                "--option",
                "fan_in_scaling=true",
                "--num-samples",
                "10",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    m = json.loads((out / "metrics.json").read_text())
    assert FIT_KEYS | {"accuracy", "nll", "ece"} <= set(m) and 0 <= m["accuracy"] <= 1
    ckpt = __import__("torch").load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["spec"]["options"] == {"weight_scale": 0.5, "fan_in_scaling": True}


def test_fit_guide_options_reach_the_guide_and_the_checkpoint(tmp_path):
    """``--guide-option`` is passed to the guide factory and recorded, so a checkpoint rebuilds the same
    guide (here the bow-tie SVI beta rule)."""
    from zoo.infer.checkpoint import load

    out = tmp_path / "run"
    argv = ["fit", "bowtie", "--dataset", "diabetes", "--hidden", "3", "--steps", "2", "--num-samples", "5"]
    assert main([*argv, "--guide-option", "beta_rule=textbook", "--no-progress", "--out", str(out)]) == 0
    res = load(out / "checkpoint.pt")
    assert res.spec["guide_options"] == {"beta_rule": "textbook"}
    assert res.guide.beta_rule == "textbook"


@pytest.mark.parametrize(
    "args, word",
    [
        (["fit", "nope", "--dataset", "diabetes"], "MODEL"),
        (["fit", "mfvi-bnn", "--dataset", "nope"], "--dataset"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--steps", "0"], "--steps"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--steps", "ten"], "--steps"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--hidden", "0"], "--hidden"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--lr", "-1"], "--lr"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--split", "-1"], "--split"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--guide", "no-such-guide"], "--guide"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--device", "tpu9"], "--device"),
        (["fit", "mfvi-bnn", "--dataset", "mnist10k", "--split", "3"], "split"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--option", "no_such_option=1"], "--option"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--option", "weight_scale"], "--option"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--option", "weight_scale=-1"], "--option"),
        (["fit", "bowtie", "--dataset", "diabetes", "--guide-option", "beta_rule=other"], "--guide-option"),
        (["fit", "bowtie", "--dataset", "diabetes", "--guide-option", "no_such=1"], "--guide-option"),
        (["fit", "bowtie", "--dataset", "diabetes", "--guide-option", "beta_rule"], "--guide-option"),
        (["fit", "mfvi-bnn", "--dataset", "diabetes", "--ensemble", "0"], "--ensemble"),
        (["reproduce", "mfvi-uci", "--variants", "nope"], "--variants"),
        (["reproduce", "nope"], "NAME"),
        (["reproduce", "mfvi-uci", "--splits", "a-b"], "--splits"),
        (["reproduce", "mfvi-uci", "--jobs", "0"], "--jobs"),
        (["reproduce", "mfvi-uci", "--set", "steps"], "--set"),
        (["reproduce", "mfvi-uci", "--set", "stepz=3"], "--set"),
    ],
)
def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys, args, word):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main([*args, "--out", str(out)])
    assert e.value.code == 2
    assert word in capsys.readouterr().err
    assert not out.exists()


def test_missing_data_root_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ZOO_DATA_DIR", raising=False)
    with pytest.raises(SystemExit) as e:
        main(["fit", "mfvi-bnn", "--dataset", "uci:yacht", "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and "ZOO_DATA_DIR" in capsys.readouterr().err


def test_reproduce_without_data_root_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ZOO_DATA_DIR", raising=False)
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as e:
        main(["reproduce", "mfvi-uci", "--splits", "0", "--out", str(out)])
    assert e.value.code == 2 and "ZOO_DATA_DIR" in capsys.readouterr().err
    assert not out.exists()


def test_console_script_entry_point():
    r = subprocess.run(
        [sys.executable, "-m", "zoo.experiments.cli", "list"], capture_output=True, text=True, check=True
    )
    assert "mfvi-bnn" in r.stdout


def _smoke_protocol(
    name: str, run_kwargs: dict, metrics: tuple, paper: dict | None = None, dataset: str = "uci:yacht"
) -> None:
    """Register (once) a protocol of mfvi-bnn fits on ``dataset``, splits 0-1 by default."""
    from zoo.experiments.reproduce import PROTOCOLS, Protocol, RunSpec, register_protocol

    if name not in PROTOCOLS:
        register_protocol(
            Protocol(
                name,
                "smoke",
                lambda s: [
                    RunSpec("mfvi-bnn", "mfvi-bnn", dataset, k, dict(run_kwargs)) for k in (s or [0, 1])
                ],
                metrics,
                paper or {},
            )
        )


def test_reproduce_smoke_on_shared_uci(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("ZOO_DATA_DIR", str(data_dir))
    from zoo.experiments.reproduce import run_protocol

    _smoke_protocol(
        "smoke-uci",
        {"hidden": [10], "steps": 30, "num_samples": 10},
        ("rmse", "nll", "coverage95"),
        {("mfvi-bnn", "uci:yacht"): {"rmse": 1.61}},
    )
    doc = run_protocol("smoke-uci", tmp_path, progress=False)
    assert len(doc["rows"]) == 2 and {r["split"] for r in doc["rows"]} == {0, 1}
    s = doc["summary"]["mfvi-bnn"]["uci:yacht"]
    assert s["n_splits"] == 2 and s["rmse"]["mean"] > 0
    assert (tmp_path / "smoke-uci.json").exists() and "rmse" in (tmp_path / "smoke-uci.md").read_text()
    assert not (tmp_path / "smoke-uci.partial.jsonl").exists()


def test_reproduce_keeps_rows_of_aliased_datasets(tmp_path, data_dir, monkeypatch):
    """A protocol naming a dataset by alias (``uci:boston``) keeps its rows, keyed by the alias, with the
    loader's canonical name beside it (the rows used to be dropped from the table)."""
    monkeypatch.setenv("ZOO_DATA_DIR", str(data_dir))
    from zoo.experiments.reproduce import run_protocol

    _smoke_protocol(
        "smoke-alias", {"hidden": [3], "steps": 3, "num_samples": 3}, ("rmse",), dataset="uci:boston"
    )
    doc = run_protocol("smoke-alias", tmp_path, splits=[0], progress=False)
    assert len(doc["rows"]) == 1
    row = doc["rows"][0]
    assert row["dataset"] == "uci:boston" and row["dataset_name"] == "uci:bostonHousing"
    assert doc["summary"]["mfvi-bnn"]["uci:boston"]["rmse"]["min"] == row["rmse"]


def test_reproduce_resumes_from_journal_and_merges(tmp_path, data_dir, monkeypatch):
    """An interrupted protocol resumes from its journal (the journaled fit is not redone) and ``merge``
    keeps earlier rows for splits the new run does not cover."""
    import json

    monkeypatch.setenv("ZOO_DATA_DIR", str(data_dir))
    from zoo.experiments.reproduce import run_protocol

    _smoke_protocol("smoke-merge", {"hidden": [5], "steps": 5, "num_samples": 5}, ("rmse",))
    fake = {"variant": "mfvi-bnn", "dataset": "uci:yacht", "split": 0, "rmse": 123.0}
    (tmp_path / "smoke-merge.partial.jsonl").write_text(
        json.dumps({"protocol": "smoke-merge", "overrides": {}}) + "\n" + json.dumps(fake) + "\n"
    )
    doc = run_protocol("smoke-merge", tmp_path, splits=[0, 1], progress=False)
    by_split = {r["split"]: r for r in doc["rows"]}
    assert by_split[0]["rmse"] == 123.0 and by_split[1]["rmse"] < 100  # split 0 was resumed, not refit
    assert not (tmp_path / "smoke-merge.partial.jsonl").exists()
    doc2 = run_protocol("smoke-merge", tmp_path, splits=[2], progress=False, merge=True)
    assert sorted(r["split"] for r in doc2["rows"]) == [0, 1, 2]
    assert doc2["summary"]["mfvi-bnn"]["uci:yacht"]["n_splits"] == 3 and len(doc2["history"]) == 1
    assert "Merged with 2 rows" in (tmp_path / "smoke-merge.md").read_text()
    with pytest.raises(ValueError, match="variants"):
        run_protocol("smoke-merge", tmp_path, splits=[2], progress=False, variants=["nope"])
    doc3 = run_protocol("smoke-merge", tmp_path, splits=[2], progress=False)  # no merge: overwrites
    assert [r["split"] for r in doc3["rows"]] == [2]


def test_reproduce_set_overrides_only_keys_the_protocol_sets(tmp_path, data_dir, monkeypatch, caplog):
    """``--set KEY=VALUE`` overrides a run argument where the protocol sets it (``steps`` everywhere): a
    post-training override does not reach a fit that has none (it would raise there)."""
    monkeypatch.setenv("ZOO_DATA_DIR", str(data_dir))
    from zoo.experiments.reproduce import run_protocol

    _smoke_protocol("smoke-set", {"hidden": [3], "steps": 50, "num_samples": 3}, ("rmse",))
    doc = run_protocol(
        "smoke-set", tmp_path, splits=[0], progress=False, overrides={"steps": 4, "posttrain_steps": 3}
    )
    row = doc["rows"][0]
    assert row["steps"] == 4 and "posttrain_steps" not in row
    # a key that reaches no run is said so (a --set conformal=0.2 on a protocol without it changes nothing)
    assert any("['posttrain_steps']: no selected run" in r.getMessage() for r in caplog.records)


def test_reproduce_checks_run_settings_before_any_fit_and_journals_the_config(
    tmp_path, data_dir, monkeypatch
):
    """A protocol's RunSpec kwargs go through RunConfig: a bad one fails before anything is fitted or
    written, naming the run and the field; each journal line records the run's config."""
    monkeypatch.setenv("ZOO_DATA_DIR", str(data_dir))
    from zoo.experiments import reproduce
    from zoo.experiments.reproduce import run_protocol

    _smoke_protocol("smoke-badcfg", {"hidden": [3], "steps": 0.5, "num_samples": 3}, ("rmse",))
    with pytest.raises(TypeError, match=r"mfvi-bnn/uci:yacht/split 0: steps"):
        run_protocol("smoke-badcfg", tmp_path / "bad", splits=[0], progress=False)
    assert not (tmp_path / "bad").exists()
    lines = []
    real = reproduce._journal_line
    monkeypatch.setattr(
        reproduce, "_journal_line", lambda row, spec: lines.append(real(row, spec)) or lines[-1]
    )
    _smoke_protocol("smoke-cfg", {"hidden": [3], "steps": 3, "num_samples": 3}, ("rmse",))
    doc = run_protocol("smoke-cfg", tmp_path, splits=[1], progress=False)
    entry = json.loads(lines[-1])
    assert entry["run_config"]["steps"] == 3 and entry["run_config"]["seed"] == 1
    assert "run_config" not in doc["rows"][0]
    with pytest.raises(ValueError, match="overrides"):
        run_protocol("smoke-cfg", tmp_path, splits=[1], progress=False, overrides={"stepz": 3})


SMOKE = ["--steps", "3", "--hidden", "3", "--num-samples", "5", "--no-progress"]


def test_fit_refuses_an_earlier_run_unless_overwrite(tmp_path, capsys):
    """``zoo fit --out DIR`` on a folder holding a run: exit 2 and every file byte-identical; with
    ``--overwrite`` the run is replaced."""
    out = tmp_path / "run"
    argv = ["fit", "mfvi-bnn", "--dataset", "diabetes", *SMOKE, "--out", str(out)]
    assert main(argv) == 0
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    with pytest.raises(SystemExit) as e:
        main([*argv[:-2], "--seed", "1", "--out", str(out)])
    assert e.value.code == 2 and "--overwrite" in capsys.readouterr().err
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == before
    for name in ("metrics.json", "checkpoint.pt", "posterior.nc"):  # any one of the files is a run
        lone = tmp_path / f"only-{name}"
        lone.mkdir()
        (lone / name).write_text("x")
        with pytest.raises(SystemExit):
            main([*argv[:-1], str(lone)])
        assert (lone / name).read_text() == "x" and len(list(lone.iterdir())) == 1
    assert main([*argv[:-2], "--seed", "1", "--overwrite", "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["seed"] == 1
    assert (out / "checkpoint.pt").read_bytes() != before["checkpoint.pt"][0]


def test_list_matrix_prints_the_composition_matrix(capsys):
    from zoo.experiments.matrix import GUIDE_FAMILIES, PRIOR_FAMILIES

    assert main(["list", "--matrix"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    assert lines[0].startswith("prior \\ guide") and head[3:] == [g.abbrev for g in GUIDE_FAMILIES]
    rows = lines[1 : 1 + len(PRIOR_FAMILIES)]
    assert [r.startswith(p.label) for r, p in zip(rows, PRIOR_FAMILIES)] == [True] * len(PRIOR_FAMILIES)
    assert all(r.count("✓") >= 1 for r in rows) and any("guide families:" == x for x in lines)


def _table(tmp_path, n: int = 60):
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3))
    y = 2.0 * x[:, 0] - x[:, 2] + 0.1 * rng.normal(size=n)
    path = tmp_path / "own.csv"
    rows = ["a,b,c,label"] + [f"{u:.5f},{v:.5f},{w:.5f},{t:.5f}" for (u, v, w), t in zip(x, y)]
    path.write_text("\n".join(rows) + "\n")
    np.savez(tmp_path / "own.npz", x=x, y=(y > 0).astype(np.int64))
    return path


def test_fit_on_own_csv_and_npz(tmp_path):
    csv = _table(tmp_path)
    out = tmp_path / "csv"
    argv = ["fit", "mfvi-bnn", "--dataset", f"csv:{csv}", "--target", "label", "--test-frac", "0.25"]
    assert main([*argv, "--split-seed", "3", *SMOKE, "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["dataset"] == "csv:own" and (m["n_train"], m["n_test"]) == (45, 15) and "rmse" in m
    out2 = tmp_path / "npz"
    assert (
        main(["fit", "mfvi-bnn", "--dataset", f"npz:{tmp_path / 'own.npz'}", *SMOKE, "--out", str(out2)]) == 0
    )
    m2 = json.loads((out2 / "metrics.json").read_text())
    assert m2["n_test"] == 6 and "accuracy" in m2  # 0/1 labels: binary inferred


@pytest.mark.parametrize(
    "extra, word",
    [
        (["--target", "nope"], "argument --target: target: no column named 'nope'"),
        (["--target", "label", "--test-frac", "1.5"], "--test-frac"),
        (["--target", "label", "--task", "ordinal"], "--task"),
        (["--target", "label", "--task", "binary"], "--dataset/--target"),  # float labels
        (["--target", "label", "--split-seed", "-1"], "--split-seed"),
    ],
)
def test_bad_own_data_arguments_exit_2_and_write_nothing(tmp_path, capsys, extra, word):
    csv = _table(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["fit", "mfvi-bnn", "--dataset", f"csv:{csv}", *extra, *SMOKE, "--out", str(out)])
    assert e.value.code == 2 and word in capsys.readouterr().err
    assert not out.exists()


def test_table_flags_need_a_table_dataset(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "mfvi-bnn", "--dataset", "diabetes", "--target", "y", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--target" in err and "csv:PATH" in err
    with pytest.raises(SystemExit) as e:
        main(
            ["fit", "mfvi-bnn", "--dataset", f"csv:{tmp_path / 'missing.csv'}", "--out", str(tmp_path / "o")]
        )
    assert e.value.code == 2 and "missing.csv" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_overwrite_with_an_ensemble_leaves_no_file_of_the_earlier_run(tmp_path):
    out = tmp_path / "run"
    argv = ["fit", "mfvi-bnn", "--dataset", "diabetes", *SMOKE, "--out", str(out)]
    assert main(argv) == 0
    assert main([*argv, "--ensemble", "2", "--overwrite"]) == 0
    assert sorted(os.listdir(out)) == ["member_0", "member_1", "metrics.json"]
    assert json.loads((out / "metrics.json").read_text())["ensemble_size"] == 2
