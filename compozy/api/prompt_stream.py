"""The prompt stream (docs/reference/events.md §6.2): how `POST …/prompt` answers when the prompt starts a turn.

The stream only reads. The turn runs in the session's runtime; this tails the turn's rows from the store the
way the session stream does (sessions/live/feed.py: the shared live feed's ring, else events.db read off the
loop), from right after the turn's `user_message` to its `done`/`error` (or a `session_stopped`), skipping
rows of other turns. A viewer that goes away ends only its own read: the turn goes on.

Two forms:
- the AI SDK's UI message stream v1 (header `x-vercel-ai-ui-message-stream: v1`; `data: {chunk}` frames,
  then `data: [DONE]`), so a `useChat` app drives a session directly. `agent_message` rows are text parts,
  `thought` rows reasoning parts, `tool_call`/`tool_result` a dynamic tool part with its input and output,
  `permission` rows a `data-compozy-permission` part (id = request id, so the decision updates it in place),
  every other row of the turn a `data-compozy-event` part holding the whole stored event; a turn that ends
  in `error` sends an `error` chunk before `finish`;
- `?frames=raw` (alias `?format=raw`) for the CLI: `event: <type>`, data = the live agent event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from django.http import StreamingHttpResponse

from compozy_base import metrics, strict_json
from sessions.core.enums import EventType
from sessions.core.live import LiveSession
from sessions.live import feed as live_feed
from sessions.live.pressure import pieces, room_for
from sessions.live.transcript import event_data, permission_data
from sessions.runtime.manager import get_manager
from sessions.services.payloads import SessionIds, envelope
from sessions.store import events as event_store
from sessions.store import folder
from sessions.store.rows import EventRow

logger = logging.getLogger(__name__)

# Routers and proxies drop idle connections after ~30-60 s; a comment every 20 s keeps them open
# (docs/reference/events.md
# §6). The AI SDK's event-stream parser skips comments.
KEEPALIVE_SECONDS = 20.0
# A reader with nothing new wakes this often to ask whether the turn ended without a terminal row reaching
# it (the feed, not the reader, polls the store for rows whose doorbell was dropped).
QUIET_SECONDS = 0.5
PAGE = 1000

UI_STREAM_HEADER = "x-vercel-ai-ui-message-stream"
_dumps = strict_json.dumper(separators=(",", ":"), ensure_ascii=False)  # frames are strict JSON (no NaN)
TURN_END = frozenset({EventType.DONE, EventType.ERROR})
# The live agent event of the raw form: these content keys, when set (docs/reference/events.md §6.2).
RAW_KEYS = ("text", "title", "tool_call_id", "stop_reason", "error", "failure", "usage", "runtime", "raw")


def wants_json(accept: str | None) -> bool:
    """Content negotiation: the JSON prompt result only for a client that asks for `application/json` and
    not for `text/event-stream` (no Accept, `*/*` and event-stream all get the stream)."""
    types = {part.split(";", 1)[0].strip().lower() for part in (accept or "").split(",")}
    return "application/json" in types and "text/event-stream" not in types


# ---- reading the turn --------------------------------------------------------------------------

class _Waker:
    """The feed rings `event` on new rows; a timer handle, not asyncio.wait_for (a task per wait)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        if self.event.is_set():
            self.event.clear()
            return
        timer = asyncio.get_running_loop().call_later(timeout, self.event.set)
        try:
            await self.event.wait()
        finally:
            timer.cancel()
            self.event.clear()


