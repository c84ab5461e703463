"""The shared live feed (sessions/live/feed.py) over a real events.db: what its ring can answer without a gap,
when it must send a viewer back to the store, and that it reads and frames each row once for all viewers."""

from __future__ import annotations

import asyncio
import gc
from collections import deque
from pathlib import Path

import pytest

from sessions.core.enums import EventType
from sessions.live import feed as live_feed
from sessions.store.events import EventLog, read_events, read_rows
from sessions.store.ops import NewEvent
from tests.django_env import ensure_django


def append(log: EventLog, n: int, type_: str = "agent_message") -> None:
    log.append([NewEvent(type_, "turn-1", {"text": f"c{log.last_sequence + i + 1}"}) for i in range(n)])


@pytest.fixture
def log(tmp_path: Path) -> EventLog:
    store = EventLog(tmp_path / "events.db", "general")
    yield store
    store.close()


def sequences(rows: list[live_feed.FeedRow] | None) -> list[int] | None:
    return None if rows is None else [r.sequence for r in rows]


async def pull(feed: live_feed.SessionFeed) -> int:
    """Ask the feed to read the store (on its worker thread) and wait for it; returns the rows it took."""
    before = feed.cursor or 0
    feed.request_pull()
    while feed._pull_task is not None:
        await asyncio.sleep(0.001)
    return (feed.cursor or 0) - before


async def opened(path: Path, session_id: str = "s1") -> live_feed.SessionFeed:
    """A feed that has learned where the store ends (its first read), as `subscribe` starts one."""
    feed = live_feed.SessionFeed(session_id, path)
    await pull(feed)
    return feed


def test_the_ring_answers_only_what_it_holds_without_a_gap(log: EventLog) -> None:
    append(log, 5)

    async def main() -> None:
        feed = live_feed.SessionFeed("s1", log.path)
        assert feed.since(0) is None, "before its first read the feed answers nothing: viewers read the store"
        await pull(feed)
        assert feed.cursor == 5 and not feed.rows  # starts at the head, empty
        assert sequences(feed.since(5)) == []
        assert feed.since(3) is None  # older than the ring: the viewer reads the store
        append(log, 3)
        assert await pull(feed) == 3
        assert sequences(feed.since(5)) == [6, 7, 8]
        assert sequences(feed.since(6)) == [7, 8]
        assert sequences(feed.since(8)) == []
        assert feed.since(4) is None
        assert await pull(feed) == 0  # nothing new: no rows, no wake
        feed.close()

    asyncio.run(main())


def test_rows_past_the_ring_send_a_late_viewer_to_the_store(log: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_feed, "RING_ROWS", 10)
    monkeypatch.setattr(live_feed, "PULL_PAGE", 4)

    async def main() -> None:
        feed = await opened(log.path)
        append(log, 25)
        assert await pull(feed) == 25, "a full page is followed by the next until the store is drained"
        assert feed.cursor == 25
        assert sequences(feed.since(15)) == list(range(16, 26))  # the ring keeps the newest 10, contiguous
        assert feed.since(14) is None
        stored = [e["sequence"] for e in read_events(log.path, after=14, limit=100)]
        assert stored == list(range(15, 26))
        feed.close()

    asyncio.run(main())


def test_the_ring_is_also_bounded_by_content_size(log: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_feed, "RING_BYTES", 10_000)

    async def main() -> None:
        feed = await opened(log.path)
        log.append([NewEvent("tool_call_update", "turn-1", {"output": "x" * 3000}) for _ in range(6)])
        assert await pull(feed) == 6
        sizes = [len(raw[5]) for raw in read_rows(log.path, after=0, limit=10)]
        fit = max(k for k in range(1, 7) if sum(sizes[-k:]) <= 10_000)  # the newest rows that fit the budget
        assert sequences(feed.since(6 - fit)) == list(range(7 - fit, 7))
        assert feed.bytes == sum(sizes[-fit:]) and feed.since(6 - fit - 1) is None
        log.append([NewEvent("tool_call_update", "turn-1", {"output": "y" * 50_000})])
        await pull(feed)
        assert sequences(feed.since(6)) == [7], "a single row larger than the budget is still served"
        feed.close()

    asyncio.run(main())


