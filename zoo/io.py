"""Crash-safe file writes: every file the zoo writes (checkpoints, metrics, protocol results) goes here.

An atomic write creates a temporary file ``.NAME.<pid>-<random>.tmp`` next to the target, writes, flushes
and fsyncs it, and renames it over ``NAME`` (``os.replace``), so a reader sees the old file or the new one,
never a half-written one, even if the writer is killed (``kill -9``) mid-write.  The temporary file is
created with mode ``0o666`` through ``os.open``, so the operating system applies the process umask, as it
does for ``open(..., "w")`` (the umask is never read or changed).

A killed write leaves its temporary file behind; the next atomic write of the same ``NAME`` removes such
orphans (:func:`remove_orphans`): temporary files of ``NAME`` whose writing process no longer runs.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_torch_save",
    "append_line",
    "remove_orphans",
]

logger = logging.getLogger(__name__)

_TMP_SUFFIX = ".tmp"
# the middle part of a temporary name: "<pid>-<hex>" (this module) or mkstemp's 8 characters (older zoos)
_OURS = re.compile(r"(\d+)-[0-9a-f]+")


def _tmp_pattern(name: str) -> re.Pattern:
    return re.compile(rf"\.{re.escape(name)}\.([A-Za-z0-9_-]+){re.escape(_TMP_SUFFIX)}")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another thread of this process may be writing it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
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
        if ours is not None and _pid_alive(int(ours.group(1))):
            continue
        try:
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


def _open_tmp(path: Path) -> tuple[Path, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(6)}{_TMP_SUFFIX}"
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
