"""What a session changed: the files between two trees, with their patches, bounded.

Binary files are named, never inlined; patches stop at a budget and the answer says how much there was."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypedDict

from sessions.worktree import git

ChangeStatus = Literal["added", "modified", "deleted", "renamed"]
_STATUS: dict[str, ChangeStatus] = {"A": "added", "M": "modified", "D": "deleted", "R": "renamed", "T": "modified",
                                    "C": "added"}
# A file's patch past this is named, not inlined (a generated lockfile, a minified bundle); all of them together
# stop at the total: the page and a terminal show a review, not a dump. The full diff is `git diff` away.
MAX_FILE_PATCH_BYTES = 256 * 1024
MAX_PATCH_BYTES = 1024 * 1024


class FileChange(TypedDict, total=False):
    path: str
    old_path: str  # a rename's source
    status: ChangeStatus
    additions: int
    deletions: int
    binary: bool
    patch: str | None  # None when omitted: see `patch_omitted`
    patch_bytes: int
    patch_omitted: str  # binary, too_large (over the per-file bound) or budget (the total bound reached)


class Changes(TypedDict):
    base: str
    head: str  # the tree or commit compared with the base
    files: list[FileChange]
    additions: int
    deletions: int
    patch_bytes: int  # every patch's size together, inlined or not
    patch_limit: int
    truncated: bool  # some patch was left out (binary files do not count)


def _parse_raw(raw: str) -> list[FileChange]:
    """`git diff --raw -z -M` records: `:modes shas STATUS\0path[\0path]\0`."""
    parts = raw.split("\0")
    files: list[FileChange] = []
    i = 0
    while i < len(parts) - 1:
        header = parts[i]
        if not header.startswith(":"):
            i += 1
            continue
        letter = header.split()[-1][:1]
        status = _STATUS.get(letter, "modified")
        if letter in ("R", "C"):
            change: FileChange = {"path": parts[i + 2], "old_path": parts[i + 1], "status": status}
            i += 3
        else:
            change = {"path": parts[i + 1], "status": status}
            i += 2
        files.append(change)
    return files


def _numstat(raw: str) -> list[tuple[int | None, int | None]]:
    """`--numstat -z`: `add\tdel\tpath\0` (a rename: `add\tdel\t\0old\0new\0`); `-` counts for binary files."""
    parts = raw.split("\0")
    counts: list[tuple[int | None, int | None]] = []
    i = 0
    while i < len(parts) - 1:
        fields = parts[i].split("\t")
        if len(fields) < 3:
            i += 1
            continue
        added, deleted, path = fields[0], fields[1], fields[2]
        counts.append((None if added == "-" else int(added), None if deleted == "-" else int(deleted)))
        i += 3 if path == "" else 1
    return counts


def _patches(text: bytes) -> list[bytes]:
    """One full `git diff` split file by file, in the order `--raw` lists them."""
    chunks: list[bytes] = []
    for piece in (b"\n" + text).split(b"\ndiff --git ")[1:]:
        chunks.append(b"diff --git " + piece + b"\n")
    return chunks


def count(repo: Path, base: str, head: str) -> int:
    """How many files differ between two commits or trees (renames count once)."""
    listed = git.run(["diff-tree", "-r", "-z", "-M", "--name-only", base, head], repo).stdout
    return len([name for name in listed.split("\0") if name])


def compare(repo: Path, base: str, head: str) -> Changes:
    """The changes from `base` to `head` (commits or trees), renames found (`-M`)."""
    args = [base, head]
    raw = git.run(["diff-tree", "-r", "-z", "-M", "--raw", *args], repo).stdout
    files = _parse_raw(raw)
    counts = _numstat(git.run(["diff-tree", "-r", "-z", "-M", "--numstat", *args], repo).stdout)
    patches = _patches(git.run_bytes(["diff-tree", "-r", "-M", "-p", "--no-color", "--full-index", *args],
                                     repo).stdout)
    budget, total, truncated = MAX_PATCH_BYTES, 0, False
    adds = dels = 0
    for index, change in enumerate(files):
        added, deleted = counts[index] if index < len(counts) else (0, 0)
        binary = added is None or deleted is None
        change["additions"], change["deletions"], change["binary"] = added or 0, deleted or 0, binary
        adds += added or 0
        dels += deleted or 0
        patch = patches[index] if index < len(patches) else b""
        change["patch_bytes"] = len(patch)
        total += len(patch)
        change["patch"] = None
        if binary:
            change["patch_omitted"] = "binary"
        elif len(patch) > MAX_FILE_PATCH_BYTES:
            change["patch_omitted"], truncated = "too_large", True
        elif len(patch) > budget:
            change["patch_omitted"], truncated = "budget", True
        else:
            change["patch"] = patch.decode("utf-8", "replace")
            budget -= len(patch)
    return {"base": base, "head": head, "files": files, "additions": adds, "deletions": dels, "patch_bytes": total,
            "patch_limit": MAX_PATCH_BYTES, "truncated": truncated}
