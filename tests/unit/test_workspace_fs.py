"""Agents' fs access (sessions/acp/workspace_fs.py) on real files:
what `confine` accepted is opened without following any symlink, so a swap between the check and the open is
refused; only regular files are read or written, never by a blocking open; malformed parameters are named."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from sessions.acp import workspace_fs
from sessions.acp.workspace_fs import NotARegularFile, OutsideWorkspace, bad_params, confine, read_text, write_text
from sessions.runtime.permissions import PermissionBoard


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    (workspace / "d").mkdir(parents=True)
    outside.mkdir()
    (workspace / "d" / "f.txt").write_text("inside\n")
    (outside / "f.txt").write_text("TOP SECRET\n")
    return workspace, outside


def swap_for_symlink(directory: Path, target: Path) -> None:
    """What a racing agent does between the daemon's check and its open."""
    shutil.rmtree(directory)
    directory.symlink_to(target, target_is_directory=True)


def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_read_through(layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    target = confine(str(workspace / "d" / "f.txt"), [workspace])
    swap_for_symlink(workspace / "d", outside)
    with pytest.raises(OutsideWorkspace, match="changed to a symlink"):
        read_text(target, None, None)


def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_written_through(
        layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    targets = [confine(str(workspace / "d" / name), [workspace]) for name in ("f.txt", "new.txt")]
    swap_for_symlink(workspace / "d", outside)
    for target in targets:
        with pytest.raises(OutsideWorkspace):
            write_text(target, "pwned")
    assert (outside / "f.txt").read_text() == "TOP SECRET\n"
    assert not (outside / "new.txt").exists()


def test_a_file_swapped_for_a_symlink_after_the_check_is_refused(layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    target = confine(str(workspace / "d" / "f.txt"), [workspace])
    (workspace / "d" / "f.txt").unlink()
    (workspace / "d" / "f.txt").symlink_to(outside / "f.txt")
    with pytest.raises(OutsideWorkspace):
        read_text(target, None, None)
    with pytest.raises(OutsideWorkspace):
        write_text(target, "pwned")
    assert (outside / "f.txt").read_text() == "TOP SECRET\n"


def test_a_symlink_inside_the_workspace_is_followed_where_it_stays_inside(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    (workspace / "alias").symlink_to(workspace / "d", target_is_directory=True)
    target = confine(str(workspace / "alias" / "f.txt"), [workspace])
    assert target.path == (workspace / "d" / "f.txt").resolve()
    assert read_text(target, None, None) == "inside\n"


def test_a_fifo_is_refused_at_once_for_reads_and_writes(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    fifo = workspace / "pipe"
    os.mkfifo(fifo)
    target = confine(str(fifo), [workspace])
    # A blocking open would wait here for a writer that never comes; the open is non-blocking and refused.
    with pytest.raises(NotARegularFile):
        read_text(target, None, None)
    with pytest.raises(NotARegularFile):  # no reader: ENXIO from the non-blocking open
        write_text(target, "x")
    assert fifo.exists() and not fifo.is_file()


def test_a_directory_is_not_a_file(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    for path in (workspace, workspace / "d"):
        with pytest.raises(NotARegularFile):
            read_text(confine(str(path), [workspace]), None, None)
        with pytest.raises(NotARegularFile):
            write_text(confine(str(path), [workspace]), "x")


def test_a_nul_byte_or_a_relative_path_is_refused_as_a_path_not_a_crash(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    with pytest.raises(OutsideWorkspace, match="NUL"):
        confine(str(workspace / "d") + "/f\0.txt", [workspace])
    with pytest.raises(OutsideWorkspace, match="absolute"):
        confine("d/f.txt", [workspace])


def test_writes_make_missing_directories_with_the_users_umask(layout: tuple[Path, Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    workspace, _ = layout
    monkeypatch.setattr(workspace_fs, "user_umask", lambda: 0o022)
    old = os.umask(0o077)  # the daemon's private umask
    try:
        write_text(confine(str(workspace / "a" / "b" / "new.txt"), [workspace]), "hello")
        write_text(confine(str(workspace / "d" / "f.txt"), [workspace]), "replaced")
    finally:
        os.umask(old)
    assert (workspace / "a" / "b" / "new.txt").read_text() == "hello"
    assert (workspace / "a").stat().st_mode & 0o777 == 0o755
    assert (workspace / "a" / "b" / "new.txt").stat().st_mode & 0o777 == 0o644
    assert (workspace / "d" / "f.txt").read_text() == "replaced"  # truncated, not appended


def test_lines_and_limits_and_the_size_cap(layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    workspace, _ = layout
    (workspace / "many.txt").write_text("".join(f"{i}\n" for i in range(1, 11)))
    target = confine(str(workspace / "many.txt"), [workspace])
    assert read_text(target, 3, 2) == "3\n4\n"
    monkeypatch.setattr(workspace_fs, "MAX_READ_BYTES", 5)
    with pytest.raises(ValueError, match="too large"):
        read_text(target, None, None)


@pytest.mark.parametrize(("method", "params", "bad"), [
    ("fs/write_text_file", {"path": "/w/f", "content": {"a": 1}}, "content"),
    ("fs/write_text_file", {"path": "/w/f"}, "content"),
    ("fs/read_text_file", {"path": "/w/f", "line": "abc"}, "line"),
    ("fs/read_text_file", {"path": "/w/f", "line": 0}, "line"),
    ("fs/read_text_file", {"path": "/w/f", "limit": -1}, "limit"),
    ("fs/read_text_file", {"path": "/w/f", "limit": True}, "limit"),
])
def test_fs_parameters_of_the_wrong_type_are_named(method: str, params: dict[str, object], bad: str) -> None:
    # An object `content` was written as its Python repr; `line: "abc"` was an internal error with a traceback.
    assert bad in bad_params(method, params)


def test_well_formed_fs_parameters_pass() -> None:
    assert bad_params("fs/read_text_file", {"path": "/w/f", "line": 3, "limit": 0}) == ""
    assert bad_params("fs/read_text_file", {"path": "/w/f", "line": None}) == ""
    assert bad_params("fs/write_text_file", {"path": "/w/f", "content": ""}) == ""


def test_two_requests_with_one_tool_call_id_both_stay_answerable() -> None:
    async def main() -> list[str]:
        board = PermissionBoard()
        first = board.open("same", "t1", {}, [])
        second = board.open("same", "t1", {}, [])
        assert first.request_id != second.request_id
        assert board.waiting_count == 2
        assert board.cancel_all() == 2  # a stop answers both
        return [(await first.answer)[0], (await second.answer)[0]]

    assert asyncio.run(main()) == ["cancelled", "cancelled"]
