"""The command line's own words: a build error names the argument it is about (not every flag at once), and
every ``zoo fit`` / ``zoo reproduce`` argument says what it does in ``--help``."""

from __future__ import annotations

import argparse

import pytest

from zoo.experiments.cli import build_parser, main
from zoo.experiments.cli_checks import build_error_flag

FIT = ["fit", "mfvi-bnn", "--dataset", "diabetes", "--steps", "2", "--hidden", "4", "--no-progress"]


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--option", "bogus=1"], "argument --option:"),
        (["--guide-option", "init_scale=-1"], "argument --guide-option:"),
        (["--guide", "nope"], "argument --guide:"),
    ],
)
def test_a_build_error_names_its_own_flag(tmp_path, capsys, extra, flag):
    with pytest.raises(SystemExit) as e:
        main([*FIT, "--out", str(tmp_path / "run"), *extra])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert flag in err, err
    assert "--option/--guide-option" not in err
    assert not (tmp_path / "run").exists()


def _fit_error_with_builder(tmp_path, capsys, name: str, body: str) -> str:
    """Register entry ``name`` whose builder runs ``body`` (from a plugin file), ``zoo fit`` it and return the
    one error line (exit 2, nothing written)."""
    plugin = tmp_path / f"plug_{name.replace('-', '_')}.py"
    plugin.write_text(
        "import zoo\n"
        "from guides.autoguides import autoguide_factory\n"
        "def build(in_features, out_features, task, hidden, **opts):\n"
        f"    {body}\n"
        f"zoo.register(zoo.ModelEntry(name={name!r}, summary='a broken builder', build=build,\n"
        "    tasks=('regression',), guides={'normal': autoguide_factory('normal')}, default_hidden=(4,)))\n"
    )
    out = tmp_path / "r"
    with pytest.raises(SystemExit) as e:
        main(["--plugin", str(plugin), "fit", name, "--dataset", "diabetes", "--out", str(out)])
    assert e.value.code == 2 and not out.exists()
    return capsys.readouterr().err


def test_a_builder_failing_on_its_defaults_blames_the_model_not_a_flag(tmp_path, capsys, clean_registry):
    err = _fit_error_with_builder(
        tmp_path, capsys, "broken-builder", "raise ValueError('the builder cannot make this network')"
    )
    assert "argument model: the builder cannot make this network" in err, err


def test_build_error_flag_reads_the_leading_argument_name():
    assert build_error_flag(ValueError("options of x: bad"), {"a": 1}, {"b": 2}) == "--option"
    assert build_error_flag(TypeError("guide_options: rejected"), {"a": 1}, {"b": 2}) == "--guide-option"
    assert build_error_flag(ValueError("hidden must be > 0"), {}, {}) == "--hidden"
    assert build_error_flag(ValueError("task: regression only"), {}, {}) == "--dataset"
    # no recognised name: the flags that were given, else the model itself
    assert build_error_flag(ValueError("Expected x > 0"), {}, {"b": 2}) == "--guide-option"
    assert build_error_flag(ValueError("Expected x > 0"), {"a": 1}, {"b": 2}) == "--option/--guide-option"
    assert build_error_flag(ValueError("Expected x > 0"), {}, None) == "model"


@pytest.mark.parametrize("command", ["fit", "reproduce"])
def test_every_argument_has_help(command):
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    silent = [
        a.option_strings[0] if a.option_strings else a.dest
        for a in parser._actions
        if not a.help and not isinstance(a, argparse._HelpAction)
    ]
    assert silent == [], f"zoo {command} arguments without help: {silent}"


def test_list_matrix_names_the_plugin_entries_it_does_not_cover(capsys, clean_registry):
    from pathlib import Path

    plugin = Path(__file__).parents[1] / "examples" / "zoo-dirichlet-laplace" / "zoo_dirichlet_laplace.py"
    assert main(["--plugin", str(plugin), "list", "--matrix"]) == 0
    out = capsys.readouterr().out
    assert "plugin entries, not in the matrix" in out
    assert "dl-bnn (meanfield, normal, flow)" in out


def test_a_builder_returning_something_else_than_a_model_is_named(tmp_path, capsys, clean_registry):
    body = "return zoo.build('mfvi-bnn', in_features, out_features, task, hidden=hidden)[0], None"
    err = _fit_error_with_builder(tmp_path, capsys, "tuple-builder", body)
    assert "argument model: the builder of tuple-builder must return a zoo BayesianModel, got tuple" in err
