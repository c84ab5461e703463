"""A real webhook receiver for the tests: a stdlib HTTP server on loopback, in a thread of the test process.

It records every POST (headers, raw body and when it arrived), verifies nothing itself (the tests do, as a user's
receiver would), and answers with `status` (200 unless a test says otherwise). `start()` may come after the daemon
sent its first attempts: the port is reserved up front and nothing listens on it until then, so those attempts are
refused. `Trickler` is the hostile one: it reads each request, then answers a byte at a time and never finishes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import select
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = 0.0  # time.time() when it arrived

    @property
    def payload(self) -> dict[str, Any]:
        return dict(json.loads(self.body))

    def signed_with(self, secret: str) -> bool:
        """The check a receiver runs (README: "Verifying a webhook")."""
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.headers.get("x-compozy-signature", ""))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Receiver:
    def __init__(self, port: int | None = None, status: int = 200) -> None:
        self.port = port or free_port()
        self.status = status
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook/private-path-token"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.deliveries.append(Delivery(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                        body, time.time()))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the tests read what they need
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, name="webhook-receiver", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def received(self, event: str | None = None, **match: Any) -> list[Delivery]:
        with self._lock:
            got = list(self.deliveries)
        return [d for d in got if (event is None or d.payload["event"] == event)
                and all(d.payload.get(k) == v for k, v in match.items())]


class Trickler:
    """A receiver that reads each POST whole, then answers one byte every `every` seconds and never finishes: a
    status line, then a header without end. Every read of the sender gets a byte within its socket timeout, so only
    a deadline on the whole attempt ends it. `held` is how long each connection lasted until the sender hung up (or
    `limit` passed: a sender without a deadline is let go then, so a test of one ends)."""

    def __init__(self, every: float = 2.0, limit: float = 30.0) -> None:
        self.every = every
        self.limit = limit
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.requests = 0
        self.held: list[float] = []
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook/private-path-token"

    def start(self) -> Trickler:
        threading.Thread(target=self._serve, name="webhook-trickler", daemon=True).start()
        return self

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self._lock:
                self._open.append(conn)
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        started = time.monotonic()
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                request += chunk
            head, _, body = request.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            with self._lock:
                self.requests += 1
            answer = b"HTTP/1.1 200 OK\r\nX-Trickle: "
            sent = 0
            while time.monotonic() - started < self.limit:
                try:
                    conn.sendall(answer[sent:sent + 1] if sent < len(answer) else b"a")
                    sent += 1
                    readable, _, _ = select.select([conn], [], [], self.every)
                    if readable and not conn.recv(1):
                        break  # the sender hung up
                except OSError:
                    break
        with self._lock:
            self.held.append(time.monotonic() - started)

    def stop(self) -> None:
        self.server.close()
        with self._lock:
            for conn in self._open:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def webhook_config(url: str, secret: str, events: list[str], extra: str = "") -> str:
    """`[notifications]` with retries fast enough for a test (the intervals are settings for this)."""
    quoted = ", ".join(f'"{e}"' for e in events)
    return (f'[notifications]\nretry_min = "100ms"\nretry_max = "400ms"\nmax_attempts = 100\ntimeout = "3s"\n'
            f'{extra}\n[[notifications.webhooks]]\nurl = "{url}"\nsecret = "{secret}"\nevents = [{quoted}]\n')
