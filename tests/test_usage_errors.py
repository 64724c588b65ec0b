"""Validate before working (issue 22 items 5, 6, 7, 8): every usage error of the command line exits 2 with one
line naming the argument before any fit; options are parsed by the type of the setting; data that would
silently give a wrong fit (``(N, 1)`` targets, other float dtypes, no rows, a UCI folder whose features
include the target or whose splits repeat rows, wildly scaled inputs) is fixed, rejected or warned about."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import torch

import zoo
from zoo.experiments import cli_common
from zoo.experiments.cli import main
from zoo.infer.predict import predict

FIT = ["fit", "mfvi-bnn", "--dataset", "diabetes", "--steps", "2", "--hidden", "4", "--no-progress"]


class _Reached(Exception):
    """Raised by the patched fit: the command got past validation."""


@pytest.fixture
def no_work(monkeypatch):
    """Any fit or protocol run is an error of the test (validation must stop the command first)."""
    import zoo.experiments.reproduce as reproduce
    import zoo.experiments.runs as runs

    calls: list = []

    def fail(*args, **kwargs):
        calls.append((args, kwargs))
        raise _Reached

    monkeypatch.setattr(runs, "fit_on_dataset", fail)
    monkeypatch.setattr(reproduce, "run_protocol", fail)
    return calls


def _usage_error(capsys, argv: list[str], flag: str) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    assert flag in lines[0] and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--seed", "-1"], "--seed"),
        (["--seed", "1e20"], "--seed"),
        (["--seed", str(2**32)], "--seed"),
        (["--lr", "inf"], "--lr"),
        (["--lr", "nan"], "--lr"),
        (["--device", "meta"], "--device"),
        (["--device", "cuda:99"], "--device"),
        (["--threads", "0"], "--threads"),
        (["--option", "nokey=3"], "--option"),
        (["--option", "weight_scale=nan"], "--option"),
        (["--option", "fan_in_scaling=maybe"], "--option"),
        (["--option", "weight_scale"], "--option"),
        (["--guide-option", "init_scale=inf"], "--guide-option"),
        (["--dataset", "cv10:nope"], "--dataset"),
        (["--dataset", "uci:nope"], "--dataset"),
    ],
)
def test_fit_usage_errors_before_any_work(tmp_path, capsys, no_work, extra, flag):
    out = tmp_path / "run"
    _usage_error(capsys, [*FIT, *extra, "--out", str(out)], flag)
    assert no_work == [] and not out.exists()


@pytest.mark.parametrize("parent_kind", ["file", "missing"])
def test_fit_out_parent_must_be_an_existing_folder(tmp_path, capsys, no_work, parent_kind):
    parent = tmp_path / "parent"
    if parent_kind == "file":
        parent.write_text("not a folder")
    line = _usage_error(capsys, [*FIT, "--out", str(parent / "run")], "--out")
    assert "parent" in line and no_work == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_fit_out_parent_must_be_writable(tmp_path, capsys, no_work):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        assert "not writable" in _usage_error(capsys, [*FIT, "--out", str(parent / "run")], "--out")
    finally:
        parent.chmod(0o700)


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--splits", "19-20"], "--splits"),  # every dataset has 20 splits except protein (5): 20 is bad
        (["--set", "nokey=3"], "--set"),
        (["--set", "lr=NaN"], "--set"),
        (["--set", "lr=-1"], "--set"),
        (["--set", "seed=1e20"], "--set"),
        (["--set", "seed=-1"], "--set"),
        (["--set", f"seed={2**32}"], "--set"),
        (["--set", "device=meta"], "--set"),
        (["--set", "progress=maybe"], "--set"),
        (["--set", 'options={"weight_scale": Infinity}'], "--set"),
        (["--set", "lr"], "--set"),
    ],
)
def test_reproduce_usage_errors_before_any_work(tmp_path, capsys, no_work, data_dir, extra, flag):
    out = tmp_path / "rep"
    argv = ["reproduce", "mfvi-uci", "--steps", "1", "--splits", "0", "--out", str(out)]
    line = _usage_error(capsys, [*argv, *extra], flag)
    assert no_work == [] and not out.exists()
    if extra[0] == "--splits":
        assert "split 20" in line  # the first split that a dataset lacks, named with its dataset


@pytest.mark.parametrize(("var", "value"), [("ZOO_DEVICE", "meta"), ("ZOO_NUM_THREADS", "abc")])
def test_bad_environment_is_a_usage_error(tmp_path, capsys, monkeypatch, no_work, var, value):
    monkeypatch.setenv(var, value)
    flag = "--device" if var == "ZOO_DEVICE" else "--threads"
    assert var in _usage_error(capsys, [*FIT, "--out", str(tmp_path / "r")], flag)
    if var == "ZOO_DEVICE":
        argv = ["reproduce", "mfvi-uci", "--splits", "0", "--out", str(tmp_path / "rep")]
        _usage_error(capsys, argv, "ZOO_DEVICE")
    assert no_work == [] and not (tmp_path / "r").exists()


def test_divergence_is_exit_1_with_one_line(tmp_path, capsys, monkeypatch):
    import zoo.experiments.runs as runs
    from zoo.infer.divergence import DivergenceError

    def diverge(*args, **kwargs):
        raise DivergenceError(7, "the ELBO became nan", object())

    monkeypatch.setattr(runs, "fit_on_dataset", diverge)
    out = tmp_path / "run"
    assert main([*FIT, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "step 7" in err[0] and not out.exists()


# ----------------------------------------------------------------------------------------------------
# options by type, dataset names
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [("False", False), ("false", False), ("no", False), ("0", False), ("off", False)]
    + [("True", True), ("true", True), ("yes", True), ("1", True), ("ON", True)],
)
def test_bool_strings_parse_by_type(raw, value):
    assert cli_common.parse_value("regularized", raw, bool) is value


@pytest.mark.parametrize(
    ("raw", "hint"),
    [("maybe", bool), ("2", bool), ("", bool), ("1.5", int), ("1e20", int), ("nan", float), ("-inf", float)]
    + [("x", float | None), ("NaN", None), ("[1, Infinity]", None)],
)
def test_bad_typed_values_name_their_key(raw, hint):
    with pytest.raises(ValueError, match="^centered: "):
        cli_common.parse_value("centered", raw, hint)


def test_typed_values_of_each_kind():
    assert cli_common.parse_value("k", "null", float | None) is None
    assert cli_common.parse_value("k", "2.5", float | None) == 2.5
    assert cli_common.parse_value("k", "7", int) == 7
    assert cli_common.parse_value("k", "0001", str) == "0001"  # a str option keeps its text
    assert cli_common.parse_value("k", '"no"', bool) is False  # centered="no", JSON-quoted
    assert cli_common.parse_value("k", '"tanh"', str) == "tanh"
    assert cli_common.parse_value("k", "[8, 8]", None) == [8, 8]
    assert cli_common.parse_value("k", "tanh", None) == "tanh"
    hints = cli_common.config_hints(zoo.get_entry("hs-bnn").options)
    assert hints["regularized"] is bool and hints["activation"] is str
    assert cli_common.parse_options(["regularized=no", "b0=2"], hints) == {"regularized": False, "b0": 2.0}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        cli_common.parse_options(["regularized"], hints)


@pytest.mark.parametrize("raw", ["False", "false", "no", "0"])
def test_cli_bool_option_reaches_the_builder_as_false(tmp_path, no_work, raw):
    with pytest.raises(_Reached):
        main(
            [
                "fit",
                "hs-bnn",
                "--dataset",
                "diabetes",
                "--option",
                f"regularized={raw}",
                "--out",
                str(tmp_path),
            ]
        )
    (_, ds, config), _ = no_work[0]
    assert config.options == {"regularized": False}
    model = zoo.build("hs-bnn", ds.in_features, 1, "regression", hidden=[4], **config.options)[0]
    assert model._zoo_spec["options"]["regularized"] is False


@pytest.mark.parametrize("name", ["cv10:diabetes", "cv10:breast-cancer", "uci:boston", "uci:yacht", "toy-hs"])
def test_cli_takes_every_documented_dataset_form(tmp_path, no_work, data_dir, name):
    with pytest.raises(_Reached):
        main(["fit", "mfvi-bnn", "--dataset", name, "--out", str(tmp_path / "r")])
    (_, ds, _), _ = no_work[0]
    assert ds.name.split(":")[0] == name.split(":")[0]


def test_is_dataset_name_matches_load_dataset():
    from zoo.data import DATASETS, is_dataset_name

    assert all(is_dataset_name(n) for n in DATASETS)
    assert all(is_dataset_name(n) for n in ("cv10:diabetes", "uci:boston", "csv:x.csv", "npz:a.npz"))
    for bad in ("nope", "cv10:mnist10k", "cv10:cv10:diabetes", "uci:nope", "", None, 3):
        assert not is_dataset_name(bad)


# ----------------------------------------------------------------------------------------------------
# threads
# ----------------------------------------------------------------------------------------------------


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_are_capped_at_the_cores(monkeypatch, caplog, restore_threads):
    from zoo.infer import threads

    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    with caplog.at_level(logging.WARNING, logger="zoo.infer.threads"):
        assert threads.apply_num_threads(100000) == 2
    assert torch.get_num_threads() == 2 and "threads=100000" in caplog.text
    caplog.clear()
    monkeypatch.setenv(threads.ENV_VAR, "100000")
    with caplog.at_level(logging.WARNING, logger="zoo.infer.threads"):
        assert threads.apply_num_threads() == 2
    assert "ZOO_NUM_THREADS=100000" in caplog.text
    assert threads.apply_num_threads(1) == 1  # within the cores: no cap


def test_cli_threads_100000_runs_capped(tmp_path, monkeypatch, caplog, no_work, restore_threads):
    with caplog.at_level(logging.WARNING), pytest.raises(_Reached):
        main([*FIT, "--threads", "100000", "--out", str(tmp_path / "r")])
    from zoo.infer.threads import available_cores

    assert torch.get_num_threads() <= available_cores() and "exceeds" in caplog.text


# ----------------------------------------------------------------------------------------------------
# data: (N, 1) targets, dtypes, no rows, scales, UCI folders
# ----------------------------------------------------------------------------------------------------


def _regression(n=40, d=3, seed=0):
    g = np.random.default_rng(seed)
    x = g.normal(size=(n, d))
    return x, x @ np.array([1.0, -0.5, 0.25]) + 0.1 * g.normal(size=n)


def test_column_targets_are_squeezed_and_fit_the_same():
    """The issue's case: y (N, 1) broadcast against (N,) means to (N, N) (ELBO -2.29e5 for -638)."""
    from zoo.data import from_arrays
    from zoo.data.core import Dataset
    from zoo.data.tensors import fit_tensors
    from zoo.experiments.config import RunConfig
    from zoo.experiments.runs import fit_on_dataset

    x, y = _regression()
    flat = from_arrays("t", "regression", x[:30], y[:30], x[30:], y[30:])
    column = from_arrays("t", "regression", x[:30], y[:30, None], x[30:], y[30:, None])
    assert column.y_train.shape == (30,) and column.out_features == 1
    raw = Dataset("t", "regression", flat.x_train, y[:30, None], flat.x_test, y[30:, None])
    assert fit_tensors(raw, torch.device("cpu"))[1].shape == (30,)
    cfg = RunConfig(steps=5, hidden=(4,), progress=False, num_samples=5)
    elbos = [fit_on_dataset("mfvi-bnn", ds, cfg).metrics["elbo"] for ds in (flat, raw)]
    assert elbos[0] == elbos[1]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_inputs_of_any_float_dtype_are_cast_to_the_model_dtype(dtype):
    x, y = (torch.as_tensor(a, dtype=torch.float32) for a in _regression())
    xd, yd = x.to(dtype), y.to(dtype)
    ref = []
    for xs, ys in ((xd.float(), yd.float()), (xd, yd)):  # the cast by hand, then by the loop
        model, guide, _ = zoo.build("mfvi-bnn", 3, 1, "regression", hidden=[4])
        result = zoo.fit(model, guide, xs, ys, steps=3, seed=0, progress=False)
        ref.append(result.elbo)
        pred = predict(result, xs[:5], num_samples=4, seed=0)
        assert pred.mean.dtype == torch.float32 and torch.isfinite(pred.mean).all()
    assert ref[0] == ref[1]


