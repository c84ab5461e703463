"""SSE over channels consumers. The store is the truth: a frame is read from events.db after a
doorbell (or a poll), never taken from the channel message, so a dropped doorbell loses nothing.

Session stream (docs/reference/events.md §6.1), two contracts:
- `frames=transcript` (default, browsers): a `transcript_snapshot`, then `transcript_delta` frames whose
  `id:` is the cursor; resume with `Last-Event-ID` plus `?epoch=&generation=` (sessions/live/transcript.py).
- `frames=raw` (the CLI; `format=raw` is its alias, as on the prompt stream): `id:` = sequence, `event:` = type,
  `data:` = SessionEventPayload; resume from `Last-Event-ID` (or `?after_sequence=` / `?after=` for clients that
  cannot set headers).
Both end with a `session_stopped` frame carrying stop_reason, stop_detail and the failure object.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer
from pydantic import ValidationError

from accounts.principal import PRINCIPAL_KEY, Principal
from compozy.api.schemas import StreamQuery
from compozy.api.stream_tails import RawTail, TranscriptTail, frame, terminal_frame
from compozy.api.validation import describe_errors
from compozy_base import metrics
from compozy_base.errors import error_body
from sessions import services
from sessions.catalog.ownership import runs_here
from sessions.core.enums import SessionState
from sessions.core.errors import CompozyError, InvalidRequest, StorageError
from sessions.core.failures import StoreReadError, classify
from sessions.live import feed as live_feed
from sessions.live.doorbells import CATALOG_GROUP
from sessions.live.pressure import ABORT, BACKLOG, PIECE_BYTES, pieces, room_for
from sessions.repair.boot import transcript_check_pending, transcript_settled
from sessions.store import events as event_store
from sessions.store import folder

logger = logging.getLogger(__name__)

# Routers and proxies drop idle connections after ~30-60 s; a comment every 20 s keeps them open.
KEEPALIVE_SECONDS = 20.0
# A viewer with nothing new wakes this often to ask whether its session stopped (the session's live feed,
# not the viewer, polls the store for rows whose doorbell was dropped: sessions/live/feed.py).
QUIET_SECONDS = 0.5
# A transcript delta upserts each changed entry whole (docs/reference/events.md §6), so a message that grows by a row
# at a
# time was resent at every row: a 3.2 MB reply cost a dashboard viewer 1.48 GB and slowed the agent's recording
# tenfold. Deltas are sent at most this often: rows that arrive in between join the next one (20 a second is
# still live to a person; raw frames, for machines, are never held).
TRANSCRIPT_DELTA_SECONDS = 0.05

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class StreamingConsumer(AsyncHttpConsumer):
    """An HTTP consumer whose response outlives handle(): a pump task writes, dispatch keeps running."""

    groups_to_join: list[str]
    metric_stream = "session"  # the `stream` label of compozy_sse_clients

    async def http_request(self, message: dict[str, Any]) -> None:
        if "body" in message:
            self.body.append(message["body"])
        if message.get("more_body"):
            return
        self.pump: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()
        self.finished = False
        self.started = False  # the 200 and its headers are sent: an error can only end the stream now
        if self.scope.get("method") not in ("GET", "HEAD"):
            # A stream is read, never written: a POST or DELETE must not open one and look accepted.
            await self.send_json_error(405, "method not allowed", "method_not_allowed", {"allow": "GET"},
                                       headers=[(b"allow", b"GET")])
            raise StopConsumer()
        try:
            await self.handle(b"".join(self.body))
        except CompozyError as exc:
            await self.send_json_error(exc.status, exc.message, exc.code, exc.data)
            raise StopConsumer() from None
        except Exception:
            # Not daphne's HTML 500 page: every error a client gets is JSON with a code.
            logger.exception("opening a %s stream failed", self.metric_stream)
            if not self.started:
                await self.send_json_error(500, "internal error", "internal_error")
            raise StopConsumer() from None

    async def send_json_error(self, status: int, message: str, code: str, data: dict[str, Any] | None = None,
                              headers: list[tuple[bytes, bytes]] | None = None) -> None:
        body = json.dumps(error_body(message, code, status, data)).encode()
        await self.send_response(status, body, headers=[(b"content-type", b"application/json"), *(headers or [])])
        self.finished = True

    async def start_stream(self, groups: list[str]) -> None:
        self.groups_to_join = groups
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
        self.started = True
        await self.send_headers(status=200, headers=SSE_HEADERS)
        metrics.SSE_CLIENTS.labels(stream=self.metric_stream).inc()
        self.counted = True
        await self.send_body(b": connected\n\n", more_body=True)
        self.pump = asyncio.create_task(self._run_pump())

    async def _run_pump(self) -> None:
        try:
            await self.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - ends the stream with an error frame; failure_body logs the cause
            try:
                await self.send_body(frame(failure_body(exc, self.metric_stream), event="error"), more_body=True)
            except Exception:  # the client went away too: the log above is all that is left to say
                logger.warning("a %s stream could not send its error frame", self.metric_stream, exc_info=True)
        finally:
            await self.finish()

    async def send_frames(self, out: bytes | list[bytes]) -> bool:
        """Frames to the client, each piece once the client has taken enough of what was sent before (a large
        frame goes in pieces: stream_pressure.pieces); False when it stopped reading: its connection is closed."""
        backlog = self.scope.get(BACKLOG)
        for piece in pieces(out):
            if not await room_for(backlog, len(piece), self.metric_stream):
                self.abort()
                return False
            await self.send_body(piece, more_body=True)
            if len(piece) >= PIECE_BYTES:
                # A large frame woke every viewer at once: one piece each per loop pass, not the whole frame of one
                # viewer after another while every other stream and request waits (300 viewers: seconds).
                await asyncio.sleep(0)
        return True

    def abort(self) -> None:
        """Close the connection of a client that stopped reading: ending only its response left it open, with
        everything queued for it held until the client went away."""
        abort = self.scope.get(ABORT)
        if abort is None:
            return
        self.finished = True  # nothing more can be sent on it
        try:
            abort()
        except Exception:  # the connection is gone already
            logger.warning("could not close a stalled %s stream", self.metric_stream, exc_info=True)

    async def finish(self) -> None:
        # A finished response needs no more rows, even while a keep-alive connection stays open.
        self.stop_timer()
        self.leave_feed()
        self.uncount()
        if not self.finished:
            self.finished = True
            try:
                await self.send_body(b"", more_body=False)
            except Exception:  # the client went away first: its response is over either way
                logger.warning("a %s stream could not end its response", self.metric_stream, exc_info=True)

    def uncount(self) -> None:
        """The stream ended (its response finished, or the client went away): once, whichever comes first."""
        if getattr(self, "counted", False):
            self.counted = False
            metrics.SSE_CLIENTS.labels(stream=self.metric_stream).dec()

    feed: live_feed.SessionFeed | None = None

    def leave_feed(self) -> None:
        feed = self.feed
        if feed is not None:
            live_feed.unsubscribe(feed, self.wake)
            self.feed = None

    _deadline = 0.0  # loop time the current wait times out
    _timer: asyncio.TimerHandle | None = None  # the one standing timer of this stream's waits
    _timed_out = False
    _waiting = False

    async def wait_for_wake(self, timeout: float) -> bool:
        """True when rung, False on timeout. Not asyncio.wait_for, which wraps the wait in a new task each time
        (a tenth of the daemon's CPU with 60 live viewers), nor a timer made and cancelled per wait (a handle, two
        heap operations and the cancelled handles' clean-up, per viewer per event): one standing timer, moved on
        only when it fires before the current wait's deadline (a live stream: at most every `timeout`)."""
        if self.wake.is_set():
            self.wake.clear()
            return True
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + timeout
        if self._timer is not None and self._timer.when() > self._deadline:  # a shorter wait than the last
            self.stop_timer()
        if self._timer is None:
            self._timer = loop.call_at(self._deadline, self._expire)
        self._timed_out = False
        self._waiting = True
        try:
            await self.wake.wait()
        finally:
            self._waiting = False
            self.wake.clear()
        return not self._timed_out

    def _expire(self) -> None:
        self._timer = None
        if not self._waiting:
            return  # between waits (sending): the next wait sets its own deadline
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._expire)
            return
        self._timed_out = True
        self.wake.set()

    def stop_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    async def run(self) -> None:
        raise NotImplementedError

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Doorbells skip channels' per-message close_old_connections (a sync_to_async round trip through
        # one shared thread for every event and every viewer); these handlers never touch the ORM.
        if message.get("type") in ("events.appended", "catalog.changed"):
            await getattr(self, message["type"].replace(".", "_"))(message)
            return
        await super().dispatch(message)

    async def events_appended(self, message: dict[str, Any]) -> None:
        self.wake.set()

    async def catalog_changed(self, message: dict[str, Any]) -> None:
        self.wake.set()

    async def disconnect(self) -> None:
        pump = getattr(self, "pump", None)
        if pump is not None and not pump.done():
            pump.cancel()
        self.stop_timer()
        self.leave_feed()
        self.uncount()
        conn = getattr(getattr(self, "tail", None), "conn", None)
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:  # a read-only handle: nothing is lost with it
                logger.warning("a %s stream could not close its store", self.metric_stream, exc_info=True)
        for group in getattr(self, "groups_to_join", []):
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception:  # a layer that went away forgets the group itself (channels expire)
                logger.warning("a %s stream could not leave group %s", self.metric_stream, group, exc_info=True)

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        await self.disconnect()
        raise StopConsumer()


