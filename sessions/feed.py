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
import contextlib
import itertools
import logging
import os
import sqlite3
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from channels.layers import get_channel_layer

from sessions.runtime.signals import session_group
from sessions.store import events as event_store

logger = logging.getLogger(__name__)

# Newest rows kept per watched session, bounded by count and by stored content size (tool output rows can be
# large): a viewer further behind than the ring reads the store instead.
RING_ROWS = 1024
RING_BYTES = 2 * 1024 * 1024
# Rows read per pull on the event loop; a full page schedules the next pull instead of blocking the loop.
PULL_PAGE = 1000
# The fallback poll (events reference §6: rows are pushed, polling every 100 ms is the fallback): one query per
# watched session, so a dropped doorbell delays a frame by at most this. Tests raise it to prove that
# frames arrive by doorbell rather than by the poll hiding a broken one.
POLL_SECONDS = float(os.environ.get("COMPOZY_SSE_POLL_SECONDS") or 0.1)

Raw = tuple[Any, ...]  # (sequence, id, turn_id, type, agent_name, content JSON text, timestamp, archived)


class FeedRow:
    """One stored row; its decoded form and its raw SSE frame are built at most once, for all viewers."""

    __slots__ = ("_event", "_frame", "raw")

    def __init__(self, raw: Raw) -> None:
        self.raw = raw
        self._event: dict[str, Any] | None = None
        self._frame: bytes | None = None

    @property
    def sequence(self) -> int:
        return int(self.raw[0])

    @property
    def type(self) -> str:
        return str(self.raw[3])

    def event(self) -> dict[str, Any]:
        """The row as `read_events` returns it. Shared between viewers: readers must not mutate it."""
        if self._event is None:
            self._event = event_store.row_to_event(self.raw)
        return self._event

    def frame(self, build: Callable[[Raw], bytes]) -> bytes:
        """The raw-mode frame; `build` depends only on the session, so every viewer gets the same bytes."""
        if self._frame is None:
            self._frame = build(self.raw)
        return self._frame


class SessionFeed:
    """The shared tail of one session's events.db. Lives on the event loop: no method is thread-safe."""

    def __init__(self, session_id: str, path: Path) -> None:
        self.session_id = session_id
        self.path = path
        self.rows: deque[FeedRow] = deque()
        self.bytes = 0  # content text held by the ring
        try:
            self.cursor = event_store.max_sequence(path)  # newest sequence read; the ring starts empty here
        except sqlite3.Error:
            self.cursor = 0  # a store not initialized yet: the first pull reads it from the start
        self.viewers: set[asyncio.Event] = set()
        self.conn: sqlite3.Connection | None = None
        self.listener: asyncio.Task[None] | None = None
        self.poller: asyncio.Task[None] | None = None
        self._repull: asyncio.Handle | None = None

    # ---- reading ---------------------------------------------------------------------------

    def pull(self) -> int:
        """Read the rows committed after the cursor into the ring and wake the viewers; returns how many."""
        if self.conn is None:
            if not self.path.exists():
                return 0
            self.conn = event_store.connect(self.path, readonly=True)
        rows = event_store.read_rows(self.path, after=self.cursor, limit=PULL_PAGE, conn=self.conn)
        if not rows:
            return 0
        for raw in rows:
            self.rows.append(FeedRow(raw))
            self.bytes += len(raw[5])
        # Evict the oldest; the newest row always stays, so a caught-up viewer never falls back to the store.
        while len(self.rows) > 1 and (len(self.rows) > RING_ROWS or self.bytes > RING_BYTES):
            self.bytes -= len(self.rows.popleft().raw[5])
        self.cursor = int(rows[-1][0])
        for wake in self.viewers:
            wake.set()
        if len(rows) == PULL_PAGE and self._repull is None:
            self._repull = asyncio.get_running_loop().call_soon(self._pull_again)
        return len(rows)

    def _pull_again(self) -> None:
        self._repull = None
        self._safe_pull()

    def _safe_pull(self) -> None:
        try:
            self.pull()
        except Exception:  # a broken read must not kill the listener; viewers fall back to the store
            logger.exception("live feed of %s: read failed", self.session_id)

    def since(self, cursor: int) -> list[FeedRow] | None:
        """The rows after `cursor`, oldest first; [] when nothing is newer; None when the ring cannot
        answer without a gap (the cursor is older than the ring), so the caller reads the store."""
        if cursor >= self.cursor:
            return []
        if not self.rows or cursor < self.rows[0].sequence - 1:
            return None
        # Sequences are gap-free, so the ring is contiguous and the position is arithmetic.
        start = cursor - self.rows[0].sequence + 1
        return list(itertools.islice(self.rows, start, None))

    # ---- doorbell --------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.listener = loop.create_task(self._listen())
        self.poller = loop.create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            self._safe_pull()

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
                await layer.receive(channel)
                self._safe_pull()
        finally:
            with contextlib.suppress(Exception):
                await layer.group_discard(group, channel)

    def close(self) -> None:
        for task in (self.listener, self.poller):
            if task is not None:
                task.cancel()
        if self._repull is not None:
            self._repull.cancel()
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None
        self.rows.clear()
        self.bytes = 0


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


def watched() -> dict[str, int]:
    """Session id → number of live viewers in this process (`compozy doctor`). Safe from another thread:
    the registry is copied in one step before it is read."""
    return {sid: len(feed.viewers) for sid, feed in dict(_feeds).items()}
