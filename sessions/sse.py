"""SSE over channels consumers. The store is the truth: a frame is read from events.db after a
doorbell (or a poll), never taken from the channel message, so a dropped doorbell loses nothing.

Raw frames: `id:` = sequence, `event:` = type, `data:` = SessionEventPayload. Resume from
`Last-Event-ID` (or `?after_sequence=` / `?after=` for clients that cannot set headers).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer

from compozy_site.api import error_body
from sessions import services
from sessions.enums import EventType, SessionState
from sessions.errors import CompozyError, InvalidRequest
from sessions.runtime.signals import CATALOG_GROUP, session_group
from sessions.store import events as event_store
from sessions.store import folder

logger = logging.getLogger(__name__)

# Routers and proxies drop idle connections after ~30-60 s; a comment every 20 s keeps them open.
KEEPALIVE_SECONDS = 20.0
# The doorbell is best effort (the in-memory layer drops past capacity), so readers also poll.
POLL_SECONDS = 0.5
PAGE = 1000

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def frame(data: dict[str, Any], event: str | None = None, event_id: int | str | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


class StreamingConsumer(AsyncHttpConsumer):
    """An HTTP consumer whose response outlives handle(): a pump task writes, dispatch keeps running."""

    groups_to_join: list[str]

    async def http_request(self, message: dict[str, Any]) -> None:
        if "body" in message:
            self.body.append(message["body"])
        if message.get("more_body"):
            return
        self.pump: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()
        self.finished = False
        try:
            await self.handle(b"".join(self.body))
        except CompozyError as exc:
            await self.send_json_error(exc.status, exc.message, exc.code, exc.data)
            raise StopConsumer() from None

    async def send_json_error(self, status: int, message: str, code: str, data: dict[str, Any] | None = None) -> None:
        body = json.dumps(error_body(message, code, status, data)).encode()
        await self.send_response(status, body, headers=[(b"content-type", b"application/json")])
        self.finished = True

    async def start_stream(self, groups: list[str]) -> None:
        self.groups_to_join = groups
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.send_headers(status=200, headers=SSE_HEADERS)
        await self.send_body(b": connected\n\n", more_body=True)
        self.pump = asyncio.create_task(self._run_pump())

    async def _run_pump(self) -> None:
        try:
            await self.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("SSE stream failed")
            with contextlib.suppress(Exception):
                await self.send_body(frame({"error": "stream failed", "diagnostic": {"message": str(exc)}},
                                           event="error"), more_body=True)
        finally:
            await self.finish()

    async def finish(self) -> None:
        if not self.finished:
            self.finished = True
            with contextlib.suppress(Exception):
                await self.send_body(b"", more_body=False)

    async def wait_for_wake(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.wake.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self.wake.clear()

    async def run(self) -> None:
        raise NotImplementedError

    async def events_appended(self, message: dict[str, Any]) -> None:
        self.wake.set()

    async def catalog_changed(self, message: dict[str, Any]) -> None:
        self.wake.set()

    async def disconnect(self) -> None:
        if getattr(self, "pump", None) is not None and not self.pump.done():
            self.pump.cancel()
        for group in getattr(self, "groups_to_join", []):
            with contextlib.suppress(Exception):
                await self.channel_layer.group_discard(group, self.channel_name)

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        await self.disconnect()
        raise StopConsumer()


def _query(scope: dict[str, Any]) -> dict[str, list[str]]:
    return parse_qs(scope.get("query_string", b"").decode("latin-1"))


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _non_negative(value: str | None, what: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise InvalidRequest(f"{what} must be a non-negative integer", code="invalid_cursor")
    return number


class SessionStreamConsumer(StreamingConsumer):
    """GET /api/workspaces/<ws>/sessions/<id>/stream (raw persisted events)."""

    async def handle(self, body: bytes) -> None:
        kwargs = self.scope["url_route"]["kwargs"]
        self.session_id = kwargs["session_id"]
        workspace = kwargs["workspace"]
        q = _query(self.scope)
        frames = (q.get("frames") or ["raw"])[0]
        if frames not in {"raw", "transcript"}:
            raise InvalidRequest("frames must be raw or transcript", code="invalid_frames")
        if frames == "transcript":
            raise InvalidRequest("transcript frames are not served yet; use frames=raw", code="invalid_frames")
        for bad in ("replay", "before_sequence"):
            if bad in q:
                raise InvalidRequest(f"{bad} is not supported on the stream", code="invalid_parameter")
        after = _non_negative(_header(self.scope, b"last-event-id"), "Last-Event-ID")
        if after is None:
            after = _non_negative((q.get("after_sequence") or q.get("after") or [None])[0], "after_sequence")
        self.types = [t for v in q.get("type", []) for t in v.split(",") if t] or None
        self.turn_id = (q.get("turn_id") or [None])[0]
        limit = _non_negative((q.get("limit") or [None])[0], "limit")
        self.meta = await sync_to_async(services.read_session_meta)(self.session_id)
        await sync_to_async(services._workspace_scope)(workspace, self.meta)
        self.path = folder.events_path(self.session_id)
        if after is None and limit:
            newest = await asyncio.to_thread(event_store.read_events, self.path, limit=limit, newest=True,
                                             types=self.types, turn_id=self.turn_id)
            after = newest[0]["sequence"] - 1 if newest else 0
        self.cursor = after or 0
        await self.start_stream([session_group(self.session_id)])

    async def run(self) -> None:
        idle = 0.0
        while True:
            rows = await asyncio.to_thread(event_store.read_events, self.path, after=self.cursor, limit=PAGE,
                                           types=self.types, turn_id=self.turn_id)
            if rows:
                idle = 0.0
                chunks = []
                terminal = False
                for row in rows:
                    payload = services.envelope(self.meta, row)
                    chunks.append(frame(payload, event=row["type"], event_id=row["sequence"]))
                    self.cursor = row["sequence"]
                    if row["type"] == EventType.SESSION_STOPPED:
                        terminal = True
                        break
                await self.send_body(b"".join(chunks), more_body=True)
                if terminal:
                    return
                if len(rows) == PAGE:
                    continue
            elif await self._stopped_without_newer():
                return
            woke = await self.wait_for_wake(POLL_SECONDS)
            if not woke:
                idle += POLL_SECONDS
                if idle >= KEEPALIVE_SECONDS:
                    idle = 0.0
                    await self.send_body(b": keepalive\n\n", more_body=True)

    async def _stopped_without_newer(self) -> bool:
        """A stopped session with nothing after the cursor gets one synthetic terminal frame."""
        try:
            meta = await sync_to_async(services.read_session_meta)(self.session_id)
        except CompozyError:
            await self.send_body(frame({"error": "session not found"}, event="error"), more_body=True)
            return True
        if meta["state"] != SessionState.STOPPED:
            return False
        newest = await asyncio.to_thread(event_store.max_sequence, self.path)
        if newest > self.cursor:
            if self.types or self.turn_id:
                # Newer rows exist but the filter hides them; the stream is still over.
                pass
            else:
                return False
        await self.send_body(frame({
            "session_id": self.session_id, "type": "session_stopped", "stop_reason": meta.get("stop_reason"),
            "stop_detail": meta.get("stop_detail"), "failure": meta.get("failure"),
            "timestamp": folder.isoformat(folder.utcnow()),
        }, event="session_stopped"), more_body=True)
        return True


class CatalogStreamConsumer(StreamingConsumer):
    """GET /api/sessions/catalog-stream: a wake signal per catalog change; clients refetch the list."""

    async def handle(self, body: bytes) -> None:
        self.pending: list[dict[str, Any]] = []
        await self.start_stream([CATALOG_GROUP])

    async def catalog_changed(self, message: dict[str, Any]) -> None:
        self.pending.append({k: message.get(k) for k in ("kind", "workspace_id", "session_id")})
        self.wake.set()

    async def run(self) -> None:
        while True:
            woke = await self.wait_for_wake(KEEPALIVE_SECONDS)
            if not woke:
                await self.send_body(b": keepalive\n\n", more_body=True)
                continue
            batch, self.pending = self.pending, []
            if batch:
                await self.send_body(b"".join(frame(item, event="session_catalog_changed") for item in batch),
                                     more_body=True)
