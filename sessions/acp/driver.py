"""The ACP driver: one agent subprocess and the JSON-RPC connection to it, on the SDK's Connection.

Traps this module exists to avoid (each pinned by a test):
1. The agent runs in its own process group, and stop signals the whole group (agents spawn tools).
2. The agent gets our full environment plus the provider's env; the SDK's spawn helper strips it.
3. stderr is drained continuously into a bounded tail; an unread PIPE blocks the agent at 64 KiB.
4. session/update is recorded in the transport's receive loop, synchronously and in arrival order: the
   SDK runs each notification handler in its own task (so handler order is not arrival order), and its
   observers deep-copy every message (a 10k/s ceiling). Requests and responses still go to the SDK.
5. Update variants the SDK does not know are kept raw (we never validate them through pydantic).
6. A connection that closes mid-prompt surfaces as TransportClosed, classified by the runtime. It is
   raised only once the process exit was seen, so the runtime's exit watcher has classified the death
   (with the turn still in flight) before the caller resumes. An agent that closes stdout but lives on
   is killed: nothing could ever answer its session again, which would otherwise sit `active` forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import json.scanner
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from acp._transport import NdjsonTransport
from acp.connection import Connection
from acp.exceptions import RequestError
from acp.meta import PROTOCOL_VERSION
from acp.task import MessageSender, TaskSupervisor

from compozy_site.home import user_umask

logger = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 64 * 1024
# Generous line limit: agents send whole file contents and tool outputs as single JSON lines.
STDIO_LIMIT_BYTES = 50 * 1024 * 1024
# Reference §8: SIGTERM the tree, then SIGKILL after the ACP driver stop timeout.
STOP_TIMEOUT_SECONDS = 5.0
# After the agent's stdout closes: how long it may take to exit before we kill its group. Longer than
# the 1 s stderr drain that `_wait_exit` allows after the exit.
CLOSED_EXIT_GRACE_SECONDS = 3.0

UpdateSink = Callable[[dict[str, Any]], None]
RequestHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]


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


# Updates handled between hand-backs to the loop. Measured: a burst held the shared loop for 17 ms p99 (others'
# ticks waited 37 ms); yielding every 256 lines cost the bare client no measurable rate, and 64 keeps one
# stretch under half a millisecond at ~7 µs an update.
YIELD_EVERY_UPDATES = 64
# A burst holds the GIL along with the loop: a yield (a zero-timeout select) releases it too briefly for another
# thread to take it, so other sessions' store threads got it only by forced switches (5 ms each, several per
# commit) and their ticks waited behind a 20k-chunk turn. Once per BREATHE_EVERY of one burst, while another
# session's commit waits, the receive loop sleeps instead (the selector rounds up to 1 ms): their writers commit
# in the gap. Measured (bench latency, 5 runs each): ticks beside the burst p99 35-59 → 13-23 ms; a lone burst
# never pauses, so ingest is unchanged.
BREATHE_EVERY = 0.005
BREATHE_SECONDS = 0.0005


# One read takes what the pipe's reader holds, up to this; lines are split and parsed from it in one pass.
READ_BYTES = 1024 * 1024
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # the C scanner: one object from a str, no wrapper


class RecordingTransport(NdjsonTransport):
    """The SDK's NDJSON stdio framing, with session/update notifications peeled off for the recorder.

    Lines are read in bulk: one `read` takes what the pipe holds, one decode and one split serve all its lines,
    and each line is parsed by the JSON scanner directly. The SDK's per-line path (a `readuntil` and a
    `json.loads` of bytes per message) cost more than everything the daemon does with a streamed chunk."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, on_update: UpdateSink,
                 others_waiting: Callable[[], bool] | None = None) -> None:
        self._supervisor = TaskSupervisor(source="compozy.RecordingTransport")
        super().__init__(reader, MessageSender(writer, self._supervisor))
        self._on_update = on_update
        self._lines: deque[str] = deque()  # complete lines read and not yet handled, in arrival order
        self._partial: list[bytes] = []  # the reads holding a line whose newline has not arrived
        self._eof = False
        self._others_waiting = others_waiting
        self._breathed = 0.0  # time.monotonic() of the last breath

    async def receive(self) -> dict[str, Any] | None:
        handled = 0
        lines = self._lines
        while True:
            if not lines:
                if self._eof or not await self._fill():
                    return None
                continue
            line = lines.popleft().strip()
            if not line:
                continue
            try:
                message, end = _scan_json(line, 0)
                if end != len(line) or not isinstance(message, dict):
                    raise ValueError(f"not one JSON object ({len(line)} characters)")
            except Exception:
                logger.exception("agent sent a line that is not a JSON-RPC message: %.200r", line)
                continue
            if message.get("method") == "session/update" and "id" not in message:
                params = message.get("params")
                if isinstance(params, dict):
                    try:
                        self._on_update(params)
                    except Exception:
                        logger.exception("recording a session/update failed")
                handled += 1
                if handled % YIELD_EVERY_UPDATES == 0:
                    # A full pipe read returns without waiting, so a fast agent's burst would otherwise hold the
                    # loop every session and stream shares: let the others run.
                    await asyncio.sleep(self._pause())
                continue
            return message  # what follows it stays queued: requests and responses keep their place in the order

    def _pause(self) -> float:
        """0 (a plain yield), or BREATHE_SECONDS once per BREATHE_EVERY while another session's commit waits."""
        if self._others_waiting is None:
            return 0
        now = time.monotonic()
        if now - self._breathed < BREATHE_EVERY or not self._others_waiting():
            return 0
        self._breathed = now
        return BREATHE_SECONDS

    async def _fill(self) -> bool:
        """Read what the pipe holds into complete lines; False at end of stream with nothing left."""
        data = await self._reader.read(READ_BYTES)
        if not data:
            self._eof = True
            tail, self._partial = b"".join(self._partial), []
            if tail.strip():
                self._lines.append(tail.decode("utf-8", errors="replace"))  # a last line without its newline
                return True
            return False
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial.append(data)  # joined once its newline comes: a long line is copied once, not per read
            return True
        complete = b"".join([*self._partial, data[:cut]]) if self._partial else data[:cut]
        self._partial = [data[cut + 1:]] if cut + 1 < len(data) else []
        # Complete lines only: a read may end inside a multi-byte character, never inside a finished line.
        self._lines.extend(complete.decode("utf-8", errors="replace").split("\n"))
        return True

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self._supervisor.shutdown()


