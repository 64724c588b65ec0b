"""Own data, second round (the audit of "fit the zoo on your own data"): 1-based labels are refused for any
number of classes, a run folder predicts on new raw rows, the run records how its table was read and which
task it fitted, table errors name the file's problem and the one flag at fault, ``--true-support``
integers are file columns as ``--target``'s, and the documented Python examples run."""

from __future__ import annotations

import json
import logging
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import zoo
from zoo.data import TableOptions, from_arrays, load_dataset, load_table
from zoo.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["--steps", "3", "--hidden", "3", "--num-samples", "5", "--no-progress"]


def _csv(path: Path, header: list[str], columns: list[np.ndarray], fmt: str = "{}") -> Path:
    rows = [",".join(header)] + [",".join(fmt.format(v) for v in row) for row in zip(*columns, strict=True)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _labels_csv(tmp_path: Path, labels: np.ndarray, name: str = "cls.csv") -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(len(labels), 2))
    return _csv(tmp_path / name, ["a", "b", "label"], [x[:, 0], x[:, 1], labels])


def _fail(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


# ------------------------------------------------------------------------------------ 1. 1-based labels


@pytest.mark.parametrize("c", [3, 5])
@pytest.mark.parametrize("task", [None, "multiclass"])
def test_one_based_labels_are_refused_for_any_number_of_classes(c, task):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 2))
    y = np.arange(60) % c + 1  # 1..C, no class 0 anywhere
    with pytest.raises(ValueError, match=r"1-based: use y - 1") as e:
        from_arrays("m", task, x[:50], y[:50], x[50:], y[50:])
    assert f"1..{c}" in str(e.value) and "regression" in str(e.value)  # the hint for ratings too
    ds = from_arrays("m", task, x[:50], y[:50] - 1, x[50:], y[50:] - 1)  # the remap it names works
    assert ds.n_classes == c and ds.out_features == c


def test_a_class_missing_from_one_part_only_is_still_a_warning(caplog):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    y_train = np.arange(30) % 3 + 1  # 1..3 in train
    y_test = np.array([0, 1, 2] * 3 + [1])  # class 0 only in the test part
    with caplog.at_level(logging.WARNING, logger="zoo.data.checks"):
        ds = from_arrays("m", None, x[:30], y_train, x[30:], y_test)
    assert ds.n_classes == 4 and "no example of class(es) [0]" in caplog.text
    with pytest.raises(ValueError, match="use y - 1"):  # the same labels in both parts: refused
        from_arrays("m", None, x[:30], y_train, x[30:], y_train[:10])


def test_cli_refuses_one_based_labels_before_writing(tmp_path, capsys):
    csv = _labels_csv(tmp_path, np.arange(60) % 3 + 1)
    out = tmp_path / "run"
    argv = ["fit", "mfvi-bnn", "--dataset", f"csv:{csv}", "--target", "label", *SMOKE, "--out", str(out)]
    err = _fail(argv, capsys)
    assert "use y - 1" in err and not out.exists()


# ------------------------------------------------------------------ 2. a run folder predicts on raw rows


