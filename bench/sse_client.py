"""A small raw-socket SSE client (asyncio streams, HTTP/1.1, chunked decoding).

httpx costs several microseconds per line; on a 2-core box the client shares CPU with the daemon and the
agent, so the viewers here do the least work possible: split frames, read `id:`/`event:`, keep `data:` bytes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass


class StreamError(RuntimeError):
    pass


@dataclass(slots=True)
class Frame:
    id: int | None
    event: str
    data: bytes


class ChunkedDecoder:
    """Incremental `Transfer-Encoding: chunked` decoder."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._remaining = 0
        self._need_crlf = False
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        out = bytearray()
        buf = self._buf
        while not self.done:
            if self._remaining:
                take = min(self._remaining, len(buf))
                if not take:
                    break
                out += buf[:take]
                del buf[:take]
                self._remaining -= take
                if self._remaining:
                    break
                self._need_crlf = True
            if self._need_crlf:
                if len(buf) < 2:
                    break
                del buf[:2]
                self._need_crlf = False
            end = buf.find(b"\r\n")
            if end < 0:
                break
            size = int(bytes(buf[:end]).split(b";", 1)[0], 16)
            del buf[: end + 2]
            if size == 0:
                self.done = True
                break
            self._remaining = size
        return bytes(out)


def parse_frame(block: bytes) -> Frame | None:
    """One SSE block (without the blank line); None for comments (`: keepalive`)."""
    event_id: int | None = None
    event = "message"
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"data: "):
            data.append(line[6:])
        elif line.startswith(b"id: "):
            event_id = int(line[4:])
        elif line.startswith(b"event: "):
            event = line[7:].decode()
    if not data and event_id is None and event == "message":
        return None
    return Frame(event_id, event, b"\n".join(data))


class SSEStream:
    """GET an SSE URL; iterate batches of frames, each batch stamped with its receive time (time.time_ns)."""

    def __init__(self, host: str, port: int, path: str, last_event_id: int | None = None,
                 read_size: int = 256 * 1024, token: str | None = None) -> None:
        self.host = host
        self.token = token  # the daemon's API token; the bare daphne baseline needs none
        self.port = port
        self.path = path
        self.last_event_id = last_event_id
        self.read_size = read_size
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._chunked: ChunkedDecoder | None = None
        self.bytes_read = 0

    async def connect(self) -> None:
        """Open the connection and read the response headers (so the stream is live when this returns)."""
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        headers = [f"GET {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Accept: text/event-stream",
                   "Cache-Control: no-cache"]
        if self.last_event_id is not None:
            headers.append(f"Last-Event-ID: {self.last_event_id}")
        if self.token is not None:
            headers.append(f"Authorization: Bearer {self.token}")
        self._writer.write(("\r\n".join(headers) + "\r\n\r\n").encode())
        await self._writer.drain()
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or parts[1] != "200":
            body = await asyncio.wait_for(self._reader.read(4096), 5)
            raise StreamError(f"GET {self.path}: {status_line} {body[:500]!r}")
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
        if fields.get("transfer-encoding", "").lower() == "chunked":
            self._chunked = ChunkedDecoder()

    async def batches(self) -> AsyncIterator[tuple[int, list[Frame]]]:
        """(receive time ns, frames parsed from one socket read); ends when the server closes the body."""
        assert self._reader is not None
        pending = b""
        while True:
            data = await self._reader.read(self.read_size)
            received = time.time_ns()
            if not data:
                return
            self.bytes_read += len(data)
            if self._chunked is not None:
                data = self._chunked.feed(data)
            pending += data
            blocks = pending.split(b"\n\n")
            pending = blocks.pop()
            frames = [f for f in (parse_frame(b) for b in blocks if b) if f is not None]
            if frames:
                yield received, frames
            if self._chunked is not None and self._chunked.done:
                return

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except (ConnectionError, OSError):
                pass
            self._writer = None


class SequenceChecker:
    """Asserts strictly consecutive `id:` values after a starting cursor; records gaps and duplicates."""

    def __init__(self, after: int) -> None:
        self.expected = after + 1
        self.count = 0
        self.gaps: list[tuple[int, int]] = []  # (expected, got)
        self.duplicates: list[int] = []

    def see(self, seq: int) -> None:
        self.count += 1
        if seq == self.expected:
            self.expected += 1
        elif seq < self.expected:
            self.duplicates.append(seq)
        else:
            self.gaps.append((self.expected, seq))
            self.expected = seq + 1

    @property
    def ok(self) -> bool:
        return not self.gaps and not self.duplicates

    def describe(self) -> str:
        if self.ok:
            return f"{self.count} frames, consecutive"
        return f"gaps {self.gaps[:5]} (total {len(self.gaps)}), duplicates {self.duplicates[:5]} " \
               f"(total {len(self.duplicates)})"


class ChunkChecker:
    """The scripted agent's `stream` chunks (`c0 c1 …`) arrive complete and in order. Count chunk texts, not
    rows or frames: the store merges the adjacent chunks of one write batch into one row."""

    def __init__(self) -> None:
        self.count = 0
        self.error: str | None = None

    def feed(self, text: str) -> None:
        if self.error is not None:
            return
        pieces = text.count(" ")
        expected = "".join(f"c{i} " for i in range(self.count, self.count + pieces))
        if text != expected:
            at = next((i for i, (a, b) in enumerate(zip(text, expected, strict=False)) if a != b),
                      min(len(text), len(expected)))
            self.error = (f"after {self.count} chunks, text differs at char {at}: got {text[at:at + 40]!r}, "
                          f"want {expected[at:at + 40]!r}")
            return
        self.count += pieces

    def ok(self, total: int) -> bool:
        return self.error is None and self.count == total

    def describe(self, total: int) -> str:
        return self.error or f"{self.count:,} of {total:,} chunks, in order"
