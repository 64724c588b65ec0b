"""Fuzzing the command line with random bad arguments (issue 22 item 8): every example corrupts exactly one
flag of an otherwise valid ``zoo fit`` (``main(argv)``) or one ``--set`` of an otherwise valid ``zoo
reproduce``, and the call must exit with code 2 and one error line naming the flag or setting, without a
traceback, before any fit or protocol starts (both are replaced by functions that fail the test) and without
creating its output folder. The ground truth is the valid command each example is one argument away from;
Hypothesis runs derandomized (the same examples on every CI run) with a small example budget per command.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zoo.experiments.cli import main

from .helpers import BAD_DEVICE as _bad_device
from .helpers import FUZZ_SETTINGS as FUZZ
from .helpers import MFVI_GUIDES as _MFVI_GUIDES
from .helpers import SHORT_TEXT as _text
from .helpers import floats_without_subnormals as _floats
from .helpers import not_a_dataset as _not_a_dataset

# ----------------------------------------------------------------------------------------------------
# the command line
# ----------------------------------------------------------------------------------------------------

_FLOATS_BAD = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "x", "", "1,5"]), _floats(max_value=0).map(repr)
)
_INTS_BAD = st.one_of(
    st.integers(max_value=0).map(str), st.sampled_from(["x", "1.5", "1e3", "", "0x10"]), _floats().map(repr)
)
_CLI_BAD = st.one_of(
    st.tuples(st.just("--seed"), st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32)).map(str)),
    st.tuples(st.just("--seed"), st.sampled_from(["1e20", "x", "1.0", ""])),
    st.tuples(st.just("--lr"), _FLOATS_BAD),
    st.tuples(st.just("--steps"), _INTS_BAD),
    st.tuples(st.just("--batch-size"), _INTS_BAD),
    st.tuples(st.just("--num-samples"), _INTS_BAD),
    st.tuples(st.just("--threads"), _INTS_BAD),
    st.tuples(st.just("--ensemble"), _INTS_BAD),
    st.tuples(st.just("--zeta"), st.sampled_from(["nan", "inf", "-1", "x"])),
    st.tuples(st.just("--split"), st.sampled_from(["-1", "x", "1.5"])),
    st.tuples(st.just("--hidden"), st.sampled_from(["0", "-4", "x", "2.5"])),
    st.tuples(st.just("--device"), _bad_device.map(str)),
    st.tuples(st.just("--dataset"), _text.filter(lambda s: _not_a_dataset(s) and not s.startswith("-"))),
    st.tuples(
        st.just("--option"),
        st.one_of(
            st.sampled_from(["x", "=1", "1a=2", "weight_scale=nan", "weight_scale=-1"]),
            st.sampled_from(["fan_in_scaling=maybe", "fan_in_scaling=2", "weight_scale=[1]"]),
            st.from_regex(r"[a-z]{2,8}_[a-z]{2,5}=[0-9]", fullmatch=True),
        ),
    ),
    st.tuples(st.just("--guide"), _text.filter(lambda s: s not in _MFVI_GUIDES and s[:1] != "-")),
)


@FUZZ
@given(bad=_CLI_BAD)
def test_cli_rejects_bad_arguments_with_exit_2(tmp_path_factory, capsys, monkeypatch, bad):
    import zoo.experiments.runs as runs

    def fitted(*args, **kwargs):
        raise AssertionError(f"a fit started despite {bad}")

    monkeypatch.setattr(runs, "fit_on_dataset", fitted)
    flag, value = bad
    out = tmp_path_factory.mktemp("cli") / "run"
    argv = ["fit", "mfvi-bnn", "--dataset", "diabetes", "--steps", "1", "--no-progress", "--out", str(out)]
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main([*argv, f"{flag}={value}"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert flag in lines[0] or flag.lstrip("-").upper() in lines[0], lines[0]
    assert not out.exists()


_SET_BAD = st.one_of(
    st.tuples(
        st.sampled_from(["steps", "batch_size", "posttrain_steps", "split"]),
        st.sampled_from(["-1", "x", "1.5"]),
    ),
    st.tuples(
        st.sampled_from(["num_samples", "batch_size", "ensemble"]), st.sampled_from(["0", "-3", "nan"])
    ),
    st.tuples(
        st.sampled_from(["lr", "max_seconds", "posttrain_lr"]),
        st.one_of(st.sampled_from(["nan", "inf", "-inf", "x", "0"]), _floats(max_value=0).map(repr)),
    ),
    st.tuples(
        st.just("seed"),
        st.one_of(st.sampled_from(["1e20", "x", "1.5", "true"]), st.integers(max_value=-1).map(str)),
    ),
    st.tuples(st.just("seed"), st.integers(min_value=2**32).map(str)),
    st.tuples(st.sampled_from(["progress", "train_metrics"]), st.sampled_from(["maybe", "2", "", "nan"])),
    st.tuples(st.just("device"), st.sampled_from(["meta", "xla", "cuda:99", "gpu", "7"])),
    st.tuples(st.just("hidden"), st.sampled_from(["[0]", "[-1, 4]", "x", "[1.5]", "{}"])),
    st.tuples(
        st.sampled_from(["options", "guide_options", "fit_options"]), st.sampled_from(["1", "[1]", "x"])
    ),
    st.tuples(st.just("options"), st.sampled_from(['{"a": NaN}', '{"b": [Infinity]}'])),
    st.tuples(st.just("zeta"), st.sampled_from(["nan", "-1", "inf", "x"])),
    st.tuples(st.from_regex(r"[a-z]{2,8}_[a-z]{2,5}", fullmatch=True), st.just("1")),  # unknown setting
)


@FUZZ
@given(bad=_SET_BAD)
def test_cli_reproduce_rejects_bad_settings_with_exit_2(tmp_path_factory, capsys, monkeypatch, bad):
    import zoo.experiments.reproduce as reproduce

    def ran(*args, **kwargs):
        raise AssertionError(f"the protocol started despite --set {bad}")

    monkeypatch.setattr(reproduce, "run_protocol", ran)
    key, value = bad
    out = tmp_path_factory.mktemp("rep") / "rep"
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["reproduce", "mfvi-uci", "--splits", "0", "--out", str(out), "--set", f"{key}={value}"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "--set" in lines[0] and key.split("_")[0] in lines[0], lines[0]
    assert not out.exists()
