"""``zoo bench`` resume: a bench folder is reused only by the same models.

The signature records each spec's options with their defaults filled in and a plugin's file and content
hash, so an edited or another plugin file of the same name is refused before any fit, naming what
changed; an unchanged plugin resumes without refitting and keeps the record's wall time.  Fits run on the
embedded ``diabetes`` data, one split, ``--steps 3``.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from zoo.experiments import bench as bench_mod
from zoo.experiments import registry
from zoo.experiments.bench import BenchPlan, earlier_wall_seconds, parse_spec, run_fits
from zoo.experiments.bench_identity import describe_difference
from zoo.experiments.cli import build_parser, main
from zoo.experiments.journal import JournalMismatch
from zoo.experiments.suites import SUITES, Budget, Suite

ONE = Suite(
    name="tiny-resume",
    description="diabetes x 1 split, 4 hidden units (tests)",
    datasets=("diabetes",),
    splits=(0,),
    hidden=(4,),
    budget=Budget(steps=3, lr=1e-2, batch_size=None, cavi_sweeps=2, num_samples=5),
)

MODULE = "plug_bench_resume"
NAME = "pl-resume"

#: a plugin with a Config options class whose ``weight_scale`` default is ``{scale}``
PLUGIN = """
import dataclasses

from guides.autoguides import autoguide_factory
from zoo import MLP, BayesianModel, make_likelihood
from zoo.core.config import Config, resolve
from zoo.priors import GaussianPrior
from zoo.registry import ModelEntry, register


@dataclasses.dataclass(frozen=True)
class Opts(Config):
    weight_scale: float = {scale}


def build(in_features, out_features, task, hidden, options=None, **kwargs):
    o = resolve(Opts, options, kwargs)
    prior = GaussianPrior(weight_scale=o.weight_scale)
    return BayesianModel(MLP(in_features, hidden, out_features), prior, make_likelihood(task, out_features))


register(ModelEntry(name="{name}", summary="a plugin's Gaussian MLP", build=build, options=Opts,
                    guides={{"normal": autoguide_factory("normal")}}, default_hidden=(3,)))