def failure_body(exc: Exception, stream: str) -> dict[str, Any]:
    """The error frame that ends a stream after its 200, with a machine code as the API's answers have.

    A stream only reads, so a storage condition (a full disk refusing the store's -shm, an I/O error) is the store
    that could not be read, classified as the API does (`storage_unavailable`): a condition of this machine, one
    log line. Anything else is a bug: `stream_failed`, and its traceback in the log."""
    reason = classify(exc)
    if reason is not None:
        unread = exc if isinstance(exc, StoreReadError) else StoreReadError(reason, str(exc))
        err = StorageError.from_exception(unread)
        logger.warning("a %s stream ended: %s: %s", stream, err.message, exc)
        return error_body(err.message, err.code, err.status, err.data)
    logger.exception("SSE stream failed")
    return error_body("stream failed", "stream_failed", 500, {"detail": str(exc)[:200]})


def stream_query(scope: dict[str, Any]) -> StreamQuery:
    """The query (and the `Last-Event-ID` header) validated through the same schema types as `GET …/events`: the
    same mistakes get the same codes. A repeated parameter counts once, except `type`, which may repeat."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    params: dict[str, Any] = {key: values if key == "type" else values[0] for key, values in query.items()}
    for key, value in scope.get("headers", []):
        if key.lower() == b"last-event-id" and value:
            params["last_event_id"] = value.decode("latin-1")
    try:
        return StreamQuery.model_validate(params)
    except ValidationError as exc:
        message, code, errors = describe_errors([{**e, "loc": ("query", *e.get("loc", ()))} for e in exc.errors()])
        raise InvalidRequest(message, code=code, data={"errors": errors}) from None


class SessionStreamConsumer(StreamingConsumer):
    """GET /api/workspaces/<ws>/stream: transcript frames (default) or raw persisted rows (`frames=raw`)."""

    tail: RawTail | TranscriptTail
    feed: live_feed.SessionFeed | None

    async def handle(self, body: bytes) -> None:
        kwargs = self.scope["url_route"]["kwargs"]
        self.session_id = kwargs["session_id"]
        q = stream_query(self.scope)
        meta = await sync_to_async(services.scoped_meta)(self.session_id, kwargs["workspace"])
        path = folder.events_path(self.session_id)
        if q.mode == "raw":
            filters = {"types": [t.value for t in q.type] if q.type else None, "turn_id": q.turn_id,
                       "agent_name": q.agent_name, "since": q.since}
            self.tail = RawTail(meta, path, q.cursor, q.limit, filters)
        else:
            self.tail = TranscriptTail(meta, path, q.cursor, q.limit, q.epoch, q.generation)
        # The session's shared live feed rings `wake` on new rows; this consumer joins no group itself.
        self.feed = live_feed.subscribe(self.session_id, path, self.wake)
        await self.start_stream([])

    async def run(self) -> None:
        """Frames after the cursor: from the shared feed's ring when it holds them, else read from the store.
        The feed wakes the viewer when it has new rows (from a doorbell or its own poll)."""
        loop = asyncio.get_running_loop()
        out: bytes | list[bytes]  # raw frames stay apart: a large one is shared, never joined (pieces)
        out, terminal = await asyncio.to_thread(self.tail.open)
        if out and not await self.send_frames(out):
            return
        last_sent = loop.time()
        woke = False
        feed = self.feed
        assert feed is not None  # subscribed in handle()
        paced, more = isinstance(self.tail, TranscriptTail), False
        while not terminal:
            if paced and not more and (wait := TRANSCRIPT_DELTA_SECONDS - (loop.time() - last_sent)) > 0:
                await asyncio.sleep(wait)  # live rows wait to share a delta; catch-up pages never do
            taken = self.tail.take(feed)
            if taken is not None:
                out, terminal, more = taken
            else:
                # Behind the ring (a resume from far back, a slow client): a page of up to 1000 rows read and
                # framed off the loop, which every other stream and session shares.
                out, terminal, more = await asyncio.to_thread(self.tail.poll)
            if out:
                if not await self.send_frames(out):
                    return
                last_sent = loop.time()
            if terminal or more:
                continue
            # Only a quiet poll (no doorbell) asks whether the session stopped: doorbells mean rows.
            if not out and not woke and await self._stopped_without_newer():
                return
            woke = await self.wait_for_wake(QUIET_SECONDS)
            # Measured from the last write: doorbells for rows a filter hides must not starve the keepalive.
            if loop.time() - last_sent >= KEEPALIVE_SECONDS:
                await self.send_body(b": keepalive\n\n", more_body=True)
                last_sent = loop.time()

    async def _stopped_without_newer(self) -> bool:
        """A stopped session with nothing after the cursor gets one synthetic terminal frame."""
        if runs_here(self.session_id):
            # Its runtime is live in this process: a stop writes its row, which reaches this viewer like any other.
            # Every quiet viewer asks twice a second; this answers without a thread hop and a meta.json read.
            return False
        try:
            await sync_to_async(services.pull_copy)(self.session_id)  # another node's: its newest record first
            meta = await sync_to_async(services.read_session_meta)(self.session_id)
        except CompozyError:
            await self.send_body(frame(error_body("session not found", "not_found", 404), event="error"),
                                 more_body=True)
            return True
        if meta["state"] != SessionState.STOPPED:
            return False
        # Nearly always settled (judged once per run): only a crashed run not judged yet costs a thread hop.
        if transcript_check_pending(meta) and not await sync_to_async(transcript_settled)(self.session_id, meta):
            return False  # another node is closing the crashed turn right now: its row comes first
        newest = await asyncio.to_thread(event_store.max_sequence, self.tail.path)
        # Newer rows hidden by a raw-mode filter do not keep the stream open.
        if newest > self.tail.cursor and not self.tail.filtered:
            return False
        await self.send_body(terminal_frame(self.session_id, meta=meta), more_body=True)
        return True


class CatalogStreamConsumer(StreamingConsumer):
    """GET /api/sessions/catalog-stream: a wake signal per catalog change; clients refetch the list."""

    metric_stream = "catalog"

    async def handle(self, body: bytes) -> None:
        self.pending: list[dict[str, Any]] = []
        await self.start_stream([CATALOG_GROUP])

    async def catalog_changed(self, message: dict[str, Any]) -> None:
        principal = self.scope.get(PRINCIPAL_KEY)
        workspace = message.get("workspace_id")
        if isinstance(principal, Principal) and workspace and not principal.sees(str(workspace)):
            return  # a token limited to some workspaces hears nothing of the others
        self.pending.append({k: message.get(k) for k in ("kind", "workspace_id", "session_id")})
        self.wake.set()

    async def run(self) -> None:
        while True:
            woke = await self.wait_for_wake(KEEPALIVE_SECONDS)
            if not woke:
                await self.send_body(b": keepalive\n\n", more_body=True)
                continue
            batch, self.pending = self.pending, []
            if batch and not await self.send_frames(
                    b"".join(frame(item, event="session_catalog_changed") for item in batch)):
                return
