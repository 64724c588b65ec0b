"""``zoo.experiments.verify`` and ``zoo reproduce NAME --verify``: a committed protocol row is fitted again
in a temporary folder and compared with it. A row that differs is reported (same host: other code). A
missing record, a selected run without a committed row, a bad tolerance and ``--merge`` are refused before
any fit, and the committed folder is never written."""

from __future__ import annotations

import json
import math

import pytest

from zoo.experiments import reproduce
from zoo.experiments.cli import main
from zoo.experiments.protocol import Protocol, RunSpec
from zoo.experiments.verify import comparison, host_status, relative_differences, table_head, verify_protocol


def test_relative_differences():
    old = {"rmse": 2.0, "nll": 1.0, "flag": True, "name": "a", "cov": 0.9}
    new = {"rmse": 2.002, "nll": math.nan, "flag": False, "name": "b"}
    got = relative_differences(old, new, ["rmse", "nll", "flag", "name", "cov", "absent"])
    assert got == {"rmse": pytest.approx(1e-3), "nll": math.inf}  # numbers both rows have, not bools
    assert relative_differences({"x": 0.0}, {"x": 1e-13}, ["x"])["x"] == pytest.approx(0.1)  # floor 1e-12


def test_host_status():
    a, b = {"cpu": "A", "isa": "AVX512"}, {"cpu": "A", "isa": "AVX2"}
    assert host_status(a, dict(a)) == "same" and host_status(a, b) == "other"
    assert host_status(None, a) == "not recorded" and host_status(a, {}) == "not recorded"


