"""Atomic run folders (:func:`zoo.io.staged_folder`): a run replaces the previous one only when complete; a
full disk (a monkeypatched ``ENOSPC``, the free-space check before the netCDF writer, and a real tiny tmpfs
where it can be mounted) leaves the previous run untouched, no temporary behind and a non-zero exit; what a
``kill -9`` leaves is cleaned by the next write."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import zoo.eval.diagnostics as diagnostics
import zoo.io
from zoo.experiments.cli import main
from zoo.experiments.ensemble import fit_ensemble
from zoo.experiments.runs import fit_on_dataset, is_run_entry, write_run
from zoo.io import RunFolderError, atomic_write_many, check_free_space, remove_orphans, staged_folder

TINY = {"steps": 3, "hidden": [3], "num_samples": 5}
SMOKE = ["--steps", "3", "--hidden", "3", "--num-samples", "5", "--no-progress"]


@pytest.fixture(scope="module")
def run():
    return fit_on_dataset("mfvi-bnn", "diabetes", **TINY)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _temporaries(*folders: Path) -> list[str]:
    return [p.name for f in folders if f.exists() for p in f.iterdir() if p.name.startswith(".")]


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    return int(proc.stdout)


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def _half_then_enospc(idata, path):
    Path(path).write_bytes(b"half a netCDF")  # as h5py would leave it
    _enospc()


# ------------------------------------------------------------------------------------ replacing runs


def test_a_run_replaces_the_previous_run_as_a_whole(run, tmp_path):
    out = tmp_path / "run"
    (out / "member_0").mkdir(parents=True)  # an earlier ensemble's run
    (out / "member_0" / "metrics.json").write_text("{}")
    (out / "metrics.json").write_text('{"old": true}')
    paths = write_run(run, out)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "metrics.json", "posterior.nc"]
    assert '"old"' not in paths["metrics"].read_text() and paths["posterior"].stat().st_size > 0
    assert _temporaries(tmp_path, out) == []


def test_files_that_are_not_the_runs_are_kept(run, tmp_path):
    out = tmp_path / "mixed"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "member_3").mkdir()
    (out / "posterior.nc").write_text("old")
    write_run(run, out)
    assert (out / "notes.txt").read_text() == "mine" and not (out / "member_3").exists()
    assert (out / "posterior.nc").read_bytes() != b"old" and _temporaries(tmp_path, out) == []


def test_staged_content_is_invisible_until_complete_and_gone_on_error(tmp_path):
    out = tmp_path / "r"
    with pytest.raises(KeyError):
        with staged_folder(out, is_run_entry) as stage:
            (stage / "metrics.json").write_text("x")
            assert not out.exists()
            raise KeyError("interrupted")
    assert not out.exists() and _temporaries(tmp_path) == []
    with pytest.raises(ValueError, match="not a directory"):
        (tmp_path / "file").write_text("x")
        with staged_folder(tmp_path / "file", is_run_entry):
            pass


# ------------------------------------------------------------------------------------ disk full


def test_disk_full_while_writing_leaves_the_previous_run_untouched(run, tmp_path, monkeypatch):
    out = tmp_path / "run"
    write_run(run, out)
    before = _snapshot(out)
    monkeypatch.setattr(diagnostics, "save_netcdf", _half_then_enospc)
    with pytest.raises(RunFolderError) as e:
        write_run(run, out)
    assert e.value.errno == errno.ENOSPC and str(out) in str(e.value) and "untouched" in str(e.value)
    assert _snapshot(out) == before and _temporaries(tmp_path, out) == []


def test_free_space_is_checked_before_the_netcdf_writer_runs(run, tmp_path, monkeypatch):
    monkeypatch.setattr(diagnostics, "save_netcdf", lambda *a: pytest.fail("the netCDF writer was reached"))
    monkeypatch.setattr(zoo.io.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 4096))
    with pytest.raises(RunFolderError, match="posterior.nc") as e:
        write_run(run, tmp_path / "run")
    assert e.value.errno == errno.ENOSPC and not (tmp_path / "run").exists() and _temporaries(tmp_path) == []


def test_check_free_space():
    check_free_space(".", 1)
    with pytest.raises(OSError, match="needs about") as e:
        check_free_space(".", 2**62, "the checkpoint")
    assert e.value.errno == errno.ENOSPC and "the checkpoint" in str(e.value)


def test_zoo_fit_on_a_full_disk_exits_nonzero_and_keeps_the_previous_run(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    argv = ["fit", "mfvi-bnn", "--dataset", "diabetes", *SMOKE, "--out", str(out)]
    assert main(argv) == 0
    before = _snapshot(out)
    monkeypatch.setattr(diagnostics, "save_netcdf", _half_then_enospc)
    assert main([*argv, "--seed", "1", "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and str(out) in err and "Traceback" not in err
    assert _snapshot(out) == before and _temporaries(tmp_path, out) == []


def test_an_ensemble_folder_is_atomic_too(tmp_path, monkeypatch):
    out = tmp_path / "ens"
    assert main(["fit", "mfvi-bnn", "--dataset", "diabetes", *SMOKE, "--out", str(out)]) == 0
    before = _snapshot(out)
    with monkeypatch.context() as m:
        m.setattr(diagnostics, "save_netcdf", _half_then_enospc)
        with pytest.raises(RunFolderError):
            fit_ensemble("mfvi-bnn", "diabetes", k=2, out_dir=out, **TINY)
    assert _snapshot(out) == before and _temporaries(tmp_path, out) == []
    ens = fit_ensemble("mfvi-bnn", "diabetes", k=2, out_dir=out, **TINY)
    assert sorted(p.name for p in out.iterdir()) == ["member_0", "member_1", "metrics.json"]
    assert '"ensemble_size": 2' in (out / "metrics.json").read_text() and ens.metrics["ensemble_size"] == 2


def test_atomic_write_many_replaces_none_when_one_write_fails(tmp_path, monkeypatch):
    a, b = tmp_path / "a.json", tmp_path / "a.md"
    a.write_text("old a")
    b.write_text("old b")
    real, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 2:
            _enospc()
        real(fd)

    monkeypatch.setattr(zoo.io.os, "fsync", fsync)
    with pytest.raises(OSError, match="No space"):
        atomic_write_many({a: b"new a", b: b"new b"})
    monkeypatch.undo()
    assert (a.read_text(), b.read_text()) == ("old a", "old b") and _temporaries(tmp_path) == []
    atomic_write_many({a: b"new a", b: b"new b"})
    assert (a.read_text(), b.read_text()) == ("new a", "new b")


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir()
    try:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
        )
    except OSError:
        return False
    return proc.returncode == 0


def test_zoo_fit_on_a_really_full_tmpfs(tmp_path):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "1m"):
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        out = disk / "run"
        out.mkdir()
        for name in ("metrics.json", "checkpoint.pt", "posterior.nc"):
            (out / name).write_text(f"previous {name}")
        free = shutil.disk_usage(disk).free
        (disk / "filler").write_bytes(b"\0" * (free - 300 * 1024))  # ~300 KiB left: posterior.nc needs more
        before = _snapshot(out)
        argv = ["fit", "mfvi-bnn", "--dataset", "diabetes", *SMOKE, "--out", str(out), "--overwrite"]
        proc = subprocess.run(
            [sys.executable, "-m", "zoo.experiments.cli", *argv], capture_output=True, text=True
        )
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "No space left on device" in proc.stderr and "Traceback" not in proc.stderr
        assert _snapshot(out) == before and _temporaries(disk, out) == []
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


# ------------------------------------------------------------------------------------ kill -9


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from zoo.io import staged_folder

    with staged_folder(sys.argv[1], lambda name: True) as stage:
        (stage / "checkpoint.pt").write_bytes(b"x" * 1000)
        open(sys.argv[2], "w").close()
        time.sleep(300)
    """
)