@pytest.fixture(scope="module")
def huge_run(tmp_path_factory):
    """``zoo fit`` on a CSV whose features are of order 1e9 and 1e-4 (the target in the middle)."""
    tmp = tmp_path_factory.mktemp("huge")
    rng = np.random.default_rng(1)
    n = 80
    big = 1e9 + 1e6 * rng.normal(size=n)
    small = 1e-4 * rng.normal(size=n)
    mid = rng.normal(size=n)
    y = 3000 + 500 * (big - 1e9) / 1e6 - 200 * mid + 50 * rng.normal(size=n)
    csv = _csv(tmp / "huge.csv", ["big", "price", "small", "mid"], [big, y, small, mid], "{:.17g}")
    out = tmp / "run"
    argv = ["fit", "mfvi-bnn", "--dataset", f"csv:{csv}", "--target", "price", "--test-frac", "0.25",
            "--split-seed", "2", "--steps", "60", "--hidden", "4", "--num-samples", "20", "--no-progress",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    return csv, out


def _raw_test_rows(csv: Path, metrics: dict) -> tuple[np.ndarray, np.ndarray]:
    """The run's test rows as they are in the file, by the recorded table options and feature names."""
    opts = TableOptions(**{k: v for k, v in metrics["table"].items() if k != "true_support"})
    ds = load_table(csv, opts.replace(standardize=False, split_seed=metrics["split_seed"]))
    assert ds.meta["feature_names"] == metrics["feature_names"] == ["big", "small", "mid"]
    return ds.x_test, ds.y_test


def test_a_zoo_fit_run_predicts_on_raw_rows_as_its_test_metrics(huge_run):
    csv, out = huge_run
    m = json.loads((out / "metrics.json").read_text())
    fit = zoo.load(out / "checkpoint.pt")
    x_raw, y = _raw_test_rows(csv, m)
    assert fit.config["x_mean"] == m["x_mean"] and fit.config["feature_names"] == m["feature_names"]
    assert m["x_mean"][0] > 1e8  # the raw scale was recorded, not the standardized one
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # standardized by the fit: no off-scale warning
        pred = fit.predict(x_raw, raw_inputs=True, num_samples=20, seed=0)
    rmse = float(np.sqrt(np.mean((pred.mean.numpy() - y) ** 2)))
    assert rmse == pytest.approx(m["rmse"], rel=1e-6)  # the CLI's test metric, from the raw rows
    ds = load_dataset(f"csv:{csv}", table=TableOptions(target="price", test_frac=0.25, split_seed=2))
    same = fit.predict(torch.as_tensor(ds.x_test, dtype=torch.float32), num_samples=20, seed=0)
    torch.testing.assert_close(pred.mean, same.mean)
    torch.testing.assert_close(fit.standardize_inputs(x_raw), torch.as_tensor(ds.x_test, dtype=torch.float32))


def test_raw_rows_without_raw_inputs_warn_and_bad_rows_are_refused(huge_run):
    csv, out = huge_run
    m = json.loads((out / "metrics.json").read_text())
    fit = zoo.load(out / "checkpoint.pt")
    x_raw, _ = _raw_test_rows(csv, m)
    with pytest.warns(UserWarning, match=r"column 'big'.*raw_inputs=True"):
        fit.predict(torch.as_tensor(x_raw, dtype=torch.float32), num_samples=5, seed=0)
    with pytest.raises(ValueError, match=r"shape \(m, 3\).*'big', 'small', 'mid'"):
        fit.standardize_inputs(x_raw[:, :2])
    with pytest.raises(ValueError, match="NaN"):
        fit.standardize_inputs(np.full((2, 3), np.nan))


def test_python_fits_record_or_refuse_input_statistics():
    rng = np.random.default_rng(0)
    x_raw = 1e4 + 1e3 * rng.normal(size=(40, 2))
    mu, sd = x_raw.mean(0), x_raw.std(0)
    x = torch.as_tensor((x_raw - mu) / sd, dtype=torch.float32)
    y = x[:, 0] - x[:, 1]
    model, guide, _ = zoo.build("mfvi-bnn", 2, 1, "regression", hidden=[3])
    plain = zoo.fit(model, guide, x, y, steps=2, progress=False)
    with pytest.raises(ValueError, match="recorded no input standardization"):
        plain.standardize_inputs(x_raw)
    model, guide, _ = zoo.build("mfvi-bnn", 2, 1, "regression", hidden=[3])
    meta = {"x_mean": mu.tolist(), "x_std": sd.tolist()}
    res = zoo.fit(model, guide, x, y, steps=2, progress=False, metadata=meta)
    torch.testing.assert_close(res.standardize_inputs(x_raw), x)
    a = res.predict(x_raw, raw_inputs=True, num_samples=4, seed=3)
    torch.testing.assert_close(a.mean, res.predict(x, num_samples=4, seed=3).mean)


def test_a_run_without_standardization_passes_raw_rows_through(tmp_path):
    csv = _labels_csv(tmp_path, np.arange(40) % 2)
    out = tmp_path / "run"
    argv = ["fit", "mfvi-bnn", "--dataset", f"csv:{csv}", "--no-standardize", *SMOKE, "--out", str(out)]
    assert main(argv) == 0
    fit = zoo.load(out / "checkpoint.pt")
    assert fit.config["standardize_x"] is False and "x_mean" not in fit.config
    rows = np.array([[0.5, -1.0]])
    torch.testing.assert_close(fit.standardize_inputs(rows), torch.as_tensor(rows, dtype=torch.float32))


# ---------------------------------------------------------------------- 4. the raw-target scale warning


def test_the_raw_target_warning_gives_advice_that_changes_y(caplog):
    x = torch.randn(30, 2)
    y = 2850.0 + 500.0 * torch.randn(30)
    model, guide, _ = zoo.build("mfvi-bnn", 2, 1, "regression", hidden=[3])
    with caplog.at_level(logging.WARNING, logger="zoo.data.tensors"):
        zoo.fit(model, guide, x, y, steps=1, progress=False)
    (message,) = [r.getMessage() for r in caplog.records if r.name == "zoo.data.tensors"]
    assert message.startswith("y is on a non-standard scale")
    assert "metadata={'y_mean': mu, 'y_std': sd}" in message and "fit_on_dataset" in message
    assert "standardize=True" not in message  # from_arrays(standardize=True) never changes y


# --------------------------------------------------------- 5. --true-support integers are file columns


def test_true_support_integers_count_file_columns_as_target_does(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 4))
    y = x[:, 0] + 0.1 * rng.normal(size=30)
    csv = _csv(tmp_path / "t.csv", ["f0", "f1", "price", "f2", "f3"], [x[:, 0], x[:, 1], y, x[:, 2], x[:, 3]])
    ds = load_table(csv, TableOptions(target="price", true_support=(3, "f0")))
    np.testing.assert_array_equal(ds.true_support, [True, False, True, False])  # file column 3 is f2
    assert ds.meta["true_support_names"] == ["f2", "f0"]
    with pytest.raises(ValueError, match=r"target, not a feature \(integer indices count the file's"):
        load_table(csv, TableOptions(target="price", true_support=(2,)))
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    help_text = re.sub(r"(\w-) ", r"\1", " ".join(capsys.readouterr().out.split()))  # argparse wraps at "-"
    assert "file-column indices counted as --target counts them" in help_text
    assert "more than 20 distinct integers: regression" in help_text  # 6. the task rule


