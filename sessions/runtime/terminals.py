"""The client's terminals (ACP `terminal/*`): commands an agent runs through us rather than by itself.

Each terminal is a process group of its own, started off the loop in a workspace root (its cwd is confined like a
file path), under the session's sandbox (sessions/acp/sandbox.py), with the agent's environment (the daemon's own
secrets left out) plus what the request sets, and two marks the request cannot set: the agent run's (so the agent's
exit, a stop and boot repair after a daemon crash find it as the agent's) and its own (so its release finds what it
started in a session of its own). Its output is kept in a bounded buffer (the request's `outputByteLimit`, at most
OUTPUT_LIMIT_BYTES), truncated from the start at a character boundary as ACP asks, and redacted before the agent
reads it: off the loop, once per change of the buffer, so an agent polling `terminal/output` is served the redacted
text it already has (200 pipelined polls of a 1 MiB buffer redacted it 200 times on the loop, 7 s of lag for every
session). A session has at most `[limits] max_terminals_per_session` open at once. Every terminal's group is killed
when the agent releases it, when the session stops and when the daemon shuts down (through the stop path).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from compozy_base.home import user_umask
from sessions.acp import spawn, stragglers, workspace_fs
from sessions.acp.child_env import inherited_environment
from sessions.core.jsonobj import JsonObject
from sessions.core.offload import starting
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
    """A terminal request that cannot be served (unknown id, cwd outside the workspace, bad params, too many)."""


@dataclass
class Terminal:
    id: str
    command: list[str]
    process: spawn.OutputProcess
    limit: int
    mark: str  # its own mark (stragglers.TERMINAL_MARK_ENV)
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task[None] | None = None
    version: int = 0  # bumped by every change of `output`
    _redacted: tuple[int, str] = (-1, "")  # (the version it was made from, the redacted text)
    _redacting: asyncio.Future[str] | None = None

    def feed(self, chunk: bytes) -> None:
        self.output += chunk
        self.version += 1
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

    async def text(self) -> str:
        """The output as the agent may read it, redacted. Redacted off the loop, at most once per version, and by
        one redaction at a time: polls that come meanwhile wait for it rather than start their own."""
        while self._redacted[0] != self.version:
            if self._redacting is None or self._redacting.done():
                self._redacting = asyncio.ensure_future(self._redact(self.version, bytes(self.output)))
            await asyncio.shield(self._redacting)
            if self.process.returncode is None:
                break  # still running: what was redacted is current enough; the next poll sees more
        return self._redacted[1]

    async def _redact(self, version: int, raw: bytes) -> str:
        text = await asyncio.to_thread(_redacted, raw)
        self._redacted = (version, text)  # set as the task completes: a waiter never sees it done and stale
        return text


def _redacted(raw: bytes) -> str:
    return redact_text(raw.decode("utf-8", errors="replace"))


class Terminals:
    """A session's terminals, by id."""

    def __init__(self, roots: Sequence[Path], default_cwd: Path, env: Mapping[str, str] | None, *,
                 run_mark: Callable[[], str | None] = lambda: None,
                 confine: Callable[[Sequence[str]], list[str]] = list, most: int = 16) -> None:
        self._roots = list(roots)
        self._default_cwd = default_cwd
        self._env = {**inherited_environment(), **(env or {})}
        self._run_mark = run_mark  # the agent run's mark, read at each create: a reactivation starts a new run
        self._confine = confine
        self._most = most
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
        if len(self._terminals) >= self._most:
            raise TerminalRefused(f"this session has {len(self._terminals)} terminals open, the most it may "
                                  f"([limits] max_terminals_per_session): release one first")
        env = dict(self._env)
        for item in params.get("env") or []:
            if isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("value"), str):
                env[item["name"]] = item["value"]
        terminal_id = f"term-{next(self._ids)}"
        run_mark = self._run_mark()
        # Unique on the machine: two sessions' `term-1` must never name each other's processes.
        mark = f"{run_mark or 'no-run'}#{terminal_id}#{secrets.token_hex(6)}"
        # Set after the request's own variables: an agent cannot name a terminal out of its run.
        env[stragglers.TERMINAL_MARK_ENV] = mark
        if run_mark is not None:
            env[stragglers.MARK_ENV] = run_mark
        limit = params.get("outputByteLimit")
        limit = min(limit, OUTPUT_LIMIT_BYTES) if isinstance(limit, int) and limit >= 0 else OUTPUT_LIMIT_BYTES
        try:
            argv = await starting(self._confine, [command, *args])  # off the loop: the sandbox's paths are stat'ed
            process = await spawn.spawn_output(argv, cwd=cwd, env=env, umask=user_umask())
        except OSError as exc:
            raise TerminalRefused(f"cannot run {command!r}: {exc.strerror or exc}") from exc
        terminal = Terminal(terminal_id, [command, *args], process, limit, mark)
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
        # Whatever the command left in its group (a backgrounded child) goes with it, and what it started in a
        # session of its own (`setsid`), found by the terminal's mark (off the loop: /proc reads).
        _signal_group(terminal.process.pid, signal.SIGKILL)
        await asyncio.to_thread(stragglers.kill_marked, terminal.mark, name=stragglers.TERMINAL_MARK_ENV)
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