async def turn_events(session_id: str, path: Path, turn_id: str,
                      ended: asyncio.Event | None) -> AsyncIterator[list[EventRow] | None]:
    """The stored rows of one turn after its `user_message`, in batches, ending with the batch that holds
    its `done`/`error` (or a `session_stopped`). Yields None when a keepalive is due. `ended` is the
    runtime's turn-ended event (None when the turn already ended): once it is set every row of the turn is
    committed, so a store read that finds nothing more ends a turn whose terminal row never came."""
    loop = asyncio.get_running_loop()
    waker = _Waker()
    feed = live_feed.subscribe(session_id, path, waker.event)
    try:
        # The turn's first row is its user_message (committed before prompt_session returned).
        first = await asyncio.to_thread(event_store.read_rows, path, turn_id=turn_id, limit=1)
        cursor = int(first[0][0]) if first else 0
        last_sent = loop.time()
        while True:
            finished = ended is None or ended.is_set()
            rows = None if finished else feed.since(cursor)
            if rows is None:
                # Behind the ring, or the turn ended: the store is read off the loop.
                raws = await asyncio.to_thread(event_store.read_rows, path, after=cursor, limit=PAGE)
                rows, more = [live_feed.FeedRow(r) for r in raws], len(raws) == PAGE
            else:
                more = False
            batch: list[EventRow] = []
            terminal = False
            for row in rows:
                cursor = row.sequence
                if row.type == EventType.SESSION_STOPPED:
                    batch.append(row.event())
                    terminal = True
                    break
                if row.raw[2] != turn_id:
                    continue  # another turn's row, or a daemon row outside any turn
                batch.append(row.event())
                if row.type in TURN_END:
                    terminal = True
                    break
            if batch:
                yield batch
                last_sent = loop.time()
            if terminal or (finished and not rows):
                return
            if more:
                continue
            await waker.wait(QUIET_SECONDS)
            if loop.time() - last_sent >= KEEPALIVE_SECONDS:
                yield None
                last_sent = loop.time()
    finally:
        live_feed.unsubscribe(feed, waker.event)


# ---- the AI SDK's UI message stream ------------------------------------------------------------

