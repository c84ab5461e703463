"""Session recap (docs/reference/sessions.md §15, docs/reference/surfaces.md §4.7): a deterministic, bounded, redacted
snapshot.

Deterministic: everything derives from persisted state (meta.json, events.db, the input queue), so
the same store gives byte-identical output; `generated_at` is the store's newest timestamp, not the
clock. Bounded: reads only the tail of events.db (newest messages within `SCAN_EVENTS` rows, newest
`MARKER_WINDOW` markers), caps every text, and lists at most `MAX_PENDING_INPUTS` queued inputs.

The recap and its parts are TypedDicts: built as dicts once a read and sent as JSON as they are. Its messages are
the transcript's with every large value cut to a JSON string (`_bound_message`), so they are no longer `UIPart`s:
they stay plain JSON objects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from sessions import services
from sessions.core.enums import LIVE_STATES, EventType, MarkerKind
from sessions.core.errors import InvalidRequest
from sessions.core.jsonobj import JsonObject
from sessions.core.record import SessionMeta
from sessions.core.redact import bound_text, redact_value
from sessions.live import transcript
from sessions.live.ui_messages import UIMessage
from sessions.models import InputEntry
from sessions.services.payloads import SessionPayload
from sessions.services.prompts import QueuedInput
from sessions.store import events as event_store
from sessions.store import folder
from sessions.store.rows import EventRow

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
RECENT_MARKERS = 5
MARKER_WINDOW = 200
SCAN_EVENTS = 20_000
MAX_PENDING_INPUTS = 100
TEXT_BYTES = 4096
VALUE_BYTES = 2048

MARKER_TYPES = [EventType.TRANSCRIPT_MARKER.value, EventType.TRANSCRIPT_MARKER_REDACTED.value]
# Open until a later `session_recovered`; the always-pending kinds need an operator, not a recovery.
RECOVERABLE = frozenset({MarkerKind.SESSION_UNHEALTHY.value, MarkerKind.PROMPT_TIMEOUT.value})
ALWAYS_PENDING = frozenset({MarkerKind.PROVIDER_FAILURE.value, MarkerKind.MCP_AUTH_REQUIRED.value})
TURN_END = [EventType.DONE.value, EventType.ERROR.value, EventType.SESSION_STOPPED.value]


class RecapMarker(TypedDict):
    kind: str
    occurred_at: str
    summary: str
    sequence: int
    turn_id: str
    evidence: NotRequired[Any]  # bounded (`_bounded`): the marker's JSON, or a truncated JSON string
    diagnostic: NotRequired[Any]


class ActiveRun(TypedDict):
    turn_id: str
    started_at: str
    started_sequence: int
    source: str
    prompt: str
    last_event_sequence: int
    last_event_type: str
    last_event_at: str


class Snapshot(TypedDict):
    generated_at: str | None
    event_cursor: int
    transcript_cursor: int
    transcript_epoch: int
    transcript_generation: int
    queue_generation: int
    consistency: str


class Recap(TypedDict):
    """The recap (docs/reference/surfaces.md §4.7)."""

    session: SessionPayload
    active_run: ActiveRun | None
    recent_markers: list[RecapMarker]
    recent_messages: list[JsonObject]  # UI messages with large values cut to JSON strings (`_bound_message`)
    pending_inputs: list[QueuedInput]
    pending_markers: list[RecapMarker]
    snapshot: Snapshot


def check_limit(limit: int | None) -> int:
    if limit is None:
        return DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}", code="invalid_limit")
    return limit


def _bounded(value: Any) -> Any:
    """A tool input/output kept whole when small, else as a truncated JSON string."""
    if isinstance(value, str):
        return bound_text(value, VALUE_BYTES)
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return value if len(text) <= VALUE_BYTES else bound_text(text, VALUE_BYTES)


def _bound_message(message: UIMessage) -> JsonObject:
    parts = []
    for ui_part in message["parts"]:
        part: JsonObject = dict(ui_part)  # its values cut below: no longer a UIPart
        if "text" in part:
            part["text"] = bound_text(part["text"], TEXT_BYTES)
        for key in ("input", "output", "data", "errorText"):
            if key in part:
                part[key] = _bounded(part[key])
        parts.append(part)
    return {**message, "parts": parts}


def _marker(row: EventRow) -> RecapMarker:
    content = row["content"] if isinstance(row["content"], dict) else {}
    raw = content["raw"] if isinstance(content.get("raw"), dict) else {}
    kind = str(raw.get("kind") or f"transcript_marker.{content.get('title', '')}")
    marker: RecapMarker = {"kind": kind, "occurred_at": raw.get("occurred_at") or row["timestamp"],
                              "summary": bound_text(str(raw.get("summary") or content.get("text") or ""), 2048),
                              "sequence": row["sequence"], "turn_id": row["turn_id"]}
    if raw.get("evidence") is not None:
        marker["evidence"] = _bounded(raw["evidence"])
    if raw.get("diagnostic") is not None:
        marker["diagnostic"] = _bounded(raw["diagnostic"])
    return marker


def _short_kind(marker: RecapMarker) -> str:
    return str(marker["kind"]).removeprefix("transcript_marker.")


def pending_markers(markers: list[RecapMarker]) -> list[RecapMarker]:
    """Open unhealthy/timeout markers not followed by `session_recovered`, plus provider/auth failures."""
    pending: list[RecapMarker] = []
    for marker in markers:
        kind = _short_kind(marker)
        if kind == MarkerKind.SESSION_RECOVERED:
            pending = [m for m in pending if _short_kind(m) not in RECOVERABLE]
        elif kind in RECOVERABLE or kind in ALWAYS_PENDING:
            pending.append(marker)
    return pending[-RECENT_MARKERS:]


def _active_run(path: Path, meta: SessionMeta) -> ActiveRun | None:
    """The turn still open in the store (its first user row has no done/error/session_stopped after it)."""
    if meta["state"] not in LIVE_STATES:
        return None
    last = event_store.read_events(path, limit=1, newest=True,
                                   types=[EventType.USER_MESSAGE.value, EventType.SYNTHETIC_REENTRY.value])
    if not last:
        return None
    turn_id = last[0]["turn_id"]
    if event_store.read_events(path, after=last[0]["sequence"], limit=1, types=TURN_END):
        return None
    first = event_store.read_events(path, limit=1, turn_id=turn_id)[0]
    newest = event_store.read_events(path, limit=1, newest=True)[0]
    content = first["content"] if isinstance(first["content"], dict) else {}
    return {"turn_id": turn_id, "started_at": first["timestamp"], "started_sequence": first["sequence"],
            "source": content.get("source") or "user", "prompt": bound_text(str(content.get("text") or ""), 512),
            "last_event_sequence": newest["sequence"], "last_event_type": newest["type"],
            "last_event_at": newest["timestamp"]}


def _pending_inputs(session_id: str) -> list[QueuedInput]:
    rows = InputEntry.objects.filter(session_id=session_id, status=InputEntry.Status.QUEUED).order_by(
        "created_at", "id")[:MAX_PENDING_INPUTS]
    return [{"queue_entry_id": e.id, "queue_position": i + 1, "text": bound_text(e.text, VALUE_BYTES),
             "mode": e.mode, "status": e.status, "queue_generation": e.generation, "source": e.source,
             "created_at": folder.isoformat(e.created_at)} for i, e in enumerate(rows)]


def build_recap(session_id: str, *, workspace_ref: str | None = None, limit: int | None = None) -> Recap:
    limit = check_limit(limit)
    meta = services.scoped_meta(session_id, workspace_ref)
    path = folder.events_path(session_id)
    page = transcript.read_page(path, limit=limit, max_scan=SCAN_EVENTS)
    marker_rows = event_store.read_events(path, limit=MARKER_WINDOW, newest=True, types=MARKER_TYPES)
    markers = [_marker(r) for r in marker_rows]
    last = event_store.read_events(path, limit=1, newest=True)
    event_cursor = last[0]["sequence"] if last else 0
    stamps = [s for s in (last[0]["timestamp"] if last else None, meta.get("updated_at")) if s]
    recap: Recap = {
        "session": services.session_payload(meta),
        "active_run": _active_run(path, meta),
        "recent_markers": markers[-RECENT_MARKERS:],
        "recent_messages": [_bound_message(e["message"]) for e in page.entries],
        "pending_inputs": _pending_inputs(session_id),
        "pending_markers": pending_markers(markers),
        "snapshot": {
            "generated_at": max(stamps) if stamps else None,
            "event_cursor": max(event_cursor, page.max_sequence),
            "transcript_cursor": page.max_sequence,
            "transcript_epoch": transcript.session_epoch(meta),
            "transcript_generation": transcript.TRANSCRIPT_GENERATION,
            "queue_generation": int(meta.get("input_generation") or 0),
            "consistency": "persisted_reads",
        },
    }
    return redact_value(recap)  # the same shape, secrets masked
