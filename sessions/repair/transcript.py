"""Transcript repair after an unclean daemon exit (docs/reference/sessions.md §13): an interrupted last turn gets an
interrupted `tool_result` per dangling tool call, then a terminal `error`. It only ever appends through
`EventLog`; it never updates, deletes or resequences, and never touches wake state. The other kind of repair,
stale metadata (a live state no daemon owns → `stopped`), is `repair/stale.py`.

The repair payload (docs/reference/surfaces.md §4.6) and its issues and actions are TypedDicts: built as dicts and
sent as JSON (API, CLI, boot repair) as they are; the report they come from is a dataclass, built once a repair.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NotRequired, TypedDict

from django.db import DatabaseError

from sessions.catalog.ownership import Owner, Where, holder_elsewhere, owner
from sessions.core.enums import LIVE_STATES, EventType, StopReason
from sessions.core.errors import Conflict
from sessions.core.jsonobj import JsonObject
from sessions.core.record import SessionMeta, SessionRecord
from sessions.repair.stale import repair_stale_meta, stale_fix
from sessions.store import events as event_store
from sessions.store import folder
from sessions.store.folder import load_meta
from sessions.store.ops import NewEvent
from sessions.store.rows import StoredEvent

logger = logging.getLogger(__name__)

# ---- transcript repair -----------------------------------------------------------------------

class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class IssueCode(StrEnum):
    EVENT_SEQUENCE_DUPLICATE = "event_sequence_duplicate"
    EVENT_SEQUENCE_REGRESSION = "event_sequence_regression"
    INVALID_EVENT_JSON = "invalid_event_json"
    EVENT_TYPE_MISMATCH = "event_type_mismatch"
    EVENT_SEQUENCE_GAP = "event_sequence_gap"
    DANGLING_TOOL_CALL_MISSING_ID = "dangling_tool_call_missing_id"
    TERMINAL_EVENT_ALREADY_EXISTS = "terminal_event_already_exists"
    NO_REPAIRABLE_TURN = "no_repairable_turn"
    SESSION_NOT_STOPPED = "session_not_stopped"
    STOP_REASON_REQUIRES_FORCE = "stop_reason_requires_force"
    # Our extension: meta.json is not valid JSON, lacks a required key or holds a state outside the closed set.
    SESSION_META_INVALID = "session_meta_invalid"


class ActionCode(StrEnum):
    APPEND_INTERRUPTED_TOOL_RESULT = "append_interrupted_tool_result"
    APPEND_TERMINAL_ERROR = "append_terminal_error"


SEVERITY = {
    IssueCode.EVENT_SEQUENCE_DUPLICATE: Severity.ERROR,
    IssueCode.EVENT_SEQUENCE_REGRESSION: Severity.ERROR,
    IssueCode.INVALID_EVENT_JSON: Severity.ERROR,
    IssueCode.EVENT_TYPE_MISMATCH: Severity.ERROR,
    IssueCode.EVENT_SEQUENCE_GAP: Severity.WARNING,
    IssueCode.DANGLING_TOOL_CALL_MISSING_ID: Severity.WARNING,
    IssueCode.TERMINAL_EVENT_ALREADY_EXISTS: Severity.INFO,
    IssueCode.NO_REPAIRABLE_TURN: Severity.INFO,
    IssueCode.SESSION_NOT_STOPPED: Severity.ERROR,
    IssueCode.STOP_REASON_REQUIRES_FORCE: Severity.ERROR,
    IssueCode.SESSION_META_INVALID: Severity.ERROR,
}
REPAIRABLE_STOP_REASONS = frozenset({StopReason.AGENT_CRASHED, StopReason.ERROR})
TERMINAL_TYPES = frozenset({EventType.DONE, EventType.ERROR})
INTERRUPTED_TOOL_MESSAGE = "Tool call interrupted before a result was persisted."
INTERRUPTED_TURN_MESSAGE = "Session interrupted before a terminal prompt event was persisted."
NO_TURN_IDS = frozenset({"", "-"})  # events outside any prompt turn (stored turn_id "-")
ISSUES_PER_CODE = 20  # a badly damaged store must not produce an unbounded report
SCAN_PAGE = 1000


class IssueView(TypedDict):
    code: str
    severity: str
    turn_id: NotRequired[str]
    event_id: NotRequired[str]
    detail: NotRequired[str]


class RepairAction(TypedDict):
    code: str
    turn_id: str | None
    tool_call_id: NotRequired[str]
    tool_name: NotRequired[str]
    persisted: bool
    event_id: NotRequired[str]  # once persisted: the event appended


class RepairPayload(TypedDict):
    """The repair payload (docs/reference/surfaces.md §4.6)."""

    session_id: str
    issues: list[IssueView]
    actions: list[RepairAction]
    persisted: bool


@dataclass
class Issue:
    code: IssueCode
    severity: Severity
    turn_id: str | None = None
    event_id: str | None = None
    detail: str | None = None

    def as_dict(self) -> IssueView:
        data: IssueView = {"code": self.code.value, "severity": self.severity.value}
        if self.turn_id is not None:
            data["turn_id"] = self.turn_id
        if self.event_id is not None:
            data["event_id"] = self.event_id
        if self.detail is not None:
            data["detail"] = self.detail
        return data


@dataclass(frozen=True)
class DanglingToolCall:
    tool_call_id: str
    tool_name: str
    event_id: str


@dataclass
class RepairReport:
    """What `inspect_transcript` found; `repair_transcript` turns it into actions."""

    session_id: str
    stored_meta: SessionMeta
    meta: SessionMeta  # the stale fix of stored_meta when no daemon owns its live state, else stored_meta
    issues: list[Issue] = field(default_factory=list)
    live: bool = False  # a running daemon owns this session: nothing may be written
    stale: bool = False
    turn_id: str | None = None  # the last turn (turn of the last non-session_stopped event)
    terminal_event_id: str | None = None
    dangling: list[DanglingToolCall] = field(default_factory=list)
    last_sequence: int = 0
    _counts: dict[IssueCode, int] = field(default_factory=dict, repr=False)

    def add(self, code: IssueCode, *, turn_id: str | None = None, event_id: str | None = None,
            detail: str | None = None) -> None:
        count = self._counts.get(code, 0) + 1
        self._counts[code] = count
        if count <= ISSUES_PER_CODE:
            self.issues.append(Issue(code, SEVERITY[code], turn_id, event_id, detail))

    def close_counts(self) -> None:
        """One summary issue per code whose occurrences were not all listed."""
        for code, count in self._counts.items():
            if count > ISSUES_PER_CODE:
                self.issues.append(Issue(code, SEVERITY[code],
                                         detail=f"{count - ISSUES_PER_CODE} more {code.value} issue(s) not listed"))
                self._counts[code] = ISSUES_PER_CODE

    @property
    def blocking(self) -> bool:
        return any(issue.severity == Severity.ERROR for issue in self.issues)

    @property
    def repairable(self) -> bool:
        return not self.blocking and self.turn_id is not None and self.terminal_event_id is None

    def planned_actions(self) -> list[RepairAction]:
        if not self.repairable:
            return []
        actions: list[RepairAction] = [
            {"code": ActionCode.APPEND_INTERRUPTED_TOOL_RESULT.value, "turn_id": self.turn_id,
             "tool_call_id": call.tool_call_id, "tool_name": call.tool_name, "persisted": False}
            for call in self.dangling
        ]
        actions.append({"code": ActionCode.APPEND_TERMINAL_ERROR.value, "turn_id": self.turn_id, "persisted": False})
        return actions

    def payload(self, actions: list[RepairAction], persisted: bool) -> RepairPayload:
        """The repair payload (docs/reference/surfaces.md §4.6)."""
        return {"session_id": self.session_id, "issues": [i.as_dict() for i in self.issues],
                "actions": actions, "persisted": persisted}


def _daemon_holds(session_id: str, state: str) -> bool:
    """Whether a running daemon may be writing this session (so repair must not): this process runs it, in any
    state (a stop or reactivation may be under way), or it is in a live state and someone else may run it."""
    found = _owner(session_id)
    return found.where is Where.HERE or (state in LIVE_STATES and found.anyone)


def leased_elsewhere(session_id: str) -> bool:
    """Another node holds the session's unexpired lease: it runs the agent and writes events.db."""
    try:
        return holder_elsewhere(session_id) is not None
    except DatabaseError:  # a catalog without the lease table (a store opened before migrate): nobody holds it
        logger.debug("lease of %s not readable", session_id, exc_info=True)
        return False


