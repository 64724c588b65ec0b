"""``zoo bench``: suites, plans, the per-fit journal and resume, refusals, paired statistics, leaderboard.

Fits run on a tiny fake suite (``diabetes``, embedded, two splits) at ``--steps 3``, so the whole file takes
seconds; the statistics are checked against numbers computed by hand.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from zoo.experiments import bench as bench_mod
from zoo.experiments.bench import BenchPlan, BenchSpec, input_selection, parse_spec, run_fits
from zoo.experiments.cli import main
from zoo.experiments.journal import JournalMismatch, read_journal
from zoo.experiments.leaderboard import (
    average_ranks,
    build_leaderboard,
    load_zoo_rows,
    mean_se,
    paired_difference,
    unit_values,
)
from zoo.experiments.suites import SUITES, Budget, Suite, get_suite, register_suite

TINY = Suite(
    name="tiny",
    description="diabetes x 2 splits, 4 hidden units (tests)",
    datasets=("diabetes",),
    splits=(0, 1),
    hidden=(4,),
    budget=Budget(steps=3, lr=1e-2, batch_size=None, cavi_sweeps=2, num_samples=5),
)


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    """The tiny suite registered, with zoo rows of mfvi-bnn:normal and blr-cavi:cavi fitted on it."""
    monkeypatch.setitem(SUITES, "tiny", TINY)
    plan = BenchPlan(TINY, (parse_spec("mfvi-bnn"), parse_spec("blr-cavi")))
    doc = run_fits(plan, tmp_path / "zoo-work", progress=False)
    rows_dir = tmp_path / "results"
    rows_dir.mkdir()
    (rows_dir / "bench-tiny.json").write_text(
        json.dumps({"suite": "tiny", "suite_identity": TINY.identity(), "rows": doc["rows"]})
    )
    monkeypatch.setenv("ZOO_BENCH_RESULTS", str(rows_dir))
    return doc


def _bench(out, *extra) -> int:
    return main(["bench", "mfvi-bnn", "--suite", "tiny", "--out", str(out), "--no-progress", *extra])


# ---------------------------------------------------------------- specs and suites


def test_parse_spec_default_and_named_guide():
    assert parse_spec("mfvi-bnn") == BenchSpec("mfvi-bnn", "normal")
    s = parse_spec("hs-bnn:structured", {"regularized": True}, {"init_scale": 0.1})
    assert (s.model, s.guide, dict(s.options)) == ("hs-bnn", "structured", {"regularized": True})
    assert s.label == "hs-bnn:structured[guide.init_scale=0.1,regularized=True]"


@pytest.mark.parametrize("text", ["no-such-model", "mfvi-bnn:no-such-guide", ""])
def test_parse_spec_rejects_unknown(text):
    with pytest.raises(ValueError, match="SPEC"):
        parse_spec(text)


def test_suites_defined_once_and_validated():
    uci = get_suite("uci-small")
    assert uci.datasets == ("uci:yacht", "uci:boston", "uci:energy", "uci:concrete")
    assert uci.splits == (0, 1, 2, 3, 4) and uci.hidden == (50,)
    assert get_suite("toys").datasets == ("toy-bowtie", "toy-hs", "toy-hs-221")
    assert get_suite("selection").selection
    with pytest.raises(ValueError, match="suite"):
        get_suite("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_suite(uci)
    with pytest.raises(ValueError, match="datasets"):
        Suite(name="x", description="", datasets=(), splits=(0,))
    with pytest.raises(ValueError, match="steps"):
        Budget(steps=0)
    with pytest.raises(ValueError, match="splits"):
        BenchPlan(TINY, (parse_spec("mfvi-bnn"),), splits=())


def test_plan_settings_cavi_hidden_and_budget():
    plan = BenchPlan(TINY, (parse_spec("blr-cavi"), parse_spec("cm-bnn")), seeds=2)
    tasks = plan.tasks()
    assert len(tasks) == 2 * 2 * 2 and not plan.off_budget
    blr = [t for t in tasks if t.model == "blr-cavi"][0].config
    cm = [t for t in tasks if t.model == "cm-bnn"][0].config
    # a linear entry keeps no hidden layer; pure CAVI gets the sweeps; a hybrid guide is SVI
    assert blr["hidden"] == [] and blr["steps"] == 2 and blr["batch_size"] is None
    assert cm["hidden"] == [4] and cm["steps"] == 3
    assert sorted({t.seed for t in tasks if t.split == 1}) == [1, 1001]
    assert BenchPlan(TINY, plan.specs, splits=(0,)).off_budget
    assert BenchPlan(TINY, plan.specs, steps=5).off_budget


# ---------------------------------------------------------------- statistics


def _rows(label, values, metric="nll"):
    return [
        {"label": label, "dataset": d, "split": s, "seed": k, metric: v} for (d, s, k), v in values.items()
    ]


def test_paired_difference_matches_hand_computation():
    bench = _rows(
        "b",
        {
            ("y", 0, 0): 1.0,
            ("y", 1, 0): 2.0,
            ("y", 2, 0): 3.0,
            ("y", 2, 1): 5.0,
            ("b", 0, 0): 4.0,
            ("b", 1, 0): 6.0,
            ("b", 9, 0): 0.0,
        },
    )
    zoo = _rows(
        "z",
        {
            ("y", 0, 0): 0.5,
            ("y", 1, 0): 1.5,
            ("y", 2, 0): 2.5,
            ("y", 7, 0): 9.0,
            ("b", 0, 0): 3.0,
            ("b", 1, 0): 3.0,
        },
    )
    vb, vz = unit_values(bench, "b", "nll"), unit_values(zoo, "z", "nll")
    assert vb[("y", 2)] == 4.0  # seeds averaged first
    d = paired_difference(vb, vz)
    # yacht: d = [0.5, 0.5, 1.5]: mean 5/6, sd sqrt(1/3), se 1/3; boston: d = [1, 3]: mean 2, se 1
    assert d["y"]["mean"] == pytest.approx(5 / 6) and d["y"]["se"] == pytest.approx(1 / 3)
    assert d["y"]["n"] == 3 and d["b"]["n"] == 2
    assert d["b"]["mean"] == pytest.approx(2.0) and d["b"]["se"] == pytest.approx(1.0)
    assert d["all"]["mean"] == pytest.approx((5 / 6 + 2) / 2)
    assert d["all"]["se"] == pytest.approx(math.sqrt(1 / 9 + 1) / 2) and d["all"]["n"] == 5
    assert paired_difference(vb, {}) == {}


def test_paired_difference_single_split_has_no_se():
    d = paired_difference({("y", 0): 1.0}, {("y", 0): 0.25})
    assert d["y"] == {"mean": 0.75, "se": None, "n": 1} and d["all"]["se"] is None


def test_mean_se_and_ranks():
    assert mean_se([1.0, 2.0, 4.0])["se"] == pytest.approx(np.std([1, 2, 4], ddof=1) / math.sqrt(3))
    with pytest.raises(ValueError, match="values"):
        mean_se([])
    means = {"a": {"d1": 1.0, "d2": 0.9}, "b": {"d1": 1.0, "d2": 0.5}, "c": {"d1": 3.0, "d2": 0.7}}
    # nll (lower better): d1 a,b tie at 1.5, c 3; d2 b 1, c 2, a 3
    assert average_ranks(means, "nll") == {"a": 2.25, "b": 1.25, "c": 2.5}
    # accuracy (higher better): d1 c 1, a/b 2.5; d2 a 1, c 2, b 3
    assert average_ranks(means, "accuracy") == {"a": 1.75, "b": 2.75, "c": 1.5}


def test_input_selection_by_hand():
    class Guide:
        def sparsity_report(self, model):
            from zoo.core.sparsity import SparsityReport

            mask = torch.tensor([[True, False, False, False], [False, False, True, False]])
            return SparsityReport({"fc0.weight": mask, "fc1.weight": torch.ones(1, 2, dtype=torch.bool)})

    class Result:
        guide, model = Guide(), None

        def activate(self):
            import contextlib

            return contextlib.nullcontext()

    class Run:
        result = Result()

        class dataset:
            true_support = np.array([True, True, False, False])

    # selected inputs {0, 2}: TP 1 of 2 -> TPR 0.5; FP 1 of 2 -> FPR 0.5
    assert input_selection(Run()) == {"tpr": 0.5, "fpr": 0.5}
    Run.dataset.true_support = np.array([True, False, False])  # 3 inputs: no first-layer mask fits
    assert input_selection(Run()) == {}


# ---------------------------------------------------------------- journal, resume, refusal


def test_resume_fits_only_what_is_missing(tmp_path, monkeypatch):
    plan = BenchPlan(TINY, (parse_spec("mfvi-bnn"),))
    first = run_fits(plan, tmp_path / "b", progress=False)
    assert len(first["rows"]) == 2 and not (tmp_path / "b" / "bench.partial.jsonl").exists()
    # an interrupted run: the journal holds the signature and the first row only, no bench.json
    journal = tmp_path / "b" / "bench.partial.jsonl"
    journal.write_text(json.dumps(plan.signature()) + "\n" + json.dumps(first["rows"][0]) + "\n{cut")
    (tmp_path / "b" / "bench.json").unlink()
    calls = []
    real = bench_mod.fit_task
    monkeypatch.setattr(bench_mod, "fit_task", lambda t: calls.append(t.key) or real(t))
    again = run_fits(plan, tmp_path / "b", progress=False)
    assert calls == [("mfvi-bnn:normal", "diabetes", 1, 1)]
    assert [r["nll"] for r in again["rows"]] == pytest.approx([r["nll"] for r in first["rows"]])
    calls.clear()
    run_fits(plan, tmp_path / "b", progress=False)  # finished: nothing is refitted
    assert calls == []


def test_other_bench_in_same_out_is_refused(tmp_path):
    plan = BenchPlan(TINY, (parse_spec("mfvi-bnn"),), splits=(0,))
    run_fits(plan, tmp_path / "b", progress=False)
    other = BenchPlan(TINY, (parse_spec("mfvi-bnn"),), splits=(0,), steps=4)
    with pytest.raises(JournalMismatch, match="steps"):
        run_fits(other, tmp_path / "b", progress=False)
    # an unfinished bench of another plan is refused too
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "bench.partial.jsonl").write_text(json.dumps(other.signature()) + "\n")
    with pytest.raises(JournalMismatch, match="unfinished"):
        run_fits(plan, tmp_path / "c", progress=False)


def test_read_journal_strict_and_lenient(tmp_path):
    p = tmp_path / "j.jsonl"
    p.write_text(json.dumps({"a": 1}) + "\n" + json.dumps({"k": 1}) + "\nnot json\n")
    assert read_journal(p, {"a": 1}, key=lambda r: r["k"]) == {1: {"k": 1}}
    with pytest.raises(JournalMismatch, match="a: 1 there, 2 now"):
        read_journal(p, {"a": 2}, key=lambda r: r["k"])
    assert read_journal(p, {"a": 2}, key=lambda r: r["k"], strict=False) == {}


# ---------------------------------------------------------------- the command line


def test_cli_bad_spec_exits_2_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        _bench_spec = ["bench", "no-such-bnn", "--suite", "uci-small", "--out", str(tmp_path / "o")]
        main(_bench_spec)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "SPEC" in err and "no-such-bnn" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--option", "nokey"], "--option"),
        (["--option", "no_such_option=1"], "no_such_option"),
        (["--steps", "0"], "--steps"),
        (["--splits", "x"], "--splits"),
        (["--against", "hs-bnn"], "--against"),
        (["--target", "y"], "--target"),
        (["--zoo-rows", "/no/such/file.json"], "--zoo-rows"),
        (["--seeds", "-1"], "--seeds"),
    ],
)
def test_cli_bad_arguments_exit_2_before_writing(tmp_path, capsys, monkeypatch, extra, flag):
    monkeypatch.setitem(SUITES, "tiny", TINY)
    with pytest.raises(SystemExit) as e:
        _bench(tmp_path / "o", *extra)
    assert e.value.code == 2 and flag in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_unknown_suite_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "mfvi-bnn", "--suite", "nope", "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and "--suite" in capsys.readouterr().err


def test_cli_writes_leaderboard_with_zoo_rows(tiny, tmp_path, capsys):
    out = tmp_path / "lb"
    assert _bench(out, "--option", "weight_scale=0.5", "--guide-option", "init_scale=0.05") == 0
    assert {"leaderboard.md", "leaderboard.json", "leaderboard.png", "bench.json"} <= {
        p.name for p in out.iterdir()
    }
    assert (out / "leaderboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lb = json.loads((out / "leaderboard.json").read_text())
    bench_label = "mfvi-bnn:normal[guide.init_scale=0.05,weight_scale=0.5] (bench)"
    assert lb["bench"] == bench_label and not lb["off_budget"] and "OFF" not in lb["title"]
    assert {r["label"] for r in lb["rows"]} == {bench_label, "mfvi-bnn:normal", "blr-cavi:cavi"}
    assert set(lb["paired"]) == {"mfvi-bnn:normal", "blr-cavi:cavi"}
    # the paired difference is the mean of the per-split differences of the two rows' NLLs
    fits = json.loads((out / "bench.json").read_text())["rows"]
    zoo = {r["split"]: r["nll"] for r in tiny["rows"] if r["label"] == "blr-cavi:cavi"}
    diffs = [r["nll"] - zoo[r["split"]] for r in fits]
    assert lb["paired"]["blr-cavi:cavi"]["nll"]["diabetes"]["mean"] == pytest.approx(np.mean(diffs))
    assert lb["paired"]["blr-cavi:cavi"]["nll"]["diabetes"]["se"] == pytest.approx(
        np.std(diffs, ddof=1) / math.sqrt(2)
    )
    md = (out / "leaderboard.md").read_text()
    assert f"**{bench_label}**" in md and "Paired differences" in md and "rmse" in md


def test_cli_same_spec_as_zoo_row_differs_by_zero(tiny, tmp_path):
    out = tmp_path / "lb"
    assert _bench(out) == 0
    lb = json.loads((out / "leaderboard.json").read_text())
    same = lb["paired"]["mfvi-bnn:normal"]["nll"]["all"]  # same fits, same seeds: identical numbers
    assert same["mean"] == 0.0 and same["se"] == 0.0


def test_cli_smoke_title_resume_and_refusal(tiny, tmp_path, capsys, monkeypatch):
    out = tmp_path / "smoke"
    assert _bench(out, "--steps", "2", "--splits", "0-0") == 0
    lb = json.loads((out / "leaderboard.json").read_text())
    assert lb["off_budget"] and "OFF the suite's budget" in lb["title"]
    assert (
        lb["units"] == [["diabetes", 0]]
        and "2 steps/sweeps (off budget)" in (out / "leaderboard.md").read_text()
    )
    calls = []
    monkeypatch.setattr(bench_mod, "fit_task", lambda t: calls.append(t) or {})
    assert _bench(out, "--steps", "2", "--splits", "0-0") == 0 and calls == []  # same bench: resumed
    before = (out / "leaderboard.json").read_bytes()
    with pytest.raises(SystemExit) as e:
        _bench(out, "--steps", "3", "--splits", "0-0")
    assert e.value.code == 2 and "--out" in capsys.readouterr().err and calls == []
    assert (out / "leaderboard.json").read_bytes() == before


def test_cli_missing_zoo_rows_is_a_clear_note(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(SUITES, "tiny", TINY)
    monkeypatch.setenv("ZOO_BENCH_RESULTS", str(tmp_path / "nowhere"))
    rows, source, note = load_zoo_rows(TINY)
    assert rows == [] and "bench_zoo_rows.py --suite tiny" in note
    assert _bench(tmp_path / "o", "--splits", "0-0") == 0
    lb = json.loads((tmp_path / "o" / "leaderboard.json").read_text())
    assert [r["label"] for r in lb["rows"]] == ["mfvi-bnn:normal (bench)"] and "no zoo rows" in lb["note"]
    assert "no zoo rows" in capsys.readouterr().out


def test_zoo_rows_computed_under_other_settings_are_noted(tiny, tmp_path):
    """Rows files record the settings behind each spec (options, guide options, fit defaults): rows computed
    before a default changed get a note naming the change, rows recording none a note saying so."""
    from zoo.experiments.bench_identity import zoo_row_identity

    path = tmp_path / "results" / "bench-tiny.json"
    doc = json.loads(path.read_text())
    assert "record no model settings" in load_zoo_rows(TINY)[2]  # the fixture's rows record none
    specs = ["mfvi-bnn:normal", "blr-cavi:cavi"]
    doc["specs"] = specs
    doc["spec_identities"] = json.loads(json.dumps({lab: zoo_row_identity(lab) for lab in specs}))
    path.write_text(json.dumps(doc))
    assert load_zoo_rows(TINY)[2] is None  # today's settings: nothing to say
    ident = doc["spec_identities"]["mfvi-bnn:normal"]
    key = sorted(ident["options"])[0]
    ident["options"][key] = "an older default"
    ident["fit_defaults"]["lr"] = 123.0
    path.write_text(json.dumps(doc))
    note = load_zoo_rows(TINY)[2]
    assert "computed under other settings" in note and "mfvi-bnn:normal:" in note
    assert f'options {key}: "an older default" there' in note and "fit defaults lr: 123.0 there" in note
    assert "blr-cavi:cavi" not in note


def test_cli_own_table_against_zoo_models(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 3))
    table = tmp_path / "mine.csv"
    lines = ["a,b,c,target"] + [f"{r[0]},{r[1]},{r[2]},{r[0] - 2 * r[1] + 0.1 * rng.normal()}" for r in x]
    table.write_text("\n".join(lines) + "\n")
    out = tmp_path / "own"
    argv = [
        "bench",
        "hs-bnn",
        "--dataset",
        f"csv:{table}",
        "--target",
        "target",
        "--against",
        "mfvi-bnn,blr-cavi",
        "--steps",
        "3",
        "--splits",
        "0-1",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    lb = json.loads((out / "leaderboard.json").read_text())
    assert lb["suite"] == "own:mine" and "fitted in this run" in lb["zoo_rows_source"]
    assert {r["label"] for r in lb["rows"]} == {
        "hs-bnn:factorized (bench)",
        "mfvi-bnn:normal",
        "blr-cavi:cavi",
    }
    assert all(per["nll"]["all"]["n"] == 2 for per in lb["paired"].values())


def test_build_leaderboard_classification_metrics():
    suite = Suite(name="c", description="", datasets=("d",), splits=(0, 1))
    rows = [
        {
            "label": "m",
            "dataset": "d",
            "split": s,
            "seed": s,
            "task": "binary",
            "nll": 0.5 + s,
            "accuracy": 0.8,
            "ece": 0.1,
            "fit_seconds": 1.0,
        }
        for s in (0, 1)
    ]
    lb = build_leaderboard(suite, "m", rows, [], off_budget=False, source="none")
    assert lb["metrics"] == ["nll", "accuracy", "ece"]
    assert lb["rows"][0]["datasets"]["d"]["nll"] == {"mean": 1.0, "se": 0.5, "n": 2}


def test_cli_split_out_of_range_fails_before_any_fit(tmp_path, capsys, data_dir, monkeypatch):
    calls = []
    monkeypatch.setattr(bench_mod, "fit_task", lambda t: calls.append(t) or {})
    argv = ["bench", "mfvi-bnn", "--suite", "uci-small", "--splits", "0,25", "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--data-dir", str(data_dir), "--steps", "1"])
    assert e.value.code == 2 and "split=25" in capsys.readouterr().err
    assert calls == [] and not (tmp_path / "o").exists()


def test_worker_processes_give_the_same_rows(tmp_path):
    plan = BenchPlan(TINY, (parse_spec("mfvi-bnn"),))
    one = run_fits(plan, tmp_path / "one", progress=False)
    two = run_fits(plan, tmp_path / "two", jobs=2, progress=False)
    assert [r["nll"] for r in two["rows"]] == pytest.approx([r["nll"] for r in one["rows"]], rel=1e-6)


def _test_points(run) -> dict:
    """A suite scorer (the hook a reference suite uses): here the number of test points scored."""
    return {"scored_points": float(run.predictions.mean.shape[0])}


def test_suite_scorer_hook_adds_metrics(tmp_path):
    import dataclasses

    suite = dataclasses.replace(TINY, name="tiny-scored", scorer=_test_points)
    assert suite.identity() == {**TINY.identity(), "name": "tiny-scored"}
    doc = run_fits(BenchPlan(suite, (parse_spec("blr-cavi"),), splits=(0,)), tmp_path / "s", progress=False)
    assert doc["rows"][0]["scored_points"] == doc["rows"][0]["n_test"] == 44
    with pytest.raises(TypeError, match="scorer"):
        dataclasses.replace(TINY, scorer=3)


def test_zoo_rows_script_keeps_the_wall_time_of_a_resumed_run(monkeypatch, tmp_path):
    """benchmarks/bench_zoo_rows.py run again on a finished journal writes the rows again with the wall
    time the fits took, not the seconds of the resume, and records each spec's settings."""
    import importlib.util

    from zoo.experiments.bench_identity import zoo_row_identity

    monkeypatch.setitem(SUITES, "tiny", TINY)
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_zoo_rows.py"
    spec = importlib.util.spec_from_file_location("bench_zoo_rows", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    args = ["--suite", "tiny", "--specs", "blr-cavi:cavi", "--work", str(tmp_path / "w")]
    assert script.main([*args, "--results-dir", str(tmp_path / "a")]) == 0
    first = json.loads((tmp_path / "a" / "bench-tiny.json").read_text())
    journal = json.loads((tmp_path / "w" / "bench.json").read_text())
    assert first["wall_seconds"] == journal["wall_seconds"]
    journal["wall_seconds"] = 1234.5  # as if the fits had taken that long before an interruption
    (tmp_path / "w" / "bench.json").write_text(json.dumps(journal))
    assert script.main([*args, "--results-dir", str(tmp_path / "b")]) == 0
    second = json.loads((tmp_path / "b" / "bench-tiny.json").read_text())
    assert second["wall_seconds"] == 1234.5 and second["rows"] == first["rows"]
    identities = {"blr-cavi:cavi": zoo_row_identity("blr-cavi:cavi")}
    assert second["spec_identities"] == json.loads(json.dumps(identities))
