"""The agent's fs requests (`fs/read_text_file`, `fs/write_text_file`), served inside its workspace roots.

A path is checked once (`confine`: resolved, symlinks included, inside a root) and then opened one component at a
time from the root's directory descriptor with `O_NOFOLLOW`, never by name. Checking a resolved path and opening
it by name later let an agent swap a directory for a symlink in between: 92 of 300 racing writes landed outside
the workspace. Now a component that became a symlink after the check fails the open, and the request is refused.

Only regular files are read or written, and every open is non-blocking: a FIFO in the workspace used to hold a
thread of the loop's shared pool until someone wrote to it, and eight of them stalled every other session's
prompts. The work runs on a pool of its own (`FS_POOL`) for the same reason.

A file with more than one hard link is refused (`HardLinked`) unless `[workspaces] allow_hard_links = true`: a hard
link is the one way to a file outside the roots that no path check can see, and reads and writes through one read
and overwrote files outside the workspace. Package managers such as pnpm hard-link their stores into a project;
where agents must read those, the key allows it.

Every refusal answers invalid params (-32602), a file too large and a path that loops (ELOOP, also when a symlink
appears and goes while it is opened) included: the agent asked for something it cannot have, the daemon did not fail.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from compozy_base.home import user_umask
from sessions.core.jsonobj import JsonObject

MAX_READ_BYTES = 10 * 1024 * 1024
# Agents' file I/O never takes a thread of the loop's default pool, which serves prompts, streams and reads.
FS_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent-fs")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class OutsideWorkspace(PermissionError):
    """An agent asked for a path outside its workspace roots, or one that left them while it was opened."""

    title = "path outside the workspace"  # of the `permission` event that records the refusal


class NotARegularFile(ValueError):
    """A directory, FIFO, socket or device: never read or written for an agent."""


class HardLinked(OutsideWorkspace):
    """A file with more than one link: one of them may be outside every root."""

    title = "file with more than one hard link"


class TooLarge(ValueError):
    """A file past MAX_READ_BYTES: read through ACP whole, it would be held in memory and in the transcript."""


class Confined(NamedTuple):
    """A checked path: the workspace root it lies in and its components below that root."""

    root: Path
    parts: tuple[str, ...]

    @property
    def path(self) -> Path:
        return self.root.joinpath(*self.parts)


def confine(path: str, roots: Sequence[Path]) -> Confined:
    """Resolve `path` (symlinks included) and require it inside one of the workspace roots."""
    if not path or not Path(path).is_absolute():
        raise OutsideWorkspace(f"path must be absolute: {path!r}")
    if "\0" in path:
        raise OutsideWorkspace(f"path contains a NUL byte: {path!r}")
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # Python 3.11 raises RuntimeError on a symlink loop
        raise OutsideWorkspace(f"path does not resolve: {path} ({exc})") from exc
    for root in roots:
        root = root.resolve()
        if resolved == root or root in resolved.parents:
            return Confined(root, resolved.relative_to(root).parts)
    raise OutsideWorkspace(f"path outside the workspace: {path}")


def _refused(exc: OSError, target: Confined, dir_fd: int, name: str) -> OSError | NotARegularFile:
    """What a failed O_NOFOLLOW open means. A component that is a symlink now (ELOOP, or ENOTDIR where
    O_DIRECTORY was asked) turned into one after `confine` checked it: refused as outside the workspace."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        try:
            moved = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            moved = False
        if moved:
            return OutsideWorkspace(f"path changed to a symlink while it was opened: {target.path}")
    if exc.errno in (errno.EISDIR, errno.ENXIO):  # ENXIO: a FIFO with no reader, or a socket
        return NotARegularFile(f"not a regular file: {target.path}")
    return exc


