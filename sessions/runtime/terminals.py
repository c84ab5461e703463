"""The client's terminals (ACP `terminal/*`): commands an agent runs through us rather than by itself.

Each terminal is a process group of its own, started in a workspace root (its cwd is confined like a file path),
with the agent's environment (the daemon's own secrets left out) plus what the request sets. Its output is kept
in a bounded buffer (the request's `outputByteLimit`, at most OUTPUT_LIMIT_BYTES), truncated from the start at a
character boundary as ACP asks, and redacted before the agent reads it. Every terminal's group is killed when the
agent releases it, when the session stops and when the daemon shuts down (through the stop path).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from sessions.acp import workspace_fs
from sessions.acp.child_env import inherited_environment
from sessions.core.jsonobj import JsonObject
from sessions.core.redact import redact_text

logger = logging.getLogger(__name__)

# A terminal's output kept for the agent when it names no limit, and the most it may ask for: enough for a test
# run's log, bounded so a chatty command cannot grow the daemon.
OUTPUT_LIMIT_BYTES = 1024 * 1024
# After SIGTERM of a terminal's group (kill, release, stop): how long before SIGKILL.
KILL_GRACE_SECONDS = 2.0


class ExitStatus(TypedDict):
    """A terminal's exit as ACP `terminal/wait_for_exit` and `terminal/output` answer it."""

    exitCode: int | None
    signal: str | None


class TerminalRefused(Exception):
    """A terminal request that cannot be served (unknown id, cwd outside the workspace, bad params)."""


@dataclass
class Terminal:
    id: str
    command: list[str]
    process: asyncio.subprocess.Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task[None] | None = None

    def feed(self, chunk: bytes) -> None:
        self.output += chunk
        excess = len(self.output) - self.limit
        if excess > 0:
            # Drop from the start, then past any UTF-8 continuation bytes so the text still decodes cleanly.
            while excess < len(self.output) and (self.output[excess] & 0xC0) == 0x80:
                excess += 1
            del self.output[:excess]
            self.truncated = True

    def exit_status(self) -> ExitStatus | None:
        code = self.process.returncode
        if code is None:
            return None
        if code < 0:
            return {"exitCode": None, "signal": signal.Signals(-code).name}
        return {"exitCode": code, "signal": None}

    def text(self) -> str:
        return redact_text(self.output.decode("utf-8", errors="replace"))


class Terminals:
    """A session's terminals, by id."""

    def __init__(self, roots: Sequence[Path], default_cwd: Path, env: Mapping[str, str] | None) -> None:
        self._roots = list(roots)
        self._default_cwd = default_cwd
        self._env = {**inherited_environment(), **(env or {})}
        self._ids = itertools.count(1)
        self._terminals: dict[str, Terminal] = {}

    def __len__(self) -> int:
        return len(self._terminals)

    def open_terminals(self) -> list[Terminal]:
        return list(self._terminals.values())

    async def create(self, params: JsonObject) -> Terminal:  # ACP terminal/create
        command = params.get("command")
        args = params.get("args") or []
        if not isinstance(command, str) or not command or not isinstance(args, list) \
                or not all(isinstance(a, str) for a in args):
            raise TerminalRefused("command must be a string and args a list of strings")
        cwd = self._default_cwd
        if params.get("cwd"):
            try:
                cwd = workspace_fs.confine(str(params["cwd"]), self._roots).path
            except workspace_fs.OutsideWorkspace as exc:
                raise TerminalRefused(f"cwd outside the workspace: {exc}") from exc
        env = dict(self._env)
        for item in params.get("env") or []:
            if isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("value"), str):
                env[item["name"]] = item["value"]
        limit = params.get("outputByteLimit")
        limit = min(limit, OUTPUT_LIMIT_BYTES) if isinstance(limit, int) and limit >= 0 else OUTPUT_LIMIT_BYTES
        try:
            process = await asyncio.create_subprocess_exec(
                command, *args, cwd=str(cwd), env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise TerminalRefused(f"cannot run {command!r}: {exc.strerror or exc}") from exc
        terminal = Terminal(f"term-{next(self._ids)}", [command, *args], process, limit)
        terminal.reader = asyncio.create_task(self._read(terminal))
        self._terminals[terminal.id] = terminal
        return terminal

    async def _read(self, terminal: Terminal) -> None:
        stream = terminal.process.stdout
        assert stream is not None
        while chunk := await stream.read(65536):
            terminal.feed(chunk)
        await terminal.process.wait()

    def get(self, params: JsonObject) -> Terminal:
        terminal = self._terminals.get(str(params.get("terminalId", "")))
        if terminal is None:
            raise TerminalRefused(f"no terminal {params.get('terminalId')!r}")
        return terminal

    async def wait_for_exit(self, terminal: Terminal) -> ExitStatus:
        if terminal.reader is not None:
            await asyncio.shield(terminal.reader)
        return terminal.exit_status() or {"exitCode": None, "signal": None}

    async def kill(self, terminal: Terminal) -> None:
        """SIGTERM the terminal's group, then SIGKILL after the grace; the terminal stays until released."""
        if terminal.process.returncode is not None:
            return
        _signal_group(terminal.process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(terminal.process.wait()), KILL_GRACE_SECONDS)
        except TimeoutError:
            _signal_group(terminal.process.pid, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(terminal.process.wait(), KILL_GRACE_SECONDS)

    async def release(self, terminal: Terminal) -> None:
        await self.kill(terminal)
        # Whatever the command left in its group (a backgrounded child) goes with it.
        _signal_group(terminal.process.pid, signal.SIGKILL)
        self._terminals.pop(terminal.id, None)
        if terminal.reader is not None:
            terminal.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await terminal.reader

    async def close_all(self) -> None:
        """At stop: every terminal killed and released, whatever the agent did."""
        for terminal in list(self._terminals.values()):
            try:
                await self.release(terminal)
            except Exception:  # the stop goes on; the group is named so an operator can find it
                logger.exception("could not kill terminal %s (pid %s)", terminal.id, terminal.process.pid)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
