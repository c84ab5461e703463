"""The agent's stdout, read as the SDK's NDJSON framing, with session/update notifications peeled off for the
recorder in arrival order, and every message checked before the SDK sees it (driver.py lists the traps)."""

from __future__ import annotations

import asyncio
import json
import json.scanner
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, SupportsIndex

from acp._transport import NdjsonTransport
from acp.task import MessageSender, TaskSupervisor

from sessions.core.jsonobj import JsonObject
from sessions.store.clean import may_hold_surrogate, scrub

logger = logging.getLogger(__name__)

# Generous line limit: agents send whole file contents and tool outputs as single JSON lines.
STDIO_LIMIT_BYTES = 50 * 1024 * 1024

UpdateSink = Callable[[JsonObject], None]
ViolationSink = Callable[[str], None]

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
# A pipe read of at most this many whole lines, with nothing queued before it, is handled as it arrives (`_tap`):
# short enough that it holds the loop no longer than a yield's stretch would.
TAP_LINES = 16
# The C scanner: one object from a str, no wrapper (typeshed types make_scanner as a class taking its context).
_scan_json: Any = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


class TappedReader(asyncio.StreamReader):
    """The agent's stdout. While nothing is buffered, each read the pipe delivers is first offered to `tap`, which
    handles what it can at once and returns the rest (from the first line it left) for the buffer and `receive`.

    Why: an agent streaming at a model's pace sends one line per read, and through the buffer each one woke the
    receive task and took a buffered read (a future, a task step, a copy). Capacity at 200 sessions, three
    alternating pairs: 170 → 164 µs of daemon CPU a chunk (bench/README)."""

    tap: Callable[[bytes], bytes] | None = None

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        tap = self.tap
        # The pipe's protocol feeds bytes; `_buffer` is StreamReader's own.
        if tap is not None and isinstance(data, bytes) and not self._buffer:  # type: ignore[attr-defined]
            data = tap(data)
            if not data:
                return
        super().feed_data(data)


