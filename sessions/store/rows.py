"""A batch's rows on their way to events.db: drafted where the batch is handed off, finished (redacted, encoded as
JSON) by whichever writer holds the store, numbered once SQLite has stored them. EventLog (events.py) runs all three
in one place; under load the store writer process (writer/process.py) finishes and writes what the loop drafted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypedDict

from compozy_base import strict_json
from sessions.core.jsonobj import EventContent, JsonObject
from sessions.core.redact import redact_value
from sessions.store.ids import new_event_id
from sessions.store.ops import HookRunRow, NewEvent, StoreOp, UsageColumns, UsageUpdate
from sessions.store.timestamps import isoformat, now_stamp, utcnow

CONTENT_SCHEMA = "compozy.session.event.v1"
# The token_usage columns of events.SCHEMA_SQL, in the order usage merges write them.
USAGE_COLUMNS = (
    "input_tokens", "output_tokens", "total_tokens", "thought_tokens", "cache_read_tokens",
    "cache_write_tokens", "context_used", "context_size", "cost_amount", "cost_currency",
)
# Rows per INSERT statement (6 bound values each): well under SQLite's variable limit on any build.
INSERT_ROWS = 100
# A row's content as stored: strict JSON (a NaN that got this far is stored as null; compozy_base/strict_json.py),
# since the raw stream sends it to browsers as it is.
_dumps = strict_json.dumper(separators=(",", ":"), ensure_ascii=False)


class StoredEvent(TypedDict):
    """An event as committed (`EventLog.commit`, the recorder's `on_commit`). A TypedDict, not a dataclass: one is
    built per streamed chunk on the write path, and a dict costs nothing more there; it goes out as JSON as is."""

    id: str
    sequence: int  # 0 until SQLite numbered it (`numbered`)
    turn_id: str  # "-" for an event outside any turn
    type: str
    agent_name: str
    content: JsonObject  # free-form: our keys (schema, type, timestamp, turn_id), then the agent's (`_content`)
    timestamp: str


class EventRow(StoredEvent):
    """An event read back from events.db (`events.row_to_event`): the stored one and whether it is archived."""

    archived: bool


Values = tuple[str, str, str, str, str, str]  # one event's INSERT values: id, turn_id, type, agent, content, timestamp
# One event before redaction and JSON: id, turn_id, type, agent, the agent's content as recorded, timestamp.
Draft = tuple[str, str, str, str, EventContent, str]
Statement = tuple[str, tuple[Any, ...]]  # a usage merge or a hook run, as SQL and its parameters


class Drafted(NamedTuple):
    """A batch on its way to SQLite: the events as drafts, their envelopes (numbered once stored; the content as
    the agent sent it until `finish` says what redaction changed), and the other ops as statements."""

    drafts: list[Draft]
    stored: list[StoredEvent]
    statements: list[Statement]


def draft(ops: Sequence[StoreOp], agent: str) -> Drafted:
    """The events of `ops` as drafts and envelopes, the other ops as statements: the cheap part of an encoding,
    done where the batch is handed off (the store writer process does the rest, `finish`)."""
    now = now_stamp()
    drafts: list[Draft] = []
    stored: list[StoredEvent] = []
    statements: list[Statement] = []
    for op in ops:
        if not isinstance(op, NewEvent):
            statements.append(usage_statement(op.turn_id, op.usage) if isinstance(op, UsageUpdate)
                              else hook_run_statement(op.row))
            continue
        event_id = op.id or new_event_id()
        turn_id = op.turn_id or "-"
        # A plain str, not the EventType member: the committed row tuple the live feed keeps must hold only
        # strings and numbers, or the collector tracks it for as long as it is kept (sessions/live/feed.py).
        type_ = str(op.type)
        drafts.append((event_id, turn_id, type_, agent, op.content, now))
        stored.append({"id": event_id, "sequence": 0, "turn_id": turn_id, "type": type_, "agent_name": agent,
                       "content": _content(type_, now, op.turn_id, op.content), "timestamp": now})
    return Drafted(drafts, stored, statements)


def _content(type_: str, timestamp: str, turn_id: str, agent_content: EventContent) -> JsonObject:
    """The stored content: our keys (schema, type, timestamp, turn id), then the agent's."""
    content = {"schema": CONTENT_SCHEMA, "type": type_, "timestamp": timestamp, **agent_content}
    if turn_id:
        content.setdefault("turn_id", turn_id)
    return content


def finish(drafts: list[Draft], *, redact: bool = True) -> tuple[list[Values], dict[int, JsonObject]]:
    """The drafts as INSERT values (the agent's part redacted, the content as JSON), and the contents redaction
    changed, by index (the envelopes must show what is stored, never what the agent sent)."""
    values: list[Values] = []
    changed: dict[int, JsonObject] = {}
    for i, (event_id, turn_id, type_, agent, agent_content, now) in enumerate(drafts):
        # Only the agent's part is redacted: the keys we add are our own.
        redacted = redact_value(agent_content) if redact else agent_content
        content = _content(type_, now, "" if turn_id == "-" else turn_id, redacted)
        if redacted != agent_content:
            changed[i] = content
        values.append((event_id, turn_id, type_, agent, _dumps(content), now))
    return values, changed


def numbered(stored: list[StoredEvent], values: list[Values],
             lasts: list[int]) -> tuple[list[StoredEvent], list[tuple[Any, ...]]]:
    """The envelopes with their sequences, and the committed rows in `read_rows` form (the live feed takes them
    without reading them back): within one statement, under the write lock, rows take consecutive numbers, the
    last one's counted back."""
    rows = [(last - len(chunk) + 1 + offset, *value, 0)
            for chunk, last in zip(slices(values), lasts, strict=True) for offset, value in enumerate(chunk)]
    for event, row in zip(stored, rows, strict=True):
        event["sequence"] = row[0]
    return stored, rows


def slices(values: list[Values]) -> list[list[Values]]:
    return [values[i:i + INSERT_ROWS] for i in range(0, len(values), INSERT_ROWS)]


def usage_statement(turn_id: str, usage: UsageColumns) -> Statement:
    """One row per turn; later non-null values overwrite earlier ones."""
    values = {k: usage.get(k) for k in USAGE_COLUMNS}
    cols = ", ".join(USAGE_COLUMNS)
    marks = ", ".join("?" for _ in USAGE_COLUMNS)
    updates = ", ".join(f"{c}=COALESCE(excluded.{c}, {c})" for c in USAGE_COLUMNS)
    return (f"INSERT INTO token_usage(turn_id, {cols}, timestamp) VALUES (?, {marks}, ?)"
            f" ON CONFLICT(turn_id) DO UPDATE SET {updates}, timestamp=excluded.timestamp",
            (turn_id, *values.values(), isoformat(utcnow())))


def hook_run_statement(row: HookRunRow) -> Statement:
    return ("INSERT INTO hook_runs(id, hook_name, event, source, mode, duration_ns, outcome, dispatch_depth,"
            " patch_applied, error, required, recorded_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (row["id"], row["hook_name"], row["event"], row.get("source", "config"), row["mode"],
             int(row.get("duration_ns", 0)), row["outcome"], int(row.get("dispatch_depth", 1)),
             row.get("patch_applied"), row.get("error"), 1 if row.get("required") else 0,
             row.get("recorded_at") or isoformat(utcnow())))