def test_a_pull_wakes_every_viewer_and_each_row_is_decoded_and_framed_once(log: EventLog) -> None:
    async def main() -> None:
        wakes = [asyncio.Event() for _ in range(3)]
        feed = live_feed.subscribe("s-wake", log.path, wakes[0])
        for wake in wakes[1:]:
            assert live_feed.subscribe("s-wake", log.path, wake) is feed  # one feed per session
        assert live_feed.watched()["s-wake"] == 3
        await pull(feed)
        append(log, 2)
        assert await pull(feed) == 2
        assert all(w.is_set() for w in wakes)

        built: list[int] = []

        def build(raw: tuple[object, ...]) -> bytes:
            built.append(int(raw[0]))  # type: ignore[call-overload]
            return f"id: {raw[0]}\n\n".encode()

        per_viewer = [[row.frame(build) for row in feed.since(0) or []] for _ in wakes]
        assert per_viewer[0] == per_viewer[1] == per_viewer[2] == [b"id: 1\n\n", b"id: 2\n\n"]
        assert built == [1, 2], "frames are built once and shared"
        rows = feed.since(0) or []
        assert rows[0].event() is rows[0].event()
        assert rows[0].event() == read_events(log.path, after=0, limit=1)[0]

        for wake in wakes:
            live_feed.unsubscribe(feed, wake)
        assert "s-wake" not in live_feed.watched()
        assert feed.conn is None and not feed.rows, "the last viewer out closes the feed"
        await asyncio.sleep(0)
        assert feed.listener is not None and feed.listener.done()

    asyncio.run(main())


