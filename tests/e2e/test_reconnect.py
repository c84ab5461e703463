"""The browser's own EventSource reconnect after a dropped connection, in Debian's Chromium.

The page talks to the daemon through a small TCP relay; mid-stream the test cuts every connection the relay
carries while the agent keeps streaming. Chromium reconnects by itself with Last-Event-ID, and the page must
end with every chunk exactly once, as the store has them, without a reload.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Daemon
from tests.e2e.test_dashboard import STREAM_TIMEOUT_MS, active_session, assistant_text, chunk_numbers


class Relay:
    """127.0.0.1:<port> → the daemon, one thread pair per connection; `cut()` drops every live one."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.lock = threading.Lock()
        self.live: list[socket.socket] = []
        self.requests: list[bytes] = []  # each request's first bytes (request line and headers), any connection
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self.lock:
                self.live += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if requests and data.split(b" ", 1)[0] in (b"GET", b"POST", b"PUT", b"DELETE"):
                    with self.lock:
                        self.requests.append(data)
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def stream_requests(self) -> list[str]:
        with self.lock:
            return [r.decode("latin-1") for r in self.requests if b"/stream?" in r.split(b"\r\n", 1)[0]]

    def cut(self) -> None:
        with self.lock:
            live, self.live = self.live, []
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.closed = True
        self.server.close()
        self.cut()


@pytest.fixture
def relay(daemon: Daemon) -> Iterator[Relay]:
    r = Relay(daemon.port)
    yield r
    r.close()


def test_a_dropped_connection_reconnects_by_itself_and_shows_every_chunk_once(page: Page, daemon: Daemon,
                                                                            workspace: Path, relay: Relay) -> None:
    session = active_session(daemon, workspace, "scripted")
    page.goto(f"http://127.0.0.1:{relay.port}/sessions/{session['id']}")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    expect(page.locator("#stream-indicator")).to_have_attribute("data-state", "live")
    assert daemon.prompt(session["id"], "slow 120 0.05").status_code == 200
    bubble = page.locator("#entries .entry-assistant .text").last
    expect(bubble).to_contain_text("c10")

    relay.cut()  # the agent keeps streaming while the browser is cut off
    assert "c119" not in bubble.inner_text(), "the turn ended before the cut"
    expect(page.locator("#entries")).to_contain_text("turn finished", timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#stream-indicator")).to_have_attribute("data-state", "live")

    text = assistant_text(page)
    assert chunk_numbers(text) == list(range(120)), text
    sequences = page.locator("#entries [data-seq]").evaluate_all("nodes => nodes.map(n => n.dataset.seq)")
    assert len(sequences) == len(set(sequences)), "a frame rendered twice"
    stored = "".join(e["content"]["text"] for e in daemon.events(session["id"], type="agent_message"))
    assert chunk_numbers(stored) == chunk_numbers(text)
    streams = relay.stream_requests()
    assert len(streams) >= 2, "the page never reconnected"
    assert any("last-event-id:" in r.lower() for r in streams[1:]), "the reconnect did not send Last-Event-ID"
    # The transcript fences rode along, so the daemon resumed with deltas instead of a fresh snapshot.
    assert page.get_attribute("html", "data-snapshots") == "1"