def agent_environment(extra: Mapping[str, str] | None) -> dict[str, str]:
    """Full daemon environment plus the provider's; API keys live in the environment."""
    env = dict(os.environ)
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
    ) -> None:
        self.command = list(command)
        self.cwd = cwd
        self.env = agent_environment(env)
        self.on_update = on_update
        self.on_request = on_request
        self.others_waiting = others_waiting
        self.process: asyncio.subprocess.Process | None = None
        self.conn: Connection | None = None
        self.stderr = StderrTail()
        self.exited = asyncio.Event()
        self.started_at: str | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._wait_task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def returncode(self) -> int | None:
        return self.process.returncode if self.process else None

    async def start(self) -> None:
        from sessions.store.folder import isoformat, utcnow

        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(self.cwd),
                env=self.env,
                start_new_session=True,
                limit=STDIO_LIMIT_BYTES,
                umask=user_umask(),  # the daemon's own 077 would make the agent's workspace files private
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise AgentNotFound(f"cannot start agent {self.command[0]!r}: {exc.strerror or exc}") from exc
        self.started_at = isoformat(utcnow())
        assert self.process.stdin and self.process.stdout and self.process.stderr
        self._drain_task = asyncio.create_task(self._drain_stderr(self.process.stderr))
        self._wait_task = asyncio.create_task(self._wait_exit())
        self.conn = Connection(self._handle, RecordingTransport(self.process.stdout, self.process.stdin,
                                                                self.on_update, self.others_waiting))

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        with contextlib.suppress(Exception):
            while chunk := await stream.read(65536):
                self.stderr.feed(chunk)

    async def _wait_exit(self) -> None:
        assert self.process
        await self.process.wait()
        # Let the drain read what the process wrote just before dying: it is the crash evidence.
        if self._drain_task:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._drain_task), 1.0)
        self.exited.set()

    async def _handle(self, method: str, params: Any, is_notification: bool) -> Any:
        if is_notification:
            return None
        return await self.on_request(method, params if isinstance(params, dict) else {})

    async def request(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
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
        runs before this request's caller resumes. A process that closed stdout but lives on can never
        answer again: kill its group, or its session would sit `active` forever.
        """
        if self.process is None:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.exited.wait(), CLOSED_EXIT_GRACE_SECONDS)
        if not self.exited.is_set():
            logger.warning("agent pid %s closed its stdout but kept running; killing its process group", self.pid)
            self.signal_group(signal.SIGKILL)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.exited.wait(), STOP_TIMEOUT_SECONDS)
        await asyncio.sleep(0)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if self.conn is None:
            return
        with contextlib.suppress(ConnectionError, BrokenPipeError, ConnectionResetError, RuntimeError):
            await self.conn.send_notification(method, params)

    async def initialize(self, timeout: float = 30.0) -> dict[str, Any]:
        result = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False},
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

    async def shutdown(self, grace: float = 1.0, stop_timeout: float = STOP_TIMEOUT_SECONDS) -> int | None:
        """Close stdin (SDK agents exit on EOF), then SIGTERM the group, then SIGKILL it."""
        if self.process is None:
            return None
        if self.process.returncode is None and self.process.stdin:
            with contextlib.suppress(Exception):
                self.process.stdin.close()
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
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.conn.close(), 2.0)