def test_the_ring_keeps_nothing_the_collector_tracks(log: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every row a streaming session's ring keeps was an object the collector tracked: at 200 sessions the oldest
    # generation grew ~6,000 objects a second and its full collections paused every stream for 40-60 ms.
    monkeypatch.setattr(live_feed, "RING_ROWS", 8)

    async def main() -> None:
        feed = await opened(log.path)
        for n in range(12):  # offered as the recorder offers them: the committed rows, typed with EventType
            log.append([NewEvent(EventType.AGENT_MESSAGE, "turn-1", {"text": f"c{n}"})])
            feed.offer(log.last_rows)
            for row in feed.since(n) or []:
                row.frame(lambda raw: f"id: {raw[0]}\n\n".encode())
        ring = feed.rows
        assert [ring[i][0] for i in range(len(ring))] == list(range(5, 13))
        assert [ring[i] for i in range(len(ring))] == [tuple(r) for r in read_rows(log.path, after=4)]
        # Without a collection first: nothing a row adds is tracked from the moment it is kept (a tuple was, until
        # the collection that the rows themselves brought on).
        columns = [column for column in gc.get_referents(ring) if isinstance(column, deque)]
        held = [item for column in columns for item in gc.get_referents(column)]
        assert len(columns) == 7 and len(held) == 7 * 8
        assert not [item for item in held if gc.is_tracked(item)], "a row the collector tracks"
        assert sorted(feed.frames) == list(range(5, 13)), "frames go with the rows they were built from"
        assert not gc.is_tracked(feed.frames)
        feed.close()

    asyncio.run(main())


def test_a_feed_on_a_store_not_created_yet_reads_it_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "later" / "events.db"

    async def main() -> None:
        feed = await opened(path, "s-late")
        assert feed.cursor == 0 and await pull(feed) == 0
        store = EventLog(path, "general")
        append(store, 3)
        assert await pull(feed) == 3
        assert sequences(feed.since(0)) == [1, 2, 3]
        store.close()
        feed.close()

    asyncio.run(main())


def test_a_doorbell_on_the_embedded_channel_layer_reaches_the_feed_and_its_viewers(
        log: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_django()
    monkeypatch.setattr(live_feed, "POLL_SECONDS", 60.0)  # only the doorbell can wake it in time
    from sessions.live import doorbells

    async def main() -> None:
        wake = asyncio.Event()
        feed = live_feed.subscribe("s-bell", log.path, wake)
        for _ in range(5):  # let the listener join the session's group
            await asyncio.sleep(0)
        while feed.cursor is None:
            await asyncio.sleep(0.001)
        append(log, 4)
        doorbells.ring_events("s-bell", log.last_sequence)
        await asyncio.wait_for(wake.wait(), 5)
        assert feed.cursor == 4 and sequences(feed.since(0)) == [1, 2, 3, 4]
        live_feed.unsubscribe(feed, wake)

    asyncio.run(main())


def test_without_any_doorbell_the_feed_finds_new_rows_by_polling(log: EventLog,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_feed, "get_channel_layer", lambda: None)  # no layer: nothing ever rings
    monkeypatch.setattr(live_feed, "POLL_SECONDS", 0.05)

    async def main() -> None:
        wake = asyncio.Event()
        feed = live_feed.subscribe("s-poll", log.path, wake)
        while feed.cursor is None:  # its first read: where the store ended when the first viewer came
            await asyncio.sleep(0.001)
        append(log, 2)
        await asyncio.wait_for(wake.wait(), 5)
        assert sequences(feed.since(0)) == [1, 2]
        live_feed.unsubscribe(feed, wake)
        await asyncio.sleep(0)
        assert feed.poller is not None and feed.poller.cancelled()

    asyncio.run(main())


def test_the_embedded_layer_still_expires_messages_with_its_sweep_rate_limited() -> None:
    from compozy_site import channel_layer

    async def main() -> None:
        layer = channel_layer.DoorbellLayer(expiry=0.05)
        await layer.send("feed.inmemory!a", {"type": "events.appended"})
        layer._clean_expired()  # the first sweep runs; the message is still fresh
        await asyncio.sleep(0.1)
        layer._clean_expired()  # expired now, but within a second of the last sweep: skipped
        assert layer.channels["feed.inmemory!a"].qsize() == 1
        await asyncio.sleep(channel_layer.SWEEP_SECONDS)
        layer._clean_expired()
        assert "feed.inmemory!a" not in layer.channels, "the next due sweep drops the expired message"

    asyncio.run(main())


def test_rows_offered_by_the_local_writer_are_taken_without_reading_the_store(
        log: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        feed = await opened(log.path)
        reads: list[int] = []
        real_read = feed._read
        monkeypatch.setattr(feed, "_read", lambda after: reads.append(after) or real_read(after))
        append(log, 3)
        feed.offer(log.last_rows)
        assert sequences(feed.since(0)) == [1, 2, 3] and reads == [], "contiguous rows need no read-back"
        feed.offer(log.last_rows)  # offered twice (a retry, a late callback): nothing is doubled
        assert sequences(feed.since(0)) == [1, 2, 3]
        append(log, 2)  # committed, but never offered (another process wrote it)
        append(log, 2)
        feed.offer(log.last_rows)  # 6-7 would leave a gap after 3: the feed reads the store instead
        while feed._pull_task is not None:
            await asyncio.sleep(0.001)
        assert reads == [3] and sequences(feed.since(0)) == [1, 2, 3, 4, 5, 6, 7]
        feed.close()

    asyncio.run(main())


def test_a_doorbell_for_rows_the_feed_already_holds_costs_no_read(
        log: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_django()
    monkeypatch.setattr(live_feed, "POLL_SECONDS", 60.0)
    from sessions.live import doorbells

    async def main() -> None:
        wake = asyncio.Event()
        feed = live_feed.subscribe("s-held", log.path, wake)
        while feed.cursor is None:
            await asyncio.sleep(0.001)
        for _ in range(5):
            await asyncio.sleep(0)
        reads: list[int] = []
        real_read = feed._read
        monkeypatch.setattr(feed, "_read", lambda after: reads.append(after) or real_read(after))
        append(log, 2)
        feed.offer(log.last_rows)
        doorbells.ring_events("s-held", log.last_sequence)
        for _ in range(20):
            await asyncio.sleep(0.005)
        assert reads == [] and sequences(feed.since(0)) == [1, 2]
        append(log, 1)  # rung by someone else, never offered: now the doorbell means a read
        doorbells.ring_events("s-held", log.last_sequence)
        for _ in range(200):
            if feed.cursor == 3:
                break
            await asyncio.sleep(0.005)
        assert reads == [2] and sequences(feed.since(0)) == [1, 2, 3]
        live_feed.unsubscribe(feed, wake)

    asyncio.run(main())


def test_transcript_viewers_at_the_same_place_share_one_delta_and_go_on_correctly(log: EventLog) -> None:
    """A transcript delta is assembled per viewer; viewers at the same place send the bytes the first one built (a
    48 MiB reply framed once, not per viewer), and the one that did not build it still builds the next delta right."""
    ensure_django()
    from compozy.api.stream_tails import TranscriptTail

    append(log, 3)

    async def main() -> None:
        feed = await opened(log.path)
        meta = {"id": "s1", "workspace_id": "w1"}
        first, second = (TranscriptTail(meta, log.path, None, None, None, None) for _ in range(2))
        first.open()
        second.open()
        append(log, 2)
        await pull(feed)
        built, shared = first.take(feed), second.take(feed)
        assert built is not None and shared is not None
        assert built[0][0] is shared[0][0], "the second viewer framed the delta again"
        assert b'"cursor":5' in built[0][0]
        # The next delta each viewer builds for itself is the same: the shared one left nothing behind.
        feed.shared_frames.clear()
        append(log, 2)
        await pull(feed)
        after_built = first.take(feed)
        feed.shared_frames.clear()
        after_shared = second.take(feed)
        assert after_built is not None and after_shared is not None
        assert after_built[0][0] is not after_shared[0][0]
        assert after_built[0] == after_shared[0]
        assert b"c1c2c3c4c5c6c7" in after_shared[0][0]

    asyncio.run(main())