def test_no_rows_is_an_error_naming_x():
    model, guide, _ = zoo.build("mfvi-bnn", 3, 1, "regression", hidden=[4])
    with pytest.raises(ValueError, match=r"\b[xy]\b"):
        zoo.fit(model, guide, torch.zeros(0, 3), torch.zeros(0), steps=1, progress=False)
    from zoo.data.tensors import conform_tensors

    with pytest.raises(ValueError, match="^x has no rows"):
        conform_tensors(model, torch.zeros(0, 3), None)


@pytest.mark.parametrize(
    ("x_scale", "y_scale", "warned"), [(1e6, 1.0, "x"), (1.0, 1e8, "y"), (1.0, 1.0, None)]
)
def test_wild_scales_warn(caplog, x_scale, y_scale, warned):
    x, y = (torch.as_tensor(a, dtype=torch.float32) for a in _regression())
    model, guide, _ = zoo.build("mfvi-bnn", 3, 1, "regression", hidden=[4])
    with caplog.at_level(logging.WARNING, logger="zoo.data.tensors"):
        zoo.fit(model, guide, x * x_scale, y * y_scale, steps=1, progress=False)
    messages = [r.getMessage() for r in caplog.records if r.name == "zoo.data.tensors"]
    if warned is None:
        assert messages == []
    else:
        assert len(messages) == 1 and messages[0].startswith(f"{warned} is on a non-standard scale")


