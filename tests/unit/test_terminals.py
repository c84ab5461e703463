"""A session's terminals (sessions/runtime/terminals.py) without a daemon: cwd confined to the workspace, output
kept within its limit from the end at a character boundary, the group killed on release."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from sessions.runtime.terminals import Terminal, TerminalRefused, Terminals


def test_a_cwd_outside_the_workspace_is_refused(tmp_path: Path) -> None:
    terminals = Terminals([tmp_path], tmp_path, {})
    with pytest.raises(TerminalRefused, match="outside the workspace"):
        asyncio.run(terminals.create({"command": "/bin/true", "cwd": "/"}))
    with pytest.raises(TerminalRefused, match="command must be"):
        asyncio.run(terminals.create({"command": "/bin/echo", "args": "not a list"}))


def test_output_is_kept_from_the_end_at_a_character_boundary() -> None:
    terminal = Terminal("t", ["x"], process=None, limit=5)  # type: ignore[arg-type]
    terminal.feed("abcé".encode())  # 5 bytes: fits
    assert (terminal.text(), terminal.truncated) == ("abcé", False)
    terminal.feed("ü".encode())  # 7 bytes: 2 dropped from the start, then no half character left
    assert (terminal.text(), terminal.truncated) == ("cé\u00fc", True)
    narrow = Terminal("t", ["x"], process=None, limit=4)  # type: ignore[arg-type]
    narrow.feed("aéb".encode() + "é".encode())  # 6 bytes: cutting 2 would split the first é, so it goes whole
    assert narrow.text() == "bé"


def test_a_released_terminal_is_killed_with_its_group(tmp_path: Path) -> None:
    async def run() -> tuple[dict[str, object], int]:
        terminals = Terminals([tmp_path], tmp_path, {})
        terminal = await terminals.create({"command": "/bin/sh", "args": ["-c", "sleep 600 & exec sleep 600"]})
        await terminals.release(terminal)
        return terminal.exit_status() or {}, len(terminals)

    status, left = asyncio.run(run())
    assert status == {"exitCode": None, "signal": signal.SIGTERM.name} and left == 0
