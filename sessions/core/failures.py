"""Storage failures: which errors mean "the disk cannot take this write", and how we name them.

A write that fails is never ignored (issue: a full disk silently dropped a turn's tail). The store writer
retries with backoff; when a store stays unwritable past its deadline the session stops with failure kind
`storage_failure`, and the API answers new work with 507 `storage_full` (or 503 `storage_unavailable`).
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

DISK_FULL = "disk_full"
IO_ERROR = "io_error"
READ_ONLY = "read_only"
LOCKED = "locked"
# The path no longer is the file the writer holds open (deleted or replaced under a live session): every later
# commit would go into an unlinked inode that no reader sees, so this is a failure, never retried.
DISPLACED = "store_displaced"

# Below this much free space a new session or prompt is refused up front (507) rather than half-written:
# a session folder with its events.db, WAL and meta.json needs about 100 KiB before its first event.
MIN_FREE_BYTES = 512 * 1024

_SQLITE_CLASSES = (
    ("SQLITE_FULL", DISK_FULL),
    ("SQLITE_IOERR", IO_ERROR),
    ("SQLITE_CANTOPEN", IO_ERROR),
    ("SQLITE_READONLY", READ_ONLY),
    ("SQLITE_BUSY", LOCKED),
    ("SQLITE_LOCKED", LOCKED),
)
_OS_CLASSES = {
    errno.ENOSPC: DISK_FULL,
    errno.EDQUOT: DISK_FULL,
    errno.EROFS: READ_ONLY,
    errno.EIO: IO_ERROR,
}


class StoreFailure(Exception):
    """A store stayed unwritable past its write deadline."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class StoreReadError(Exception):
    """A store that could not be read for a condition of the disk: said as a read, never as "not writable"."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def classify(exc: BaseException, near: Path | None = None) -> str | None:
    """The storage class of `exc`, or None when it is not a storage condition (a bug, bad input).

    SQLite reports a full tmpfs as SQLITE_FULL on some writes and as an I/O error on others (the WAL's
    shared-memory file), so an I/O error on a filesystem that is (nearly) full counts as disk_full."""
    reason: str | None = None
    if isinstance(exc, StoreFailure | StoreReadError):
        return exc.reason
    if isinstance(exc, sqlite3.Error):
        name = str(getattr(exc, "sqlite_errorname", "") or "")
        for prefix, value in _SQLITE_CLASSES:
            if name.startswith(prefix):
                reason = value
                break
        else:
            text = str(exc).lower()
            if "disk is full" in text:
                reason = DISK_FULL
            elif "disk i/o" in text:
                reason = IO_ERROR
            elif "readonly" in text:
                reason = READ_ONLY
            elif "locked" in text:
                reason = LOCKED
    elif isinstance(exc, OSError):
        reason = _OS_CLASSES.get(exc.errno or 0)
    elif isinstance(exc.__cause__, sqlite3.Error):
        # Django's own database errors wrap SQLite's (a full catalog disk): the condition is the cause's.
        return classify(exc.__cause__, near)
    if reason == IO_ERROR and near is not None and not has_free_space(near, MIN_FREE_BYTES // 8):
        reason = DISK_FULL
    return reason


def has_free_space(path: Path, need: int = MIN_FREE_BYTES) -> bool:
    """True when the filesystem holding `path` (or its nearest existing parent) has `need` bytes free."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        stat = os.statvfs(probe)
    except OSError:
        return True  # cannot tell: let the write itself decide
    return stat.f_bavail * stat.f_frsize >= need
