"""One live reader per session per daemon process, shared by every SSE viewer of that session.

Without it, each viewer joined the session's doorbell group and, on every ring, ran its own query and
built its own frames: V viewers meant V doorbell deliveries, V reads and V frame builds per event. The feed
takes one doorbell per event, reads the new rows once and keeps the newest of them (RING_ROWS rows, at most
RING_BYTES of content); viewers copy from that ring, and the decoded row and the raw frame bytes are built
once, on first use.

The store stays the truth. The ring is only a cache of the newest rows: a viewer whose cursor is older
than the ring reads events.db itself, and the feed also polls the store, so a dropped doorbell delays a
frame by at most POLL_SECONDS but never loses one. The registry is process-local state, not a signal: doorbells still
travel on the channel layer, so each daemon process behind a Redis layer runs its own feeds.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from channels.layers import get_channel_layer

from sessions.core.failures import classify
from sessions.live.doorbells import session_group
from sessions.live.ring import Raw, RowRing
from sessions.store import events as event_store
from sessions.store import replica
from sessions.store.rows import EventRow

logger = logging.getLogger(__name__)

# Newest rows kept per watched session, bounded by count and by stored content size (tool output rows can be
# large): a viewer further behind than the ring reads the store instead.
RING_ROWS = 1024
RING_BYTES = 2 * 1024 * 1024
# Rows read per pull (on a worker thread); a full page is followed by the next one.
PULL_PAGE = 1000
# Transcript deltas kept for the other viewers at the same place (`shared_frames`): the newest few.
SHARED_FRAMES = 4
# Decoded rows kept for the other viewers (transcript and prompt streams read the newest rows): unlike frames they
# are objects the collector tracks, so only the newest few stay.
SHARED_EVENTS = 64
# The fallback poll (docs/reference/events.md §6: rows are pushed, polling every 100 ms is the fallback): one query per
# watched session, so a dropped doorbell delays a frame by at most this. Tests raise it to prove that
# frames arrive by doorbell rather than by the poll hiding a broken one.
POLL_SECONDS = float(os.environ.get("COMPOZY_SSE_POLL_SECONDS") or 0.1)
LOCAL_POLL_SECONDS = max(POLL_SECONDS, 1.0)

class FeedRow:
    """One stored row as a viewer reads it. A row of a feed's ring has its decoded form and its raw SSE frame built
    at most once, for all viewers (kept by the feed); a row read from the store builds them for its one reader.

    Made per read, never kept: the ring holds its rows column by column (`feed_ring.RowRing`). A kept object per
    row is one the collector tracks, and 150 streaming sessions' rings then grew the oldest generation by ~6,000
    objects a second, whose full collections paused every stream for 40-60 ms (bench `capacity`)."""

    __slots__ = ("_feed", "raw")

    def __init__(self, raw: Raw, feed: SessionFeed | None = None) -> None:
        self.raw = raw
        self._feed = feed

    @property
    def sequence(self) -> int:
        return int(self.raw[0])

    @property
    def type(self) -> str:
        return str(self.raw[3])

    def event(self) -> EventRow:
        """The row as `read_events` returns it. Shared between viewers: readers must not mutate it."""
        if self._feed is None:
            return event_store.row_to_event(self.raw)
        events = self._feed.events
        event = events.get(self.raw[0])
        if event is None:
            event = events[self.raw[0]] = event_store.row_to_event(self.raw)
            if len(events) > SHARED_EVENTS:
                del events[min(events)]
        return event

    def frame(self, build: Callable[[Raw], bytes]) -> bytes:
        """The raw-mode frame; `build` depends only on the session, so every viewer gets the same bytes."""
        if self._feed is None:
            return build(self.raw)
        frames = self._feed.frames
        frame = frames.get(self.raw[0])
        if frame is None:
            frame = frames[self.raw[0]] = build(self.raw)
        return frame


class SessionFeed:
    """The shared tail of one session's events.db. Lives on the event loop: no method is thread-safe.

    Rows reach it two ways. The daemon that writes the session offers each committed batch directly
    (`offer`: no read at all). Anything else (a doorbell from another process, the fallback poll, a gap)
    asks for a pull, and pulls read the store on a worker thread, one at a time, never on the loop."""

    def __init__(self, session_id: str, path: Path) -> None:
        self.session_id = session_id
        self.path = path
        # The ring: columns of strings and numbers, which the collector never tracks (feed_ring says why), and what
        # viewers built from its rows, by sequence: frames (bytes: untracked too) and decoded rows.
        self.rows = RowRing()
        self.frames: dict[int, bytes] = {}
        self.events: dict[int, EventRow] = {}
        self.bytes = 0  # content text held by the ring
        # Newest sequence held; None until the first read says where the store ends (viewers read the
        # store themselves meanwhile).
        self.cursor: int | None = None
        self.viewers: set[asyncio.Event] = set()
        self.conn: sqlite3.Connection | None = None
        self.listener: asyncio.Task[None] | None = None
        self.poller: asyncio.Task[None] | None = None
        self._pull_task: asyncio.Task[None] | None = None
        self._pull_again = False
        self._news_at = 0.0  # loop time rows last arrived; a busy feed needs no fallback poll
        self.offered = False  # the local store writer has offered rows: the session is written in this process
        self.closed = False
        # Frames each viewer would otherwise build for itself (a transcript delta is assembled per viewer), keyed
        # by what fixes their bytes: viewers at the same place share one copy, which a 48 MiB message needs.
        self.shared_frames: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()

    def shared_frame(self, key: tuple[Any, ...]) -> Any:
        return self.shared_frames.get(key)

    def share_frame(self, key: tuple[Any, ...], value: Any) -> None:
        self.shared_frames[key] = value
        while len(self.shared_frames) > SHARED_FRAMES:
            self.shared_frames.popitem(last=False)

    def since(self, cursor: int) -> list[FeedRow] | None:
        """The rows after `cursor`, oldest first; [] when nothing is newer; None when the ring cannot
        answer without a gap (the cursor is older than the ring), so the caller reads the store."""
        if self.cursor is None:
            return None
        if cursor >= self.cursor:
            return []
        rows = self.rows
        if not len(rows) or cursor < rows.first - 1:
            return None
        # Sequences are gap-free, so the ring is contiguous and the position is arithmetic.
        return [FeedRow(rows[i], self) for i in range(cursor - rows.first + 1, len(rows))]

    # ---- rows in ---------------------------------------------------------------------------

    def offer(self, raws: list[Raw]) -> None:
        """Rows the local store writer just committed, in order. Taken when they continue the ring
        without a gap; otherwise the store is read."""
        self.offered = True
        if self.cursor is None or not raws:
            return
        if int(raws[-1][0]) <= self.cursor:
            return
        fresh = [r for r in raws if int(r[0]) > self.cursor]
        if int(fresh[0][0]) != self.cursor + 1:
            self.request_pull()
            return
        self._apply(fresh)

    def _apply(self, raws: list[Raw]) -> None:
        for raw in raws:
            self.rows.append(raw)
            self.bytes += len(raw[5])
        # Evict the oldest; the newest row always stays, so a caught-up viewer never falls back to the store.
        while len(self.rows) > 1 and (len(self.rows) > RING_ROWS or self.bytes > RING_BYTES):
            sequence, content = self.rows.popleft()
            self.bytes -= len(content)
            self.frames.pop(sequence, None)
            self.events.pop(sequence, None)
        self.cursor = int(raws[-1][0])
        self._news_at = asyncio.get_running_loop().time()
        for wake in self.viewers:
            wake.set()

    def request_pull(self) -> None:
        """Read what the store has after the cursor, off the loop; coalesced while a pull runs."""
        if self.closed:
            return
        if self._pull_task is not None:
            self._pull_again = True
            return
        self._pull_task = asyncio.get_running_loop().create_task(self._pull())

    async def _pull(self) -> None:
        try:
            while not self.closed:
                self._pull_again = False
                if self.cursor is None:
                    top = await asyncio.to_thread(self._top)
                    if self.cursor is None:
                        self.cursor = top
                    continue
                after = self.cursor
                rows = await asyncio.to_thread(self._read, after)
                if self.closed:
                    return
                fresh = [r for r in rows if int(r[0]) > (self.cursor or 0)]
                if fresh and int(fresh[0][0]) == (self.cursor or 0) + 1:
                    self._apply(fresh)
                if len(rows) < PULL_PAGE and not self._pull_again:
                    return
        except Exception as exc:  # a broken read must not kill the feed; viewers fall back to the store
            reason = classify(exc)
            if reason is not None:  # the machine's condition (a full disk, an I/O error), not a bug: one line
                logger.warning("live feed of %s: read failed (%s): %s", self.session_id, reason, exc)
            else:
                logger.exception("live feed of %s: read failed", self.session_id)
        finally:
            self._pull_task = None

    def _top(self) -> int:
        replica.pull_events(self.session_id)  # another node writes it: the rows the cluster's database has, first
        try:
            top = event_store.max_sequence(self.path)
        except sqlite3.Error:
            return 0  # a store not initialized yet: the first pull reads it from the start
        cap = replica.visible_upto(self.session_id)
        return top if cap is None else min(top, cap)

    def _read(self, after: int) -> list[Raw]:
        """On a worker thread; pulls never overlap, so the one connection is used by one thread at a time."""
        replica.pull_events(self.session_id)  # another node writes it: the rows the cluster's database has, first
        if self.conn is None:
            if not self.path.exists():
                return []
            self.conn = event_store.connect(self.path, readonly=True)
        rows = event_store.read_rows(self.path, after=after, limit=PULL_PAGE, conn=self.conn)
        # Written here in a cluster: no further than what the database has (or holds through an outage), so a viewer
        # never sees a row a survivor could not show.
        cap = replica.visible_upto(self.session_id)
        return rows if cap is None else [row for row in rows if int(row[0]) <= cap]

    # ---- doorbell --------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.request_pull()  # where the store ends now
        self.listener = loop.create_task(self._listen())
        self.poller = loop.create_task(self._poll())

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # A session whose writer runs in this process offers every committed batch (`offer`), which no layer can
            # drop: once it has, the poll is only a safety net, once a second. At 200 streaming sessions on a loaded
            # loop, the 100 ms poll of a feed whose offer came a little late was a thread hop and a read, for nothing.
            every = LOCAL_POLL_SECONDS if self.offered else POLL_SECONDS
            await asyncio.sleep(every)
            if loop.time() - self._news_at >= every:
                self.request_pull()

    async def _listen(self) -> None:
        layer = get_channel_layer()
        if layer is None:
            return  # viewers poll
        # The layer's default prefix, not our own: channels_redis runs one receive loop per process that
        # pops only the process-local channel named by that prefix; a "feed." channel would never be read.
        channel = await layer.new_channel()
        group = session_group(self.session_id)
        await layer.group_add(group, channel)
        try:
            while True:
                message = await layer.receive(channel)
                # The local writer already offered what it rang for; only news from elsewhere needs a read.
                sequence = message.get("sequence") if isinstance(message, dict) else None
                if not isinstance(sequence, int) or self.cursor is None or sequence > self.cursor:
                    self.request_pull()
        finally:
            try:
                await layer.group_discard(group, channel)
            except Exception:  # a layer that went away forgets the group itself (channels expire)
                logger.warning("feed of %s: could not leave its doorbell group", self.session_id, exc_info=True)

    def close(self) -> None:
        self.closed = True
        for task in (self.listener, self.poller):
            if task is not None:
                task.cancel()
        conn, self.conn = self.conn, None
        if conn is not None:
            if self._pull_task is not None:
                # A pull may be using it on its thread right now: close it there, after that read.
                self._pull_task.add_done_callback(lambda _: conn.close())
            else:
                try:
                    conn.close()
                except sqlite3.Error:  # a read-only handle: nothing is lost with it
                    logger.warning("feed of %s: could not close its store", self.session_id, exc_info=True)
        self.rows.clear()
        self.frames.clear()
        self.events.clear()
        self.bytes = 0
        self.shared_frames.clear()


_feeds: dict[str, SessionFeed] = {}


def subscribe(session_id: str, path: Path, wake: asyncio.Event) -> SessionFeed:
    """The session's feed (started on first use); `wake` is set whenever new rows arrive."""
    feed = _feeds.get(session_id)
    if feed is None:
        feed = _feeds[session_id] = SessionFeed(session_id, path)
        feed.start()
    feed.viewers.add(wake)
    return feed


def unsubscribe(feed: SessionFeed, wake: asyncio.Event) -> None:
    """The last viewer to leave closes the feed."""
    feed.viewers.discard(wake)
    if not feed.viewers and _feeds.get(feed.session_id) is feed:
        del _feeds[feed.session_id]
        feed.close()


def offer_rows(session_id: str, raws: list[Raw]) -> None:
    """The local store writer committed `raws`: the session's feed, if anyone watches, takes them as they are."""
    feed = _feeds.get(session_id)
    if feed is not None:
        feed.offer(raws)


def watched() -> dict[str, int]:
    """Session id → number of live viewers in this process (`compozy doctor`). Safe from another thread:
    the registry is copied in one step before it is read."""
    return {sid: len(feed.viewers) for sid, feed in dict(_feeds).items()}
