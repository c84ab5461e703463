"""Size-limited filesystems for the storage tests: a tmpfs of a given size (root only), filled on purpose."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount_tmpfs(path: Path, size: int) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


@contextlib.contextmanager
def tmpfs(path: Path, size: int) -> Iterator[Path]:
    """`path` as a tmpfs of `size` bytes for the block; the test is skipped where none can be mounted."""
    if not mount_tmpfs(path, size):
        pytest.skip("cannot mount a size-limited tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def fill(sessions: Path, leave: int) -> Path:
    """A filler file that leaves about `leave` bytes free on the sessions filesystem."""
    filler = sessions / "filler.bin"
    size = max(0, free_bytes(sessions) - leave)
    with open(filler, "wb") as f:
        chunk = b"\0" * (1024 * 1024)
        while size > 0:
            n = min(size, len(chunk))
            try:
                f.write(chunk[:n])
            except OSError:
                break
            size -= n
    return filler


def fill_up(sessions: Path) -> list[Path]:
    """Fill the sessions filesystem to the last block (a filler, then what 4 KiB writes still take)."""
    fillers = [fill(sessions, 0), sessions / "filler-rest.bin"]
    with open(fillers[1], "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    return fillers