# ------------------------------------------------------------- 6./7. the task and the table are recorded


def test_cli_prints_the_task_and_records_it_with_the_table(tmp_path, capsys):
    csv = _labels_csv(tmp_path, np.arange(60) % 3)
    runs = {}
    for name, extra in (("seed3", ["--split-seed", "3"]), ("split3", ["--split", "3"])):
        out = tmp_path / name
        argv = ["fit", "mfvi-bnn", "--dataset", f"csv:{csv}", "--target", "label", "--true-support", "0",
                *extra, *SMOKE, "--out", str(out)]  # fmt: skip
        assert main(argv) == 0
        printed = capsys.readouterr().out
        assert "task: multiclass (3 classes, inferred from the target; pass --task to override)" in printed
        assert "true support: a" in printed
        runs[name] = json.loads((out / "metrics.json").read_text()), zoo.load(out / "checkpoint.pt").config
    for m, config in runs.values():
        assert (m["task"], m["n_classes"]) == ("multiclass", 3)
        assert m["data_source"] == str(csv.resolve()) == config["data_source"]
        assert m["split_seed"] == config["split_seed"] == 3  # the effective seed, either way
        assert m["table"] == config["table"] and m["table"]["target"] == "label"
        assert m["table"]["test_frac"] == 0.1 and m["table"]["standardize"] is True
        assert m["true_support_names"] == ["a"]
    (a, _), (b, _) = runs["seed3"], runs["split3"]
    assert (a["table"]["split_seed"], a["split"]) == (3, 0)
    assert (b["table"]["split_seed"], b["split"]) == (0, 3)
    assert a["accuracy"] == b["accuracy"] and a["nll"] == b["nll"]  # the same split and fit


