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


class _NotFinite:
    """JSON has no NaN or Infinity (RFC 8259), but Python's scanner reads `NaN`, `Infinity`, `-Infinity` and a number
    that overflows (`1e400`) as floats no JSON encoder may write back: a NaN cost made `/api/sessions` unreadable to
    the browser. The scanner reads each as null instead, counted here (the loop's thread only) so the message
    that held one is recorded as a violation, and the rest of it still does its work."""

    read = 0

    @classmethod
    def constant(cls, name: str) -> None:
        cls.read += 1
        return None

    @classmethod
    def number(cls, text: str) -> float | None:
        value = float(text)
        if value - value == 0:  # finite (inf - inf is nan): the common case, one subtraction
            return value
        cls.read += 1
        return None


# The C scanner: one object from a str, no wrapper (typeshed types make_scanner as a class taking its context).
_scan_json: Any = json.scanner.make_scanner(json.JSONDecoder(  # type: ignore[arg-type]
    parse_constant=_NotFinite.constant, parse_float=_NotFinite.number))


class TappedReader(asyncio.StreamReader):
    """The agent's stdout. While nothing is buffered, each read the pipe delivers is first offered to `tap`, which
    handles what it can at once and returns the rest (from the first line it left) for the buffer and `receive`.

    Why: an agent streaming at a model's pace sends one line per read, and through the buffer each one woke the
    receive task and took a buffered read (a future, a task step, a copy). Capacity at 200 sessions, three
    alternating pairs: 170 → 164 µs of daemon CPU a chunk (bench/README).

    "Nothing is buffered" is `unread == 0`: the bytes this reader buffered, less those its one consumer (the
    transport's `_fill`, through the public `read`) reported with `consumed`. StreamReader's own count of them
    is its private `_buffer`, which this once read; the count costs an addition per buffered read. A reader
    read some other way would keep `unread` above 0: it would only stop tapping, never reorder a line."""

    tap: Callable[[bytes], bytes] | None = None
    unread = 0

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        if isinstance(data, bytes):  # what the pipe's protocol feeds
            tap = self.tap
            if tap is not None and not self.unread:
                data = tap(data)
                if not data:
                    return
            chunk = data
        else:
            chunk = bytes(data)  # buffered as StreamReader would, and counted
        super().feed_data(chunk)
        self.unread += len(chunk)

    def consumed(self, count: int) -> None:
        """`count` bytes were read out of the buffer."""
        self.unread -= count


class RecordingTransport:
    """The SDK's NDJSON stdio framing, with session/update notifications peeled off for the recorder.

    Lines are read in bulk: one `read` takes what the pipe holds, one decode and one split serve all its lines,
    and each line is parsed by the JSON scanner directly. The SDK's per-line path (a `readuntil` and a
    `json.loads` of bytes per message) cost more than everything the daemon does with a streamed chunk.

    A message transport as the SDK's `Connection(handler, transport)` takes one (send, receive, close), written
    out rather than inherited from the SDK's own NDJSON transport, which lives in a private module
    (`acp._transport`); sending goes through the SDK's public `acp.task.MessageSender`, as that one's does."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, on_update: UpdateSink,
                 others_waiting: Callable[[], bool] | None = None, on_violation: ViolationSink | None = None,
                 on_eof: Callable[[], None] | None = None) -> None:
        self._supervisor = TaskSupervisor(source="compozy.RecordingTransport")
        self._reader = reader
        self._sender = MessageSender(writer, self._supervisor)
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
        self._tapped = reader if isinstance(reader, TappedReader) else None
        if self._tapped is not None:
            self._tapped.tap = self._tap

    async def send(self, message: JsonObject) -> None:
        if "method" in message and "id" in message:
            self._asked.add(message["id"])  # before the write: the answer cannot come first
        await self._sender.send(message)

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
            message, odd = self._parse(line) if line else (None, False)
            if message is not None:
                if message.get("method") != "session/update" or "id" in message:
                    return data[start:]  # parsed again by `receive`: requests and responses are rare
                if odd:
                    self._not_finite(message)
                self._record_update(message)
            start = cut + 1
        return b""

    def _parsed(self, line: str) -> JsonObject | None:
        """The line's one JSON object, or None (a violation) when it holds anything else."""
        message, odd = self._parse(line)
        if odd and message is not None:
            self._not_finite(message)
        return message

    def _parse(self, line: str) -> tuple[JsonObject | None, bool]:
        """(the line's one JSON object or None, whether a NaN or Infinity in it was read as null)."""
        before = _NotFinite.read
        try:
            message, end = _scan_json(line, 0)
            if end != len(line) or not isinstance(message, dict):
                raise ValueError
        except (ValueError, RecursionError, StopIteration):  # the scanner's StopIteration: no value at all
            self._violation(f"a line that is not one JSON object ({len(line)} characters): {line[:80]!r}")
            return None, False
        if may_hold_surrogate(line):
            message = scrub(message)
        return message, _NotFinite.read != before

    def _not_finite(self, message: JsonObject) -> None:
        method = message.get("method")
        what = f"{method!r:.60}" if method is not None else f"the response to request {message.get('id')!r:.40}"
        params = message.get("params")
        update = params.get("update") if method == "session/update" and isinstance(params, dict) else None
        if isinstance(update, dict) and update.get("sessionUpdate"):
            what += f" ({update['sessionUpdate']!r:.40})"
        self._violation(f"{what} held NaN or Infinity, which JSON does not have: read as null")

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
        if self._tapped is not None:
            self._tapped.consumed(len(data))
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
        if self._tapped is not None:
            self._tapped.tap = None  # a closed connection records nothing more, as its stopped receive loop would
        try:
            await self._sender.close()
        finally:
            await self._supervisor.shutdown()
