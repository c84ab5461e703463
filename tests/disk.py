"""Size-limited filesystems for the storage tests: a tmpfs of a given size (root only), filled on purpose."""

from __future__ import annotations

import contextlib
import os
import shutil
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


BLOCK = 4096


def _run(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout


@contextlib.contextmanager
def unreadable_file(folder: Path, name: str, image: Path) -> Iterator[Path]:
    """`folder` as a small ext4 filesystem (a loop device) holding the same files, where reading `name` fails with
    EIO and every other file reads: the device is cut below the file's one data block (written last, after a
    filler) while the filesystem is mounted read-only. Skipped where loop devices cannot be used (needs root)."""
    aside = folder.with_name(folder.name + ".aside")
    loop = ""
    try:
        subprocess.run(["truncate", "-s", "8M", str(image)], check=True, timeout=30)
        _run("mkfs.ext4", "-q", "-b", str(BLOCK), "-O", "^has_journal", str(image))
        loop = _run("losetup", "-f", "--show", str(image)).strip()
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot make a loop-device filesystem here (needs root, losetup and mkfs.ext4)")
    folder.rename(aside)
    folder.mkdir()
    try:
        _run("mount", loop, str(folder))
        for path in sorted(aside.iterdir()):
            if path.name != name:
                shutil.copy2(path, folder / path.name)
        (folder / ".filler").write_bytes(b"\0" * (BLOCK * 256))
        shutil.copy2(aside / name, folder / name)
        _run("umount", str(folder))
        _run("mount", "-o", "ro", loop, str(folder))
        extent = _run("filefrag", "-v", str(folder / name)).splitlines()[3].split()
        block = int(extent[3].rstrip("."))  # the physical start of the file's one extent
        os.truncate(image, block * BLOCK)
        _run("losetup", "-c", loop)
        fd = os.open(folder / name, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # nothing of it left in the page cache
        finally:
            os.close(fd)
        yield folder / name
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)
        subprocess.run(["losetup", "-d", loop], capture_output=True, timeout=30)
        folder.rmdir()
        aside.rename(folder)