def test_given_task_and_registered_datasets(tmp_path, capsys):
    csv = _labels_csv(tmp_path, (np.arange(40) % 2).astype(float) * 3.5)
    out = tmp_path / "r"
    argv = ["fit", "mfvi-bnn", "--dataset", f"csv:{csv}", "--task", "regression", *SMOKE, "--out", str(out)]
    assert main(argv) == 0
    assert "task: regression (given by --task)" in capsys.readouterr().out
    m = json.loads((out / "metrics.json").read_text())
    assert (m["task"], m["n_classes"]) == ("regression", None) and m["x_mean"] is not None
    out2 = tmp_path / "d"
    assert main(["fit", "mfvi-bnn", "--dataset", "diabetes", *SMOKE, "--out", str(out2)]) == 0
    m2 = json.loads((out2 / "metrics.json").read_text())
    assert m2["task"] == "regression" and "table" not in m2 and len(m2["x_std"]) == 10
    assert not capsys.readouterr().out.startswith("task:")


def test_load_dataset_standardize_false_wins_over_table_options(tmp_path):
    csv = _labels_csv(tmp_path, np.arange(40) % 2)
    ds = load_dataset(f"csv:{csv}", standardize=False, table=TableOptions(standardize=True))
    assert ds.x_mean is None and ds.meta["table_options"]["standardize"] is False


# ------------------------------------------------------------------------------- 8. error messages


def test_file_format_errors_say_what_the_file_is(tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "good.npz", x=rng.normal(size=(20, 2)), y=rng.normal(size=20))
    np.save(tmp_path / "plain.npy", rng.normal(size=(20, 3)))
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}] * 20, dtype=object), y=np.zeros(20))
    csv = _labels_csv(tmp_path, np.arange(20) % 2)
    npz_x = rng.normal(size=(20, 2))
    npz_x[[3, 7], 1] = np.nan
    np.savez(tmp_path / "nan.npz", x=npz_x, y=np.zeros(20))
    cases = [
        (f"csv:{tmp_path / 'good.npz'}", r"good\.npz: not a text/CSV file"),
        (f"npz:{csv}", r"cls\.csv: not an \.npz archive"),
        (f"npz:{tmp_path / 'plain.npy'}", r"plain\.npy: not an \.npz archive but a single \.npy array"),
        (f"npz:{tmp_path / 'objects.npz'}", r"objects\.npz: an array of the archive holds Python objects"),
        (f"npz:{tmp_path / 'nan.npz'}", r"rows \(0-based\) \[3, 7\]"),
    ]
    for dataset, message in cases:
        err = _fail(["fit", "mfvi-bnn", "--dataset", dataset, *SMOKE, "--out", str(tmp_path / "o")], capsys)
        assert re.search(r"argument --dataset: .*" + message, err), err
        assert "allow_pickle" not in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("cell", "hint"),
    [("-1,822.79", "remove the thousands separators"), ("1,95", "'.' is the decimal point"),
     ("cat", "class labels must be integers 0..C-1")],
)  # fmt: skip
def test_non_numeric_target_hints_fit_the_cell(tmp_path, cell, hint):
    path = tmp_path / "t.csv"
    path.write_text(f'a;price\n1.0;"{cell}"\n2.0;3.0\n')
    with pytest.raises(ValueError, match=re.escape(hint)) as e:
        load_table(path, TableOptions(target="price"))
    if hint != "class labels must be integers 0..C-1":
        assert "0..C-1" not in str(e.value)


def test_table_errors_name_the_one_flag_at_fault(tmp_path, capsys):
    csv = _labels_csv(tmp_path, np.arange(20) % 2)
    base = ["fit", "mfvi-bnn", "--dataset", f"csv:{csv}", *SMOKE, "--out", str(tmp_path / "o")]
    err = _fail([*base, "--target", "nosuch"], capsys)
    assert "argument --target: target: no column named 'nosuch'" in err
    err = _fail([*base, "--target", "label", "--true-support", "nosuch"], capsys)
    assert "argument --true-support: true_support: no column named 'nosuch'" in err
    err = _fail([*base, "--test-frac", "0.01"], capsys)
    assert "argument --test-frac: test_frac=0.01" in err


