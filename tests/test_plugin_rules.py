"""Plugin and registry rules: one file per plugin name, names that survive the command line's ``MODEL:GUIDE``
syntax (unique ignoring case), guides added to existing models (:func:`zoo.register_guide`) and the
unknown-model hint."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from pyro.infer.autoguide import AutoDiagonalNormal, AutoNormal

import zoo
from guides.autoguides import autoguide_factory
from zoo.experiments import registry
from zoo.experiments.bench import parse_spec
from zoo.experiments.cli import main
from zoo.experiments.plugins import PluginError, load_plugin

from .test_plugins import FIT, fake_distribution, plugin_source, write

pytestmark = pytest.mark.usefixtures("clean_registry")

ROOT = Path(__file__).resolve().parent.parent

#: a plugin adding the guide ``{guide}`` (a diagonal-normal autoguide) to the zoo's ``mfvi-bnn``
GUIDE_PLUGIN = """
import zoo
from guides.autoguides import autoguide_factory

zoo.register_guide("mfvi-bnn", {guide!r}, autoguide_factory("diagonal"))
{tail}
"""


def guide_plugin(guide: str, tail: str = "") -> str:
    return GUIDE_PLUGIN.format(guide=guide, tail=tail)


# --- 1. one file per plugin name ---------------------------------------------------------------------


def test_a_second_file_with_a_loaded_plugins_name_is_a_usage_error(tmp_path):
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    first = write(tmp_path / "v1" / "plug_same.py", plugin_source("pl-same"))
    second = write(tmp_path / "v2" / "plug_same.py", plugin_source("pl-same").replace("(3,)", "(5,)"))
    assert load_plugin(first) == ["pl-same"]
    assert load_plugin(first) == ["pl-same"]  # the same file again: a no-op
    with pytest.raises(PluginError) as e:
        load_plugin(second)
    msg = str(e.value)
    assert str(first.resolve()) in msg and str(second.resolve()) in msg and "'plug_same'" in msg
    entry = registry.get_entry("pl-same")
    assert entry.plugin == str(first.resolve()) and tuple(entry.default_hidden) == (3,)


def test_cli_second_file_with_the_same_name_exits_2_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    first = write(tmp_path / "v1" / "plug_cli_same.py", plugin_source("pl-cli-same"))
    second = write(tmp_path / "v2" / "plug_cli_same.py", plugin_source("pl-cli-same"))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["--plugin", str(first), "--plugin", str(second), "fit", "pl-cli-same", *FIT, "--out", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--plugin" in err and str(second.resolve()) in err, err
    assert not out.exists()


# --- 2. names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "st:bnn", "st bnn", "st\tbnn", " st", "-st", "st[1]", "a,b", "a=b", "a|b"]
)
def test_register_refuses_names_that_break_the_command_line(name):
    entry = dataclasses.replace(registry.get_entry("mfvi-bnn"), name=name)
    with pytest.raises(ValueError, match="^name: .* is not a valid name"):
        registry.register(entry)
    assert name not in registry.available()


@pytest.mark.parametrize("guide", ["", "my:guide", "my guide"])
def test_register_refuses_guide_names_that_break_the_command_line(guide):
    entry = dataclasses.replace(
        registry.get_entry("mfvi-bnn"), name="pl-guide-names", guides={guide: AutoNormal}
    )
    with pytest.raises(ValueError, match="^guides of pl-guide-names: .* is not a valid name"):
        registry.register(entry)
    with pytest.raises(ValueError, match="^guide_name: .* is not a valid name"):
        zoo.register_guide("mfvi-bnn", guide, AutoNormal)
    with pytest.raises(TypeError, match="^name: a name must be a string"):
        registry.register(dataclasses.replace(entry, name=3))
    assert "pl-guide-names" not in registry.available() and guide not in registry.get_entry("mfvi-bnn").guides


def test_a_valid_name_registers_and_parses_as_a_spec():
    entry = dataclasses.replace(registry.get_entry("mfvi-bnn"), name="pl-ok_1.2+x", plugin=None)
    registry.register(entry)
    spec = parse_spec("pl-ok_1.2+x:lowrank")
    assert (spec.model, spec.guide) == ("pl-ok_1.2+x", "lowrank")
    for name in registry.available():  # the rule refuses none of the zoo's names
        assert registry.NAME_RULE.fullmatch(name)
        assert all(registry.NAME_RULE.fullmatch(g) for g in registry.get_entry(name).guides)


def test_names_differing_only_by_case_clash(tmp_path):
    with pytest.raises(
        ValueError, match=r"^name: 'mfvi-bnn' \('MFVI-BNN' but for case\) is already registered"
    ):
        registry.register(dataclasses.replace(registry.get_entry("mfvi-bnn"), name="MFVI-BNN"))
    path = write(tmp_path / "plug_case.py", plugin_source("Mfvi-Bnn"))
    with pytest.raises(PluginError, match=r"plug_case\.py.*'mfvi-bnn' \('Mfvi-Bnn' but for case\)"):
        load_plugin(path)
    with pytest.raises(ValueError, match="^guide_name: mfvi-bnn already offers a guide 'normal'"):
        zoo.register_guide("mfvi-bnn", "Normal", AutoNormal)
    assert "MFVI-BNN" not in registry.available() and "Mfvi-Bnn" not in registry.available()


# --- 3. register_guide -------------------------------------------------------------------------------


def test_register_guide_adds_a_guide_and_refuses_bad_input():
    before = registry.get_entry("mfvi-bnn")
    shared = {n: registry.get_entry(n).guides for n in registry.available()}
    updated = zoo.register_guide("mfvi-bnn", "pl-mine", autoguide_factory("diagonal"))
    assert list(updated.guides)[-1] == "pl-mine" and updated.default_guide == before.default_guide == "normal"
    assert "pl-mine" not in before.guides  # entries are immutable: the registry holds an updated copy
    assert all("pl-mine" not in g for n, g in shared.items() if n != "mfvi-bnn")
    model, guide, spec = zoo.build("mfvi-bnn", 3, 1, "regression", hidden=[4], guide="pl-mine", seed=0)
    guide(torch.randn(5, 3), torch.randn(5))  # the guide runs on the model
    assert isinstance(guide, AutoDiagonalNormal) and spec["guide"] == "pl-mine" and "guide_plugin" not in spec
    with pytest.raises(ValueError, match="^guide_name: mfvi-bnn already offers a guide 'pl-mine'"):
        zoo.register_guide("mfvi-bnn", "pl-mine", AutoNormal)
    with pytest.raises(ValueError, match=r"^model_name: unknown model 'pl-nope'; available: .*mfvi-bnn"):
        zoo.register_guide("pl-nope", "g", AutoNormal)
    with pytest.raises(TypeError, match="^factory: .* got str"):
        zoo.register_guide("mfvi-bnn", "pl-other", "AutoNormal")
    with pytest.raises(TypeError, match="^model_name: "):
        zoo.register_guide(3, "pl-other", AutoNormal)
    assert "pl-other" not in registry.get_entry("mfvi-bnn").guides


def test_a_plugin_owns_the_guides_it_adds_and_rolls_them_back(tmp_path):
    path = write(tmp_path / "plug_guides.py", guide_plugin("pl-g"))
    assert load_plugin(path) == ["mfvi-bnn:pl-g"]
    assert load_plugin(path) == ["mfvi-bnn:pl-g"]  # loading it again: a no-op
    entry = registry.get_entry("mfvi-bnn")
    assert entry.guide_plugins["pl-g"].origin == str(path.resolve()) and entry.plugin is None
    spec = zoo.build("mfvi-bnn", 3, 1, "regression", guide="pl-g")[2]
    assert spec["guide_plugin"] == str(path.resolve()) and "plugin" not in spec
    other = write(tmp_path / "plug_guides_other.py", guide_plugin("pl-g"))
    with pytest.raises(
        PluginError, match=r"plug_guides_other\.py.*already offers a guide 'pl-g' \(from plugin .*"
    ):
        load_plugin(other)
    broken = write(
        tmp_path / "plug_guides_broken.py", guide_plugin("pl-broken", tail="raise RuntimeError('x1')")
    )
    with pytest.raises(PluginError, match="RuntimeError: x1"):
        load_plugin(broken)
    assert "pl-broken" not in registry.get_entry("mfvi-bnn").guides  # rolled back with the failed plugin
    assert registry.plugin_names("plug_guides_broken") == []


def test_cli_fit_and_reference_score_with_a_plugin_guide(tmp_path, capsys):
    from zoo.infer.checkpoint import load

    path = write(tmp_path / "plug_cli_guide.py", guide_plugin("pl-cli-g"))
    out = tmp_path / "run"
    assert (
        main(["fit", "--plugin", str(path), "mfvi-bnn", "--guide", "pl-cli-g", *FIT, "--out", str(out)]) == 0
    )
    assert "mfvi-bnn/pl-cli-g on diabetes" in capsys.readouterr().out
    spec = torch.load(out / "checkpoint.pt", weights_only=True)["spec"]
    assert spec["guide"] == "pl-cli-g" and spec["guide_plugin"] == str(path.resolve())
    x = torch.randn(4, 10)
    before = load(out / "checkpoint.pt").predict(x, num_samples=5, seed=0).mean
    registry._REGISTRY["mfvi-bnn"] = registry.get_entry("mfvi-bnn").without_guide(
        "pl-cli-g"
    )  # a fresh process
    with pytest.raises(
        ValueError, match=r"guide 'pl-cli-g' of mfvi-bnn comes from plugin .*plug_cli_guide\.py"
    ):
        load(out / "checkpoint.pt")
    load_plugin(path)
    assert torch.allclose(load(out / "checkpoint.pt").predict(x, num_samples=5, seed=0).mean, before)
    scores = tmp_path / "scores"
    argv = ["reference", "score", "mfvi-bnn:pl-cli-g", "--plugin", str(path), "--instance", "gauss-221"]
    argv += [
        "--out",
        str(scores),
        "--steps",
        "5",
        "--draws",
        "20",
        "--root",
        str(ROOT / "benchmarks/reference"),
    ]
    assert main(argv) == 0 and (scores / "scores.json").exists()


def test_an_installed_plugin_adds_a_guide_after_the_zoos_models(tmp_path):
    """In a fresh process, an entry point whose hook looks a model up and adds a guide loads once, after
    every family module (``mfvi-bnn``'s ``flow`` guide, added by another family module, comes first)."""
    write(
        tmp_path / "ep_mod_guides.py",
        """
        import zoo
        CALLS = []

        def register():
            CALLS.append(1)
            normal = zoo.get_entry("mfvi-bnn").guides["normal"]
            zoo.register_guide("mfvi-bnn", "pl-ep-g", normal)
        """,
    )
    fake_distribution(tmp_path, "fake-guide-plugin", {"pl-ep-g": "ep_mod_guides:register"})
    code = textwrap.dedent(
        """
        import sys, zoo
        entry = zoo.get_entry("mfvi-bnn")
        origin, calls = entry.guide_plugins["pl-ep-g"].origin, sys.modules["ep_mod_guides"].CALLS
        print(list(entry.guides)[-2:], origin, calls)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("ZOO_NO_ENTRY_POINTS", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[0] == "['flow', 'pl-ep-g'] entry-point:fake-guide-plugin [1]"


# --- 4. the unknown-model hint -------------------------------------------------------------------------


def test_unknown_model_hints_at_plugins(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"unknown model 'pl-nope'.*a plugin's model\? pass --plugin PATH"):
        registry.get_entry("pl-nope")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["fit", "pl-nope", *FIT, "--out", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "a plugin's model? pass --plugin PATH" in err and not out.exists(), err


def test_build_refuses_a_multiclass_model_with_fewer_than_two_classes():
    """One output cannot hold a categorical over classes: refused at build, naming out_features."""
    with pytest.raises(ValueError, match=r"^out_features: a multiclass model needs at least 2 classes"):
        zoo.build("mfvi-bnn", 3, 1, "multiclass")
    with pytest.raises(TypeError, match=r"^out_features: "):
        zoo.build("mfvi-bnn", 3, 2.0, "multiclass")
    model = zoo.build("mfvi-bnn", 3, 2, "multiclass", hidden=[4])[0]
    assert model.likelihood.task == "multiclass"
