"""A viewer that stops reading its event stream (a frozen tab, a stalled proxy) must not cost the daemon memory
without bound: daphne gives the app no backpressure, so everything written for it was queued (eight stalled viewers
of one fast turn queued 15 GB). Its stream now waits for it with about a megabyte queued, shows in `compozy
status`, and carries on, gap-free, when the client reads again."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessions.live.pressure import HIGH_WATER_BYTES
from tests.conftest import Daemon, of_type, start_daemon, wait_for
from tests.sse import RawStream

# ~30 MB of chunk text per turn: thirty times the high-water mark, so a stream without backpressure queues far more
# than the bound below. The stall timeout is out of the way: these tests are about a viewer that reads again, and a
# loaded machine must not turn a slow turn into a stall (a stalled stream has its own test, test_stream_pressure).
TURN = "stream 30000 1000"


@pytest.fixture
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("home"), extra_config='[http]\nstream_stall_timeout = "10m"\n')
    yield d
    d.stop()


@pytest.mark.timeout(300)
def test_a_viewer_that_stops_reading_holds_a_bounded_backlog_and_then_gets_every_frame(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    path = daemon.scoped(sid, "/stream") + "?frames=raw"
    stalled = socket.create_connection(("127.0.0.1", daemon.port), timeout=60)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    stalled.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {daemon.token}\r\n"
                    f"Accept: text/event-stream\r\nLast-Event-ID: 0\r\n\r\n".encode())
    stream = RawStream(stalled)
    assert stream.head().startswith(b"HTTP/1.1 200")
    # Chunk text that the stalled viewer does not read while the turn runs: it used to be queued.
    done = of_type(daemon.run_turn(sid, TURN, timeout=240), "done")[0]["sequence"]
    streams = wait_for(lambda: (s := daemon.http.get("/api/status").json()["streams"])["waiting_on_client"] and s,
                       timeout=30, what="the stalled stream to wait on its client")
    assert streams["waiting_on_client"] == 1
    # What waits for it: the high-water mark plus the one page of frames that crossed it, not the turn.
    assert streams["queued_bytes"] < HIGH_WATER_BYTES + 8 * 1024 * 1024, streams
    assert re.search(r"slow viewers\s+1 waiting", daemon.cli("status").stdout)

    stream.read_until(f"id: {done}\n".encode())
    stalled.close()
    assert stream.ids() == list(range(1, done + 1)), "frames lost or repeated"
    assert daemon.http.get("/api/status").json()["streams"]["waiting_on_client"] == 0


def test_a_dashboard_viewer_gets_a_growing_message_a_bounded_number_of_times(daemon: Daemon,
                                                                              workspace: Path) -> None:
    # Transcript deltas upsert whole entries; sent at every row, a reply streamed in 2,000 rows cost one viewer
    # 1,021 times its size. Rows arriving within 50 ms now share one delta.
    sid = daemon.create(workspace)["id"]
    received: list[bytes] = []
    connected = threading.Event()

    def watch() -> None:
        with daemon.client() as client, client.stream("GET", daemon.scoped(sid, "/stream"),
                                                      headers={"Accept": "text/event-stream"}) as response:
            connected.set()
            for data in response.iter_bytes():
                received.append(data)
                if b"prompt_stop_reason" in data or b'"type":"done"' in data or b"end_turn" in data:
                    return

    viewer = threading.Thread(target=watch, daemon=True)
    viewer.start()
    assert connected.wait(30)
    turn = daemon.run_turn(sid, "slow 600 0.002", timeout=60)
    viewer.join(30)
    reply = "".join(e["content"]["text"] for e in of_type(turn, "agent_message"))
    sent = sum(len(b) for b in received)
    assert reply and sent < 60 * len(reply), f"{sent:,} bytes for a {len(reply):,}-character reply"


@pytest.mark.timeout(300)
def test_a_prompt_stream_whose_client_stops_reading_waits_for_it_and_then_ends_with_the_turn(
        daemon: Daemon, workspace: Path) -> None:
    # The prompt's own answer is a stream too (`compozy session prompt`, a useChat app): it used to have only the
    # transport's 64 MiB cut behind it, so a stalled client cost the daemon that much per prompt.
    sid = daemon.create(workspace)["id"]
    body = b'{"message": "%s"}' % TURN.encode()
    client = socket.create_connection(("127.0.0.1", daemon.port), timeout=60)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    client.sendall(f"POST {daemon.scoped(sid, '/prompt')}?format=raw HTTP/1.1\r\nHost: localhost\r\n"
                   f"Authorization: Bearer {daemon.token}\r\nAccept: text/event-stream\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    stream = RawStream(client)
    assert stream.head().startswith(b"HTTP/1.1 200")
    turn_id = wait_for(lambda: [e["turn_id"] for e in daemon.events(sid, type="user_message")], timeout=30,
                       what="the prompt's user_message")[-1]
    events = daemon.turn_events(sid, turn_id, timeout=180)
    assert of_type(events, "done"), "the turn did not finish while its client was not reading"
    streams = wait_for(lambda: (s := daemon.http.get("/api/status").json()["streams"])["waiting_on_client"] and s,
                       timeout=30, what="the stalled prompt stream to wait on its client")
    assert streams["waiting_on_client"] == 1
    assert streams["queued_bytes"] < HIGH_WATER_BYTES + 8 * 1024 * 1024, streams

    stream.read_until(b"event: done\n")
    client.close()
    stored = [e["sequence"] for e in events if e["type"] != "user_message"]
    assert stream.ids() == stored, "frames lost or repeated"
    assert daemon.http.get("/api/status").json()["streams"]["waiting_on_client"] == 0
