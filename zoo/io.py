"""Crash-safe file writes: every file the zoo writes (checkpoints, metrics, protocol results) goes here.

An atomic write creates a temporary file ``.NAME.<pid>-<random>.tmp`` next to the target, writes, flushes
and fsyncs it, and renames it over ``NAME`` (``os.replace``), so a reader sees the old file or the new one,
never a half-written one, even if the writer is killed (``kill -9``) mid-write.  The temporary file is
created with mode ``0o666`` through ``os.open``, so the operating system applies the process umask, as it
does for ``open(..., "w")`` (the umask is never read or changed).

A killed write leaves its temporary file behind; the next atomic write of the same ``NAME`` removes such
orphans (:func:`remove_orphans`): temporary files of ``NAME`` whose writing process no longer runs.

A *run folder* (several files that belong together, e.g. ``metrics.json``, ``checkpoint.pt`` and
``posterior.nc`` of ``zoo fit --out DIR``) is written the same way, one level up (:func:`staged_folder`):
everything goes into a temporary sibling folder ``.DIR.<pid>-<random>.tmp`` and is renamed into place only
when every file is complete, so a failure (a full disk included) leaves the previous run untouched and no
temporary behind.  :func:`atomic_write_many` does the same for a few files in a shared folder (all are
written and fsynced before the first is renamed).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import torch

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_path",
    "atomic_write_text",
    "atomic_torch_save",
    "atomic_write_many",
    "atomic_save_figure",
    "append_line",
    "read_lines",
    "check_free_space",
    "pid_alive",
    "remove_orphans",
    "staged_folder",
    "RunFolderError",
]

logger = logging.getLogger(__name__)

_TMP_SUFFIX = ".tmp"
_OLD_SUFFIX = ".old"  # a previous run folder moved aside while a new one is renamed into place
# the middle part of a temporary name: "<pid>-<hex>" (this module) or mkstemp's 8 characters (older zoos)
_OURS = re.compile(r"(\d+)-[0-9a-f]+")


def _tmp_pattern(name: str) -> re.Pattern:
    suffixes = f"{re.escape(_TMP_SUFFIX)}|{re.escape(_OLD_SUFFIX)}"
    return re.compile(rf"\.{re.escape(name)}\.([A-Za-z0-9_-]+)({suffixes})")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    if pid == os.getpid():
        return True  # another thread of this process may be writing it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):  # no /proc (not Linux): alive as far as kill() can tell
        return True


def remove_orphans(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that killed atomic writes of ``path`` left in its folder.

    A temporary file counts as orphaned when the process that created it no longer runs (its pid is in
    the name) or it has an older zoo's ``mkstemp`` name.  Returns the removed paths.
    """
    path = Path(path)
    pattern = _tmp_pattern(path.name)
    removed = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None:
            continue
        ours = _OURS.fullmatch(m.group(1))
        if ours is not None and pid_alive(int(ours.group(1))):
            continue
        if m.group(2) == _OLD_SUFFIX and not os.path.lexists(path):
            # killed between moving the previous run aside and renaming the new one in: restore it
            os.replace(entry.path, path)
            logger.warning("restored the previous run %s left aside by a killed writer", path)
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(Path(entry.path))
        except FileNotFoundError:  # removed by a concurrent writer
            pass
    if removed:
        logger.info("removed %d orphaned temporary file(s) of %s", len(removed), path)
    return removed


def _check_target(path: Path) -> None:
    if path.is_dir():
        raise ValueError(f"path {str(path)!r} is a directory")
    if not path.parent.is_dir():
        raise ValueError(f"path: folder {str(path.parent)!r} does not exist")


def _tmp_name(path: Path, suffix: str = _TMP_SUFFIX) -> Path:
    return path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(6)}{suffix}"