def test_scale_rule_boundaries():
    from zoo.data.tensors import SCALE_LIMIT, warn_scale

    assert not warn_scale("x", torch.full((4, 2), SCALE_LIMIT / 2))
    assert warn_scale("x", torch.full((4, 2), SCALE_LIMIT * 2))
    assert warn_scale("x", torch.tensor([[1e-5], [-1e-5]]))  # sd 1e-5 around 0
    assert not warn_scale("y", torch.tensor([0, 1, 1]))  # labels are never warned about


def _uci_folder(root, *, features=(0, 1, 2), target=3, train=None, test=None):
    folder = root / "uci" / "yacht"
    folder.mkdir(parents=True, exist_ok=True)
    np.savetxt(folder / "data.txt", np.random.default_rng(0).normal(size=(30, 4)))
    np.savetxt(folder / "index_features.txt", np.array(features), fmt="%d")
    np.savetxt(folder / "index_target.txt", np.array([target]), fmt="%d")
    np.savetxt(folder / "n_splits.txt", np.array([1]), fmt="%d")
    np.savetxt(folder / "index_train_0.txt", np.array(train if train is not None else range(25)), fmt="%d")
    np.savetxt(folder / "index_test_0.txt", np.array(test if test is not None else range(25, 30)), fmt="%d")
    return root