def _owner(session_id: str) -> Owner:
    try:
        return owner(session_id)
    except DatabaseError:  # as in leased_elsewhere
        logger.debug("lease of %s not readable", session_id, exc_info=True)
        return Owner(Where.NOBODY)


def _read_meta(session_id: str) -> SessionMeta:
    return load_meta(session_id)


def _pages(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
    """Rows of `sql` (which selects rowid first, filters `rowid > ?` and orders by rowid), a page at a time.

    Storage order, not `ORDER BY sequence`: in our schema rowid is the sequence, and in a foreign or
    damaged store (no primary key on sequence) it is the append order, the only order in which a
    sequence regression is visible.
    """
    cursor = 0
    while True:
        rows = conn.execute(sql, (*params, cursor, SCAN_PAGE)).fetchall()
        if not rows:
            return
        yield from rows
        cursor = rows[-1][0]


def _sequence_is_key(conn: sqlite3.Connection) -> bool:
    """True when `sequence` is the table's INTEGER PRIMARY KEY (our schema): duplicates are impossible."""
    columns = conn.execute("PRAGMA table_info(events)").fetchall()
    keys = [c[1] for c in columns if c[5]]
    return keys == ["sequence"] and any(c[1] == "sequence" and str(c[2]).upper() == "INTEGER" for c in columns)


def _parse(text: Any) -> JsonObject | None:  # a stored event's content
    try:
        body = json.loads(text)
    except (TypeError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _scan_integrity(report: RepairReport, conn: sqlite3.Connection) -> None:
    """Pass 1 over every row: sequences, JSON, content type; remembers the last turn."""
    max_seq = prev_seq = 0
    last_turn: str | None = None
    sql = ("SELECT rowid, sequence, id, turn_id, type, content FROM events"
           " WHERE rowid > ? ORDER BY rowid LIMIT ?")
    for _rowid, seq, event_id, turn_id, type_, content in _pages(conn, sql, ()):
        turn = turn_id if turn_id not in NO_TURN_IDS else None
        if not isinstance(seq, int) or isinstance(seq, bool):
            report.add(IssueCode.EVENT_SEQUENCE_REGRESSION, turn_id=turn, event_id=event_id,
                       detail=f"sequence {seq!r} is not an integer")
        elif seq < max_seq and seq != prev_seq:
            report.add(IssueCode.EVENT_SEQUENCE_REGRESSION, turn_id=turn, event_id=event_id,
                       detail=f"sequence {seq} stored after sequence {max_seq}")
        elif seq > max_seq + 1:
            missing = f"{max_seq + 1}" if seq == max_seq + 2 else f"{max_seq + 1}..{seq - 1}"
            report.add(IssueCode.EVENT_SEQUENCE_GAP, turn_id=turn, event_id=event_id,
                       detail=f"sequence {missing} missing before {seq}")
        if isinstance(seq, int):
            prev_seq = seq
            max_seq = max(max_seq, seq)
        body = _parse(content)
        if body is None:
            report.add(IssueCode.INVALID_EVENT_JSON, turn_id=turn, event_id=event_id,
                       detail=f"content of sequence {seq} is not a JSON object")
        elif body.get("type") != type_:
            report.add(IssueCode.EVENT_TYPE_MISMATCH, turn_id=turn, event_id=event_id,
                       detail=f"content type {body.get('type')!r} differs from row type {type_!r}")
        if type_ != EventType.SESSION_STOPPED:
            last_turn = turn_id
    report.last_sequence = max_seq
    if not _sequence_is_key(conn):
        rows = conn.execute(
            "SELECT sequence, COUNT(*), MIN(id) FROM events GROUP BY sequence HAVING COUNT(*) > 1"
            " ORDER BY sequence LIMIT ?", (ISSUES_PER_CODE + 1,)).fetchall()
        for seq, count, event_id in rows:
            report.add(IssueCode.EVENT_SEQUENCE_DUPLICATE, event_id=event_id,
                       detail=f"sequence {seq} stored {count} times")
    report.turn_id = last_turn if last_turn not in NO_TURN_IDS else None


def _scan_last_turn(report: RepairReport, conn: sqlite3.Connection) -> None:
    """Pass 2 over the last turn only (turn_id index): terminal event and dangling tool calls."""
    assert report.turn_id is not None
    calls: dict[str, DanglingToolCall] = {}
    results: set[str] = set()
    missing_ids: list[str] = []
    sql = ("SELECT rowid, id, type, content FROM events WHERE turn_id = ? AND rowid > ?"
           " ORDER BY rowid LIMIT ?")
    for _rowid, event_id, type_, content in _pages(conn, sql, (report.turn_id,)):
        body = _parse(content)
        if body is None:
            continue  # already reported by pass 1
        if type_ in TERMINAL_TYPES:
            report.terminal_event_id = event_id
        elif type_ == EventType.TOOL_CALL:
            call_id = str(body.get("tool_call_id") or "")
            name = str(body.get("tool_name") or body.get("title") or "")
            if not call_id:
                missing_ids.append(event_id)
            elif call_id not in calls or (name and not calls[call_id].tool_name):
                first = calls.get(call_id)
                calls[call_id] = DanglingToolCall(call_id, name, first.event_id if first else event_id)
        elif type_ == EventType.TOOL_RESULT and body.get("tool_call_id"):
            results.add(str(body["tool_call_id"]))
    if report.terminal_event_id is not None:
        report.add(IssueCode.TERMINAL_EVENT_ALREADY_EXISTS, turn_id=report.turn_id,
                   event_id=report.terminal_event_id, detail="the last turn already has a terminal event")
        return
    report.dangling = [call for call_id, call in calls.items() if call_id not in results]
    for event_id in missing_ids:
        report.add(IssueCode.DANGLING_TOOL_CALL_MISSING_ID, turn_id=report.turn_id, event_id=event_id,
                   detail="tool_call without a tool_call_id: no interrupted result can be matched to it")


def inspect_transcript(session_id: str, *, force: bool = False) -> RepairReport:
    """Read-only: the session's repair issues and what a repair would append. Never writes.

    A live state a running daemon owns → `session_not_stopped` (the store is not read). A live state no
    daemon owns is judged by its stale fix (§13), computed in memory.
    """
    stored = _read_meta(session_id)
    report = RepairReport(session_id, stored, stored)
    state = stored["state"]
    if _daemon_holds(session_id, state):
        report.live = True
        report.add(IssueCode.SESSION_NOT_STOPPED, detail=f"session is {state} and owned by the running daemon")
        return report
    if state in LIVE_STATES:
        fixed = stale_fix(stored)
        if fixed is not None:
            report.meta, report.stale = fixed, True
    path = folder.events_path(session_id)
    if not path.exists():
        report.add(IssueCode.NO_REPAIRABLE_TURN, detail="the session has no events.db")
        return report
    conn = event_store.connect(path, readonly=True)
    try:
        _scan_integrity(report, conn)
        if report.turn_id is None:
            report.add(IssueCode.NO_REPAIRABLE_TURN,
                       detail="the transcript ends outside any prompt turn: no turn was cut off")
        else:
            _scan_last_turn(report, conn)
    except sqlite3.DatabaseError as exc:
        # Not a transcript issue but a broken file (not a database, no events table): nothing to judge.
        raise Conflict(f"events.db is unreadable: {exc}", code="event_store_unreadable",
                       data={"session_id": session_id}) from exc
    finally:
        conn.close()
    # Only a repair that would append needs the stop reason to allow it: a cleanly stopped session whose last turn
    # is closed has nothing to repair, and saying "use --force" there invites a repair it does not need.
    reason = report.meta.get("stop_reason") or ""
    if reason not in REPAIRABLE_STOP_REASONS and not force and report.turn_id is not None \
            and report.terminal_event_id is None:
        report.add(IssueCode.STOP_REASON_REQUIRES_FORCE,
                   detail=f"stop reason {reason or 'none'!r} is not agent_crashed or error; use --force")
    report.close_counts()
    return report


def _repair_events(report: RepairReport, meta: SessionMeta) -> list[NewEvent]:
    turn_id = report.turn_id or ""
    base: dict[str, str] = {}
    if meta.get("acp_session_id"):
        base["session_id"] = meta["acp_session_id"]
    new = [
        NewEvent(EventType.TOOL_RESULT.value, turn_id, {
            **base, "tool_call_id": call.tool_call_id, "tool_name": call.tool_name, "status": "failed",
            "tool_result": {"error": INTERRUPTED_TOOL_MESSAGE}, "tool_error": INTERRUPTED_TOOL_MESSAGE,
            "repair": {"action": ActionCode.APPEND_INTERRUPTED_TOOL_RESULT.value},
        })
        for call in report.dangling
    ]
    new.append(NewEvent(EventType.ERROR.value, turn_id, {
        **base, "error": INTERRUPTED_TURN_MESSAGE, "stop_reason": meta.get("stop_reason") or None,
        "failure": meta.get("failure"), "repair": {"action": ActionCode.APPEND_TERMINAL_ERROR.value},
    }))
    return new


def _append(report: RepairReport, meta: SessionMeta) -> list[StoredEvent]:
    """One transaction: a crash mid-repair leaves all of the repair or none of it (idempotence)."""
    if _daemon_holds(report.session_id, meta["state"]):
        raise Conflict("the running daemon took over this session; repair refused", code="session_not_stopped")
    log = event_store.EventLog(folder.events_path(report.session_id), meta["agent_name"])
    try:
        if log.last_sequence != report.last_sequence:
            raise Conflict("events were appended while the repair was planned; run it again", code="repair_conflict",
                           data={"planned_after": report.last_sequence, "now": log.last_sequence})
        return log.append(_repair_events(report, meta))
    finally:
        log.close()


def repair_transcript(session_id: str, *, dry_run: bool, force: bool) -> RepairPayload:
    """Inspect, then (unless `dry_run`) append the repair events; returns the §4.6 payload.

    A stale live state is first repaired like any read would (meta.json + catalog), except on a dry run,
    which persists nothing at all.
    """
    report = inspect_transcript(session_id, force=force)
    actions = report.planned_actions()
    if dry_run or report.live:
        return report.payload(actions, persisted=False)
    meta = report.meta
    if report.stale:
        meta = repair_stale_meta(report.stored_meta, report.meta)  # the fix inspect computed
    elif folder.meta_oversized(session_id):
        # Read slim (folder.read_meta): stored slim, so the record is small again for every reader.
        folder.write_meta(SessionRecord.from_meta(report.stored_meta))
    if not actions:
        return report.payload(actions, persisted=False)
    stored = _append(report, meta)
    for action, row in zip(actions, stored, strict=True):
        action["event_id"] = row["id"]
        action["persisted"] = True
    logger.info("repaired transcript of %s turn %s: %d event(s) appended", session_id, report.turn_id, len(stored))
    return report.payload(actions, persisted=True)
