"""Own data (issue 21, item 5): table files (CSV / NPZ) through ``load_table`` / ``load_dataset("csv:...")``,
the checks of ``from_arrays`` before any training, the documented ``true_support`` route to selection
metrics, and the likelihoods' target checks with Pyro's validation off."""

from __future__ import annotations

import numpy as np
import pyro
import pytest
import torch

from zoo.core.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood
from zoo.data import TableOptions, from_arrays, infer_task, load_dataset, load_table, random_split
from zoo.eval.selection import selection_rates

# ------------------------------------------------------------------------------------------------ helpers


def _write_csv(path, header, rows, sep=","):
    lines = [sep.join(header)] + [sep.join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def _table(n=40, seed=0):
    """Columns a, b, c (features) and label (binary, driven by a and c)."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=(n, 3)) * 10, 3)
    y = (x[:, 0] - x[:, 2] > 0).astype(int)
    return x, y


@pytest.fixture
def csv_file(tmp_path):
    x, y = _table()
    rows = [[*xr, int(yr)] for xr, yr in zip(x, y, strict=True)]
    return _write_csv(
        tmp_path / "mine.csv", ["a", "b", "label", "c"], [[r[0], r[1], r[3], r[2]] for r in rows]
    )


# ---------------------------------------------------------------------------------------------- round trip


def test_csv_round_trip_by_name_and_index(csv_file):
    x, y = _table()
    ds = load_table(csv_file, TableOptions(target="label", standardize=False, test_frac=0.25, split_seed=3))
    tr, te = random_split(40, seed=3, test_fraction=0.25)
    assert ds.name == "csv:mine" and ds.task == "binary" and ds.n_classes == 2 and ds.split == 3
    assert (ds.n_train, ds.n_test) == (30, 10) and ds.meta["feature_names"] == ["a", "b", "c"]
    np.testing.assert_array_equal(ds.x_train, x[tr])  # the file's columns a, b, c in order
    np.testing.assert_array_equal(ds.x_test, x[te])
    np.testing.assert_array_equal(ds.y_train, y[tr])
    assert ds.y_train.dtype == np.int64 and ds.x_mean is None
    by_index = load_table(csv_file, TableOptions(target=2, standardize=False, test_frac=0.25, split_seed=3))
    by_negative = load_table(
        csv_file, TableOptions(target=-2, standardize=False, test_frac=0.25, split_seed=3)
    )
    as_text = load_table(csv_file, TableOptions(target="2", standardize=False, test_frac=0.25, split_seed=3))
    for other in (by_index, by_negative, as_text):
        np.testing.assert_array_equal(other.x_train, ds.x_train)
        np.testing.assert_array_equal(other.y_test, ds.y_test)
    default_target = load_table(csv_file, TableOptions(standardize=False))  # the last column, c
    assert default_target.task == "regression" and default_target.meta["target"] == "c"


def test_csv_semicolon_delimiter_and_regression_values(tmp_path):
    path = _write_csv(
        tmp_path / "r.csv", ["u", "v", "y"], [[i, 2 * i, 0.5 * i + 1] for i in range(10)], sep=";"
    )
    ds = load_table(path, TableOptions(standardize=False, test_frac=0.2))
    assert ds.task == "regression" and ds.in_features == 2
    full_x = np.concatenate([ds.x_train, ds.x_test])
    full_y = np.concatenate([ds.y_train, ds.y_test])
    np.testing.assert_allclose(full_y, 0.5 * full_x[:, 0] + 1)
    np.testing.assert_allclose(full_x[:, 1], 2 * full_x[:, 0])


def test_npz_xy_and_single_array(tmp_path):
    x, y = _table()
    np.savez(tmp_path / "xy.npz", x=x, y=y)
    ds = load_table(tmp_path / "xy.npz", TableOptions(standardize=False))
    tr, te = random_split(40, seed=0)
    assert ds.name == "npz:xy" and ds.task == "binary"
    np.testing.assert_array_equal(ds.x_train, x[tr])
    np.testing.assert_array_equal(ds.y_test, y[te])
    np.savez(tmp_path / "one.npz", table=np.column_stack([y, x]))
    one = load_table(tmp_path / "one.npz", TableOptions(target=0, standardize=False))
    np.testing.assert_array_equal(one.x_test, x[te])
    np.testing.assert_array_equal(one.y_train, y[tr])
    with pytest.raises(ValueError, match="target"):
        load_table(tmp_path / "xy.npz", TableOptions(target=0))
    with pytest.raises(ValueError, match="target"):
        load_table(tmp_path / "one.npz", TableOptions(target="label"))
    np.savez(tmp_path / "two.npz", a=x, b=y)
    with pytest.raises(ValueError, match="'x' and 'y'"):
        load_table(tmp_path / "two.npz")


def test_task_inference():
    assert infer_task(np.array([0.5, 1.0, 2.0])) == "regression"
    assert infer_task(np.array([0, 1, 1, 0])) == "binary"
    assert infer_task(np.array([0.0, 2.0, 1.0])) == "multiclass"
    assert infer_task(np.arange(50)) == "regression"  # many distinct integers
    assert infer_task(np.zeros((4, 2))) == "regression"
    with pytest.raises(ValueError, match="task"):
        infer_task(np.ones(5))
    rng = np.random.default_rng(0)
    ds = from_arrays("m", None, rng.normal(size=(9, 2)), np.arange(9) % 3, rng.normal(size=(3, 2)), [0, 1, 2])
    assert ds.task == "multiclass" and ds.n_classes == 3
    bi = from_arrays("b", "binary", rng.normal(size=(4, 2)), [0, 1, 1, 0], rng.normal(size=(2, 2)), [1, 0])
    assert bi.n_classes == 2 and bi.out_features == 1
    floats = from_arrays("f", "binary", rng.normal(size=(4, 2)), [0.0, 1.0, 1.0, 0.0], np.ones((1, 2)), [1.0])
    assert floats.y_train.dtype == np.int64 and floats.y_train.tolist() == [0, 1, 1, 0]
    # multiclass: inferred from the largest label of both parts, checked when given
    mc = from_arrays("m", "multiclass", np.ones((3, 1)), [0, 1, 1], np.ones((1, 1)), [3])
    assert mc.n_classes == 4 and mc.out_features == 4


# ---------------------------------------------------------------------------------------------- rejections


def _arrays(n_train=6, n_test=3, d=2, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(n_train, d)),
        rng.normal(size=n_train),
        rng.normal(size=(n_test, d)),
        rng.normal(size=n_test),
    )


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            lambda a: a[0].__setitem__((1, 1), np.nan) or a,
            r"x_train contains 1 non-finite.*column\(s\) \[1\]",
        ),
        (lambda a: a[2].__setitem__((slice(None), 0), np.inf) or a, r"x_test contains 3 non-finite"),
        (lambda a: a[3].__setitem__(2, np.nan) or a, r"y_test contains 1 non-finite.*row\(s\) \[2\]"),
        (lambda a: (a[0], a[1], a[2][:0], a[3][:0]), r"x_test has no rows: the test part is empty"),
        (lambda a: (a[0][:0], a[1][:0], a[2], a[3]), r"x_train has no rows"),
        (lambda a: (a[0], a[1][:5], a[2], a[3]), r"y_train has 5 row\(s\) but x_train has 6"),
        (lambda a: (a[0], a[1], a[2][:, :1], a[3]), r"x_test has 1 feature column\(s\) but x_train has 2"),
        (lambda a: (a[0].astype(str), a[1], a[2], a[3]), r"x_train must be numeric"),
    ],
)
def test_from_arrays_rejects_bad_regression_data(change, match):
    xtr, ytr, xte, yte = change(list(_arrays()))
    with pytest.raises(ValueError, match=match):
        from_arrays("bad", "regression", xtr, ytr, xte, yte)


@pytest.mark.parametrize(
    ("task", "y_train", "y_test", "n_classes", "match"),
    [
        ("binary", [0, 0.7, 1, 0], [1], None, r"y_train must hold integer class labels.*0\.7"),
        ("binary", [-1, 1, 1, -1], [1], None, r"y_train labels must lie in 0\.\.C-1.*-1/\+1 to 0/1"),
        ("binary", [1, 2, 2, 1], [1], None, r"y_train labels must lie in 0\.\.1.*1-based: use y - 1"),
        ("binary", [0, 1, 1, 0], [2], None, r"y_test labels must lie in 0\.\.1"),
        ("binary", [0, 1, 1, 0], [1], 3, r"n_classes must be 2 for task 'binary'"),
        ("multiclass", [0, 1, 2, 3], [1], 3, r"y_train labels must lie in 0\.\.2 for 3 classes"),
        ("multiclass", [0, 0, 0, 0], [0], None, r"n_classes must be >= 2"),
        ("multiclass", [0, 1, 2, 1], [1], True, r"n_classes must be an int"),
        ("binary", [0, 1, np.nan, 0], [1], None, r"y_train contains 1 non-finite"),
        ("ordinal", [0, 1, 1, 0], [1], None, r"task must be one of"),
        ("regression", [0.0, 1.0, 1.0, 0.5], [1.0], 2, r"n_classes must be None for task 'regression'"),
    ],
)
def test_from_arrays_rejects_bad_labels(task, y_train, y_test, n_classes, match):
    x = np.arange(8.0).reshape(4, 2)
    with pytest.raises(ValueError, match=match):
        from_arrays("bad", task, x, np.array(y_train), x[:1], np.array(y_test), n_classes=n_classes)


def test_csv_rejections(tmp_path):
    good = _write_csv(tmp_path / "g.csv", ["a", "b", "y"], [[i, i % 3, i % 2] for i in range(20)])
    cases = [
        (["a", "color", "y"], [[1, "red", 0], [2, "blue", 1]], {}, r"feature column 'color' is not numeric"),
        (["1", "2", "3"], [[4, 5, 0], [6, 7, 1]], {}, r"header row"),
        (["a", "b", "y"], [[1, "", 0], [2, "NA", 1], [3, 4, 1]], {}, r"column 'b' has 2 missing"),
        (["a", "b", "y"], [[1, 2, 0], [2, 3]], {}, r"data row 2 has 2 fields"),
        (["a", "b", "y"], [[1, 2, "yes"], [2, 3, "no"]], {}, r"target column 'y' is not numeric"),
    ]
    for k, (header, rows, opts, match) in enumerate(cases):
        with pytest.raises(ValueError, match=match):
            load_table(_write_csv(tmp_path / f"bad{k}.csv", header, rows), TableOptions(**opts))
    with pytest.raises(ValueError, match="target: no column named 'z'"):
        load_table(good, TableOptions(target="z"))
    with pytest.raises(ValueError, match=r"target: column index 5 is out of range"):
        load_table(good, TableOptions(target=5))
    with pytest.raises(ValueError, match="test_frac=0.01 leaves an empty"):
        load_table(good, TableOptions(test_frac=0.01))
    with pytest.raises(ValueError, match=r"y_train labels .*1-based"):
        one_based = _write_csv(tmp_path / "ob.csv", ["a", "y"], [[i, 1 + i % 2] for i in range(20)])
        load_table(one_based)
    soft = _write_csv(tmp_path / "soft.csv", ["a", "y"], [[i, [0, 0.7, 1][i % 3]] for i in range(30)])
    with pytest.raises(ValueError, match=r"y_(train|test) must hold integer class labels.*0\.7"):
        load_table(soft, TableOptions(task="binary"))
    assert load_table(soft).task == "regression"  # inferred: non-integer values
    with pytest.raises(FileNotFoundError, match="path"):
        load_table(tmp_path / "absent.csv")
    with pytest.raises(ValueError, match="path: a table file must end in"):
        load_table(tmp_path / "data.txt")


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"test_frac": 1.0}, ValueError, "test_frac"),
        ({"test_frac": 0}, ValueError, "test_frac"),
        ({"task": "ordinal"}, ValueError, "task"),
        ({"split_seed": -1}, ValueError, "split_seed"),
        ({"target": True}, TypeError, "target"),
        ({"target": " "}, ValueError, "target"),
        ({"standardize": 1}, TypeError, "standardize"),
        ({"true_support": [0.5]}, TypeError, "true_support"),
    ],
)
def test_table_options_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        TableOptions(**kwargs)


def test_table_options_from_dict():
    opts = TableOptions.from_dict({"target": "y", "true_support": ["a", 2]})
    assert opts.true_support == ("a", 2) and opts.to_dict()["true_support"] == ["a", 2]
    with pytest.raises(ValueError, match="targt"):
        TableOptions.from_dict({"targt": "y"})


# --------------------------------------------------------------------------------------- split, standardize


def test_split_reproducible_by_seed(csv_file):
    a = load_table(csv_file, TableOptions(target="label", split_seed=5))
    b = load_table(csv_file, TableOptions(target="label", split_seed=5))
    c = load_table(csv_file, TableOptions(target="label", split_seed=6))
    np.testing.assert_array_equal(a.meta["test_index"], b.meta["test_index"])
    np.testing.assert_array_equal(a.x_test, b.x_test)
    assert not np.array_equal(a.meta["test_index"], c.meta["test_index"])
    # load_dataset: split K uses seed split_seed + K
    via_name = load_dataset(f"csv:{csv_file}", 1, table=TableOptions(target="label", split_seed=5))
    np.testing.assert_array_equal(via_name.meta["test_index"], c.meta["test_index"])
    np.testing.assert_array_equal(via_name.x_train, c.x_train)


def test_standardization_uses_train_part_only(csv_file):
    x, y = _table()
    opts = TableOptions(target="c", split_seed=2, test_frac=0.3)
    ds = load_table(csv_file, opts)
    raw = np.column_stack([x[:, 0], x[:, 1], y])  # features a, b, label in file order; target c
    tr, te = ds.meta["train_index"], ds.meta["test_index"]
    np.testing.assert_allclose(ds.x_mean, raw[tr].mean(axis=0))
    np.testing.assert_allclose(ds.x_std, raw[tr].std(axis=0))
    assert not np.allclose(ds.x_mean, raw.mean(axis=0))
    np.testing.assert_allclose(ds.x_train.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(ds.x_test, (raw[te] - raw[tr].mean(0)) / raw[tr].std(0))
    np.testing.assert_allclose(ds.transform_x(raw[te]), ds.x_test)
    np.testing.assert_array_equal(ds.y_train, x[tr, 2])  # regression targets stay in original units
    assert ds.y_mean == pytest.approx(x[tr, 2].mean()) and ds.y_std == pytest.approx(x[tr, 2].std())
    raw_ds = load_table(csv_file, opts.replace(standardize=False))
    assert raw_ds.x_mean is None and raw_ds.x_std is None
    np.testing.assert_array_equal(raw_ds.x_test, raw[te])
    np.testing.assert_array_equal(raw_ds.transform_x(raw[te]), raw[te])
    with pytest.raises(ValueError, match="x must have shape"):
        ds.transform_x(raw[:, :2])
    # load_dataset(standardize=False) wins over the table's default
    np.testing.assert_array_equal(
        load_dataset(f"csv:{csv_file}", 0, standardize=False, table=opts).x_test, raw[te]
    )


def test_load_dataset_table_names(csv_file, tmp_path):
    ds = load_dataset(f"csv:{csv_file}")
    assert ds.name == "csv:mine" and ds.meta["target"] == "c" and ds.task == "regression"
    mapping = load_dataset(f"csv:{csv_file}", table={"target": "label", "true_support": ["a", "c"]})
    assert mapping.task == "binary" and mapping.true_support.tolist() == [True, False, True]
    by_index = load_dataset(
        f"csv:{csv_file}", table={"target": 2, "true_support": [0, 3]}
    )  # 3: c, after label
    assert by_index.true_support.tolist() == [True, False, True]
    x, y = _table()
    np.savez(tmp_path / "arr.npz", x=x, y=y)
    assert load_dataset(f"npz:{tmp_path / 'arr.npz'}").task == "binary"
    cv = load_dataset(f"cv10:csv:{csv_file}", 3, table={"target": "label"})
    assert cv.n_train + cv.n_test == 40 and cv.n_test == 4
    with pytest.raises(ValueError, match="table: table options apply"):
        load_dataset("diabetes", table=TableOptions())
    with pytest.raises(ValueError, match="csv:PATH"):
        load_dataset("mine.csv")
    with pytest.raises(ValueError, match="give the file"):
        load_dataset("csv:")
    with pytest.raises(TypeError, match="table"):
        load_dataset(f"csv:{csv_file}", table=["target"])


# ------------------------------------------------------------------------------------------- true support


def test_true_support_forms_and_rejections(tmp_path):
    xtr, _, xte, _ = _arrays(d=4)
    ytr, yte = np.array([0, 1, 0, 1, 1, 0]), np.array([1, 0, 1])
    by_index = from_arrays("s", "binary", xtr, ytr, xte, yte, true_support=[3, 1])
    by_mask = from_arrays(
        "s", "binary", xtr, ytr, xte, yte, true_support=np.array([False, True, False, True])
    )
    assert by_index.true_support.tolist() == by_mask.true_support.tolist() == [False, True, False, True]
    assert from_arrays("s", "binary", xtr, ytr, xte, yte).true_support is None
    for bad, match in (
        ([4], r"true_support indices must lie in 0\.\.3"),
        ([1, 1], "distinct"),
        (np.array([True, False]), "true_support mask has 2 entries"),
        ([0.5, 1.0], "true_support must be a boolean mask or integer indices"),
        ([[0, 1]], "1-D"),
    ):
        with pytest.raises(ValueError, match=match):
            from_arrays("s", "binary", xtr, ytr, xte, yte, true_support=bad)
    table = _write_csv(tmp_path / "t.csv", ["a", "b", "label"], [[i, -i, i % 2] for i in range(10)])
    assert load_table(table, TableOptions(true_support=(1,))).true_support.tolist() == [False, True]
    with pytest.raises(ValueError, match="true_support: column 'label' is the target"):
        load_table(table, TableOptions(target="label", true_support=("label",)))
    with pytest.raises(ValueError, match="true_support: no column named 'z'"):
        load_table(table, TableOptions(true_support=("a", "z")))


def test_logistic_sim_true_support_from_beta_true():
    ds = load_dataset("logistic-sim", 0)
    np.testing.assert_array_equal(ds.true_support, np.asarray(ds.meta["beta_true"]) != 0)


def test_true_support_gives_selection_metrics(tmp_path):
    from zoo.experiments.runs import fit_on_dataset

    rng = np.random.default_rng(1)
    x = rng.normal(size=(120, 5))
    y = (2 * x[:, 0] - 2 * x[:, 3] + 0.3 * rng.normal(size=120) > 0).astype(int)
    path = _write_csv(
        tmp_path / "sel.csv", ["f0", "f1", "f2", "f3", "f4", "y"], np.column_stack([x, y]).tolist()
    )
    ds = load_table(path, TableOptions(target="y", task="binary", true_support=("f0", "f3")))
    assert ds.y_train.dtype == np.int64  # the 0.0/1.0 written by the CSV are integer labels
    run = fit_on_dataset("lbbnn", ds, hidden=[], steps=15, progress=False, num_samples=5)
    assert {"tpr", "fpr"} <= set(run.metrics)
    with run.result.activate():
        rep = run.result.guide.sparsity_report(run.result.model)
    expected = selection_rates(rep.masks["fc0.weight"].reshape(-1).cpu().numpy(), [1, 0, 0, 1, 0])
    assert (run.metrics["tpr"], run.metrics["fpr"]) == pytest.approx(expected)
    assert run.metrics["truth"] == [1, 0, 0, 1, 0]
    assert run.metrics["selected"] == rep.masks["fc0.weight"].reshape(-1).int().tolist()
    plain = fit_on_dataset(
        "lbbnn", load_table(path, TableOptions(target="y")), hidden=[], steps=3, progress=False
    )
    assert "tpr" not in plain.metrics and "fpr" not in plain.metrics


# ------------------------------------------------------------------------------------ likelihood targets


@pytest.fixture
def no_pyro_validation():
    with pyro.validation_enabled(False):
        yield


def test_validate_targets_gaussian(no_pyro_validation):
    lik = GaussianLikelihood()
    lik.validate_targets(torch.randn(5))
    lik.validate_targets(torch.arange(5))  # integer targets are real numbers too
    for bad, match in (
        (torch.tensor([0.0, float("nan"), 1.0]), r"y contains 1 non-finite"),
        (torch.tensor([0.0, float("inf")]), r"y contains 1 non-finite"),
        (torch.randn(5, 1), r"y must have shape \(N,\).*squeeze"),
        (torch.randn(0), r"y must have at least one row"),
        (torch.tensor(1.0), r"y must have at least one row"),
        (np.zeros(3), r"y must be a torch.Tensor"),
        (torch.ones(3, dtype=torch.bool), r"y must be real-valued"),
    ):
        with pytest.raises(ValueError, match=match):
            lik.validate_targets(bad)
    multi = GaussianLikelihood(out_features=2)
    multi.validate_targets(torch.randn(4, 2))
    for bad in (torch.randn(4), torch.randn(4, 3)):
        with pytest.raises(ValueError, match=r"y must have shape \(N, 2\)"):
            multi.validate_targets(bad)


def test_validate_targets_bernoulli(no_pyro_validation):
    lik = BernoulliLikelihood()
    # what the check prevents: with validation off, Pyro scores a label of 0.7 without complaint
    f = torch.zeros(3, 1)
    assert torch.isfinite(lik.log_likelihood(f, torch.tensor([0.7, 0.0, 1.0]), {})).all()
    for good in (torch.tensor([0, 1, 1]), torch.tensor([0.0, 1.0]), torch.tensor([True, False])):
        lik.validate_targets(good)
    for bad, match in (
        (torch.tensor([0.7, 0.0, 1.0]), r"y must hold integer labels.*0\.7"),
        (torch.tensor([-1, 1, 1]), r"y labels must lie in 0\.\.1.*-1/\+1"),
        (torch.tensor([1, 2, 2]), r"y labels must lie in 0\.\.1.*1-based"),
        (torch.tensor([[0, 1]]), r"y must be 1-D labels"),
        (torch.tensor([0.0, float("nan")]), r"y contains 1 non-finite"),
    ):
        with pytest.raises(ValueError, match=match):
            lik.validate_targets(bad)


def test_validate_targets_categorical(no_pyro_validation):
    lik = CategoricalLikelihood(3)
    lik.validate_targets(torch.tensor([0, 2, 1]))
    lik.validate_targets(torch.tensor([0.0, 2.0]))
    for bad, match in (
        (torch.tensor([0, 3]), r"y labels must lie in 0\.\.2"),
        (torch.tensor([0.0, 1.5]), r"y must hold integer labels.*1\.5"),
        (torch.tensor([1, 2, 3]), r"1-based"),
        (torch.tensor([True, False]), r"y must be integer class labels"),
        (torch.zeros(2, 3, dtype=torch.long), r"y must be 1-D labels"),
    ):
        with pytest.raises(ValueError, match=match):
            lik.validate_targets(bad)
