"""Plugins: models from outside the package join the registry by file, dotted module or entry point; clashes,
import failures and plugins that register nothing are clear errors; checkpoints record the plugin."""

from __future__ import annotations

import dataclasses
import sys
import textwrap

import pytest
import torch

from zoo.experiments import registry
from zoo.experiments.cli import main
from zoo.experiments.plugins import PluginError, load_plugin

#: a plugin registering a Gaussian MLP under ``name`` at import (``hook=True``: through ``register()``)
PLUGIN = """
from guides.autoguides import autoguide_factory
from zoo import MLP, BayesianModel, make_likelihood
from zoo.priors import GaussianPrior
from zoo.registry import ModelEntry, register as zoo_register

CALLS = []


def build(in_features, out_features, task, hidden, weight_scale=1.0):
    prior = GaussianPrior(weight_scale=weight_scale)
    return BayesianModel(MLP(in_features, hidden, out_features), prior, make_likelihood(task, out_features))


def register():
    CALLS.append(1)
    for name in {names!r}:
        zoo_register(
            ModelEntry(name=name, summary="a plugin's Gaussian MLP", build=build,
                       guides={{"normal": autoguide_factory("normal")}}, default_hidden=(3,))
        )

{tail}
"""


def plugin_source(*names: str, hook: bool = False) -> str:
    return PLUGIN.format(names=list(names), tail="" if hook else "register()")


def write(path, text: str):
    path.write_text(textwrap.dedent(text))
    return path


def fake_distribution(root, dist: str, entry_points: dict[str, str]) -> None:
    """An installed distribution ``dist`` (metadata only) declaring ``entry_points`` in the zoo's group."""
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{lines}")


def test_plugin_by_file_registers_builds_and_records_its_origin(tmp_path, clean_registry):
    path = write(tmp_path / "plug_file.py", plugin_source("pl-file"))
    assert load_plugin(str(path)) == ["pl-file"]
    entry = registry.get_entry("pl-file")
    assert entry.plugin == str(path.resolve()) and entry.plugin_module == "plug_file"
    assert "pl-file" in registry.available() and "plugin: " in registry.format_table()
    model, guide, spec = registry.build("pl-file", 2, 1, "regression", weight_scale=0.5)
    assert spec["plugin"] == str(path.resolve()) and spec["options"] == {"weight_scale": 0.5}
    assert model._zoo_spec == spec and model._zoo_spec is not spec
    assert float(model.prior.weight_scale) == 0.5 and model.architecture.hidden == (3,)
    # loading the same file again is a no-op: the module is not executed twice, the entry is the same
    module = sys.modules["plug_file"]
    assert load_plugin(path) == ["pl-file"] and registry.get_entry("pl-file") is entry
    assert sys.modules["plug_file"] is module and module.CALLS == [1]


def test_plugin_by_dotted_module_with_a_register_hook(tmp_path, monkeypatch, clean_registry):
    pkg = tmp_path / "plugpkg_a"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    write(pkg / "models.py", plugin_source("pl-mod-1", "pl-mod-2", hook=True))
    monkeypatch.syspath_prepend(str(tmp_path))
    import plugpkg_a.models as mod  # importing the module alone registers nothing (the hook convention)

    assert mod.CALLS == [] and "pl-mod-1" not in registry.available()
    assert load_plugin("plugpkg_a.models") == ["pl-mod-1", "pl-mod-2"] and mod.CALLS == [1]
    assert registry.get_entry("pl-mod-2").plugin == "plugpkg_a.models"
    assert load_plugin("plugpkg_a.models") == ["pl-mod-1", "pl-mod-2"] and mod.CALLS == [1]
    with pytest.raises(PluginError, match="plugpkg_a.nope.*ModuleNotFoundError"):
        load_plugin("plugpkg_a.nope")
    with pytest.raises(PluginError, match="neither a .py file nor a dotted module"):
        load_plugin("not a module")


