"""A viewer that stops reading its event stream (a frozen tab, a stalled proxy) must not cost the daemon memory
without bound: daphne gives the app no backpressure, so everything written for it was queued (eight stalled viewers
of one fast turn queued 15 GB). Its stream now waits for it with about a megabyte queued, shows in `compozy
status`, and carries on, gap-free, when the client reads again."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from sessions.stream_pressure import HIGH_WATER_BYTES
from tests.conftest import Daemon, of_type, wait_for


def test_a_viewer_that_stops_reading_holds_a_bounded_backlog_and_then_gets_every_frame(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    path = daemon.scoped(sid, "/stream") + "?frames=raw"
    stalled = socket.create_connection(("127.0.0.1", daemon.port), timeout=60)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    stalled.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {daemon.token}\r\n"
                    f"Accept: text/event-stream\r\nLast-Event-ID: 0\r\n\r\n".encode())
    assert stalled.recv(4096).startswith(b"HTTP/1.1 200")
    # ~100 MB of chunk text that the stalled viewer does not read while the turn runs: it used to be queued.
    done = of_type(daemon.run_turn(sid, "stream 100000 1000", timeout=180), "done")[0]["sequence"]
    streams = wait_for(lambda: (s := daemon.http.get("/api/status").json()["streams"])["waiting_on_client"] and s,
                       timeout=30, what="the stalled stream to wait on its client")
    assert streams["waiting_on_client"] == 1
    # What waits for it: the high-water mark plus the one page of frames that crossed it, not the turn.
    assert streams["queued_bytes"] < HIGH_WATER_BYTES + 8 * 1024 * 1024, streams
    assert re.search(r"slow viewers\s+1 waiting", daemon.cli("status").stdout)

    chunks: list[bytes] = []
    marker, tail = f"id: {done}\n".encode(), b""
    while marker not in tail:
        chunk = stalled.recv(1 << 20)
        assert chunk, "the stream ended before done"
        chunks.append(chunk)
        tail = tail[-64:] + chunk
    ids = [int(line[3:]) for line in b"".join(chunks).split(b"\n")
           if line.startswith(b"id:") and line[3:].strip().isdigit()]
    stalled.close()
    assert ids == list(range(1, done + 1)), "frames lost or repeated"
    assert daemon.http.get("/api/status").json()["streams"]["waiting_on_client"] == 0
