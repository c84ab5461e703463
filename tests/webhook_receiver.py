"""A real webhook receiver for the tests: a stdlib HTTP server on loopback, in a thread of the test process.

It records every POST (headers and raw body), verifies nothing itself (the tests do, as a user's receiver would),
and answers with `status` (200 unless a test says otherwise). `start()` may come after the daemon sent its first
attempts: the port is reserved up front and nothing listens on it until then, so those attempts are refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes

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
                                                        body))
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


def webhook_config(url: str, secret: str, events: list[str], extra: str = "") -> str:
    """`[notifications]` with retries fast enough for a test (the intervals are settings for this)."""
    quoted = ", ".join(f'"{e}"' for e in events)
    return (f'[notifications]\nretry_min = "100ms"\nretry_max = "400ms"\nmax_attempts = 100\ntimeout = "3s"\n'
            f'{extra}\n[[notifications.webhooks]]\nurl = "{url}"\nsecret = "{secret}"\nevents = [{quoted}]\n')