def _open_parent(target: Confined, *, create: bool) -> int:
    """The descriptor of the target's directory, walked from the root without following any symlink."""
    mask = user_umask()
    fd = os.open(target.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in target.parts[:-1]:
            try:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o777, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                    if mask >= 0:  # as if the agent had made it: the user's umask, not the daemon's private one
                        os.fchmod(child, 0o777 & ~mask)
            except OSError as exc:
                raise _refused(exc, target, fd, part) from exc
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_file(target: Confined, flags: int, *, create: bool = False,
               hard_links: bool = False) -> tuple[int, os.stat_result, bool]:
    """The target, a regular file, opened from its checked parent without following any symlink: (fd, its stat,
    whether this open created it). No O_TRUNC: a FIFO, a device or a hard-linked file must be refused before
    anything is done to it."""
    if not target.parts:
        raise NotARegularFile(f"not a regular file: {target.path}")
    parent = _open_parent(target, create=create)
    name, created = target.parts[-1], False
    try:
        fd = -1
        if create:
            with contextlib.suppress(FileExistsError):
                fd = os.open(name, flags | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, 0o666, dir_fd=parent)
                created = True
        if fd < 0:
            fd = os.open(name, flags | _FILE_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise _refused(exc, target, parent, name) from exc
    finally:
        os.close(parent)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotARegularFile(f"not a regular file: {target.path}")
    if st.st_nlink > 1 and not hard_links:
        os.close(fd)
        raise HardLinked(f"{target.path} has {st.st_nlink} hard links, and another may be outside the workspace "
                         "([workspaces] allow_hard_links = true allows such files)")
    return fd, st, created


def read_text(target: Confined, line: int | None, limit: int | None, *, hard_links: bool = False) -> str:
    fd, st, _ = _open_file(target, os.O_RDONLY, hard_links=hard_links)
    with os.fdopen(fd, "rb") as file:
        if st.st_size > MAX_READ_BYTES:
            raise TooLarge(f"file too large to read through ACP ({st.st_size} bytes, at most {MAX_READ_BYTES})")
        text = file.read(MAX_READ_BYTES + 1).decode("utf-8", errors="replace")
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max((line or 1) - 1, 0)
    end = start + limit if limit else None
    return "".join(lines[start:end])


def write_text(target: Confined, content: str, *, hard_links: bool = False) -> None:
    """Write for the agent. The daemon's umask keeps its own home private; what it creates in the user's workspace
    gets the user's umask instead, as if the agent had written it."""
    fd, _, created = _open_file(target, os.O_WRONLY, create=True, hard_links=hard_links)
    with os.fdopen(fd, "wb") as file:
        os.set_blocking(fd, True)
        mask = user_umask()
        if created and mask >= 0:
            os.fchmod(fd, 0o666 & ~mask)
        file.truncate(0)
        file.write(content.encode("utf-8"))


def bad_params(method: str, params: JsonObject) -> str:
    """What is wrong with an fs request's parameters (ACP: `content` a string, `line` ≥ 1, `limit` ≥ 0), or "".
    An object `content` used to be written as its Python repr, and `line: "abc"` was an internal error."""
    if method == "fs/write_text_file" and not isinstance(params.get("content"), str):
        return "a content that is not a string"
    for name, least in (("line", 1), ("limit", 0)):
        value = params.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
            return f"{name} {value!r:.40} (an integer ≥ {least} or null)"
    return ""


def fs_error(path: str, exc: OSError | ValueError) -> Exception:
    """The JSON-RPC error an fs request failure answers. A missing file is ACP's resource-not-found (-32002):
    agents such as gemini-cli read a file first to learn that it does not exist yet, and stop on -32603."""
    from acp.exceptions import RequestError

    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return RequestError.resource_not_found(path)
    if isinstance(exc, NotARegularFile | TooLarge | OutsideWorkspace) or (
            isinstance(exc, OSError) and exc.errno == errno.ELOOP):
        # ELOOP that `_refused` could not pin on a symlink: one that came and went between the open and its look.
        return RequestError.invalid_params({"path": path, "reason": str(exc)})
    return RequestError.internal_error({"path": path, "error": str(exc)})
