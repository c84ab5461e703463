"""Transcript assembly: stored events → AI-SDK UI messages, deterministic, incremental, bounded.

An entry is `{message, start_sequence, sequence}`: `message` is a UI message `{id, role, metadata, parts}`,
`start_sequence` the first event folded into it and `sequence` the last event that changed it.

Rules (docs/reference/events.md §5), applied in sequence order:

- `user_message` / `synthetic_reentry` close the open assistant message and make one user message.
- `agent_message` → `text` part, `thought` → `reasoning` part (consecutive chunks merge; empty ones are
  dropped); `tool_call` → `dynamic-tool` part, joined with its `tool_result` by `tool_call_id`. They
  append to the open assistant message, opening one if none is open.
- `permission`, markers, runtime events, `clarify` and unknown types → `data-compozy-event` parts
  (a permission *request*, `decision` pending, is a `data-compozy-permission` part whose later decision
  updates it in place). Inside an open assistant message they are parts of it; otherwise each is its own
  `system` message. They never close the assistant message.
- `done` only closes the open assistant message (adding `stop_reason`/`usage` to its metadata); `plan`
  and `system` only close it when they belong to its turn (a daemon-originated row such as `auto_title`,
  recorded outside any turn, does not split an answer); a `plan` then shows as a `data-compozy-event` part
  (carrying its `entries`) like a marker; `error` and `session_stopped` close it and make a `system` message.
- A `dynamic-tool` part also carries the ACP `toolKind` (`read`, `edit`, …), the latest ACP `status` and the
  call's `content` blocks (text, `diff`, `terminal`: `tool_content` of its newest `tool_call` row that had any).
  A `system` row titled `terminal_exited` adds its command, exit code and output to the open message's tool part
  whose `terminal` block names it (`terminals`, by terminal id), else it is an event part; it never closes a message.
- An assistant message opened outside any turn (its first row has no turn id, or the turn id of a turn that
  already ended with `done`) carries `out_of_turn: true`: a note the agent sent after its turn, not an answer
  still streaming.

So at most one entry is open, and every entry lies wholly between two entry starts. Two facts follow
that make reads bounded:

- After any "clean" event (`CLEAN_AFTER`) nothing is open, so assembly may start right after one with
  an empty state and produce exactly the entries the full replay would.
- A "hard boundary" (`HARD_BOUNDARIES`) always starts exactly one entry, whatever the state: counting
  them backwards finds where to start for the newest N entries without reading older events.

Fences: `epoch` counts conversation resets (clear/rewind, `meta.json` `transcript_epoch`; none exist
yet, so it is 1); `generation` is the version of these assembly rules (bump `TRANSCRIPT_GENERATION`
whenever a change would assemble the same events differently). A client holding entries from another
epoch or generation, or a cursor beyond the store (`sequence_reset`), must replace its cache.

Entries, messages, parts and their data are TypedDicts (`TranscriptEntry`, `UIMessage`, `UIPart`, `EventData`):
they are built as dicts row by row, while a session streams, and go out as JSON as they are, so typing their keys
must cost nothing at run time (a dataclass would be one more object per part, and one more conversion on the way
out). A part is one flat TypedDict with the keys of every part kind, `type` saying which: the assembler copies and
updates parts without asking their kind, which a union would make it narrow at every step. What they carry from a
stored event's free-form content (a tool's input and output, its ACP content blocks) stays `Any`/`JsonObject`.
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

from sessions.core.enums import EventType
from sessions.core.jsonobj import JsonObject
from sessions.core.record import SessionMeta
from sessions.live.ui_messages import (
    DONE_METADATA_KEYS,
    EVENT_DATA_KEYS,
    USER_METADATA_KEYS,
    EventData,
    MarkerData,
    MessageMetadata,
    TerminalData,
    TranscriptEntry,
    TranscriptPage,
    UIPart,
)
from sessions.store import events as event_store
from sessions.store.rows import EventRow

# 2: plans are shown, tool parts carry toolKind and status.
# 3: tool parts carry their content blocks (diffs, terminals) and terminal output; out-of-turn messages marked.
TRANSCRIPT_GENERATION = 3
DEFAULT_EPOCH = 1
DEFAULT_LIMIT = 200
MAX_LIMIT = 1000
PAGE = 1000

USER_TYPES = frozenset({EventType.USER_MESSAGE, EventType.SYNTHETIC_REENTRY})
CLOSE_ONLY = frozenset({EventType.PLAN, EventType.SYSTEM, EventType.DONE})
CLOSE_WITH_ENTRY = frozenset({EventType.ERROR, EventType.SESSION_STOPPED})
# Bookkeeping rows with no place in a conversation view.
IGNORED = frozenset({EventType.AVAILABLE_COMMANDS_UPDATE})
HARD_BOUNDARIES = USER_TYPES | CLOSE_WITH_ENTRY
# `plan`/`system` close only within their own turn, so only `done` of the close-only rows is always clean.
CLEAN_AFTER = USER_TYPES | CLOSE_WITH_ENTRY | {EventType.DONE}

PENDING_DECISIONS = frozenset({"", "pending"})
TERMINAL_EXITED = "terminal_exited"
NO_TURN = frozenset({"", "-"})  # the turn id of rows recorded outside any turn (markers at create, interrupts)

class ResetReason(StrEnum):
    FENCE_MISSING = "fence_missing"
    EPOCH_MISMATCH = "epoch_mismatch"
    GENERATION_MISMATCH = "generation_mismatch"
    SEQUENCE_RESET = "sequence_reset"


def session_epoch(meta: SessionMeta) -> int:
    return int(meta.get("transcript_epoch") or DEFAULT_EPOCH)


def check_fences(cursor: int | None, epoch: int | None, generation: int | None, *, current_epoch: int,
                 max_sequence: int) -> ResetReason | None:
    """None when a resuming client may continue with deltas from `cursor`; else why it must reset."""
    if cursor is None:
        return None
    if epoch is None or generation is None:
        return ResetReason.FENCE_MISSING
    if epoch != current_epoch:
        return ResetReason.EPOCH_MISMATCH
    if generation != TRANSCRIPT_GENERATION:
        return ResetReason.GENERATION_MISMATCH
    if cursor > max_sequence:
        return ResetReason.SEQUENCE_RESET
    return None


# ---- entries ---------------------------------------------------------------------------------

class _Entry:
    """One UI message under construction. Text chunks are kept as lists and joined when materialized,
    so a 50k-chunk answer costs linear time, not quadratic."""

    __slots__ = ("chunks", "id", "metadata", "parts", "perms", "role", "sequence", "start_sequence", "tools")

    def __init__(self, row: EventRow, role: str) -> None:
        self.id = f"msg_{row['id']}"
        self.role = role
        self.start_sequence = self.sequence = int(row["sequence"])
        self.metadata: MessageMetadata = {"turn_id": row["turn_id"], "agent_name": row["agent_name"],
                                          "created_at": row["timestamp"]}
        self.parts: list[UIPart] = []
        self.chunks: dict[int, list[str]] = {}  # part index → text chunks not yet joined
        self.tools: dict[str, int] = {}  # tool_call_id → part index
        self.perms: dict[str, int] = {}  # permission request_id → part index

    def add_text(self, kind: str, text: str) -> None:
        last = len(self.parts) - 1
        if last >= 0 and self.parts[last]["type"] == kind:
            self.chunks.setdefault(last, [self.parts[last]["text"]]).append(text)
            return
        self.parts.append({"type": kind, "text": text})

    def add_part(self, part: UIPart) -> int:
        self.parts.append(part)
        return len(self.parts) - 1

    def materialize(self) -> TranscriptEntry:
        for index, chunks in self.chunks.items():
            self.parts[index] = {**self.parts[index], "text": "".join(chunks)}
        self.chunks.clear()
        return {
            "message": {"id": self.id, "role": self.role, "metadata": self.metadata.copy(),
                        "parts": [p.copy() for p in self.parts]},
            "start_sequence": self.start_sequence,
            "sequence": self.sequence,
        }

    @classmethod
    def from_dict(cls, entry: TranscriptEntry) -> _Entry:
        """Rehydrate an open entry a caller kept (the inverse of `materialize`)."""
        message = entry["message"]
        self = cls.__new__(cls)
        self.id, self.role = message["id"], message["role"]
        self.metadata = (message.get("metadata") or {}).copy()
        self.parts = [p.copy() for p in message.get("parts") or []]
        self.start_sequence, self.sequence = int(entry["start_sequence"]), int(entry["sequence"])
        self.chunks = {}
        self.tools = {p["toolCallId"]: i for i, p in enumerate(self.parts) if p.get("type") == "dynamic-tool"}
        self.perms = {p["id"]: i for i, p in enumerate(self.parts)
                      if p.get("type") == "data-compozy-permission" and p.get("id")}
        return self


def event_data(row: EventRow) -> EventData:
    content = row["content"] if isinstance(row["content"], dict) else {}
    data: EventData = {"event_type": row["type"], "sequence": row["sequence"], "turn_id": row["turn_id"],
                            "timestamp": row["timestamp"]}
    for key in EVENT_DATA_KEYS:
        if content.get(key) not in (None, "", {}, []):
            data[key] = content[key]
    raw = content.get("raw")
    if str(row["type"]).startswith("transcript_marker.") and isinstance(raw, dict):
        data["marker"] = cast(MarkerData, {k: raw[k] for k in ("kind", "occurred_at", "summary", "evidence",
                                                                 "diagnostic") if k in raw})
    return data


def permission_data(row: EventRow) -> tuple[str, EventData]:
    """A permission row as a `data-compozy-permission` part's id and data: what a UI needs to offer the
    choice (the request id it answers on `POST …/permissions/{request_id}`, and the agent's options)."""
    content = row["content"] if isinstance(row["content"], dict) else {}
    request_id = str(content.get("request_id") or content.get("tool_call_id") or row["id"])
    data = event_data(row)
    raw = content["raw"] if isinstance(content.get("raw"), dict) else {}
    data["options"] = [{"option_id": o.get("optionId"), "kind": o.get("kind"), "label": o.get("name")}
                       for o in raw.get("options") or [] if isinstance(o, dict)]
    return request_id, data


def _tool_part(content: JsonObject) -> UIPart:
    part: UIPart = {"type": "dynamic-tool", "toolCallId": str(content.get("tool_call_id") or ""),
            "toolName": str(content.get("tool_name") or content.get("title") or "tool"),
            "title": str(content.get("title") or content.get("tool_name") or ""),
            "toolKind": str(content.get("tool_kind") or ""), "status": str(content.get("status") or ""),
            "state": "input-available", "input": content.get("tool_input")}
    if isinstance(content.get("tool_content"), list) and content["tool_content"]:
        part["content"] = content["tool_content"]
    return part


def terminal_data(content: JsonObject) -> TerminalData:
    """A `terminal_exited` row's terminal: its id, command, exit code and (bounded, redacted) output."""
    raw: JsonObject = content["raw"] if isinstance(content.get("raw"), dict) else {}
    return cast(TerminalData, {key: raw[key] for key in ("terminal_id", "command", "exit_code", "signal", "output",
                                                         "truncated") if key in raw})


def _terminal_ids(part: UIPart) -> set[str]:
    output: JsonObject = part["output"] if isinstance(part.get("output"), dict) else {}  # the tool's result
    blocks = [*(part.get("content") or []), *(output.get("terminals") or [])]
    return {str(b.get("terminal_id")) for b in blocks if isinstance(b, dict) and b.get("terminal_id")}


# ---- the assembler ---------------------------------------------------------------------------

class Assembler:
    """Folds rows (in sequence order) into entries. Holds only the open entry, so memory stays bounded;
    `drain()` returns the entries changed since the last drain, materialized, in start order."""

    def __init__(self, open_entry: TranscriptEntry | None = None, *, track: bool = True) -> None:
        self.open: _Entry | None = _Entry.from_dict(open_entry) if open_entry else None
        # Off while replaying history (read_page, resume): only deltas need the changed set.
        self.track = track
        self._changed: dict[str, _Entry] = {}
        self.created = 0
        self.last_row: EventRow | None = None
        self.keep: collections.deque[_Entry] | None = None  # set by read_page to collect the newest entries
        self.ended_turn = ""  # the turn id of the last `done`: agent rows of that turn came after it ended

    @property
    def open_entry(self) -> TranscriptEntry | None:
        return self.open.materialize() if self.open else None

    @property
    def open_start(self) -> int | None:
        """Where the open entry began: with the last sequence fed, it fixes what the next delta holds."""
        return self.open.start_sequence if self.open else None

    def forget_changes(self) -> None:
        """The changes were sent in a delta another viewer at the same place built (sessions/live/feed.py
        `shared_frames`): not materialized here, so this viewer's text chunks are never joined into a copy."""
        self._changed = {}

    def _new(self, row: EventRow, role: str) -> _Entry:
        entry = _Entry(row, role)
        self.created += 1
        if self.keep is not None:
            self.keep.append(entry)
        return entry

    def _touch(self, entry: _Entry, row: EventRow) -> None:
        entry.sequence = int(row["sequence"])
        if self.track:
            self._changed[entry.id] = entry

    def _assistant(self, row: EventRow) -> _Entry:
        if self.open is None:
            self.open = self._new(row, "assistant")
            turn_id = str(row["turn_id"] or "")
            if turn_id in NO_TURN or turn_id == self.ended_turn:
                self.open.metadata["out_of_turn"] = True
        return self.open

    def _standalone(self, row: EventRow, part: UIPart) -> None:
        entry = self._new(row, "system")
        entry.metadata["event_type"] = row["type"]
        entry.add_part(part)
        self._touch(entry, row)

    def feed(self, row: EventRow) -> None:
        self.last_row = row
        type_ = row["type"]
        if type_ in IGNORED:
            return
        content = row["content"] if isinstance(row["content"], dict) else {}
        if type_ in USER_TYPES:
            self._user_message(row, content)
        elif type_ in (EventType.AGENT_MESSAGE, EventType.THOUGHT):
            self._agent_chunk(row, content)
        elif type_ == EventType.TOOL_CALL:
            self._tool_call(row, content)
        elif type_ == EventType.TOOL_RESULT:
            self._tool_result(row, content)
        elif type_ == EventType.USAGE:
            self._usage(row, content)
        elif type_ == EventType.SYSTEM and content.get("title") == TERMINAL_EXITED:
            self._terminal_exited(row, content)
        elif type_ in CLOSE_ONLY:
            self._close(row, content)
        elif type_ in CLOSE_WITH_ENTRY:
            self.open = None
            self._standalone(row, {"type": "data-compozy-event", "data": event_data(row)})
        elif type_ == EventType.PERMISSION and str(content.get("decision") or "") in PENDING_DECISIONS:
            self._permission_request(row)
        else:
            # permission decisions, markers, runtime events, clarify, compaction and future types
            self._other_event(row, content)

    def _user_message(self, row: EventRow, content: JsonObject) -> None:
        self.open = None
        entry = self._new(row, "user")
        text = str(content.get("text") or "")
        if text:
            entry.add_part({"type": "text", "text": text})
        for key in USER_METADATA_KEYS:
            if content.get(key) not in (None, ""):
                entry.metadata[key] = content[key]
        if row["type"] == EventType.SYNTHETIC_REENTRY:
            entry.metadata["synthetic_reentry"] = True
        self._touch(entry, row)

    def _agent_chunk(self, row: EventRow, content: JsonObject) -> None:
        text = content.get("text")
        if not isinstance(text, str) or not text:
            return  # empty chunks are dropped
        entry = self._assistant(row)
        entry.add_text("text" if row["type"] == EventType.AGENT_MESSAGE else "reasoning", text)
        self._touch(entry, row)

    def _tool_call(self, row: EventRow, content: JsonObject) -> None:
        entry = self._assistant(row)
        part = _tool_part(content)
        index = entry.tools.get(part["toolCallId"])
        if index is None:
            entry.tools[part["toolCallId"]] = entry.add_part(part)
        else:
            # A tool_call update refines the running call; keep what it does not restate.
            old = entry.parts[index]
            entry.parts[index] = cast(UIPart, {**old, **{k: v for k, v in part.items() if v not in (None, "", "tool")},
                                               "state": old["state"]})
        self._touch(entry, row)

    def _tool_result(self, row: EventRow, content: JsonObject) -> None:
        entry = self._assistant(row)
        call_id = str(content.get("tool_call_id") or "")
        index = entry.tools.get(call_id)
        if index is None:  # result without its call in this message (e.g. a repair after a crash)
            index = entry.tools[call_id] = entry.add_part(_tool_part(content))
        part = entry.parts[index].copy()
        error = content.get("tool_error")
        part["status"] = str(content.get("status") or ("failed" if error else "completed"))
        if error:
            part.update({"state": "output-error", "errorText": str(error)})
            part.pop("output", None)
        else:
            part.update({"state": "output-available", "output": content.get("tool_result")})
        entry.parts[index] = part
        self._touch(entry, row)

    def _terminal_exited(self, row: EventRow, content: JsonObject) -> None:
        terminal = terminal_data(content)
        terminal_id = str(terminal.get("terminal_id") or "")
        entry = self.open
        if entry is not None and terminal_id:
            for index in entry.tools.values():
                part = entry.parts[index]
                if terminal_id in _terminal_ids(part):
                    entry.parts[index] = {**part, "terminals": {**(part.get("terminals") or {}), terminal_id: terminal}}
                    self._touch(entry, row)
                    return
        data = event_data(row)
        data["terminal"] = terminal
        self._event_part(row, {"type": "data-compozy-event", "data": data})

    def _usage(self, row: EventRow, content: JsonObject) -> None:
        if self.open is not None and isinstance(content.get("usage"), dict):
            self.open.metadata["usage"] = {**self.open.metadata.get("usage", {}), **content["usage"]}
            self._touch(self.open, row)

    def _close(self, row: EventRow, content: JsonObject) -> None:
        """A row that ends the open message (`done` with its stop reason and usage, or another of the same turn)."""
        type_ = row["type"]
        if type_ == EventType.DONE:
            self.ended_turn = str(row["turn_id"] or "")
        if self.open is not None and type_ == EventType.DONE:
            for key in DONE_METADATA_KEYS:
                if content.get(key) not in (None, ""):
                    self.open.metadata[key] = content[key]
            self._touch(self.open, row)
            self.open = None
        elif self.open is not None and row["turn_id"] == self.open.metadata["turn_id"]:
            self.open = None
        if type_ == EventType.PLAN:
            self._event_part(row, {"type": "data-compozy-event", "data": event_data(row)})

    def _permission_request(self, row: EventRow) -> None:
        request_id, data = permission_data(row)
        part: UIPart = {"type": "data-compozy-permission", "id": request_id, "data": data}
        if self.open is None:
            self._standalone(row, part)
        else:
            self.open.perms[request_id] = self.open.add_part(part)
            self._touch(self.open, row)

    def _other_event(self, row: EventRow, content: JsonObject) -> None:
        if self.open is not None and row["type"] == EventType.PERMISSION:
            entry = self.open
            index = entry.perms.get(str(content.get("request_id") or ""))
            if index is not None:  # the decision settles the request shown earlier
                request = entry.parts[index]
                entry.parts[index] = {**request, "data": {**request["data"], "decision": content.get("decision")}}
        self._event_part(row, {"type": "data-compozy-event", "data": event_data(row)})

    def _event_part(self, row: EventRow, part: UIPart) -> None:
        """A part of the open assistant message, else a `system` message of its own."""
        if self.open is None:
            self._standalone(row, part)
            return
        self.open.add_part(part)
        self._touch(self.open, row)

    def feed_all(self, rows: list[EventRow]) -> None:
        for row in rows:
            self.feed(row)

    def drain(self) -> list[TranscriptEntry]:
        changed = sorted(self._changed.values(), key=lambda e: e.start_sequence)
        self._changed = {}
        return [e.materialize() for e in changed]


# ---- bounded reads ---------------------------------------------------------------------------

def _query(path: Path, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    if not path.exists():
        return []
    try:
        return event_store.query(path, sql, params)
    except sqlite3.OperationalError:
        return []  # a store created but not yet initialized has no events table


def _marks(types: frozenset[str]) -> tuple[str, list[str]]:
    ordered = sorted(str(t) for t in types)
    return ",".join("?" for _ in ordered), ordered


def _restart_point(path: Path, hi: int, want: int, max_scan: int | None) -> tuple[int, bool]:
    """(first sequence to assemble from, partial) for the newest `want` entries below `hi`.

    Counts hard boundaries backwards (one query over the type index). When `max_scan` stops the count
    first, assembly starts at the window's first row: `partial` unless that row is known to start clean,
    since the first message may then miss its beginning (better than dropping the tail of an answer)."""
    floor = 1 if max_scan is None else max(1, hi - max_scan)
    marks, types = _marks(HARD_BOUNDARIES)
    rows = _query(path, f"SELECT sequence FROM events WHERE sequence < ? AND sequence >= ? AND type IN ({marks})"
                        " ORDER BY sequence DESC LIMIT ?", [hi, floor, *types, want])
    if len(rows) >= want:
        return int(rows[-1][0]), False
    if floor <= 1:
        return 1, False
    edge = dict(_query(path, "SELECT sequence, type FROM events WHERE sequence IN (?, ?)", [floor - 1, floor]))
    clean = edge.get(floor - 1) in CLEAN_AFTER or edge.get(floor) in HARD_BOUNDARIES
    return floor, not clean


def _last_clean(path: Path, at_or_before: int) -> int:
    marks, types = _marks(CLEAN_AFTER)
    rows = _query(path, f"SELECT MAX(sequence) FROM events WHERE sequence <= ? AND type IN ({marks})",
                  [at_or_before, *types])
    return int(rows[0][0] or 0) if rows else 0


def _rows(path: Path, after: int, before: int | None = None) -> Iterator[EventRow]:
    """Rows after `after` (and below `before`), one page in memory at a time."""
    cursor = after
    while True:
        batch = event_store.read_events(path, after=cursor, limit=PAGE, before=before)
        if not batch:
            return
        yield from batch
        cursor = batch[-1]["sequence"]
        if len(batch) < PAGE:
            return


@dataclass
class Page:
    entries: list[TranscriptEntry]
    max_sequence: int
    has_older: bool
    next_before_sequence: int | None
    partial: bool = False
    assembler: Assembler = field(default_factory=Assembler)


def read_page(path: Path, *, limit: int = DEFAULT_LIMIT, before: int | None = None,
              max_scan: int | None = None) -> Page:
    """The newest `limit` entries starting below `before` (default: the whole store), ascending.

    Reads only from a restart point found by counting hard boundaries backwards. An entry that starts
    below `before` but continues past it is returned whole. With no `before`, the returned assembler
    holds the state at `max_sequence`, ready to produce deltas. `max_scan` caps how far back to read."""
    top = event_store.max_sequence(path)
    hi = top + 1 if before is None else min(before, top + 1)
    start, partial = _restart_point(path, hi, limit + 1, max_scan)
    kept: collections.deque[_Entry] = collections.deque(maxlen=limit)
    assembler = Assembler(track=False)
    assembler.keep = kept
    for row in _rows(path, start - 1, hi):
        assembler.feed(row)
    straddler = assembler.open
    if straddler is not None and hi <= top:
        # Finish the entry that was open at `before`; anything it does not absorb is not on this page.
        assembler.keep = None
        for row in _rows(path, hi - 1):
            assembler.feed(row)
            if assembler.open is not straddler:
                break
    assembler.keep = None
    assembler.track = True
    entries = [e.materialize() for e in kept]
    if partial and entries:
        entries[0]["message"]["metadata"]["partial"] = True
    has_older = assembler.created > len(entries) or start > 1
    next_before = entries[0]["start_sequence"] if has_older and entries else None
    return Page(entries, top, has_older and bool(entries), next_before, partial, assembler)


def page_payload(page: Page, *, epoch: int, limit: int) -> TranscriptPage:
    """`GET …/transcript` response body."""
    return {"entries": page.entries, "epoch": epoch, "generation": TRANSCRIPT_GENERATION,
            "max_sequence": page.max_sequence, "has_older": page.has_older,
            "next_before_sequence": page.next_before_sequence, "limit": limit}


def resume(path: Path, cursor: int) -> Assembler:
    """The assembler state right after `cursor`: replays only from the last clean point at or before it."""
    assembler = Assembler(track=False)
    start = _last_clean(path, cursor)
    if start > 0:
        clean = event_store.read_events(path, after=start - 1, limit=1)
        if clean and clean[0]["type"] == EventType.DONE:
            assembler.ended_turn = str(clean[0]["turn_id"] or "")  # what a late row of that turn is told apart by
    for row in _rows(path, start, cursor + 1):
        assembler.feed(row)
    assembler.track = True
    return assembler


@dataclass
class Delta:
    entries: list[TranscriptEntry]
    cursor: int
    rows: int
    has_more: bool
    last_row: EventRow | None


def read_delta(path: Path, assembler: Assembler, after: int, *, limit: int = PAGE) -> Delta:
    """Entries changed by the rows after `after` (at most `limit` rows), upserts in start order."""
    return apply_rows(assembler, event_store.read_events(path, after=after, limit=limit), after, limit=limit)


def apply_rows(assembler: Assembler, rows: list[EventRow], after: int, *, limit: int | None = None) -> Delta:
    """The delta for rows already read (the live feed's ring, or a store page of at most `limit`)."""
    assembler.feed_all(rows)
    cursor = rows[-1]["sequence"] if rows else after
    has_more = limit is not None and len(rows) >= limit
    return Delta(assembler.drain(), cursor, len(rows), has_more, rows[-1] if rows else None)


def assemble(rows: list[EventRow]) -> list[TranscriptEntry]:
    """Every entry of `rows` (a full, in-memory replay; for tests and small stores)."""
    assembler = Assembler(track=False)
    kept: collections.deque[_Entry] = collections.deque()
    assembler.keep = kept
    assembler.feed_all(rows)
    return [e.materialize() for e in kept]
