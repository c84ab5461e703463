"""A minimal SSE client for the integration tests (httpx streaming, frames parsed as the spec says)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from tests.conftest import Daemon


@dataclass
class Frame:
    id: str | None
    event: str
    data: dict[str, Any]


def frames(response: httpx.Response) -> Iterator[Frame]:
    """A minimal SSE parser (comments such as `: keepalive` are skipped)."""
    event_id: str | None = None
    event, data = "message", []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield Frame(event_id, event, json.loads("\n".join(data)))
            event_id, event, data = None, "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


def open_stream(client: httpx.Client, path: str, params: dict[str, Any] | None = None,
                last_event_id: int | None = None) -> Any:
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    return client.stream("GET", path, params=params or {}, headers=headers, timeout=httpx.Timeout(60.0))


def watch_raw(daemon: Daemon, path: str, params: dict[str, Any], last_event_id: int | None,
              until: Any, connected: threading.Event, out: list[Frame]) -> None:
    """Read frames into `out` until `until(out)` is true; `connected` is set once the headers arrived."""
    with daemon.client() as client, open_stream(client, path, params, last_event_id) as response:
        assert response.status_code == 200
        connected.set()
        for frame in frames(response):
            out.append(frame)
            if until(out):
                return


class RawStream:
    """An event stream read off a raw HTTP/1.1 socket (the tests that need a small receive window or a client
    that stops reading). daphne sends a streamed body chunked, and a chunk boundary can fall inside a frame
    (`id: 28` + `\\r\\n1000\\r\\n` + `9`), so the body is de-chunked before anyone looks for frames."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf, self.body = sock, b"", b""

    def _recv(self) -> None:
        data = self.sock.recv(1 << 20)
        assert data, "the connection closed before the stream ended"
        self.buf += data

    def head(self) -> bytes:
        """The status line and headers; what follows them stays for `read_until`."""
        while b"\r\n\r\n" not in self.buf:
            self._recv()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return head

    def read_until(self, marker: bytes) -> bytes:
        """The de-chunked body, read until `marker` appears in it."""
        scanned = 0
        while marker not in self.body[scanned:]:
            scanned = max(0, len(self.body) - len(marker))
            while b"\r\n" not in self.buf:
                self._recv()
            size = int(self.buf.split(b"\r\n", 1)[0].split(b";")[0], 16)
            assert size, "the stream ended before the marker"
            start = self.buf.index(b"\r\n") + 2
            while len(self.buf) < start + size + 2:
                self._recv()
            self.body += self.buf[start:start + size]
            self.buf = self.buf[start + size + 2:]
        return self.body

    def ids(self) -> list[int]:
        return [int(line[3:]) for line in self.body.split(b"\n")
                if line.startswith(b"id:") and line[3:].strip().isdigit()]
