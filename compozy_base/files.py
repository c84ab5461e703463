"""The one atomic file write: a crash or a failed write leaves the old file or the new one, never half of one and
never a stray temp file. Used by memory's write path and secrets.toml (sessions/store/folder.py keeps its own)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, text: str, *, mode: int = 0o600, dir_mode: int = 0o700) -> None:
    """`text` (UTF-8, newlines as given) to `path` with `mode`: a uniquely named temp file in the same folder,
    fsynced, renamed over `path`, the folder fsynced; the temp file removed when anything fails. A missing folder
    is made with `dir_mode`."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """The folder's entries (a rename, a removal) made durable."""
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