"""


@pytest.fixture
def setting(monkeypatch, tmp_path):
    """The one-split suite registered, no committed zoo rows, and the registry restored afterwards."""
    monkeypatch.setitem(SUITES, ONE.name, ONE)
    monkeypatch.setenv("ZOO_BENCH_RESULTS", str(tmp_path / "no-zoo-rows"))
    registry.load_plugins()
    saved = dict(registry._REGISTRY)
    yield tmp_path
    forget_plugin()
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


def forget_plugin() -> None:
    """What a new process sees: the plugin neither registered nor imported."""
    registry._REGISTRY.pop(NAME, None)
    sys.modules.pop(MODULE, None)


def write_plugin(path, scale: float):
    path.write_text(textwrap.dedent(PLUGIN.format(scale=scale, name=NAME)))
    return path


def bench(plugin, out, *extra) -> int:
    argv = ["bench", NAME, "--plugin", str(plugin), "--suite", ONE.name, "--out", str(out)]
    return main([*argv, "--steps", "3", "--no-progress", *extra])


def spy_fits(monkeypatch) -> list:
    calls: list = []
    real = bench_mod.fit_task
    monkeypatch.setattr(bench_mod, "fit_task", lambda t: calls.append(t.key) or real(t))
    return calls


def test_edited_plugin_default_is_refused_naming_the_change(setting, monkeypatch, capsys):
    plugin, out = write_plugin(setting / f"{MODULE}.py", 1.0), setting / "b"
    assert bench(plugin, out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    write_plugin(plugin, 2.5)  # the same file, another default
    forget_plugin()
    calls = spy_fits(monkeypatch)
    with pytest.raises(SystemExit) as e:
        bench(plugin, out)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--out" in err
    assert f"{NAME}:normal options weight_scale: 1.0 there, 2.5 now" in err
    assert f"{NAME}:normal plugin sha256" in err
    assert calls == [] and {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_same_name_from_another_plugin_file_is_refused(setting, monkeypatch, capsys):
    first, out = write_plugin(setting / f"{MODULE}.py", 1.0), setting / "b"
    assert bench(first, out) == 0
    (setting / "v2").mkdir()
    second = write_plugin(setting / "v2" / f"{MODULE}.py", 1.0)  # same content, another file
    forget_plugin()
    calls = spy_fits(monkeypatch)
    with pytest.raises(SystemExit) as e:
        bench(second, out)
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"{NAME}:normal plugin file" in err and "v2" in err and calls == []


def test_unchanged_plugin_resumes_without_refitting_and_keeps_wall_time(setting, monkeypatch):
    plugin, out = write_plugin(setting / f"{MODULE}.py", 1.0), setting / "b"
    assert bench(plugin, out) == 0
    first = json.loads((out / "bench.json").read_text())
    assert first["wall_seconds"] > 0
    forget_plugin()
    calls = spy_fits(monkeypatch)
    assert bench(plugin, out) == 0 and calls == []
    again = json.loads((out / "bench.json").read_text())
    assert again["rows"] == first["rows"]
    assert again["wall_seconds"] >= first["wall_seconds"] > 0


def test_wall_seconds_after_an_interrupted_run_counts_the_recovered_rows(tmp_path):
    plan = BenchPlan(ONE, (parse_spec("mfvi-bnn"),))
    first = run_fits(plan, tmp_path / "b", progress=False)
    (row,) = first["rows"]
    journal = tmp_path / "b" / "bench.partial.jsonl"
    journal.write_text(json.dumps(plan.signature()) + "\n" + json.dumps(row) + "\n")
    done = {bench_mod.row_key(row): row}
    assert earlier_wall_seconds(tmp_path / "b", done) == first["wall_seconds"]  # the finished record's
    (tmp_path / "b" / "bench.json").unlink()
    assert earlier_wall_seconds(tmp_path / "b", done) == row["total_seconds"] > 0
    again = run_fits(plan, tmp_path / "b", progress=False)  # nothing left to fit
    assert again["rows"] == first["rows"] and again["wall_seconds"] >= round(row["total_seconds"], 1)


def test_signature_holds_resolved_options_and_no_plugin_for_zoo_models():
    spec = parse_spec("mfvi-bnn", {"hierarchical_scale": True})
    (model,) = BenchPlan(ONE, (spec,)).signature()["models"]
    defaults = registry.get_entry("mfvi-bnn").options().to_dict()
    assert model["options"] == {**defaults, "hierarchical_scale": True} and model["plugin"] is None
    assert set(model["options"]) > {"hierarchical_scale"}  # defaults filled in
    with pytest.raises(ValueError, match="mfvi-bnn:normal.*nosuch"):
        BenchPlan(ONE, (parse_spec("mfvi-bnn", {"nosuch": 1}),)).signature()


def test_describe_difference_names_changed_options_only():
    plan = BenchPlan(ONE, (parse_spec("mfvi-bnn"),))
    wanted = plan.signature()
    found = json.loads(json.dumps(wanted))
    assert describe_difference(found, wanted) == "the signatures differ"  # nothing to name
    found["models"][0]["options"]["weight_scale"] = 9.0
    found["steps"] = 7
    text = describe_difference(found, wanted)
    assert "steps: 7 there, null now" in text and "mfvi-bnn:normal options weight_scale: 9.0 there" in text
    assert "bias_scale" not in text


def test_record_of_an_older_signature_version_is_refused(tmp_path, monkeypatch):
    plan = BenchPlan(ONE, (parse_spec("mfvi-bnn"),))
    run_fits(plan, tmp_path / "b", progress=False)
    record = tmp_path / "b" / "bench.json"
    doc = json.loads(record.read_text())
    old = {k: v for k, v in doc["signature"].items() if k != "models"} | {"bench": 1}
    record.write_text(json.dumps({**doc, "signature": old}))
    calls = spy_fits(monkeypatch)
    with pytest.raises(JournalMismatch, match="another zoo version.*version 1"):
        run_fits(plan, tmp_path / "b", progress=False)
    (tmp_path / "c").mkdir()  # an unfinished bench of version 1 too
    (tmp_path / "c" / "bench.partial.jsonl").write_text(json.dumps(old) + "\n")
    with pytest.raises(JournalMismatch, match="unfinished.*another zoo version"):
        run_fits(plan, tmp_path / "c", progress=False)
    assert calls == []


def test_bench_help_and_parsing_of_options_agree(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "option (JSON)" not in text and "values parse by the option's type" in text
    from zoo.experiments.bench_cli import _spec

    a = parser.parse_args(["bench", "mfvi-bnn", "--out", "x", "--option", "hierarchical_scale=yes"])
    assert _spec(parser, a).options == {"hierarchical_scale": True}  # typed, not JSON ("yes" is no JSON)
    a = parser.parse_args(["bench", "mfvi-bnn", "--out", "x", "--option", "hierarchical_scale=maybe"])
    with pytest.raises(SystemExit) as e:
        _spec(parser, a)
    assert e.value.code == 2 and "hierarchical_scale" in capsys.readouterr().err
