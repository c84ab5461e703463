"""Frames reach live viewers by doorbell, on the embedded channel layer and on Redis (the scale-out layer).

Viewers also poll the store, which would hide a broken doorbell from every other test: here the poll is
pushed out to 60 s, so a turn whose frames arrive within the test's timeout arrived by doorbell. The Redis
case runs against the machine's Redis on loopback (a database of its own, flushed first) and is skipped
where there is none: the embedded default never needs it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, start_daemon
from tests.shared_services import DOORBELL_REDIS_URL
from tests.sse import Frame, frames, open_stream, watch_raw

TURN_SECONDS = 30  # far below the 60 s poll: frames that arrive in time were rung in
CHUNKS = 20


def redis_url() -> str | None:
    url = DOORBELL_REDIS_URL
    try:
        import channels_redis  # noqa: F401
        import redis
    except ImportError:
        return None
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        client.ping()
        client.flushdb()
        client.close()
    except redis.RedisError:
        return None
    return url


@pytest.fixture(params=["embedded", "redis"], scope="module")
def layer_daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    env = {"COMPOZY_SSE_POLL_SECONDS": "60"}
    if request.param == "redis":
        url = redis_url()
        if url is None:
            pytest.skip("no Redis on loopback, or channels-redis is not installed")
        env["REDIS_URL"] = url
    daemon = start_daemon(tmp_path_factory.mktemp(f"home-{request.param}"), env_extra=env)
    yield daemon
    daemon.stop()


def watch_transcript(daemon: Daemon, path: str, connected: threading.Event, out: list[Frame]) -> None:
    with daemon.client() as client, open_stream(client, path) as response:
        assert response.status_code == 200
        connected.set()
        text = ""
        for frame in frames(response):
            out.append(frame)
            for entry in frame.data.get("entries", []):
                if entry["message"]["role"] == "assistant":
                    text = "".join(p["text"] for p in entry["message"]["parts"] if p["type"] == "text")
            if f"c{CHUNKS - 1} " in text:
                return


def test_a_turn_reaches_raw_and_transcript_viewers_by_doorbell(layer_daemon: Daemon, workspace: Path) -> None:
    d = layer_daemon
    sid = d.create(workspace, agent="scripted")["id"]
    path = d.scoped(sid, "/stream")
    newest = d.events(sid, limit=1)
    head = newest[-1]["sequence"] if newest else 0
    raw: list[list[Frame]] = [[], []]
    live: list[Frame] = []
    ready = [threading.Event() for _ in range(3)]

    def done(got: list[Frame]) -> bool:
        return got[-1].event == "done"

    threads: list[threading.Thread] = [
        threading.Thread(target=watch_raw, args=(d, path, {"frames": "raw"}, head, done, ready[i], raw[i]),
                         daemon=True) for i in range(2)]
    threads.append(threading.Thread(target=watch_transcript, args=(d, path, ready[2], live), daemon=True))
    for thread in threads:
        thread.start()
    assert all(r.wait(30) for r in ready)
    assert d.prompt(sid, f"slow {CHUNKS} 0.02").status_code == 200
    for thread in threads:
        thread.join(TURN_SECONDS)
        assert not thread.is_alive(), "frames stopped arriving: the doorbell did not reach the viewer"

    stored = [e for e in d.all_events(sid) if e["sequence"] > head]
    upto = next(e["sequence"] for e in stored if e["type"] == "done")
    expected: list[Any] = [e["sequence"] for e in stored if e["sequence"] <= upto]
    for got in raw:
        assert [int(f.id or 0) for f in got] == expected
        text = "".join(f.data["content"]["text"] for f in got if f.event == "agent_message")
        assert text == "".join(f"c{i} " for i in range(CHUNKS))
    assert live[0].event == "transcript_snapshot" and any(f.event == "transcript_delta" for f in live)


def test_the_feed_shares_the_process_receive_loop_on_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """channels_redis runs one receive loop per process, popping the process-local channel that the layer's
    prefix names. A feed channel with a prefix of its own is popped only when its own receive happens to hold
    that loop, so its doorbells wait out another receiver's blocking pop (seconds). Here a consumer-like
    receiver holds the loop first; the feed must still be rung at once."""
    import asyncio

    url = redis_url()
    if url is None:
        pytest.skip("no Redis on loopback, or channels-redis is not installed")
    from channels_redis.core import RedisChannelLayer

    from sessions.live import feed as live_feed
    from sessions.live.doorbells import session_group
    from sessions.store.events import EventLog
    from sessions.store.ops import NewEvent

    layer = RedisChannelLayer(hosts=[url])
    monkeypatch.setattr(live_feed, "get_channel_layer", lambda: layer)
    log = EventLog(tmp_path / "events.db", "general")

    async def main() -> float:
        other = asyncio.create_task(layer.receive(await layer.new_channel()))  # takes the receive loop first
        await asyncio.sleep(0.2)
        wake = asyncio.Event()
        feed = live_feed.subscribe("s-redis", log.path, wake)
        await asyncio.sleep(0.5)  # the listener has joined the group
        log.append([NewEvent("agent_message", "turn-1", {"text": "hi"})])
        loop = asyncio.get_running_loop()
        started = loop.time()
        await layer.group_send(session_group("s-redis"), {"type": "events.appended", "sequence": 1})
        await asyncio.wait_for(wake.wait(), 10)
        took = loop.time() - started
        live_feed.unsubscribe(feed, wake)
        other.cancel()
        await asyncio.gather(other, return_exceptions=True)
        return took

    took = asyncio.run(main())
    log.close()
    assert took < 1.0, f"the doorbell took {took:.2f} s to reach the feed"