def test_what_a_killed_writer_leaves_is_removed_by_the_next_write(run, tmp_path):
    out, flag = tmp_path / "run", tmp_path / "flag"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(out), str(flag)])
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the writer did not start"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left = [n for n in _temporaries(tmp_path) if n.startswith(".run.")]
    assert len(left) == 1 and not out.exists()
    write_run(run, out)
    assert [n for n in _temporaries(tmp_path) if n.startswith(".run.")] == []
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "metrics.json", "posterior.nc"]


def test_a_previous_run_moved_aside_by_a_killed_writer_is_restored(tmp_path):
    out = tmp_path / "run"
    aside = tmp_path / f".run.{_dead_pid()}-abcdef.old"
    aside.mkdir()
    (aside / "metrics.json").write_text("previous")
    remove_orphans(out)
    assert (out / "metrics.json").read_text() == "previous" and not aside.exists()
    live = tmp_path / f".run.{os.getpid()}-abcdef.tmp"  # a writer that still runs: left alone
    live.mkdir()
    dead = tmp_path / f".run.{_dead_pid()}-012345.tmp"
    dead.mkdir()
    assert remove_orphans(out) == [dead] and live.exists()


def _full_disk_on_second_file(monkeypatch):
    """Make the second file staged by ``zoo.io`` hit a full disk; returns the real ``os.fdopen``."""
    real_fdopen, calls = os.fdopen, []

    def fdopen(fd, *a, **k):
        calls.append(fd)
        if len(calls) == 2:
            os.close(fd)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fdopen(fd, *a, **k)

    monkeypatch.setattr(zoo.io.os, "fdopen", fdopen)
    return real_fdopen


