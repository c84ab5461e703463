"""What the store writer commits: events, usage merges and hook runs, and the runs of streamed chunks the recorder
merges as they arrive (docs/reference/events.md §2), before `EventLog.commit` turns them into rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypedDict

from sessions.core.jsonobj import EventContent

# Token usage by `token_usage` column (rows.USAGE_COLUMNS: counts, the cost's amount and currency), as
# `acp.mapping.normalize_usage` reads it off the agent's update; a column the update did not carry is absent.
UsageColumns = dict[str, int | float | str | None]


class HookRunRow(TypedDict):
    """One hook run's audit row (sessions/hooks/runner.py), as `hook_runs` stores it. A TypedDict: built as a dict,
    stored as SQL parameters and handed to `HookOutcome.runs` as is."""

    id: str
    hook_name: str
    event: str
    source: str
    mode: str
    duration_ns: int
    outcome: str
    dispatch_depth: int
    patch_applied: str | None
    error: str | None
    required: bool
    recorded_at: str | None


class NewEvent(NamedTuple):
    """One event to append. A named tuple, not a dataclass: one is built per streamed chunk."""

    type: str
    turn_id: str
    content: EventContent  # the agent's keys (sessions/acp/mapping.py) or ours for the events we record
    id: str = ""


@dataclass(frozen=True)
class UsageUpdate:
    """A token-usage merge, committed in the same transaction as the events recorded beside it."""

    turn_id: str
    usage: UsageColumns


@dataclass(frozen=True)
class HookRun:
    row: HookRunRow


StoreOp = NewEvent | UsageUpdate | HookRun

# Streamed text arrives as many small chunks; docs/reference/events.md §2 stores adjacent same-turn chunks of one
# write batch as one row. Only chunks that differ in nothing but their text merge.
MERGEABLE_TYPES = frozenset({"agent_message", "thought"})
# One row holds at most this many chunks, so a long burst reaches viewers and readers as several rows.
MAX_RUN_CHUNKS = 5000


class ChunkRun:
    """Adjacent mergeable chunks, merged as they are recorded: the first chunk and every chunk's text.

    The recorder merges on the loop, one list append per chunk, so a burst reaches its store thread as a few
    runs: the thread's own Python work (which holds the GIL every other session's store thread waits for)
    no longer grows with the chunk count."""

    __slots__ = ("first", "pieces")

    def __init__(self, first: NewEvent) -> None:
        self.first = first
        self.pieces: list[str] = [first.content["text"]]

    def takes(self, op: NewEvent) -> bool:
        first = self.first
        return (op.type == first.type and op.turn_id == first.turn_id and len(self.pieces) < MAX_RUN_CHUNKS
                and _same_but_text(first.content, op.content))

    def event(self) -> NewEvent:
        first = self.first
        if len(self.pieces) == 1:
            return first
        return NewEvent(first.type, first.turn_id, {**first.content, "text": "".join(self.pieces)})

    @classmethod
    def of(cls, first: NewEvent, pieces: list[str]) -> ChunkRun:
        run = cls(NewEvent(first.type, first.turn_id, {**first.content, "text": pieces[0]}))
        run.pieces = pieces
        return run

    def tail_text(self, chars: int) -> str:
        """At least the last `chars` characters of the run's text (whole pieces), joined."""
        taken, size = [], 0
        for piece in reversed(self.pieces):
            taken.append(piece)
            size += len(piece)
            if size >= chars:
                break
        return "".join(reversed(taken))

    def split_tail(self, chars: int) -> tuple[ChunkRun | None, ChunkRun, int]:
        """(the run without its last `chars` characters or None, a run of those characters, pieces added): a
        piece cut in two counts as one more recorded chunk."""
        pieces, i, left = self.pieces, len(self.pieces), chars
        while left > 0 and i > 0:
            i -= 1
            left -= len(pieces[i])
        keep = -left  # characters of pieces[i] that stay in the head
        head = pieces[:i] + ([pieces[i][:keep]] if keep > 0 else [])
        tail = ([pieces[i][keep:]] if keep > 0 else [pieces[i]]) + pieces[i + 1:]
        return (ChunkRun.of(self.first, head) if head else None), ChunkRun.of(self.first, tail), int(keep > 0)


PendingOp = StoreOp | ChunkRun


def append_op(ops: list[PendingOp], op: StoreOp) -> None:
    """Append `op` to `ops`; a chunk that docs/reference/events.md §2 lets merge joins the run before it or starts
    one."""
    if type(op) is NewEvent and op.type in MERGEABLE_TYPES and not op.id and type(op.content.get("text")) is str:
        prev = ops[-1] if ops else None
        if type(prev) is ChunkRun and prev.takes(op):
            prev.pieces.append(op.content["text"])
        else:
            ops.append(ChunkRun(op))
        return
    ops.append(op)


def op_weight(op: PendingOp) -> int:
    """How many recorded operations `op` stands for."""
    return len(op.pieces) if type(op) is ChunkRun else 1


def materialize(ops: Sequence[PendingOp]) -> list[StoreOp]:
    """The store operations of merged `ops`: each run becomes one event with its text joined once."""
    return [op.event() if isinstance(op, ChunkRun) else op for op in ops]


def merge_chunks(ops: Sequence[StoreOp]) -> list[StoreOp]:
    """Adjacent same-turn `agent_message` (or `thought`) chunks without an explicit id become one event."""
    merged: list[PendingOp] = []
    for op in ops:
        append_op(merged, op)
    return materialize(merged)


def _same_but_text(a: EventContent, b: EventContent) -> bool:
    if len(a) != len(b):
        return False
    for k, v in a.items():  # noqa: SIM110 - a loop, not all(<generator>): half the cost, once per streamed chunk
        if k != "text" and (k not in b or b[k] != v):
            return False
    return True