def test_plugin_by_entry_point_and_by_file_share_one_identity(tmp_path, monkeypatch, clean_registry):
    """An installed entry point (a callable) is loaded with the zoo's models; the same module given as a file
    afterwards is a no-op, and so is the entry point after the file (either order)."""
    write(tmp_path / "ep_mod_a.py", plugin_source("pl-ep", hook=True))
    fake_distribution(tmp_path, "fake-zoo-plugin", {"pl-ep": "ep_mod_a:register"})
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.load_plugins()
    entry = registry.get_entry("pl-ep")
    assert entry.plugin == "entry-point:fake-zoo-plugin" and entry.plugin_module == "ep_mod_a"
    assert registry.build("pl-ep", 3, 1, "regression")[2]["plugin"] == "entry-point:fake-zoo-plugin"
    assert load_plugin(tmp_path / "ep_mod_a.py") == ["pl-ep"] and registry.get_entry("pl-ep") is entry
    assert load_plugin("entry-point:fake_zoo_plugin") == ["pl-ep"]
    with pytest.raises(PluginError, match="no installed distribution 'no-such-dist'"):
        load_plugin("entry-point:no-such-dist")


def test_file_first_then_the_entry_point_is_a_no_op(tmp_path, monkeypatch, clean_registry):
    other = tmp_path / "src"
    other.mkdir()
    path = write(other / "ep_mod_b.py", plugin_source("pl-ep-b", hook=True))
    assert load_plugin(path) == ["pl-ep-b"]
    write(tmp_path / "ep_mod_b.py", plugin_source("pl-ep-b", hook=True))  # the "installed" copy
    fake_distribution(tmp_path, "fake-zoo-plugin-b", {"pl-ep-b": "ep_mod_b"})  # a module this time
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.load_plugins()
    assert registry.get_entry("pl-ep-b").plugin == str(path.resolve())