def test_uci_folder_checks(tmp_path):
    from zoo.data import load_uci

    ds = load_uci("yacht", 0, data_dir=_uci_folder(tmp_path / "ok"))
    assert ds.n_train == 25 and ds.in_features == 3
    cases = [
        ({"features": (0, 1, 3)}, "lists the target column 3"),
        ({"features": (0, 0, 1)}, "repeats a column"),
        ({"features": (0, 7)}, "index_features"),
        ({"train": [*range(24), 0]}, "index_train_0.txt .* repeats rows"),
        ({"test": [25, 26, 26]}, "index_test_0.txt .* repeats rows"),
        ({"train": range(26)}, "overlap"),
    ]
    for i, (kw, match) in enumerate(cases):
        with pytest.raises(ValueError, match=match):
            load_uci("yacht", 0, data_dir=_uci_folder(tmp_path / str(i), **kw))


# ----------------------------------------------------------------------------------------------------
# zero steps, seeds, devices
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mfvi-bnn", "cm-bnn"])
def test_zero_steps_then_predict(name):
    x, y = (torch.as_tensor(a, dtype=torch.float32) for a in _regression())
    model, guide, _ = zoo.build(name, 3, 1, "regression", hidden=[4])
    result = zoo.fit(model, guide, x[:30], y[:30], steps=0, progress=False)
    pred = predict(result, x[30:], num_samples=6, seed=1)
    again = predict(result, x[30:], num_samples=6, seed=1)
    assert pred.mean.shape == (10,) and torch.isfinite(pred.mean).all() and (pred.var > 0).all()
    assert torch.equal(pred.mean, again.mean)


def test_zero_steps_closed_form_guide_is_a_clear_error():
    x, y = (torch.as_tensor(a, dtype=torch.float32) for a in _regression())
    model, guide, _ = zoo.build("blr-cavi", 3, 1, "regression")
    result = zoo.fit(model, guide, x, y, steps=0, progress=False)
    if getattr(guide, "uses_gradients", True):
        pytest.skip("blr-cavi's guide takes gradient steps")
    with pytest.raises(ValueError, match="^result: the fit ran 0 steps"):
        predict(result, x, num_samples=2)


def test_seed_and_device_checks():
    from zoo.core.validation import MAX_SEED, check_device_name, check_seed, resolve_device

    assert check_seed("seed", MAX_SEED) == MAX_SEED
    for bad, err in ((-1, ValueError), (MAX_SEED + 1, ValueError), (1e20, TypeError), (True, TypeError)):
        with pytest.raises(err, match="^seed"):
            check_seed("seed", bad)
    with pytest.raises(ValueError, match="^seed"):
        zoo.FitConfig(seed=2**40)
    for bad in ("meta", "xla", "nonsense", "cuda:99"):
        with pytest.raises(ValueError, match="^device"):
            resolve_device(bad)
    with pytest.raises(ValueError, match="^device"):
        check_device_name("device", "meta")
    assert resolve_device("cpu") == torch.device("cpu")