def _open_tmp(path: Path) -> tuple[Path, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = _tmp_name(path)
        try:
            return tmp, os.open(tmp, flags, 0o666)  # the OS applies the umask
        except FileExistsError:  # pragma: no cover - 48 random bits collided
            continue


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (best effort: not every platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> None:
    """Call ``write(fh)`` on a temporary binary file and atomically rename it to ``path``.

    On any error (or interruption) the temporary file is removed and the old ``path`` is untouched.
    """
    path = Path(path)
    _check_target(path)
    remove_orphans(path)
    tmp, fd = _open_tmp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_path(path: str | os.PathLike, write_to: Callable[[Path], Any]) -> None:
    """Call ``write_to(tmp)`` with the name of a temporary file beside ``path`` and atomically rename it to
    ``path``: for writers that take a file name rather than a file object (netCDF).  The file keeps the
    permissions of any new file (``0o666`` less the umask) even if the writer replaces the temporary.

    On any error (or interruption) the temporary file is removed and the old ``path`` is untouched."""
    path = Path(path)
    _check_target(path)
    remove_orphans(path)
    tmp, fd = _open_tmp(path)
    os.close(fd)
    try:
        mode = stat.S_IMODE(os.stat(tmp).st_mode)  # 0o666 & ~umask, without reading or changing the umask
        write_to(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Atomically replace ``path`` by ``data``."""
    atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Atomically replace ``path`` by ``text`` (encoded with ``encoding``)."""
    atomic_write_bytes(path, text.encode(encoding))


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """Atomically write ``obj`` with ``torch.save``."""
    atomic_write(path, lambda fh: torch.save(obj, fh))


def append_line(fh: IO[str], text: str) -> None:
    """Append a line to an open journal and fsync it: a killed run loses at most the line being written."""
    fh.write(text + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def atomic_save_figure(fig: Any, path: str | os.PathLike, dpi: int = 100) -> None:
    """Render a matplotlib figure to PNG in memory, close it, and replace ``path`` with it atomically."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def read_lines(path: str | os.PathLike) -> list[dict]:
    """The JSON rows of a journal written by :func:`append_line` (``[]`` when there is none); a line cut by a
    kill does not parse and is skipped, so the row it held is redone."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def atomic_write_many(files: Mapping[str | os.PathLike, bytes]) -> None:
    """Replace several files together: each is written to its temporary and fsynced first, and only then
    are they renamed into place, so a failure while writing (e.g. a full disk) replaces none of them."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            _check_target(path)
            remove_orphans(path)
            tmp, fd = _open_tmp(path)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for folder in {path.parent for _, path in staged}:
        _fsync_dir(folder)


def check_free_space(folder: str | os.PathLike, nbytes: int, what: str = "the file") -> None:
    """Raise ``OSError(ENOSPC)`` naming ``what`` when ``folder``'s filesystem has less than ``nbytes`` free.

    Used before writers that crash instead of raising on a full disk (h5py, under netCDF)."""
    free = shutil.disk_usage(folder).free
    if free < nbytes:
        raise OSError(
            errno.ENOSPC,
            f"No space left on device: {what} needs about {nbytes / 2**20:.1f} MiB, "
            f"{free / 2**20:.1f} MiB free in {str(folder)!r}",
        )


class RunFolderError(OSError):
    """Writing a run folder failed (e.g. a full disk); the run that was at its path is untouched."""


_ORPHAN = re.compile(r"\..+\.[A-Za-z0-9_-]+\.tmp")  # a temporary file a killed write left in a run folder


def _entries(folder: Path) -> list[str]:
    return [e.name for e in os.scandir(folder)]


def _swap_in(staged: Path, path: Path) -> None:
    """Put the staged folder at ``path``, moving an existing ``path`` aside first (restored by
    :func:`remove_orphans` if the process is killed between the two renames)."""
    if not os.path.lexists(path):
        os.rename(staged, path)
        return
    old = _tmp_name(path, _OLD_SUFFIX)
    os.rename(path, old)
    os.rename(staged, path)
    shutil.rmtree(old, ignore_errors=True)


def _merge_in(staged: Path, path: Path, owned: Callable[[str], bool]) -> None:
    """Replace ``path``'s owned entries by the staged ones, leaving its other entries alone."""
    trash = _tmp_name(path, _TMP_SUFFIX)
    trash.mkdir()
    for name in _entries(path):
        if owned(name):
            os.replace(path / name, trash / name)
    for name in _entries(staged):
        remove_orphans(path / name)
        os.replace(staged / name, path / name)
    shutil.rmtree(trash, ignore_errors=True)
    os.rmdir(staged)


@contextlib.contextmanager
def staged_folder(path: str | os.PathLike, owned: Callable[[str], bool]) -> Iterator[Path]:
    """Write a run folder atomically: yields an empty temporary sibling folder to write into; when the
    block ends without error its content replaces the run at ``path``.

    ``owned(name)`` says which entries of ``path`` belong to a run (e.g. ``metrics.json``).  When ``path``
    does not exist or holds only such entries, the staged folder is renamed to ``path`` (the previous
    folder is moved aside and deleted); when it holds other files too (or is the working directory) the
    run's entries are replaced one by one (renames only, after everything is written) and the others are
    kept.  On an error (including ``KeyboardInterrupt``) the temporary folder is removed and ``path`` is
    untouched; an ``OSError`` is raised again as :class:`RunFolderError` naming ``path``.  Temporaries of
    killed writers are removed first (:func:`remove_orphans`).
    """
    path = Path(os.path.abspath(path))
    if os.path.lexists(path) and not path.is_dir():
        raise ValueError(f"path {str(path)!r} exists and is not a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(path)
    staged = _tmp_name(path)
    staged.mkdir()
    try:
        yield staged
        whole = not path.exists() or (
            path != Path(os.getcwd()) and all(owned(n) or _ORPHAN.fullmatch(n) for n in _entries(path))
        )
        if whole:
            _swap_in(staged, path)
        else:
            _merge_in(staged, path, owned)
    except BaseException as e:
        shutil.rmtree(staged, ignore_errors=True)
        if isinstance(e, OSError) and not isinstance(e, RunFolderError):
            raise RunFolderError(
                e.errno,
                f"cannot write the run folder {str(path)!r}: {e.strerror or e}; what was there is untouched "
                "and no temporary is left",
            ) from e
        raise
    _fsync_dir(path.parent)
