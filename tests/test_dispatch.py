"""One fan-out (:mod:`zoo.experiments.dispatch`): rows equal whatever the backend (loky, Dask, Ray), a worker
killed mid-fit has its fit re-run without losing a finished one, workers die with their parent, and a bad
``--backend``/``--address`` is refused before anything runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import zoo.experiments.reproduce as reproduce
from zoo.experiments.cli import main
from zoo.experiments.dispatch import DispatchConfig, DispatchError, _worker_lost, dispatch, open_backend
from zoo.experiments.journal import read_journal, run_journaled
from zoo.experiments.reproduce import Protocol, RunSpec, run_protocol
from zoo.io import pid_alive

TIMING = ("fit_seconds", "total_seconds")


def _flaky(task: dict) -> dict:
    """Task 2 kills its own worker (SIGKILL, as the OOM killer would) the first time it runs."""
    folder = Path(task["dir"])
    (folder / f"call-{task['k']}-{uuid.uuid4().hex}").touch()
    if task["k"] == 2:
        time.sleep(3.0)  # the quick tasks finish (and are journaled) first
        marker = folder / "killed"
        if not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    import torch

    return {"k": task["k"], "value": task["k"] ** 2, "threads": torch.get_num_threads()}


def _entry_origin(name: str) -> str:
    from zoo.experiments.registry import get_entry

    return get_entry(name).plugin


def _calls(folder: Path) -> dict[int, int]:
    out: dict[int, int] = {}
    for p in folder.glob("call-*"):
        k = int(p.name.split("-")[1])
        out[k] = out.get(k, 0) + 1
    return out


# ---------------------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"backend": "spark"}, "backend"),
        ({"backend": "loky", "address": "tcp://host:8786"}, "address"),
        ({"backend": "dask", "address": "no address"}, "address"),
        ({"backend": "dask", "address": "tcp://host"}, "address"),
        ({"backend": "ray", "address": "http//x:1"}, "address"),
        ({"jobs": 0}, "jobs"),
        ({"threads": -1}, "threads"),
        ({"connect_timeout": 0}, "connect_timeout"),
    ],
)
def test_config_rejects_bad_settings(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        DispatchConfig(**kwargs)


def test_config_accepts_addresses_of_each_backend():
    for backend, address in [
        ("dask", "tcp://10.0.0.1:8786"),
        ("dask", "scheduler.local:8786"),
        ("ray", "auto"),
        ("ray", "10.0.0.1:6379"),
        ("ray", "ray://head:10001"),
    ]:
        assert DispatchConfig(backend=backend, address=address).address == address
    assert DispatchConfig().inline and not DispatchConfig(jobs=2).inline


# ------------------------------------------------------------------------------------ protocol rows


@pytest.fixture
def tiny(monkeypatch):
    name = "r-dispatch-tiny"

    def runs(splits):
        return [
            RunSpec("mfvi", "mfvi-bnn", "diabetes", s, {"steps": 15, "hidden": [3], "num_samples": 4})
            for s in (splits if splits is not None else [0, 1])
        ]

    monkeypatch.setitem(reproduce.PROTOCOLS, name, Protocol(name, "dispatch test", runs, ["rmse", "nll"]))
    return name


def _rows(doc: dict) -> list[dict]:
    return sorted(
        ({k: v for k, v in r.items() if k not in TIMING} for r in doc["rows"]), key=lambda r: r["split"]
    )


@pytest.fixture(scope="module")
def inline_rows(tmp_path_factory):
    name = "r-dispatch-ref"

    def runs(splits):
        return [
            RunSpec("mfvi", "mfvi-bnn", "diabetes", s, {"steps": 15, "hidden": [3], "num_samples": 4})
            for s in (splits if splits is not None else [0, 1])
        ]

    reproduce.PROTOCOLS[name] = Protocol(name, "dispatch test", runs, ["rmse", "nll"])
    try:
        doc = run_protocol(name, tmp_path_factory.mktemp("inline"), progress=False)
    finally:
        del reproduce.PROTOCOLS[name]
    return _rows(doc)


def _backend_rows(tiny: str, out: Path, backend: str) -> list[dict]:
    doc = run_protocol(tiny, out, progress=False, dispatch=DispatchConfig(backend=backend, jobs=2))
    assert f"backend={backend}" in doc["machine"]
    import torch

    assert doc["host"]["isa"] == torch.backends.cpu.get_cpu_capability()  # the driver's CPU kernels
    md = (out / f"{tiny}.md").read_text()
    assert f"{doc['host']['isa']} kernels" in md
    return _rows(doc)


def test_unreachable_dask_scheduler_is_refused_before_anything_is_written(tiny, tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    cfg = DispatchConfig(backend="dask", address="tcp://127.0.0.1:9", connect_timeout=1)
    with pytest.raises(DispatchError, match="address"):
        with open_backend(cfg):
            pytest.fail("the block ran")
    monkeypatch.setattr(reproduce, "_run_one", lambda spec: pytest.fail("a fit ran"))
    with pytest.raises(DispatchError, match="127.0.0.1:9"):
        run_protocol(tiny, tmp_path / "out", progress=False, dispatch=cfg)
    assert not (tmp_path / "out").exists()


def test_loky_rows_equal_in_process_rows(tiny, inline_rows, tmp_path):
    assert _backend_rows(tiny, tmp_path, "loky") == inline_rows
    assert len(inline_rows) == 2 and all(r["rmse"] > 0 for r in inline_rows)


def test_workers_load_the_plugins_of_the_parent(tmp_path):
    from zoo.experiments import registry
    from zoo.experiments.plugins import load_plugin

    plugin = Path(__file__).parents[1] / "examples" / "zoo-dirichlet-laplace" / "zoo_dirichlet_laplace.py"
    registry.load_plugins()
    saved = dict(registry._REGISTRY)
    try:
        (name,) = load_plugin(str(plugin))
        out = dict(dispatch(_entry_origin, [name, name], DispatchConfig(jobs=2)))
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved)
        sys.modules.pop("zoo_dirichlet_laplace", None)
    assert out == {0: str(plugin.resolve()), 1: str(plugin.resolve())}


def test_dask_local_cluster_rows_equal_loky_rows(tiny, inline_rows, tmp_path):
    pytest.importorskip("distributed")
    assert _backend_rows(tiny, tmp_path, "dask") == inline_rows


def test_ray_rows_equal_loky_rows(tiny, inline_rows, tmp_path):
    pytest.importorskip("ray")
    try:
        rows = _backend_rows(tiny, tmp_path, "ray")
    except DispatchError as e:  # a machine where a local Ray cannot start: say why (Dask is still tested)
        pytest.skip(f"a local Ray instance cannot start here: {e}")
    assert rows == inline_rows


# ------------------------------------------------------------------------------------ failures


def test_a_killed_worker_has_its_fit_rerun_and_no_finished_fit_is_lost(tmp_path, caplog):
    tasks = [{"k": k, "dir": str(tmp_path)} for k in range(4)]
    journal = tmp_path / "j.partial.jsonl"
    rows = run_journaled(
        tasks,
        _flaky,
        journal=journal,
        signature={"test": "kill"},
        done={},
        key=lambda r: r["k"],
        task_key=lambda t: t["k"],
        dispatch_config=DispatchConfig(jobs=2),
    )
    assert (tmp_path / "killed").exists()  # the worker really died
    assert {k: r["value"] for k, r in rows.items()} == {0: 0, 1: 1, 2: 4, 3: 9}
    assert {r["threads"] for r in rows.values()} == {1}  # torch threads pinned in every worker
    calls = _calls(tmp_path)
    assert calls[2] == 2  # the killed fit ran again
    assert calls[0] == calls[1] == 1  # finished before the kill: never re-run
    lines = journal.read_text().splitlines()
    assert json.loads(lines[0]) == {"test": "kill"} and len(lines) == 5  # each row journaled once
    assert read_journal(journal, {"test": "kill"}, key=lambda r: r["k"]) == rows
    assert "worker died" in caplog.text


def test_only_a_lost_worker_is_retried_not_a_failing_fit():
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    assert _worker_lost(TerminatedWorkerError("killed")) and not _worker_lost(ZeroDivisionError())
    with pytest.raises(ZeroDivisionError):  # in-process: the fit's own error, unchanged
        list(dispatch(_divide, [1, 0], DispatchConfig(jobs=1, retries=3)))


def _divide(x: int) -> float:
    return 1 / x


PARENT = textwrap.dedent(
    """
    import os, sys, time
    from zoo.experiments.dispatch import DispatchConfig, dispatch

    def sleeper(folder):
        open(os.path.join(folder, f"pid-{os.getpid()}"), "w").close()
        time.sleep(300)

    if __name__ == "__main__":
        list(dispatch(sleeper, [sys.argv[1]] * 2, DispatchConfig(jobs=2)))
    """
)


def test_workers_die_with_their_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env={**os.environ})
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("pid-*"))) < 2:
            assert proc.poll() is None, "the parent exited early"
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.2)
        pids = [int(p.name[4:]) for p in tmp_path.glob("pid-*")]
        assert all(pid_alive(p) for p in pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [p for p in pids if pid_alive(p)]
    for p in alive:  # do not leave them behind if the test fails
        os.kill(p, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived their parent by 10 s"


# ------------------------------------------------------------------------------------ command line


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--backend", "spark"], "--backend"),
        (["--address", "tcp://h:1"], "--address"),  # loky with an address
        (["--backend", "dask", "--address", "nonsense"], "--address"),
    ],
)
def test_bad_backend_or_address_is_a_usage_error_before_any_fit(
    tiny, tmp_path, capsys, monkeypatch, extra, flag
):
    monkeypatch.setattr(reproduce, "_run_one", lambda spec: pytest.fail("a fit ran"))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["reproduce", tiny, "--out", str(out), "--jobs", "2", *extra])
    assert e.value.code == 2 and flag in capsys.readouterr().err
    assert not out.exists()