def test_a_leaderboard_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """``zoo bench`` writes ``leaderboard.{json,md,png}`` as one set: a full disk while writing the second
    file leaves the earlier leaderboard's three files as they were and no temporary behind."""
    from zoo.experiments import leaderboard

    for ext in ("json", "md", "png"):
        (tmp_path / f"leaderboard.{ext}").write_bytes(f"old {ext}".encode())
    before = _snapshot(tmp_path)
    monkeypatch.setattr(leaderboard, "leaderboard_markdown", lambda lb: "new md")
    monkeypatch.setattr("zoo.experiments.leaderboard_plot.leaderboard_png", lambda lb: b"new png")
    real_fdopen = _full_disk_on_second_file(monkeypatch)
    with pytest.raises(OSError, match="No space"):
        leaderboard.write_leaderboard({"rows": []}, tmp_path)
    assert _snapshot(tmp_path) == before and not _temporaries(tmp_path)
    monkeypatch.setattr(zoo.io.os, "fdopen", real_fdopen)
    paths = leaderboard.write_leaderboard({"rows": []}, tmp_path)
    assert paths["md"].read_text() == "new md" and paths["png"].read_bytes() == b"new png"


def test_a_bench_folder_changes_as_one_set(tmp_path, monkeypatch):
    """``zoo bench`` writes ``bench.json`` and its leaderboard together: a full disk while writing them keeps
    the earlier files and the journal (which holds every finished fit); success removes the journal."""
    from zoo.experiments.bench import BENCH_FILE, JOURNAL_FILE, write_bench

    journal = tmp_path / JOURNAL_FILE
    journal.write_text('{"fit": 1}\n')
    (tmp_path / BENCH_FILE).write_text("old bench")
    (tmp_path / "leaderboard.md").write_text("old md")
    before = _snapshot(tmp_path)
    real_fdopen = _full_disk_on_second_file(monkeypatch)
    with pytest.raises(OSError, match="No space"):
        write_bench(tmp_path, {"rows": [1]}, {tmp_path / "leaderboard.md": b"new md"})
    assert _snapshot(tmp_path) == before and not _temporaries(tmp_path)
    monkeypatch.setattr(zoo.io.os, "fdopen", real_fdopen)
    write_bench(tmp_path, {"rows": [1]}, {tmp_path / "leaderboard.md": b"new md"})
    assert (tmp_path / "leaderboard.md").read_text() == "new md" and not journal.exists()
