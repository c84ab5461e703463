"""What a session stream reads and frames, apart from the consumers that serve it (compozy/api/sse.py).

`RawTail`: persisted rows after a cursor as raw frames (`id:` = sequence, `event:` = type, `data:` =
SessionEventPayload). `TranscriptTail`: one `transcript_snapshot` (unless a fenced resume), then
`transcript_delta` frames. Both take rows from the session's shared live feed when its ring holds them and read
events.db otherwise (called in a worker thread then: `poll`, `open`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from compozy_base import strict_json
from sessions import services
from sessions.core.enums import EventType
from sessions.core.jsonobj import JsonObject
from sessions.core.record import SessionMeta
from sessions.live import feed as live_feed
from sessions.live import transcript
from sessions.store import events as event_store
from sessions.store import replica
from sessions.store.rows import EventRow

PAGE = 1000  # rows read from the store per catch-up page
# A frame's data is strict JSON (no NaN: strict_json.py); one encoder for every frame.
_dumps = strict_json.dumper(separators=(",", ":"), ensure_ascii=False)


def frame(data: Mapping[str, Any], event: str | None = None, event_id: int | str | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event:
        lines.append(f"event: {event}")
    lines.append("data: " + _dumps(data))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def terminal_frame(session_id: str, *, row: EventRow | None = None,
                   meta: SessionMeta | None = None) -> bytes:
    """The closing `session_stopped` frame (no id: the client's cursor stays on the last stored row),
    from the stored row when there is one, else from meta.json."""
    source: Mapping[str, object]
    timestamp: str | None
    if row is not None:
        content = row["content"] if isinstance(row["content"], dict) else {}
        source, timestamp = content, row["timestamp"]
    else:
        source, timestamp = meta or {}, meta.get("updated_at") if meta else None
    return frame({"session_id": session_id, "type": EventType.SESSION_STOPPED.value,
                  "stop_reason": source.get("stop_reason") or None, "stop_detail": source.get("stop_detail") or None,
                  "failure": source.get("failure"), "timestamp": timestamp}, event=EventType.SESSION_STOPPED)




class RawTail:
    """Raw persisted rows after a cursor: `id:` = sequence, `event:` = type, `data:` = SessionEventPayload."""

    def __init__(self, meta: SessionMeta, path: Path, cursor: int | None, limit: int | None,
                 filters: dict[str, Any]) -> None:
        self.meta, self.path, self.limit, self.filters = meta, path, limit, filters
        self.conn: sqlite3.Connection | None = None
        self.cursor = cursor or 0
        self.start_cursor = cursor
        self.row_filter = event_store.RowFilter.of(**filters)
        self.filtered = bool(self.row_filter)
        self.head = json.dumps({"session_id": meta["id"], "workspace_id": meta["workspace_id"]})[:-1]

    def open(self) -> tuple[list[bytes], bool]:
        if self.start_cursor is None and self.limit:
            newest = event_store.read_events(self.path, limit=self.limit, newest=True, **self.filters)
            self.cursor = newest[0]["sequence"] - 1 if newest else 0
        return [], False

    def _frame(self, raw: tuple[Any, ...]) -> bytes:
        seq, event_id, turn_id, type_, agent, text, timestamp, archived = raw
        try:
            # Only to validate: a broken row must not break the stream, nor a NaN an earlier version stored (a
            # browser's JSON.parse would refuse the frame): that row is framed again, the number as null.
            content = strict_json.loads(text, duplicates=True)
            cleaned = False
        except strict_json.NotFinite:
            content, cleaned = strict_json.finite(json.loads(text)), True
        except json.JSONDecodeError:
            content, cleaned = None, False
        if not isinstance(content, dict) or cleaned or type_ == EventType.SESSION_STOPPED:
            row: EventRow = {"id": event_id, "sequence": seq, "turn_id": turn_id, "type": type_, "agent_name": agent,
                   "content": content if isinstance(content, dict) else {"invalid_json": text[:2048]},
                   "timestamp": timestamp, "archived": bool(archived)}
            payload = cast(JsonObject, services.envelope(self.meta, row))  # and the stop's keys below
            if type_ == EventType.SESSION_STOPPED:
                payload.update({k: row["content"].get(k) for k in ("stop_reason", "stop_detail", "failure")})
            return frame(payload, event=type_, event_id=seq)
        dumps = json.dumps
        data = (f'{self.head},"id":{dumps(event_id)},"sequence":{seq},"turn_id":{dumps(turn_id)},'
                f'"type":{dumps(type_)},"agent_name":{dumps(agent)},"content":{text},'
                f'"timestamp":{dumps(timestamp)},"archived":{"true" if archived else "false"}}}')
        return f"id: {seq}\nevent: {type_}\ndata: {data}\n\n".encode()

    def take(self, feed: live_feed.SessionFeed) -> tuple[list[bytes], bool, bool] | None:
        """Frames from the shared live feed; None when the cursor is older than its ring."""
        rows = feed.since(self.cursor)
        if rows is None:
            return None
        out, terminal = self._emit(rows)
        return out, terminal, False

    def poll(self) -> tuple[list[bytes], bool, bool]:
        """The next page from the store (the cursor is behind the feed's ring)."""
        if self.conn is None and self.path.exists():
            self.conn = event_store.connect(self.path, readonly=True)
        rows = event_store.read_rows(self.path, after=self.cursor, limit=PAGE, conn=self.conn, **self.filters)
        full = len(rows) == PAGE
        cap = replica.visible_upto(self.meta["id"])  # written here in a cluster: no row the database may not get
        if cap is not None:
            rows = [raw for raw in rows if int(raw[0]) <= cap]
        out, terminal = self._emit(live_feed.FeedRow(raw) for raw in rows)
        return out, terminal, not terminal and full and (cap is None or bool(rows))

    def _emit(self, rows: Iterable[live_feed.FeedRow]) -> tuple[list[bytes], bool]:
        """Frames for rows after the cursor, up to a stored `session_stopped` (then True: terminal). Not joined
        here: a large frame is the feed's one copy, shared by every viewer (stream_pressure.pieces)."""
        chunks = []
        for row in rows:
            self.cursor = row.sequence
            if self.filtered and not self.row_filter.matches(row.raw):
                continue
            chunks.append(row.frame(self._frame))
            if row.type == EventType.SESSION_STOPPED:
                return chunks, True
        return chunks, False


class TranscriptTail:
    """Assembled transcript frames: one `transcript_snapshot` (unless a fenced resume), then deltas."""

    filtered = False

    def __init__(self, meta: SessionMeta, path: Path, cursor: int | None, limit: int | None,
                 epoch: int | None, generation: int | None) -> None:
        self.meta, self.path, self.limit = meta, path, limit or transcript.DEFAULT_LIMIT
        self.cursor = cursor or 0
        self.fences = (cursor, epoch, generation)
        self.epoch = transcript.session_epoch(meta)
        self.assembler = transcript.Assembler()

    def open(self) -> tuple[list[bytes], bool]:
        cursor, epoch, generation = self.fences
        top = event_store.max_sequence(self.path)
        reason = transcript.check_fences(cursor, epoch, generation, current_epoch=self.epoch, max_sequence=top)
        if cursor is not None and reason is None:
            self.assembler = transcript.resume(self.path, cursor)
            return [], False
        page = transcript.read_page(self.path, limit=self.limit)
        self.assembler, self.cursor = page.assembler, page.max_sequence
        data: dict[str, Any] = {
            "session_id": self.meta["id"], "workspace_id": self.meta["workspace_id"], "epoch": self.epoch,
            "generation": transcript.TRANSCRIPT_GENERATION, "entries": page.entries,
            "max_sequence": page.max_sequence, "has_older": page.has_older,
        }
        if page.next_before_sequence is not None:
            data["next_before_sequence"] = page.next_before_sequence
        data["reset"] = reason is not None
        if reason is not None:
            data["reason"] = reason.value
        out = frame(data, event="transcript_snapshot", event_id=page.max_sequence)
        return self._with_terminal(out, self.assembler.last_row)

    def take(self, feed: live_feed.SessionFeed) -> tuple[list[bytes], bool, bool] | None:
        """A delta from the shared live feed's decoded rows; None when the cursor is older than its ring.

        Viewers at the same place (the same cursor, the same open entry, the same rows after it) get the same
        delta: the first to get there builds it and the feed keeps it for the others, so a large message is
        framed once, not once per viewer (a 48 MiB reply cost each dashboard viewer 58 MB)."""
        rows = feed.since(self.cursor)
        if rows is None:
            return None
        if not rows:
            return [], False, False
        key = ("transcript", self.epoch, self.cursor, rows[-1].sequence, self.assembler.open_start)
        events = [r.event() for r in rows]
        shared = feed.shared_frame(key)
        if shared is not None:
            self.assembler.feed_all(events)
            self.assembler.forget_changes()
            self.cursor = rows[-1].sequence
            frames, terminal = shared
            return frames, terminal, False
        out = self._delta_frames(transcript.apply_rows(self.assembler, events, self.cursor))
        feed.share_frame(key, (out[0], out[1]))
        return out

    def poll(self) -> tuple[list[bytes], bool, bool]:
        return self._delta_frames(transcript.read_delta(self.path, self.assembler, self.cursor, limit=PAGE))

    def _delta_frames(self, delta: transcript.Delta) -> tuple[list[bytes], bool, bool]:
        if not delta.rows:
            return [], False, False
        self.cursor = delta.cursor
        top = event_store.max_sequence(self.path) if delta.has_more else delta.cursor
        out = frame({"session_id": self.meta["id"], "epoch": self.epoch,
                     "generation": transcript.TRANSCRIPT_GENERATION, "entries": delta.entries,
                     "cursor": delta.cursor, "max_sequence": top, "has_more": top > delta.cursor},
                    event="transcript_delta", event_id=delta.cursor)
        frames, terminal = self._with_terminal(out, delta.last_row)
        return frames, terminal, delta.has_more and not terminal

    def _with_terminal(self, out: bytes, last: EventRow | None) -> tuple[list[bytes], bool]:
        if last is not None and last["type"] == EventType.SESSION_STOPPED:
            return [out, terminal_frame(self.meta["id"], row=last)], True
        return [out], False
