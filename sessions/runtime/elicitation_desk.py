"""The agent's `elicitation/create` requests (form mode) answered by a person: checked, opened on the board,
recorded as `system` rows (`elicitation_requested`, `elicitation_answered`; the recorder redacts secret-looking
values), shared in the record's liveness (attention list, `elicitation_requested` webhook, other nodes), waited on.

A question too long, with a schema too large or one the form cannot honour (sessions/core/elicitation_form.py), or
one past MAX_OPEN_QUESTIONS, is refused with `invalid_params`, which the agent sees, and a `protocol_violation`
row, which a person sees; nothing of it is stored. meta.json keeps only a line of each open question (what the
attention list and the webhook show): the whole question is in its event row and in the runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessions.core.elicitation_form import question_problem
from sessions.core.enums import EventType
from sessions.core.jsonobj import JsonObject
from sessions.core.offload import spawn
from sessions.core.redact import bound_text
from sessions.runtime.elicitations import ElicitationBoard

if TYPE_CHECKING:
    from sessions.runtime.activity import Activity
    from sessions.runtime.host import SessionCore
    from sessions.runtime.turns import Turns

METHOD = "elicitation/create"
# Questions one session may have open at once: an agent asks one at a time and waits (claude, codex); a few in
# flight is generous. Each open question is a line of meta.json, so this bounds the record: with no bound, 300 open
# questions of 10 KB cost 646 MB of meta.json rewrites.
MAX_OPEN_QUESTIONS = 16
# What meta.json keeps of an open question's message: the attention list and the webhook show 300 bytes of it.
SHARED_MESSAGE_BYTES = 300


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
        problem = question_problem(message, schema)
        if problem is None and self.board.waiting_count >= MAX_OPEN_QUESTIONS:
            problem = f"{self.board.waiting_count} questions are open already, at most {MAX_OPEN_QUESTIONS}"
        if problem is not None:
            self._session.protocol_violation(f"{METHOD} refused: {problem}")
            raise RequestError.invalid_params({"reason": problem})
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
        who = {"actor": dict(pending.answered_by.fields())} if pending.answered_by is not None else {}
        self._session.record(EventType.SYSTEM, {
            "title": "elicitation_answered", "text": action, **who,
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
            {"request_id": p.request_id, "message": bound_text(p.message, SHARED_MESSAGE_BYTES), "turn_id": p.turn_id,
             "created_at": p.created_at} for p in self.board.waiting_items()]
        self._session.announce()
        spawn(self._session.persist())

    def answer(self, request_id: str, action: str, content: JsonObject | None) -> bool:
        return self.board.resolve(request_id, action, content)