def test_a_failing_entry_point_is_a_clear_error_every_time(tmp_path, monkeypatch, capsys, clean_registry):
    write(tmp_path / "ep_mod_c.py", "raise RuntimeError('broken plugin 1234')\n")
    fake_distribution(tmp_path, "fake-broken", {"bad": "ep_mod_c:register"})
    monkeypatch.syspath_prepend(str(tmp_path))
    for _ in range(2):  # not silently skipped on the next call
        with pytest.raises(PluginError, match=r"entry point 'bad'.*'fake-broken'.*broken plugin 1234"):
            registry.available()
    with pytest.raises(SystemExit) as e:
        main(["list"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "fake-broken" in err and "RuntimeError" in err
    monkeypatch.setenv("ZOO_NO_ENTRY_POINTS", "1")
    assert main(["list"]) == 0 and "mfvi-bnn" in capsys.readouterr().out


def test_clashes_name_both_owners_and_roll_back(tmp_path, clean_registry):
    zoo_clash = write(tmp_path / "plug_clash.py", plugin_source("pl-new", "mfvi-bnn"))
    before = dict(registry._REGISTRY)
    with pytest.raises(PluginError) as e:
        load_plugin(zoo_clash)
    msg = str(e.value)
    assert "'mfvi-bnn' is already registered by the zoo (zoo.families" in msg and "plug_clash.py" in msg
    assert registry._REGISTRY == before  # pl-new, registered before the clash, is gone again
    first = write(tmp_path / "plug_one.py", plugin_source("pl-shared"))
    second = write(tmp_path / "plug_two.py", plugin_source("pl-shared"))
    load_plugin(first)
    with pytest.raises(PluginError, match=r"plugin .*plug_one\.py \(module plug_one\).*plug_two\.py"):
        load_plugin(second)
    assert registry.get_entry("pl-shared").plugin_module == "plug_one"
    with pytest.raises(ValueError, match="already registered by plugin .*plug_one"):  # outside a plugin too
        registry.register(dataclasses.replace(registry.get_entry("mfvi-bnn"), name="pl-shared"))


def test_import_errors_name_the_file_and_keep_the_traceback(tmp_path, clean_registry):
    path = write(tmp_path / "plug_broken.py", "import math\n\nVALUE = math.sqrt(4) / 0\n")
    with pytest.raises(PluginError) as e:
        load_plugin(path)
    msg = str(e.value)
    assert "plug_broken.py" in msg and "ZeroDivisionError: float division by zero" in msg
    assert "Traceback" in msg and "VALUE = math.sqrt(4) / 0" in msg
    assert "plug_broken" not in sys.modules


def test_plugins_that_register_nothing_or_do_not_exist(tmp_path, clean_registry):
    with pytest.raises(PluginError, match=r"plug_empty\.py.* registered no model"):
        load_plugin(write(tmp_path / "plug_empty.py", "X = 1\n"))
    with pytest.raises(PluginError, match=r"no such file .*plug_missing\.py"):
        load_plugin(tmp_path / "plug_missing.py")
    (tmp_path / "plug_dir").mkdir()
    with pytest.raises(PluginError, match="not a .py file"):
        load_plugin(tmp_path / "plug_dir")
    with pytest.raises(PluginError, match="not a valid module name"):
        load_plugin(write(tmp_path / "plug-dash.py", plugin_source("pl-dash")))
    with pytest.raises(TypeError, match="path_or_module"):
        load_plugin(3)


def test_registry_keeps_the_keyword_form_and_refuses_a_second_zoo_registration(clean_registry):
    entry = registry.get_entry("mfvi-bnn")
    assert entry.plugin is None and "plugin" not in registry.build("mfvi-bnn", 2, 1, "regression")[2]
    with pytest.raises(ValueError, match="already registered by the zoo"):
        registry.register(entry)


FIT = ["--dataset", "diabetes", "--steps", "3", "--hidden", "3", "--num-samples", "5", "--no-progress"]


def test_cli_fit_of_a_plugin_model_and_its_checkpoint(tmp_path, capsys, clean_registry):
    from zoo.infer.checkpoint import load

    path = write(tmp_path / "plug_cli.py", plugin_source("pl-cli"))
    out = tmp_path / "run"
    assert main(["fit", "--plugin", str(path), "pl-cli", *FIT, "--out", str(out)]) == 0
    assert "pl-cli/normal on diabetes" in capsys.readouterr().out
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["spec"]["plugin"] == str(path.resolve()) and ckpt["spec"]["model"] == "pl-cli"
    x = torch.randn(4, 10)
    before = load(out / "checkpoint.pt").predict(x, num_samples=5, seed=0).mean
    del registry._REGISTRY["pl-cli"]  # a fresh registry, without the plugin
    with pytest.raises(ValueError, match=r"model 'pl-cli' comes from plugin .*plug_cli\.py: import it first"):
        load(out / "checkpoint.pt")
    load_plugin(path)
    assert torch.allclose(load(out / "checkpoint.pt").predict(x, num_samples=5, seed=0).mean, before)
    # --plugin before the subcommand works too
    assert main(["--plugin", str(path), "fit", "pl-cli", *FIT, "--out", str(tmp_path / "run2")]) == 0


@pytest.mark.parametrize(
    "text, words",
    [
        ("raise ImportError('no module named secret_dep')\n", ["plug_bad.py", "secret_dep", "Traceback"]),
        ("X = 1\n", ["plug_bad.py", "registered no model"]),
        (None, ["no such file", "plug_bad.py"]),
    ],
)
def test_cli_broken_plugin_exits_2_and_writes_nothing(tmp_path, capsys, clean_registry, text, words):
    path = tmp_path / "plug_bad.py"
    if text is not None:
        write(path, text)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["fit", "--plugin", str(path), "mfvi-bnn", *FIT, "--out", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--plugin" in err and all(w in err for w in words), err
    assert not out.exists()


def test_every_subcommand_takes_plugin(tmp_path, capsys, clean_registry):
    path = write(tmp_path / "plug_sub.py", plugin_source("pl-sub"))
    assert main(["list", "--plugin", str(path)]) == 0 and "pl-sub" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:  # the plugin loads, then the unknown protocol is the usage error
        main(["reproduce", "--plugin", str(path), "no-such-protocol", "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and "NAME" in capsys.readouterr().err
    assert registry.get_entry("pl-sub").plugin == str(path.resolve())
