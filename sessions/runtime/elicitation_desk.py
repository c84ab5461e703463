"""The agent's `elicitation/create` requests (form mode) answered by a person: opened on the board, recorded as
`system` rows (`elicitation_requested`, `elicitation_answered`; the recorder redacts secret-looking values), shared
in the record's liveness (attention list, `elicitation_requested` webhook, other nodes), waited on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessions.core.enums import EventType
from sessions.core.jsonobj import JsonObject
from sessions.core.offload import spawn
from sessions.runtime.elicitations import ElicitationBoard

if TYPE_CHECKING:
    from sessions.runtime.activity import Activity
    from sessions.runtime.host import SessionCore
    from sessions.runtime.turns import Turns

METHOD = "elicitation/create"


class ElicitationDesk:
    def __init__(self, session: SessionCore, activity: Activity, turns: Turns, board: ElicitationBoard) -> None:
        self._session = session
        self._activity = activity
        self._turns = turns
        self.board = board

    async def ask(self, params: JsonObject) -> JsonObject:  # ACP elicitation/create and its answer
        from acp.exceptions import RequestError

        mode = params.get("mode")
        schema = params.get("requestedSchema")
        if mode != "form" or not isinstance(schema, dict):
            # We offer form mode only (clientCapabilities.elicitation.form).
            raise RequestError.invalid_params({"mode": mode, "reason": "only form elicitations are supported"})
        message = str(params.get("message") or "")
        turn = self._turns.turn
        turn_id = turn.id if turn else ""
        if turn is None or turn.cancel_requested:
            # Nobody can be asked outside a running turn (the turn end cancels what is open).
            self._session.record(EventType.SYSTEM, {"title": "elicitation_answered", "text": "cancel",
                                                    "raw": {"message": message, "action": "cancel"}}, turn_id=turn_id)
            return {"action": "cancel"}
        pending = self.board.open(turn_id, message, schema)
        self._session.record(EventType.SYSTEM, {
            "title": "elicitation_requested", "text": message,
            "raw": {"request_id": pending.request_id, "message": message, "requested_schema": schema}},
            turn_id=turn_id)
        await self._session.recorder.flush()
        self._activity.touch("agent_waiting", "waiting for an answer to a question")
        self._share()
        try:
            action, content = await pending.answer
        finally:
            self.board.close(pending.request_id)
            self._share()
        self._session.record(EventType.SYSTEM, {
            "title": "elicitation_answered", "text": action,
            "raw": {"request_id": pending.request_id, "message": message, "action": action,
                    "content": content if action == "accept" else None}}, turn_id=turn_id)
        self._activity.touch("elicitation", action)
        if action == "accept":
            return {"action": "accept", "content": content or {}}
        return {"action": action}

    def _share(self) -> None:
        """What waits, into meta.json (not awaited) for the attention list and webhooks on any node."""
        liveness = self._session.rec.liveness_to_write()
        liveness.elicitation_requests = [
            {"request_id": p.request_id, "message": p.message, "turn_id": p.turn_id, "created_at": p.created_at}
            for p in self.board.waiting_items()]
        self._session.announce()
        spawn(self._session.persist())

    def answer(self, request_id: str, action: str, content: JsonObject | None) -> bool:
        return self.board.resolve(request_id, action, content)