def test_host_records_the_cpu_kernels(monkeypatch):
    import torch

    from zoo.experiments.host import cpu_name, host

    info = "processor\t: 0\nmodel name\t: Some CPU\ncpu family\t: 6\nmodel\t\t: 207\n\nprocessor\t: 1\n"
    assert cpu_name(info) == "Some CPU (family 6, model 207)"
    assert cpu_name("processor\t: 0\nmodel name\t: Bare\n") == "Bare"
    assert cpu_name("") != ""  # platform's name, or "unknown"
    monkeypatch.delenv("MKL_CBWR", raising=False)
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    got = host()
    assert got["isa"] == torch.backends.cpu.get_cpu_capability() and got["threads"] == torch.get_num_threads()
    assert got["torch"] == torch.__version__ and got["kernel_env"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS")
    assert "kernel_env" not in host() or "MKL_ENABLE_INSTRUCTIONS" not in host()["kernel_env"]


def test_comparison_counts_and_refuses_a_bad_tolerance():
    pairs = [
        (("v", "d", 0), {"rmse": 1.0}, {"rmse": 1.0}, "same"),
        (("v", "d", 1), {"rmse": 1.0}, {"rmse": 1.01}, "same"),
        (("v", "d", 2), {"rmse": 1.0}, {"rmse": 1.01}, "other"),
    ]
    lines, counts = comparison(pairs, ["rmse"], 1e-6)
    assert counts == {"rows": 3, "beyond": 2, "beyond_same_host": 1}
    assert lines[0] == "| v | d | 0 | 1 → 1 | 0.00e+00 | same |"
    assert lines[1].endswith("**beyond** | same |") and lines[2].endswith("**beyond** | other |")
    head = table_head(("variant", "dataset", "split"), ["rmse"])
    assert head[0].count("|") == lines[0].count("|") == head[1].count("|")  # as many columns as cells
    assert comparison(pairs, ["rmse"], 0.02)[1]["beyond"] == 0
    for bad in (-1.0, math.nan, math.inf, "1e-6"):
        with pytest.raises(ValueError, match="tolerance"):
            comparison(pairs, ["rmse"], bad)


@pytest.fixture
def tiny(monkeypatch):
    name = "r-verify-tiny"

    def runs(splits):
        return [
            RunSpec("mfvi", "mfvi-bnn", "diabetes", s, {"steps": 15, "hidden": [3], "num_samples": 4})
            for s in (splits if splits is not None else [0, 1])
        ]

    monkeypatch.setitem(reproduce.PROTOCOLS, name, Protocol(name, "verify test", runs, ["rmse", "nll"]))
    return name


def test_verify_protocol_gives_back_its_rows_and_reports_a_changed_one(tiny, tmp_path, capsys):
    doc = reproduce.run_protocol(tiny, tmp_path, progress=False)
    record = tmp_path / f"{tiny}.json"
    files = sorted(p.name for p in tmp_path.iterdir())
    lines, counts = verify_protocol(tiny, tmp_path)
    assert counts == {"rows": 2, "beyond": 0, "beyond_same_host": 0}
    assert lines[0].startswith(f"Committed rows: {record}, made by `zoo.experiments.reproduce.run_protocol(")
    assert all(line.endswith("| same |") for line in lines[4:])  # the header records this host
    changed = json.loads(record.read_text())
    changed["rows"][1]["nll"] += 1e-4
    record.write_text(json.dumps(changed))
    before = record.read_text()
    assert main(["reproduce", tiny, "--out", str(tmp_path), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "1 of 2 rows reproduced" in out and "1 on the same host (other code)" in out
    assert main(["reproduce", tiny, "--out", str(tmp_path), "--verify", "--tolerance", "1e-3"]) == 0
    unrecorded = {k: v for k, v in doc.items() if k != "host"}  # committed before headers recorded it
    record.write_text(json.dumps(unrecorded))
    assert main(["reproduce", tiny, "--out", str(tmp_path), "--verify", "--splits", "0"]) == 0
    assert "| not recorded |" in capsys.readouterr().out
    record.write_text(before)
    assert record.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == files


def test_verify_refuses_before_any_fit(tiny, tmp_path, capsys, monkeypatch):
    def no_fit(*args, **kwargs):
        raise AssertionError("a fit ran")

    monkeypatch.setattr(reproduce, "run_protocol", no_fit)
    with pytest.raises(ValueError, match="no committed"):
        verify_protocol(tiny, tmp_path)
    row = {"variant": "mfvi", "dataset": "diabetes", "split": 0, "rmse": 1.0, "nll": 1.0}
    (tmp_path / f"{tiny}.json").write_text(json.dumps({"rows": [row]}))
    with pytest.raises(ValueError, match=r"1 selected run\(s\) have no committed row"):
        verify_protocol(tiny, tmp_path)  # split 1 has none
    with pytest.raises(ValueError, match="tolerance"):
        verify_protocol(tiny, tmp_path, splits=[0], tolerance=-1.0)
    # a row fitted with another guide than the run fits now (the entry's default guide changed since)
    (tmp_path / f"{tiny}.json").write_text(json.dumps({"rows": [{**row, "guide": "flow"}]}))
    with pytest.raises(ValueError, match=r"now fits mfvi-bnn:normal but .* fitted with mfvi-bnn:flow"):
        verify_protocol(tiny, tmp_path, splits=[0])
    (tmp_path / f"{tiny}.json").write_text(json.dumps({"rows": [{**row, "model": "hs-bnn"}]}))
    with pytest.raises(ValueError, match=r"committed row was fitted with hs-bnn:"):
        verify_protocol(tiny, tmp_path, splits=[0])
    (tmp_path / f"{tiny}.json").write_text(json.dumps({"rows": [row]}))
    with pytest.raises(ValueError, match="unknown protocol"):
        verify_protocol("no-such-protocol", tmp_path)
    with pytest.raises(SystemExit):  # only DIR/NAME.json is read: a missing folder is that error
        main(["reproduce", tiny, "--out", str(tmp_path / "missing" / "deeper"), "--verify"])
    assert "argument --verify: out_dir: no committed" in capsys.readouterr().err
    for extra in (["--merge"], ["--fresh"], ["--splits", "1"]):
        with pytest.raises(SystemExit):
            main(["reproduce", tiny, "--out", str(tmp_path), "--verify", *extra])
        assert "argument --verify" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{tiny}.json"]


def test_every_committed_protocol_row_is_what_its_run_fits_now():
    """Each committed protocol row was fitted with the model and guide its run fits today, so ``--verify``
    compares like with like (lbbnn-selection once fitted the entry's default guide, which changed)."""
    from pathlib import Path

    from zoo.experiments.reproduce import PROTOCOLS, _row_key, _spec_key, available_protocols
    from zoo.experiments.verify import check_same_fit

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    checked = 0
    for name in available_protocols():
        record = results / f"{name}.json"
        if not record.exists():
            continue
        rows = {_row_key(r): r for r in json.loads(record.read_text())["rows"]}
        p = PROTOCOLS[name]
        specs = [s for s in p.runs(None) if _spec_key(s) in rows]
        check_same_fit(specs, rows, _spec_key)
        checked += len(specs)
    assert checked > 1000  # the committed protocols' rows, not an empty loop
