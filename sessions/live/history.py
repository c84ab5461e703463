"""`session history`: the assembled turn sequence, read bounded from events.db and assembled by the transcript's own
`Assembler` (sessions/live/transcript.py), so a turn reads the same in history as in the transcript frames."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from pathlib import Path
from typing import NotRequired, TypedDict

from sessions.core.enums import EventType, MarkerKind
from sessions.live.transcript import (
    DEFAULT_LIMIT,
    NO_TURN,
    PAGE,
    USER_TYPES,
    Assembler,
    _Entry,
    _marks,
    _query,
    _rows,
)
from sessions.live.ui_messages import UIMessage
from sessions.store import events as event_store
from sessions.store.rows import EventRow


class HistoryTurn(TypedDict):
    """One turn of `session history` (a TypedDict: built as a dict and sent as JSON as is)."""

    turn_id: str
    started_at: str | None
    start_sequence: int
    sequence: int
    event_count: int
    messages: list[UIMessage]
    truncated: NotRequired[bool]  # a turn too long to read whole: its first row, then its newest rows
    omitted_events: NotRequired[int]
    rewound: NotRequired[bool]  # a rewind took it back (docs/reference/worktrees.md): kept, marked, not replayed

# `session history` reads at most HISTORY_TURN_ROWS rows of one turn (its first row, the user's message, and its
# newest rows) and HISTORY_ROWS in all, newest turns first: memory stays bounded whatever the turn sizes, and
# `session events --after` pages through a huge turn in full.
HISTORY_TURN_ROWS = 1000
HISTORY_ROWS = 5000


def _turn_starts(path: Path, want: int, after: int) -> dict[int, str]:
    """First sequence → turn id of the newest `want` turns after `after`: a turn begins at its first user row
    (a steer or a wake is a turn of its own; an agent's echo of the prompt is a later row of the same turn)."""
    marks, types = _marks(USER_TYPES)
    found: dict[str, int] = {}
    before: int | None = None
    while True:
        bound = "" if before is None else " AND sequence < ?"
        rows = _query(path, f"SELECT sequence, turn_id FROM events WHERE sequence > ?{bound} AND type IN ({marks})"
                            " ORDER BY sequence DESC LIMIT ?",
                      [after, *([] if before is None else [before]), *types, PAGE])
        for sequence, turn_id in rows:
            if turn_id in NO_TURN:
                continue
            if turn_id not in found and len(found) >= want:
                return {seq: turn for turn, seq in found.items()}
            found[str(turn_id)] = int(sequence)  # descending: the last one seen is the turn's first
        if len(rows) < PAGE:
            return {seq: turn for turn, seq in found.items()}
        before = int(rows[-1][0])


def read_history(path: Path, *, last: int = DEFAULT_LIMIT, after: int = 0) -> list[HistoryTurn]:
    """The newest `last` turns after `after`, oldest first: each the transcript entries (UI messages, assembled by
    the same `Assembler` as the transcript frames) of its rows in sequence order, so the user's message, the reply as
    one message with its thoughts and tool calls, and the markers where they happened. Rows outside any turn stay
    where they happened: in the turn they fell in, or, before the first turn shown, in a group of their own."""
    top = event_store.max_sequence(path)
    if top <= after:
        return []
    starts = _turn_starts(path, last, after)
    bounds = sorted(starts)
    if len(starts) < last and (not bounds or bounds[0] > after + 1):
        bounds.insert(0, after + 1)  # rows before the first turn shown: no turn was cut off to make room
    segments = [(begin, (bounds[i + 1] - 1) if i + 1 < len(bounds) else top) for i, begin in enumerate(bounds)]
    plan: list[tuple[int, int, int]] = []
    budget = HISTORY_ROWS
    for begin, end in reversed(segments):
        if budget <= 0:
            break
        take = min(end - begin + 1, HISTORY_TURN_ROWS, budget)
        plan.append((begin, end, take))
        budget -= take
    turns = [_history_turn(path, begin, end, take, starts.get(begin)) for begin, end, take in reversed(plan)]
    rewound = rewound_turn_ids(path)
    for turn in turns:
        if turn["turn_id"] in rewound:
            turn["rewound"] = True
    return turns


def rewound_turn_ids(path: Path) -> set[str]:
    """Every turn a `session_rewound` marker took back (events stay append-only: the marker names them)."""
    found: set[str] = set()
    for row in event_store.iter_events(path, types=[EventType.TRANSCRIPT_MARKER.value]):
        if row["content"].get("title") == MarkerKind.SESSION_REWOUND:
            evidence = (row["content"].get("raw") or {}).get("evidence") or {}
            found.update(str(t) for t in evidence.get("rewound_turns") or [])
    return found


def _history_turn(path: Path, begin: int, end: int, take: int, turn_id: str | None) -> HistoryTurn:
    assembler = Assembler(track=False)
    kept: collections.deque[_Entry] = collections.deque()
    assembler.keep = kept
    size = end - begin + 1
    first: EventRow | None = None
    count = 0
    if take < size:
        # A turn too long to read whole: its first row (the user's message), then its newest rows.
        head = event_store.read_events(path, after=begin - 1, limit=1)
        rows: Iterable[EventRow] = [*head, *_rows(path, end - take + 1, end + 1)]
    else:
        rows = _rows(path, begin - 1, end + 1)
    for row in rows:
        first = first or row
        assembler.feed(row)
        count += 1
    turn: HistoryTurn = {
        "turn_id": turn_id or (first["turn_id"] if first else "-"),
        "started_at": first["timestamp"] if first else None, "start_sequence": begin,
        "sequence": assembler.last_row["sequence"] if assembler.last_row else end, "event_count": count,
        "messages": [e.materialize()["message"] for e in kept]}
    if take < size:
        turn.update({"truncated": True, "omitted_events": size - count})
    return turn
