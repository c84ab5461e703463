"""The ACP driver: one agent subprocess and the JSON-RPC connection to it, on the SDK's Connection.

Traps this module exists to avoid (each pinned by a test):
1. The agent runs in its own process group, and stop signals the whole group (agents spawn tools).
2. The agent gets our environment (less the daemon's own secrets) plus the provider's env; the SDK's spawn
   helper strips it.
3. stderr is drained continuously into a bounded tail; an unread PIPE blocks the agent at 64 KiB.
4. session/update is recorded in the transport's receive loop, synchronously and in arrival order: the
   SDK runs each notification handler in its own task (so handler order is not arrival order), and its
   observers deep-copy every message (a 10k/s ceiling). Requests and responses still go to the SDK.
5. Update variants the SDK does not know are kept raw (we never validate them through pydantic).
6. A connection that closes mid-prompt surfaces as TransportClosed, classified by the runtime. It is
   raised only once the process exit was seen, so the runtime's exit watcher has classified the death
   (with the turn still in flight) before the caller resumes. An agent that closes stdout but lives on
   is killed, idle or not: nothing could ever answer its session again, which would otherwise sit `active`.
7. The agent's exit is the process's own (a pidfd), not its pipes' closing: a grandchild that inherited stdout
   kept a dead agent's session `active`. Its group is killed when it exits.
8. What the agent sends is checked before the SDK sees it (a malformed response killed the SDK's receive
   loop): violations are reported to the runtime, lone surrogates replaced, lines over STDIO_LIMIT_BYTES
   dropped without being held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from acp.connection import Connection
from acp.exceptions import RequestError
from acp.meta import PROTOCOL_VERSION

from compozy_base.home import user_umask
from sessions.acp import spawn, stragglers
from sessions.acp.child_env import inherited_environment
from sessions.acp.transport import STDIO_LIMIT_BYTES, RecordingTransport, UpdateSink, ViolationSink
from sessions.core.jsonobj import JsonObject
from sessions.core.offload import starting
from sessions.store.folder import isoformat, utcnow

logger = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 64 * 1024
# Reference §8: SIGTERM the tree, then SIGKILL after the ACP driver stop timeout.
STOP_TIMEOUT_SECONDS = 5.0
# After the agent's stdout closes: how long it may take to exit before we kill its group. Longer than
# the 1 s stderr drain that `_wait_exit` allows after the exit.
CLOSED_EXIT_GRACE_SECONDS = 3.0

RequestHandler = Callable[[str, JsonObject], Awaitable[Any]]


class AgentNotFound(Exception):
    """The provider's executable does not exist or is not executable."""


class TransportClosed(Exception):
    """The agent's stdio closed while we were waiting on it."""


class AgentRequestError(Exception):
    """The agent answered a request with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        # The agent's own reason usually sits in `data`; operators need it in the failure summary.
        detail = data.get("details") or data.get("message") if isinstance(data, dict) else data
        suffix = f": {detail}" if detail else ""
        super().__init__(f"{method}: {message} (code {code}){suffix}")
        self.method = method
        self.code = code
        self.data = data


class StderrTail:
    """Keeps the last `limit` bytes of the agent's stderr; the drain never blocks on a consumer."""

    def __init__(self, limit: int = STDERR_TAIL_BYTES) -> None:
        self.limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0

    def feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        while self._size > self.limit and self._chunks:
            head = self._chunks[0]
            excess = self._size - self.limit
            if len(head) <= excess:
                self._chunks.popleft()
                self._size -= len(head)
            else:
                self._chunks[0] = head[excess:]
                self._size -= excess

    def text(self) -> str:
        return b"".join(self._chunks).decode("utf-8", errors="replace")


def agent_environment(extra: Mapping[str, str] | None) -> dict[str, str]:
    """The daemon's environment without the daemon's own secrets (`sessions/acp/child_env.py`), plus the provider's:
    the agents' API keys live in the environment."""
    env = inherited_environment()
    env.update(extra or {})
    return env


