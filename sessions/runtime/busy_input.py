"""Busy input (docs/reference/sessions.md §6): interrupt and steer, fenced by the input generation.

An interrupt bumps `input_generation`, drops older queued entries with visible markers, and keeps the
canceled text as salvage for one steer. A steer waits for the next tool-result boundary (ACP has no
mid-turn injection) and otherwise falls back to the queue."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sessions.core.enums import MarkerKind
from sessions.core.errors import Conflict
from sessions.core.live import PromptResult, Salvage, TurnExtra
from sessions.core.offload import db, spawn

if TYPE_CHECKING:
    from sessions.runtime.host import SessionCore
    from sessions.runtime.turn import Turn

logger = logging.getLogger(__name__)


START = "start"


def route(*, busy: bool, handover: bool, queue_waiting: bool, mode: str | None, default_mode: str) -> str:
    """Where a prompt goes (sessions reference §6): `start` (a turn now) or its busy-input mode (`queue`,
    `interrupt`, `steer`). Decided under the session's admission lock (`Turns.admission`), so the order prompts are
    acknowledged in is the order they run in.

    A session runs a prompt at once only when it is idle and nothing waits in its queue: between two turns, input
    queued earlier runs first, and a prompt that arrives then (no mode, or `queue`) goes behind it. A steer with no
    turn to steer takes its own fallback, the queue."""
    if not busy and not handover and not queue_waiting:
        return START
    chosen = mode or default_mode
    if chosen == "steer" and not busy:
        return "queue"
    return chosen


@dataclass
class StagedSteer:
    entry_id: str
    text: str
    generation: int
    delivering: bool = False


class TurnControl(Protocol):
    """What busy input needs of the session's turns (`Turns`, which holds it): the running turn, the hand-over
    flag, and starting and cancelling turns."""

    turn: Turn | None
    handover: bool

    async def cancel_and_wait(self, turn: Turn) -> bool: ...

    async def start_turn(self, text: str, *, source: str = ..., authored: str | None = ...,
                         extra: TurnExtra | None = ...) -> Turn: ...


# A dropped prompt is quoted this far in its marker: enough to recognise it, never a pasted megabyte.
QUOTE_CHARS = 120


def _quote(text: str) -> str:
    one_line = " ".join(text.split())
    return f"“{one_line[:QUOTE_CHARS]}{'…' if len(one_line) > QUOTE_CHARS else ''}”"


class BusyInput:
    """A session's busy-input modes beyond the queue: interrupt and steer. Owns the salvage a dedicated interrupt
    keeps for one steer and the staged steer; the turns it hands the session between are `Turns`'."""

    def __init__(self, session: SessionCore, turns: TurnControl) -> None:
        self._session = session
        self._turns = turns
        self.salvage: Salvage | None = None
        self.steer: StagedSteer | None = None

    def end_salvage(self) -> None:
        """A turn started: the interrupt's salvage is fenced to the next input (docs/reference/sessions.md §6), so a
        later
        steer cannot compose it with text it was never meant for."""
        self.salvage = None

    def at_tool_result(self) -> None:
        """A tool result arrived: the boundary a staged steer waits for."""
        turn = self._turns.turn
        if self.steer is not None and not self.steer.delivering and turn is not None:
            self.steer.delivering = True
            spawn(self._deliver_steer(turn))

    @property
    def generation(self) -> int:
        return self._session.rec.input_generation

    async def _advance_generation(self) -> list[str]:
        """Bump the input generation; pending entries of older generations are dropped, visibly."""
        self._session.rec.input_generation = self.generation + 1
        texts = await db(self._session.manager.inputs.drop_older, self._session.rec.id, self.generation)
        dropped = list(texts)
        # A staged steer is a queued row of an older generation too: drop_older took it already, so it gets
        # its own marker here, never a second one (and is counted once). Each marker quotes what was dropped: an
        # interrupt that only counted them left a person to guess which of their prompts would never run.
        steer_id = self.steer.entry_id if self.steer is not None else None
        for entry_id, text in texts.items():
            if entry_id == steer_id:
                continue
            self._session.marker(MarkerKind.PROMPT_DROPPED,
                                 f"Queued prompt dropped by an interrupt: {_quote(text)}",
                                 {"queue_entry_id": entry_id, "reason": "stale_generation",
                                  "queue_generation": self.generation})
        if steer_id is not None:
            steer_text = texts.get(steer_id) or (self.steer.text if self.steer is not None else "")
            self._session.marker(MarkerKind.PROMPT_DROPPED,
                                 f"Staged steer dropped by an interrupt: {_quote(steer_text)}",
                                 {"queue_entry_id": steer_id, "reason": "stale_generation"})
            if steer_id not in dropped:
                dropped.append(steer_id)
            self.steer = None
        return dropped

    async def interrupt(self, *, replacement: str | None, expected_turn_id: str | None) -> PromptResult:
        """Cancel the current turn (fenced by expected_turn_id); run `replacement` as a new turn, or keep
        the canceled text as salvage for one later steer (the dedicated interrupt)."""
        turn = self._turns.turn
        if expected_turn_id and (turn is None or turn.id != expected_turn_id):
            raise Conflict("expected_turn_id does not match the running turn", code="turn_mismatch",
                           data={"expected_turn_id": expected_turn_id, "current_turn_id": turn.id if turn else None})
        dropped = await self._advance_generation()
        previous = turn.id if turn else None
        self._turns.handover = replacement is not None
        try:
            if turn is not None:
                if replacement is None:
                    self.salvage = {"text": turn.authored or turn.text, "turn_id": turn.id}
                if not await self._turns.cancel_and_wait(turn):
                    raise Conflict("the running turn did not end within timeout_cancel_grace",
                                   code="interrupt_timeout", data={"turn_id": turn.id})
            new = await self._turns.start_turn(replacement) if replacement is not None else None
        finally:
            self._turns.handover = False
        result: PromptResult = {"status": "interrupted", "interrupted": turn is not None,
                                  "previous_turn_id": previous, "canceled_queued_entries": dropped,
                                  "queue_generation": self.generation}
        if new is not None:
            result.update({"status": "accepted", "mode": "interrupt", "new_turn_id": new.id, "turn_id": new.id})
        if turn is None:  # idle: still 200 and older input fenced off (surfaces reference), but no turn was cut
            summary = "No turn was running; input generation advanced" + (
                " and the replacement started." if replacement is not None else ".")
        else:
            summary = "Turn interrupted" + (" and replaced." if replacement is not None else "; text kept for a steer.")
        self._session.marker(MarkerKind.PROMPT_INTERRUPTED, summary,
                    {"generation": self.generation, "canceled_count": len(dropped), "previous_turn_id": previous,
                     "new_turn_id": result.get("new_turn_id")})
        await self._session.recorder.flush()
        await self._session.persist()
        return result

    async def stage_steer(self, text: str) -> PromptResult:
        """Steer: after a dedicated interrupt, compose salvage + correction once as a new turn; while busy,
        deliver at the next tool-result boundary, else fall back to the queue when the turn ends."""
        if self.salvage is not None and self._turns.turn is None:
            salvage, self.salvage = self.salvage, None
            composed = f"{salvage['text']}\n\nUser correction/guidance after interrupt: {text}"
            turn = await self._turns.start_turn(composed, source="steer", authored=text)
            self._session.marker(MarkerKind.PROMPT_STEERED, "Steer composed with the interrupted prompt.",
                        {"generation": self.generation, "salvaged_turn_id": salvage["turn_id"], "new_turn_id": turn.id})
            return {"status": "accepted", "mode": "steer", "turn_id": turn.id, "new_turn_id": turn.id,
                    "queue_generation": self.generation}
        if self._turns.turn is None:
            raise Conflict("no prompt in progress to steer", code="prompt_not_in_progress")
        entry, _ = await db(self._session.manager.inputs.enqueue, self._session.rec.id, text, mode="steer",
                            generation=self.generation)
        if self.steer is not None:
            await db(self._session.manager.inputs.mark, self.steer.entry_id, "canceled")
            self._session.marker(MarkerKind.PROMPT_DROPPED, "An older staged steer was replaced.",
                        {"queue_entry_id": self.steer.entry_id, "reason": "replaced"})
        self.steer = StagedSteer(entry.id, entry.text, entry.generation)
        self._session.marker(MarkerKind.PROMPT_STEERED, "Steer staged for the next tool result.",
                    {"queue_entry_id": entry.id, "queue_generation": entry.generation})
        await self._session.recorder.flush()
        return {"status": "staged", "mode": "steer", "staged": True, "queue_entry_id": entry.id,
                "queue_generation": entry.generation, "fallback_mode_if_no_tool_result": "queue"}

    async def _deliver_steer(self, turn: Turn) -> None:
        """At a tool-result boundary: end the running turn cooperatively and continue with the steer."""
        steer = self.steer
        if steer is None or self._turns.turn is not turn:
            return
        self._turns.handover = True
        try:
            if not await self._turns.cancel_and_wait(turn):
                steer.delivering = False
                return
            if self.steer is not steer or self._session.stopping:
                return
            self.steer = None
            await db(self._session.manager.inputs.mark, steer.entry_id, "sent")
            new = await self._turns.start_turn(steer.text, source="steer", extra={
                "action": "steered", "resource": "session_input_queue", "decision": str(steer.generation),
                "request_id": steer.entry_id})
        finally:
            self._turns.handover = False
        self._session.marker(MarkerKind.PROMPT_STEERED, "Steer delivered at a tool-result boundary.",
                    {"queue_entry_id": steer.entry_id, "previous_turn_id": turn.id, "new_turn_id": new.id})

    async def fall_back(self) -> None:
        steer = self.steer
        if steer is None or steer.delivering:
            return
        self.steer = None
        await db(self._session.manager.inputs.to_queue, steer.entry_id)
        self._session.marker(MarkerKind.PROMPT_STEERED, "No tool result before the turn ended; steer queued instead.",
                    {"queue_entry_id": steer.entry_id, "fallback_to_queue": True})
