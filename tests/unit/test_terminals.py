"""A session's terminals (sessions/runtime/terminals.py) without a daemon: cwd confined to the workspace, output
kept within its limit from the end at a character boundary and redacted off the loop once per change, at most
`most` open at once, the group killed on release with what it started in a session of its own, and the agent run's
mark on every command (so the agent's exit and boot repair find them)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from sessions.acp import stragglers
from sessions.runtime import terminals as terminals_mod
from sessions.runtime.terminals import TerminalRefused, Terminals
from tests.conftest import wait_for


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_cwd_outside_the_workspace_is_refused(tmp_path: Path) -> None:
    terminals = Terminals([tmp_path], tmp_path, {})
    with pytest.raises(TerminalRefused, match="outside the workspace"):
        asyncio.run(terminals.create({"command": "/bin/true", "cwd": "/"}))
    with pytest.raises(TerminalRefused, match="command must be"):
        asyncio.run(terminals.create({"command": "/bin/echo", "args": "not a list"}))


def finished(tmp_path: Path, limit: int, *chunks: bytes) -> list[str]:
    """What an exited terminal (a real `true`) says after each chunk is fed to it."""
    async def run() -> list[str]:
        terminal = await Terminals([tmp_path], tmp_path, {}).create({"command": "/bin/true",
                                                                      "outputByteLimit": limit})
        assert terminal.reader is not None
        await terminal.reader
        said = []
        for chunk in chunks:
            terminal.feed(chunk)
            said.append(f"{await terminal.text()}|{terminal.truncated}")
        return said
    return asyncio.run(run())


def test_output_is_kept_from_the_end_at_a_character_boundary(tmp_path: Path) -> None:
    # 5 bytes fit; 7 drop 2 from the start, then no half character is left
    assert finished(tmp_path, 5, "abcé".encode(), "ü".encode()) == ["abcé|False", "cé\u00fc|True"]
    # 6 bytes in a 4-byte buffer: cutting 2 would split the first é, so it goes whole
    assert finished(tmp_path, 4, "aéb".encode() + "é".encode()) == ["bé|True"]


def test_polls_of_unchanged_output_share_one_redaction_made_off_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = terminals_mod._redacted

    def counted(raw: bytes) -> str:
        import threading
        calls.append(threading.current_thread() is threading.main_thread())
        return real(raw)

    monkeypatch.setattr(terminals_mod, "_redacted", counted)

    async def run() -> set[str]:
        terminal = await Terminals([tmp_path], tmp_path, {}).create(
            {"command": "/bin/sh", "args": ["-c", "head -c 1000000 /dev/zero | tr '\\0' x; "
                                            "echo ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345"]})
        assert terminal.reader is not None
        await terminal.reader
        return set(await asyncio.gather(*(terminal.text() for _ in range(200))))

    [text] = asyncio.run(run())
    assert "sk-ant-api03-abcdefghijklmnop" not in text and "[REDACTED]" in text
    assert calls == [False]  # once, for 200 polls, and not on the loop's thread


def test_a_session_has_at_most_its_number_of_terminals_open(tmp_path: Path) -> None:
    async def run() -> None:
        terminals = Terminals([tmp_path], tmp_path, {}, most=2)
        first = await terminals.create({"command": "/bin/sleep", "args": ["600"]})
        await terminals.create({"command": "/bin/sleep", "args": ["600"]})
        with pytest.raises(TerminalRefused, match="max_terminals_per_session"):
            await terminals.create({"command": "/bin/true"})
        await terminals.release(first)  # a released one makes room
        await terminals.create({"command": "/bin/true"})
        await terminals.close_all()

    asyncio.run(run())


def test_a_released_terminal_is_killed_with_its_group_and_what_it_started_in_a_session_of_its_own(
        tmp_path: Path) -> None:
    pid_file = tmp_path / "setsid.pid"

    async def run() -> tuple[dict[str, object], int, int]:
        terminals = Terminals([tmp_path], tmp_path, {})
        terminal = await terminals.create({"command": "/bin/sh", "args": [
            "-c", f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 600' & sleep 600 & exec sleep 600"]})
        escaped = int(await asyncio.to_thread(
            wait_for, lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=10, what="the setsid pid"))
        await terminals.release(terminal)
        return terminal.exit_status() or {}, len(terminals), escaped

    status, left, escaped = asyncio.run(run())
    assert status == {"exitCode": None, "signal": signal.SIGTERM.name} and left == 0
    wait_for(lambda: not alive(escaped), timeout=10, what="the setsid child to be killed")


def test_a_terminal_carries_its_agent_runs_mark_which_the_agent_cannot_override(tmp_path: Path) -> None:
    async def run() -> int:
        terminals = Terminals([tmp_path], tmp_path, {}, run_mark=lambda: "sess_1@2026-12-05T00:00:00Z")
        await terminals.create({"command": "/bin/sleep", "args": ["600"], "env": [
            {"name": stragglers.MARK_ENV, "value": "someone-else"}]})
        # What boot repair does for a crashed daemon's session: whatever carries the run's mark is killed.
        killed = await asyncio.to_thread(stragglers.kill_marked, "sess_1@2026-12-05T00:00:00Z")
        await terminals.close_all()
        return killed

    assert asyncio.run(run()) == 1