class AgentProcess:
    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str] | None,
        on_update: UpdateSink,
        on_request: RequestHandler,
        others_waiting: Callable[[], bool] | None = None,
        on_violation: ViolationSink | None = None,
        owner: str = "agent",
        kill_grace: float = STOP_TIMEOUT_SECONDS,
        closed_stdout_grace: float = CLOSED_EXIT_GRACE_SECONDS,
        confine: Callable[[Sequence[str]], list[str]] = list,
    ) -> None:
        self.command = list(command)
        # The argv actually spawned: `command` under the sandbox (sessions/acp/sandbox.py `wrap`), or as it is.
        self.confine = confine
        # `[session.stop] kill_grace` and `closed_stdout_grace` (compozy_base/config/loader.py `Timeouts`).
        self.kill_grace = kill_grace
        self.closed_stdout_grace = closed_stdout_grace
        self.owner = owner  # a session id: with the start time, the run's straggler mark (stragglers.py)
        self.cwd = cwd
        self.env = agent_environment(env)
        self.on_update = on_update
        self.on_request = on_request
        self.others_waiting = others_waiting
        self.on_violation = on_violation
        self.process: spawn.ChildProcess | None = None
        self.conn: Connection | None = None
        self.stderr = StderrTail()
        self.exited = asyncio.Event()
        self.started_at: str | None = None
        self.mark: str | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._wait_task: asyncio.Task[None] | None = None
        self._closed_task: asyncio.Task[None] | None = None
        # Set when the daemon killed an agent that closed its stdout and lived on: a transport failure, not a crash.
        self.killed_for_closed_stdout = False
        self.closed = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def returncode(self) -> int | None:
        return self.process.returncode if self.process else None

    async def start(self) -> None:
        self.started_at = started_at = isoformat(utcnow())
        self.mark = stragglers.mark(self.owner, started_at)
        try:
            argv = await starting(self.confine, self.command)  # off the loop: the sandbox's paths are stat'ed
            # Spawned on a start-up thread: a fork and exec on the loop held every session's stream (spawn.py).
            self.process = await spawn.spawn(
                argv, cwd=self.cwd, env={**self.env, stragglers.MARK_ENV: self.mark},
                umask=user_umask(),  # the daemon's own 077 would make the agent's workspace files private
                limit=STDIO_LIMIT_BYTES)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise AgentNotFound(f"cannot start agent {self.command[0]!r}: {exc.strerror or exc}") from exc
        assert self.process.stdin and self.process.stdout and self.process.stderr
        self._drain_task = asyncio.create_task(self._drain_stderr(self.process.stderr))
        self._wait_task = asyncio.create_task(self._wait_exit())
        self.conn = Connection(self._handle, RecordingTransport(
            self.process.stdout, self.process.stdin, self.on_update, self.others_waiting,
            on_violation=self.on_violation, on_eof=self._stdout_closed))

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        try:
            while chunk := await stream.read(65536):
                self.stderr.feed(chunk)
        except Exception:  # the agent's stderr is evidence only: its exit is still waited for
            logger.warning("could not read the stderr of agent %s", self.command[0], exc_info=True)

    async def _wait_exit(self) -> None:
        assert self.process
        await self._leader_gone()
        # Nothing the agent started in its group may outlive it, nor keep its pipes (and so its session) open.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.mark:  # and what it started outside its group (setsid): found by its mark, off the loop
            try:
                await asyncio.to_thread(stragglers.kill_marked, self.mark)
            except Exception:  # the session ends all the same; what survived is named in the log
                logger.warning("could not kill what agent %s started outside its group", self.command[0],
                               exc_info=True)
        # Let the drain read what the process wrote just before dying: it is the crash evidence.
        if self._drain_task:
            # The drain logs its own failures: only its time is up here.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._drain_task), 1.0)
        self.exited.set()

    async def _leader_gone(self) -> None:
        """Until the agent process itself has exited and been reaped, whoever holds its pipes: `Process.wait()`
        of asyncio (Python 3.11) also waited for its pipes to close, which a grandchild holding stdout delays for
        ever, and the session then read `active` with its agent long dead (spawn.py waits on a pidfd)."""
        assert self.process
        await self.process.wait()

    def _stdout_closed(self) -> None:
        """The agent's stdout reached EOF. An agent that lives on without it can never answer again: unless it
        exits within the grace, its group is killed, whether or not a request was waiting (an idle one used to
        read `healthy` until the next prompt failed)."""
        if self._closed_task is None and self.process is not None:
            self._closed_task = asyncio.ensure_future(self._reap_after_stdout_closed())

    async def _reap_after_stdout_closed(self) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.exited.wait(), self.closed_stdout_grace)
        if not self.exited.is_set() and self.process is not None and self.process.returncode is None:
            logger.warning("agent pid %s closed its stdout but kept running; killing its process group", self.pid)
            self.killed_for_closed_stdout = True
            self.signal_group(signal.SIGKILL)

    async def _handle(self, method: str, params: Any, is_notification: bool) -> Any:
        if is_notification:
            return None
        return await self.on_request(method, params if isinstance(params, dict) else {})

    async def request(self, method: str, params: JsonObject, timeout: float | None = None) -> Any:
        if self.conn is None:
            raise TransportClosed("agent connection is not open")
        try:
            coro = self.conn.send_request(method, params)
            return await (asyncio.wait_for(coro, timeout) if timeout else coro)
        except RequestError as exc:
            raise AgentRequestError(method, exc.code, str(exc), getattr(exc, "data", None)) from exc
        except (ConnectionError, BrokenPipeError, ConnectionResetError) as exc:
            await self._settle_exit()
            raise TransportClosed(f"{method}: agent connection closed") from exc

    async def _settle_exit(self) -> None:
        """The connection closed under a request: wait for the process to exit before reporting it.

        Waiters on `exited` wake in FIFO order and the runtime's exit watcher registered at start, so it
        runs before this request's caller resumes. A process that closed stdout but lives on is killed by
        `_reap_after_stdout_closed`; a connection lost for another reason starts the same wait here.
        """
        if self.process is None:
            return
        self._stdout_closed()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.exited.wait(), self.closed_stdout_grace + self.kill_grace)
        await asyncio.sleep(0)

    async def notify(self, method: str, params: JsonObject) -> None:
        if self.conn is None:
            return
        with contextlib.suppress(ConnectionError, BrokenPipeError, ConnectionResetError, RuntimeError):
            await self.conn.send_notification(method, params)

    async def initialize(self, timeout: float = 30.0, *, terminal: bool = False) -> JsonObject:
        """ACP initialize; `terminal` offers client terminals (only when the permission policy lets commands run)."""
        result = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": terminal,
                                       "elicitation": {"form": {}}},  # a person answers: runtime/elicitation_desk.py
                "clientInfo": {"name": "compozy", "title": "Compozy", "version": "0.1.0"},
            },
            timeout=timeout,
        )
        return result if isinstance(result, dict) else {}

    def signal_group(self, sig: int) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    async def shutdown(self, grace: float = 1.0, stop_timeout: float | None = None) -> int | None:
        """Close stdin (SDK agents exit on EOF), then SIGTERM the group, then SIGKILL it."""
        if self.process is None:
            return None
        stop_timeout = self.kill_grace if stop_timeout is None else stop_timeout
        if self.process.returncode is None and self.process.stdin:
            try:
                self.process.stdin.close()
            except Exception:  # the signals below stop the agent without its EOF
                logger.warning("could not close the stdin of agent %s", self.command[0], exc_info=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.exited.wait(), grace)
        if self.process.returncode is None:
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.exited.wait(), stop_timeout)
        if self.process.returncode is None:
            self.signal_group(signal.SIGKILL)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.exited.wait(), stop_timeout)
        else:
            # The leader is gone (so signal_group would do nothing); no tool it spawned may outlive it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        await self.close_connection()
        return self.process.returncode

    async def close_connection(self) -> None:
        if self.conn is not None and not self.closed.is_set():
            self.closed.set()
            try:
                await asyncio.wait_for(self.conn.close(), 2.0)
            except Exception:  # the process is gone or going: its connection has nothing left to deliver
                logger.warning("could not close the connection to agent %s", self.command[0], exc_info=True)