class RecordingTransport(NdjsonTransport):
    """The SDK's NDJSON stdio framing, with session/update notifications peeled off for the recorder.

    Lines are read in bulk: one `read` takes what the pipe holds, one decode and one split serve all its lines,
    and each line is parsed by the JSON scanner directly. The SDK's per-line path (a `readuntil` and a
    `json.loads` of bytes per message) cost more than everything the daemon does with a streamed chunk."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, on_update: UpdateSink,
                 others_waiting: Callable[[], bool] | None = None, on_violation: ViolationSink | None = None,
                 on_eof: Callable[[], None] | None = None) -> None:
        self._supervisor = TaskSupervisor(source="compozy.RecordingTransport")
        super().__init__(reader, MessageSender(writer, self._supervisor))
        self._on_update = on_update
        self._on_violation = on_violation
        self._on_eof = on_eof
        self._lines: deque[str] = deque()  # complete lines read and not yet handled, in arrival order
        self._partial: list[bytes] = []  # the reads holding a line whose newline has not arrived
        self._partial_bytes = 0
        self._skipping = False  # inside a line over STDIO_LIMIT_BYTES: dropped up to its newline
        self._eof = False
        self._others_waiting = others_waiting
        self._breathed = 0.0  # time.monotonic() of the last breath
        # Ids of our requests not answered yet (one given up on stays: its late answer is no violation). The SDK
        # drops a response it cannot match without a word, and the request the agent meant to answer then waits.
        self._asked: set[int | str] = set()
        if isinstance(reader, TappedReader):
            reader.tap = self._tap

    async def send(self, message: JsonObject) -> None:
        if "method" in message and "id" in message:
            self._asked.add(message["id"])  # before the write: the answer cannot come first
        await super().send(message)

    async def receive(self) -> JsonObject | None:
        handled = 0
        lines = self._lines
        while True:
            if not lines:
                if self._eof or not await self._fill():
                    return None
                continue
            line = lines.popleft().strip()
            message = self._parsed(line) if line else None
            if message is None:
                continue
            if message.get("method") == "session/update" and "id" not in message:
                self._record_update(message)
                handled += 1
                if handled % YIELD_EVERY_UPDATES == 0:
                    # A full pipe read returns without waiting, so a fast agent's burst would otherwise hold the
                    # loop every session and stream shares: let the others run.
                    await asyncio.sleep(self._pause())
                continue
            message = self._checked(message)
            if message is not None:
                return message  # what follows it stays queued: requests and responses keep their place in the order

    def _tap(self, data: bytes) -> bytes:
        """A few whole lines read with nothing queued before them: their updates recorded now, in order; returned
        (for `receive`) is everything from the first message that is not an update, so requests and responses
        keep their place. Anything else (a partial line, a burst, a read while lines wait) is returned whole."""
        if (self._lines or self._partial or self._skipping or not data.endswith(b"\n")
                or data.count(b"\n") > TAP_LINES):
            return data
        start = 0
        while start < len(data):
            cut = data.index(b"\n", start)
            line = data[start:cut].decode("utf-8", errors="replace").strip()
            message = self._parsed(line) if line else None
            if message is not None:
                if message.get("method") != "session/update" or "id" in message:
                    return data[start:]  # parsed again by `receive`: requests and responses are rare
                self._record_update(message)
            start = cut + 1
        return b""

    def _parsed(self, line: str) -> JsonObject | None:
        """The line's one JSON object, or None (a violation) when it holds anything else."""
        try:
            message, end = _scan_json(line, 0)
            if end != len(line) or not isinstance(message, dict):
                raise ValueError
        except (ValueError, RecursionError, StopIteration):  # the scanner's StopIteration: no value at all
            self._violation(f"a line that is not one JSON object ({len(line)} characters): {line[:80]!r}")
            return None
        if may_hold_surrogate(line):
            message = scrub(message)
        return message

    def _record_update(self, message: JsonObject) -> None:
        """A `session/update` notification: recorded here, never handed to the SDK."""
        params = message.get("params")
        if isinstance(params, dict):
            try:
                self._on_update(params)
            except Exception:
                logger.exception("recording a session/update failed")
        else:
            self._violation("a session/update whose params are not an object")

    def _checked(self, message: JsonObject) -> JsonObject | None:
        """A message the SDK can handle, or None. A response with an id the SDK cannot look up (a list) killed its
        receive loop, and an `error` that is not an object left the prompt it answered waiting forever: the first
        is dropped, the second becomes a proper error, so the request it answers fails instead of hanging. A
        response to nothing we asked is dropped as a violation (the SDK dropped it unseen)."""
        if "method" in message:
            if isinstance(message["method"], str):
                return message
            self._violation(f"a message whose method is not a string: {message['method']!r:.80}")
            return None
        ident = message.get("id")
        if not isinstance(ident, int | str) or isinstance(ident, bool):
            self._violation(f"a message that is neither a request, a notification nor a response: {message!r:.120}")
            return None
        if ident not in self._asked:
            self._violation(f"a response to request {ident!r:.40}, which was never sent or was already answered")
            return None
        self._asked.discard(ident)
        if "error" in message:
            error = message["error"]
            if not (isinstance(error, dict) and isinstance(error.get("code"), int)
                    and isinstance(error.get("message"), str)):
                self._violation(f"response {ident!r} carries a malformed error: {error!r:.120}")
                message = {**message, "error": {"code": -32603, "message": f"malformed error from the agent: "
                                                                         f"{error!r:.200}"}}
        elif "result" not in message:
            self._violation(f"response {ident!r} has neither a result nor an error")
            message = {**message, "error": {"code": -32603, "message": "response without a result or an error"}}
        return message

    def _violation(self, what: str) -> None:
        if self._on_violation is None:
            logger.warning("agent protocol violation: %s", what)
            return
        try:
            self._on_violation(what)
        except Exception:
            logger.exception("reporting a protocol violation failed")

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
            if self._on_eof is not None:
                self._on_eof()
            tail, self._partial, self._partial_bytes = b"".join(self._partial), [], 0
            if tail.strip() and not self._skipping:
                self._lines.append(tail.decode("utf-8", errors="replace"))  # a last line without its newline
                return True
            return False
        if self._skipping:
            first = data.find(b"\n")
            if first < 0:
                return True
            self._skipping = False
            data = data[first + 1:]
            if not data:
                return True
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial.append(data)  # joined once its newline comes: a long line is copied once, not per read
            self._partial_bytes += len(data)
            if self._partial_bytes > STDIO_LIMIT_BYTES:
                # Never held whole: a 300 MB line once took the daemon past 1 GB and stalled every stream.
                self._partial, self._partial_bytes, self._skipping = [], 0, True
                self._violation(f"a line over {STDIO_LIMIT_BYTES // (1024 * 1024)} MiB was dropped")
            return True
        complete = b"".join([*self._partial, data[:cut]]) if self._partial else data[:cut]
        self._partial = [data[cut + 1:]] if cut + 1 < len(data) else []
        self._partial_bytes = len(data) - cut - 1
        # Complete lines only: a read may end inside a multi-byte character, never inside a finished line.
        self._lines.extend(complete.decode("utf-8", errors="replace").split("\n"))
        return True

    async def close(self) -> None:
        if isinstance(self._reader, TappedReader):
            self._reader.tap = None  # a closed connection records nothing more, as its stopped receive loop would
        try:
            await super().close()
        finally:
            await self._supervisor.shutdown()
