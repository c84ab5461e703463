"""Busy input (sessions reference §6): interrupt and steer, fenced by the input generation.

An interrupt bumps `input_generation`, drops older queued entries with visible markers, and keeps the
canceled text as salvage for one steer. A steer waits for the next tool-result boundary (ACP has no
mid-turn injection) and otherwise falls back to the queue."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from sessions.enums import MarkerKind
from sessions.runtime.tasks import db
from sessions.runtime.turns import Turn

logger = logging.getLogger(__name__)

@dataclass
class StagedSteer:
    entry_id: str
    text: str
    generation: int
    delivering: bool = False


class BusyInputMixin:
    """SessionRuntime's busy-input modes beyond the queue: interrupt and steer."""

    @property
    def generation(self) -> int:
        return int(self.meta.get("input_generation") or 0)

    async def _advance_generation(self) -> list[str]:
        """Bump the input generation; pending entries of older generations are dropped, visibly."""
        self.meta["input_generation"] = self.generation + 1
        dropped = await db(self.manager.inputs.drop_older, self.id, self.generation)
        # A staged steer is a queued row of an older generation too: drop_older took it already, so it gets
        # its own marker here, never a second one (and is counted once).
        steer_id = self.steer.entry_id if self.steer is not None else None
        for entry_id in dropped:
            if entry_id == steer_id:
                continue
            self.marker(MarkerKind.PROMPT_DROPPED, "Stale queued input dropped by an interrupt.",
                        {"queue_entry_id": entry_id, "reason": "stale_generation",
                         "queue_generation": self.generation})
        if steer_id is not None:
            self.marker(MarkerKind.PROMPT_DROPPED, "Staged steer dropped by an interrupt.",
                        {"queue_entry_id": steer_id, "reason": "stale_generation"})
            if steer_id not in dropped:
                dropped.append(steer_id)
            self.steer = None
        return dropped

    async def cancel_and_wait(self, turn: Turn) -> bool:
        await self.cancel_turn()
        try:
            await asyncio.wait_for(asyncio.shield(turn.ended.wait()), self.config.supervision.timeout_cancel_grace)
            return True
        except TimeoutError:
            return False

    async def interrupt(self, *, replacement: str | None, expected_turn_id: str | None) -> dict[str, Any]:
        """Cancel the current turn (fenced by expected_turn_id); run `replacement` as a new turn, or keep
        the canceled text as salvage for one later steer (the dedicated interrupt)."""
        from sessions.errors import Conflict

        turn = self.turn
        if expected_turn_id and (turn is None or turn.id != expected_turn_id):
            raise Conflict("expected_turn_id does not match the running turn", code="turn_mismatch",
                           data={"expected_turn_id": expected_turn_id, "current_turn_id": turn.id if turn else None})
        dropped = await self._advance_generation()
        previous = turn.id if turn else None
        self.handover = replacement is not None
        try:
            if turn is not None:
                if replacement is None:
                    self.salvage = {"text": turn.authored or turn.text, "turn_id": turn.id}
                if not await self.cancel_and_wait(turn):
                    raise Conflict("the running turn did not end within timeout_cancel_grace",
                                   code="interrupt_timeout", data={"turn_id": turn.id})
            new = await self.start_turn(replacement) if replacement is not None else None
        finally:
            self.handover = False
        result: dict[str, Any] = {"status": "interrupted", "interrupted": turn is not None,
                                  "previous_turn_id": previous, "canceled_queued_entries": dropped,
                                  "queue_generation": self.generation}
        if new is not None:
            result.update({"status": "accepted", "mode": "interrupt", "new_turn_id": new.id, "turn_id": new.id})
        if turn is None:  # idle: still 200 and older input fenced off (surfaces reference), but no turn was cut
            summary = "No turn was running; input generation advanced" + (
                " and the replacement started." if replacement is not None else ".")
        else:
            summary = "Turn interrupted" + (" and replaced." if replacement is not None else "; text kept for a steer.")
        self.marker(MarkerKind.PROMPT_INTERRUPTED, summary,
                    {"generation": self.generation, "canceled_count": len(dropped), "previous_turn_id": previous,
                     "new_turn_id": result.get("new_turn_id")})
        await self.recorder.flush()
        await self.persist()
        return result

    async def stage_steer(self, text: str) -> dict[str, Any]:
        """Steer: after a dedicated interrupt, compose salvage + correction once as a new turn; while busy,
        deliver at the next tool-result boundary, else fall back to the queue when the turn ends."""
        if self.salvage is not None and self.turn is None:
            salvage, self.salvage = self.salvage, None
            composed = f"{salvage['text']}\n\nUser correction/guidance after interrupt: {text}"
            turn = await self.start_turn(composed, source="steer", authored=text)
            self.marker(MarkerKind.PROMPT_STEERED, "Steer composed with the interrupted prompt.",
                        {"generation": self.generation, "salvaged_turn_id": salvage["turn_id"], "new_turn_id": turn.id})
            return {"status": "accepted", "mode": "steer", "turn_id": turn.id, "new_turn_id": turn.id,
                    "queue_generation": self.generation}
        if self.turn is None:
            from sessions.errors import Conflict

            raise Conflict("no prompt in progress to steer", code="prompt_not_in_progress")
        entry, _ = await db(self.manager.inputs.enqueue, self.id, text, mode="steer", generation=self.generation)
        if self.steer is not None:
            await db(self.manager.inputs.mark, self.steer.entry_id, "canceled")
            self.marker(MarkerKind.PROMPT_DROPPED, "An older staged steer was replaced.",
                        {"queue_entry_id": self.steer.entry_id, "reason": "replaced"})
        self.steer = StagedSteer(entry.id, entry.text, entry.generation)
        self.marker(MarkerKind.PROMPT_STEERED, "Steer staged for the next tool result.",
                    {"queue_entry_id": entry.id, "queue_generation": entry.generation})
        await self.recorder.flush()
        return {"status": "staged", "mode": "steer", "staged": True, "queue_entry_id": entry.id,
                "queue_generation": entry.generation, "fallback_mode_if_no_tool_result": "queue"}

    async def _deliver_steer(self, turn: Turn) -> None:
        """At a tool-result boundary: end the running turn cooperatively and continue with the steer."""
        steer = self.steer
        if steer is None or self.turn is not turn:
            return
        self.handover = True
        try:
            if not await self.cancel_and_wait(turn):
                steer.delivering = False
                return
            if self.steer is not steer or self.stopping:
                return
            self.steer = None
            await db(self.manager.inputs.mark, steer.entry_id, "sent")
            new = await self.start_turn(steer.text, source="steer", extra={
                "action": "steered", "resource": "session_input_queue", "decision": str(steer.generation),
                "request_id": steer.entry_id})
        finally:
            self.handover = False
        self.marker(MarkerKind.PROMPT_STEERED, "Steer delivered at a tool-result boundary.",
                    {"queue_entry_id": steer.entry_id, "previous_turn_id": turn.id, "new_turn_id": new.id})

    async def _steer_fallback(self) -> None:
        steer = self.steer
        if steer is None or steer.delivering:
            return
        self.steer = None
        await db(self.manager.inputs.to_queue, steer.entry_id)
        self.marker(MarkerKind.PROMPT_STEERED, "No tool result before the turn ended; steer queued instead.",
                    {"queue_entry_id": steer.entry_id, "fallback_to_queue": True})