def test_bench_leaves_out_an_against_model_that_cannot_fit_the_task(tmp_path, capsys):
    csv = _labels_csv(tmp_path, np.arange(40) % 2)
    out = tmp_path / "bench"
    argv = ["bench", "mfvi-bnn", "--dataset", f"csv:{csv}", "--against", "blr-cavi", "--steps", "2",
            "--splits", "0-0", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "warning: argument --against: blr-cavi:cavi fits regression data, not binary" in captured.err
    assert "task: binary (inferred from the target" in captured.out
    lb = json.loads((out / "leaderboard.json").read_text())
    assert [r["label"] for r in lb["rows"]] == ["mfvi-bnn:normal (bench)"]


# ------------------------------------------------------------------------- 3. the documented examples


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_getting_started_python_examples_run(tmp_path, monkeypatch):
    """The page's Python blocks, run in order in one namespace at smoke size (fewer steps and draws)."""
    monkeypatch.chdir(tmp_path)
    blocks = _python_blocks((ROOT / "docs" / "getting-started.md").read_text())
    assert len(blocks) == 2
    code = "\n".join(blocks)
    code = re.sub(r"steps=\d+", "steps=20", code).replace("num_samples=200", "num_samples=20")
    namespace: dict = {"__name__": "getting_started"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ArviZ's on few draws; not the page's point
        exec(compile(code, "getting-started.md", "exec"), namespace)  # noqa: S102 - the project's own page
    res, ds, pred = namespace["res"], namespace["ds"], namespace["pred"]
    assert res.config["y_mean"] == pytest.approx(float(ds.y_train.mean()))
    assert res.config["y_std"] == pytest.approx(float(ds.y_train.std()))  # ddof=0, as zoo fit
    assert abs(float(pred.mean.mean()) - ds.y_mean) < 3 * ds.y_std  # target units, not standardized
    idata = namespace["idata"]
    assert float(idata.observed_data["obs"].mean()) == pytest.approx(float(ds.y_train.mean()), rel=1e-5)
    again = res.predict(namespace["xt"], num_samples=20, seed=0)
    torch.testing.assert_close(again.mean, res.predict(namespace["xt"], num_samples=20, seed=0).mean)
    fit, x_raw = namespace["loaded"], namespace["x_raw"]
    torch.testing.assert_close(fit.standardize_inputs(x_raw), torch.as_tensor(ds.x_test, dtype=torch.float32))


def test_readme_own_data_snippets_compile():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("**Own data.**") : text.index("## Gold standards")]
    blocks = _python_blocks(section)
    assert blocks and all(compile(b, "README.md", "exec") for b in blocks)
    assert "header row" in section and "decimal point" in section and "file-column" in section


def test_a_nuts_run_records_its_inputs_and_predicts_on_raw_rows(huge_run, tmp_path):
    """zoo fit --inference nuts keeps the data's record in the checkpoint as a variational run does, so a
    loaded NUTS fit predicts on raw rows too."""
    csv, _ = huge_run
    out = tmp_path / "nuts"
    argv = ["fit", "mfvi-bnn", "--inference", "nuts", "--dataset", f"csv:{csv}", "--target", "price",
            "--test-frac", "0.25", "--split-seed", "2", "--hidden", "3", "--chains", "1", "--warmup", "10",
            "--samples", "8", "--max-tree-depth", "3", "--sequential", "--no-progress",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    m = json.loads((out / "metrics.json").read_text())
    fit = zoo.load(out / "checkpoint.pt")
    assert fit.config["x_mean"] == m["x_mean"] and fit.config["feature_names"] == ["big", "small", "mid"]
    x_raw, _ = _raw_test_rows(csv, m)
    ds = load_dataset(f"csv:{csv}", table=TableOptions(target="price", test_frac=0.25, split_seed=2))
    raw = fit.predict(x_raw, raw_inputs=True, seed=0)
    same = fit.predict(torch.as_tensor(ds.x_test, dtype=torch.float32), seed=0)
    torch.testing.assert_close(raw.mean, same.mean)