class UIMessageChunks:
    """Stored rows of one turn → UI message stream chunks (the AI SDK's `UIMessageChunk`s). Only fields of
    the protocol's own schemas are sent: its parser refuses what it does not know in older versions."""

    def __init__(self, meta: SessionIds, turn_id: str) -> None:
        self.meta, self.turn_id = meta, turn_id
        self.open: tuple[str, str] | None = None  # the streaming text or reasoning part: (kind, id)
        self.tools: dict[str, Any] = {}  # toolCallId → the input last sent
        self.error: str | None = None

    def start(self) -> list[dict[str, Any]]:
        return [{"type": "start", "messageId": f"msg_{self.turn_id}"}]

    def _close(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        kind, part_id = self.open
        self.open = None
        return [{"type": f"{kind}-end", "id": part_id}]

    def _tool_input(self, call_id: str, content: dict[str, Any], *, update: bool) -> list[dict[str, Any]]:
        name = str(content.get("tool_name") or content.get("title") or "tool")
        given = content.get("tool_input")
        if call_id not in self.tools:
            self.tools[call_id] = given
            return [{"type": "tool-input-start", "toolCallId": call_id, "toolName": name, "dynamic": True},
                    {"type": "tool-input-available", "toolCallId": call_id, "toolName": name,
                     "input": given if given is not None else {}, "dynamic": True}]
        if update and given is not None and given != self.tools[call_id]:
            self.tools[call_id] = given
            return [{"type": "tool-input-available", "toolCallId": call_id, "toolName": name, "input": given,
                     "dynamic": True}]
        return []

    def row(self, event: EventRow) -> list[dict[str, Any]]:
        type_ = event["type"]
        content = event["content"] if isinstance(event["content"], dict) else {}
        if type_ in (EventType.AGENT_MESSAGE, EventType.THOUGHT):
            text = content.get("text")
            if not isinstance(text, str) or not text:
                return []  # empty chunks are dropped, as in the transcript
            kind = "text" if type_ == EventType.AGENT_MESSAGE else "reasoning"
            out: list[dict[str, Any]] = []
            if self.open is None or self.open[0] != kind:
                out = self._close()
                self.open = (kind, f"{kind}_{event['sequence']}")
                out.append({"type": f"{kind}-start", "id": self.open[1]})
            return [*out, {"type": f"{kind}-delta", "id": self.open[1], "delta": text}]
        out = self._close()
        if type_ == EventType.TOOL_CALL:
            return out + self._tool_input(str(content.get("tool_call_id") or event["id"]), content, update=True)
        if type_ == EventType.TOOL_RESULT:
            call_id = str(content.get("tool_call_id") or event["id"])
            out += self._tool_input(call_id, content, update=False)  # a result whose call came before the turn
            error = content.get("tool_error")
            if error:
                return [*out, {"type": "tool-output-error", "toolCallId": call_id, "errorText": str(error),
                               "dynamic": True}]
            return [*out, {"type": "tool-output-available", "toolCallId": call_id,
                           "output": content.get("tool_result"), "dynamic": True}]
        if type_ == EventType.PERMISSION:
            request_id, data = permission_data(event)
            data.update({"session_id": self.meta["id"], "workspace_id": self.meta["workspace_id"]})
            return [*out, {"type": "data-compozy-permission", "id": request_id, "data": data}]
        if type_ == EventType.ERROR:
            summary = event_data(event)
            failure = summary["failure"] if isinstance(summary.get("failure"), dict) else {}
            self.error = str(summary.get("error") or failure.get("summary") or "the turn failed")
        return [*out, {"type": "data-compozy-event", "id": str(event["id"]), "data": envelope(self.meta, event)}]

    def finish(self) -> list[dict[str, Any]]:
        out = self._close()
        if self.error is not None:
            out.append({"type": "error", "errorText": self.error})
        return [*out, {"type": "finish"}]


def _data_frames(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + _dumps(c).encode() + b"\n\n"
                    for c in chunks)


def raw_frame(session_id: str, event: EventRow) -> bytes:
    """The raw form's frame: `id:` = sequence, `event:` = type, data = the live agent event."""
    content = event["content"] if isinstance(event["content"], dict) else {}
    data = {"type": event["type"], "session_id": session_id, "turn_id": event["turn_id"],
            "timestamp": event["timestamp"]}
    data.update({k: content[k] for k in RAW_KEYS if content.get(k) not in (None, "")})
    body = _dumps(data)
    return f"id: {event['sequence']}\nevent: {event['type']}\ndata: {body}\n\n".encode()


# ---- the response ------------------------------------------------------------------------------

async def _frames(meta: SessionIds, turn_id: str, ended: asyncio.Event | None, raw: bool,
                  backlog: Callable[[], int] | None, abort: Callable[[], None] | None) -> AsyncIterator[bytes]:
    """The response body. Like the session stream, it writes nothing more while about a megabyte waits for a
    client that stopped reading, writes a large frame in pieces under that mark, and closes the connection of a
    client that took nothing for `[http] stream_stall_timeout` (the turn goes on)."""
    session_id = meta["id"]
    ui = UIMessageChunks(meta, turn_id)
    metrics.SSE_CLIENTS.labels(stream="prompt").inc()
    try:
        if not raw:
            yield _data_frames(ui.start())
        async for batch in turn_events(session_id, folder.events_path(session_id), turn_id, ended):
            if batch is None:
                out = [b": keepalive\n\n"]
            elif raw:
                out = [raw_frame(session_id, event) for event in batch]
            else:
                out = [_data_frames([chunk for event in batch for chunk in ui.row(event)])]
            for piece in pieces(out):
                if not await room_for(backlog, len(piece), "prompt"):
                    if abort is not None:
                        abort()  # what was queued for it goes with the connection
                    return
                yield piece
        if not raw:
            yield _data_frames(ui.finish()) + b"data: [DONE]\n\n"
    except asyncio.CancelledError:
        # The viewer went away (Django cancels the response on http.disconnect): only this read ends.
        logger.debug("prompt stream of %s turn %s: viewer left", session_id, turn_id)
        raise
    finally:
        metrics.SSE_CLIENTS.labels(stream="prompt").dec()


def response_for_turn(session_id: str, turn_id: str, *, raw: bool = False,
                      backlog: Callable[[], int] | None = None,
                      abort: Callable[[], None] | None = None) -> StreamingHttpResponse:
    """The 200 answer to a prompt that started turn `turn_id` (called on the loop right after it started).
    `backlog` is the connection's queued byte count (the request scope's BACKLOG), None where there is none;
    `abort` closes the connection (ABORT)."""
    runtime: LiveSession | None = get_manager().get(session_id)
    meta: SessionIds = {"id": session_id, "workspace_id": (runtime.rec.workspace_id if runtime else None)}
    turn = runtime.turn if runtime is not None else None
    ended = turn.ended if turn is not None and turn.id == turn_id else None
    response = StreamingHttpResponse(_frames(meta, turn_id, ended, raw, backlog, abort),
                                     content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    if not raw:
        response[UI_STREAM_HEADER] = "v1"
    return response
