"""Turns: one prompt at a time per session. The user_message is committed before the prompt reaches the
agent; a turn the agent ends with an error puts the failure on the session until a later turn succeeds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypedDict

from compozy_base import metrics
from sessions.acp import auth
from sessions.acp.driver import AgentRequestError, TransportClosed
from sessions.acp.mapping import normalize_usage
from sessions.core import display, lifecycle
from sessions.core.enums import EventType, FailureKind, MarkerKind, SessionState
from sessions.core.errors import Conflict, HookDenied, StorageError
from sessions.core.failures import StoreFailure
from sessions.core.live import TurnExtra
from sessions.core.offload import db, spawn
from sessions.core.record import CostDoc, Failure, FailureDoc
from sessions.core.redact import redact_text
from sessions.runtime.busy_input import BusyInput
from sessions.runtime.turn import Turn
from sessions.store import folder
from sessions.store.ids import new_turn_id
from sessions.store.ops import UsageColumns

if TYPE_CHECKING:
    from sessions.runtime.activity import Activity
    from sessions.runtime.elicitations import ElicitationBoard
    from sessions.runtime.host import SessionCore
    from sessions.runtime.permissions import PermissionBoard

logger = logging.getLogger(__name__)

# Failures a turn puts on a live session; the next turn that succeeds clears them.
TURN_FAILURE_KINDS = frozenset({FailureKind.PROMPT_FAILURE.value, FailureKind.PROVIDER_AUTH_FAILURE.value})


class UserMessageContent(TurnExtra, total=False):
    """A turn's `user_message` (or `synthetic_reentry`) row."""

    text: str
    source: str
    authored_text: str  # what was typed, when a prompt hook changed `text`
    context_replay: bool
    memory_snapshot: bool  # the agent received the session's frozen memory snapshot before `text`


class DoneContent(TypedDict, total=False):
    """A turn's `done` row (also the start of an `error` row for a turn that said nothing)."""

    stop_reason: str
    prompt_stop_reason: str
    usage: UsageColumns
    cost: CostDoc  # this turn's share of the session's cost


class TurnCost(Protocol):
    def turn_started(self) -> None: ...

    def turn_cost(self) -> CostDoc | None: ...


class Turns:
    """A session's turns: start, run, cancel, and dispatch of queued input. Owns the running turn, the prompt lock,
    the context projection waiting for the next prompt, and the busy-input modes (`input`: interrupt and steer)."""

    def __init__(self, session: SessionCore, activity: Activity, permissions: PermissionBoard, *,
                 heartbeat: Callable[[], None], after_reply: Callable[[Turn], None],
                 cost: TurnCost | None = None, elicitations: ElicitationBoard | None = None,
                 checkpoint: Callable[[str], Awaitable[object]] | None = None) -> None:
        self._session = session
        # A worktree session's checkpoint when a turn ends (checkpointing.py): taken while the turn is still the
        # session's, so no input starts and no rewind runs before the state it ended with is kept.
        self._checkpoint = checkpoint
        self._elicitations = elicitations  # the agent's open questions: cancelled with the turn, as permissions
        self._cost = cost  # what each turn cost, when the agent reports cost (agent_state.py)
        self._activity = activity
        self._permissions = permissions
        self._heartbeat = heartbeat  # a turn started: supervision's heartbeat must run
        self._after_reply = after_reply  # a turn the agent answered: the auto-title may name the session
        self.turn: Turn | None = None
        self.prompt_lock = asyncio.Lock()
        # Admission: deciding whether input starts a turn now or waits in the queue, and acting on it, is one step
        # per session (prompts, queued dispatch, wakes), so input runs in the order it was acknowledged in.
        self.admission = asyncio.Lock()
        # Provider context recovery: a projection of this session's log, prepended to the next prompt.
        self.projection: str | None = None
        # The frozen memory snapshot (sessions/runtime/memory_tools.py), prepended to the first prompt once.
        self.memory_block: str | None = None
        # Set while an interrupt or a steer hands the session from one turn to the next: the ending turn
        # must not dispatch queued input into the gap (ACP runs one prompt per session at a time).
        self.handover = False
        self.input: BusyInput = BusyInput(session, self)

    @property
    def busy(self) -> bool:
        return self.turn is not None

    def _context_for(self, turn: Turn) -> tuple[bool, bool]:
        """What the agent receives before the typed text, once each: the context projection, then the frozen memory
        snapshot. A slash command goes to the agent as typed (a prefix would make it text): the next prompt carries
        them instead. Returns (replayed, gave memory)."""
        if turn.text.startswith("/"):
            return False, False
        replayed, gave_memory = self.projection is not None, self.memory_block is not None
        if self.projection is not None:
            # Context rebuilt from log: the agent receives the projection; the store keeps what was typed.
            turn.sent = f"{self.projection}\n\nUser request: {turn.text}"
            self.projection = None
        if self.memory_block is not None:
            turn.sent = f"{self.memory_block}\n\n{turn.sent or turn.text}"
            self.memory_block = None
        return replayed, gave_memory

    async def start_turn(self, text: str, *, source: str = "user", authored: str | None = None,
                         extra: TurnExtra | None = None) -> Turn:
        """Record user_message (committed) before the prompt reaches ACP, then run the turn."""
        async with self.prompt_lock:
            if self.turn is not None:
                raise Conflict("a prompt is already in progress", code="prompt_in_progress")
            outcome = await self._session.hook("input.pre_submit", message=text, context_blocks=[], attachments=[],
                                      input_class="user_message" if source == "user" else "synthetic_reentry")
            if outcome is not None:
                if not outcome.ok:
                    raise HookDenied(outcome.error, data={"hook": outcome.hook_name,
                                                          "stops_session": outcome.hook_required})
                patched = str(outcome.payload.get("message") or text)
                if patched != text:
                    authored, text = authored if authored is not None else text, patched
            turn = Turn(new_turn_id(), text, source, folder.isoformat(folder.utcnow()) or "")
            replayed, gave_memory = self._context_for(turn)
            self.turn = turn
            if self._cost is not None:
                self._cost.turn_started()
            # The interrupt's salvage is fenced to the next input (docs/reference/sessions.md §6): a turn in between
            # ends it,
            # so a later steer cannot compose it with text it was never meant for.
            self.input.end_salvage()
            content: UserMessageContent = {"text": text, "source": source, **(extra or {})}
            if authored is not None and authored != text:
                content["authored_text"] = authored
                turn.authored = authored
            if replayed:
                content["context_replay"] = True
            if gave_memory:
                content["memory_snapshot"] = True
            # A daemon-originated prompt (a heartbeat wake) is stored as such, never as something a user typed.
            kind = EventType.SYNTHETIC_REENTRY if source == "synthetic" else EventType.USER_MESSAGE
            self._session.record(kind, content, turn_id=turn.id)
            try:
                await self._session.recorder.flush()
            except StoreFailure as exc:
                # Nothing reached the agent: the prompt is refused whole (the session stops on its own).
                self.turn = None
                turn.ended.set()
                raise StorageError.from_failure(exc) from exc
            activity = self._session.rec.activity_to_write()
            activity.turn_id, activity.turn_source, activity.turn_started_at = turn.id, source, turn.started_at
            activity.current_tool = activity.tool_call_id = activity.last_progress_at = None
            activity.prompt_active = True
            self._activity.touch("prompt_started")
            started = await self._session.hook("turn.start", turn_id=turn.id, input_class=source, user_message=text)
            if started is not None and not started.ok and started.hook_required:
                turn.terminal = True
                self._session.record(EventType.ERROR, {"error": started.error}, turn_id=turn.id)
                self.turn = None
                turn.ended.set()
                raise HookDenied(started.error, data={"hook": started.hook_name, "stops_session": True})
            # Health follows prompt activity (docs/reference/health.md §3): `prompting` and wake-ineligible once the
            # turn
            # is allowed to start, not at its first heartbeat (30 s). Not awaited: the turn never waits on it.
            spawn(self._session.persist())
            turn.task = spawn(self._run_turn(turn))
            self._session.announce()  # `running` on the dashboard now, not once the write above lands
        self._heartbeat()
        return turn

    async def _run_turn(self, turn: Turn) -> None:
        assert self._session.agent
        outcome = "error"
        try:
            result = await self._session.agent.request("session/prompt", {
                "sessionId": self._session.rec.acp_session_id,
                "prompt": [{"type": "text", "text": turn.sent or turn.text}],
            })
            result = result if isinstance(result, dict) else {}
            stop = str(result.get("stopReason") or "end_turn")
            content: DoneContent = {"stop_reason": stop, "prompt_stop_reason": stop}
            if isinstance(result.get("usage"), dict):
                content["usage"] = normalize_usage(result["usage"])
                self._session.recorder.merge_usage(turn.id, content["usage"])
            if stop == "end_turn" and turn.outputs == 0 and not turn.cancel_requested:
                # An agent whose model server is down ends the turn at once with nothing said; that is a
                # failure the user must see, not a quiet success.
                failure = await self._turn_failure(
                    FailureKind.PROMPT_FAILURE, "the agent ended the turn without any output (stop reason "
                    "end_turn); its model or model server may be unavailable")
                self._session.record(EventType.ERROR, {**content, "error": failure["summary"], "failure": failure},
                            turn_id=turn.id)
            else:
                cost = self._cost.turn_cost() if self._cost is not None else None
                if cost is not None:
                    content["cost"] = cost  # this turn's share of the session's cost (history, recap)
                self._cancel_open_tools(turn, stop)
                self._session.record(EventType.DONE, content, turn_id=turn.id)
                self._clear_turn_failure()
                outcome = "done"
            turn.terminal = True
            # A heartbeat wake is the daemon talking, not the user: it never names the session.
            if turn.reply and turn.source != "synthetic":
                self._after_reply(turn)
        except AgentRequestError as exc:
            failure = await self._turn_failure(*self._classify_prompt_error(exc))
            self.close_open_tools(turn, "failed", "Tool call never settled: its turn failed.")
            self._session.record(EventType.ERROR, {"error": failure["summary"], "failure": failure}, turn_id=turn.id)
            turn.terminal = True
        except TransportClosed:
            # The exit watcher classifies the death; the stop path records this turn's error and marker,
            # so the turn must still be current when it looks (it cancels this task when done).
            await self._session.stopped.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # whatever broke the turn is recorded on it and logged with its traceback
            logger.exception("turn %s failed", turn.id)
            self.close_open_tools(turn, "failed", "Tool call never settled: its turn failed.")
            self._session.record(EventType.ERROR, {"error": redact_text(str(exc))}, turn_id=turn.id)
            turn.terminal = True
        finally:
            metrics.TURN_SECONDS.observe(time.monotonic() - turn.started_mono)
            self._permissions.cancel_all()
            if self._elicitations is not None:
                self._elicitations.cancel_all()
            await self._settle_store(turn)
            if self.turn is turn:
                self.turn = None
                activity = self._session.rec.activity_to_write()
                activity.prompt_active, activity.current_tool, activity.tool_call_id = False, None, None
                self._session.rec.liveness.stall_state = ""
                # The turn that ended last, for the `turn_finished` webhook (derived from saved metadata).
                # Its reply's start is the sessions list's preview of the session (display.preview_text).
                self._session.rec.liveness.last_turn = {
                    "turn_id": turn.id, "source": turn.source, "ended_at": folder.isoformat(folder.utcnow()),
                    "outcome": outcome, "reply_preview": display.preview_text(redact_text(turn.reply))}
            turn.ended.set()
        await self._session.observe("turn.end", turn_id=turn.id, input_class=turn.source, user_message=turn.text)
        if self._session.rec.state == SessionState.ACTIVE and not self._session.stopping and not self.handover:
            await self.input.fall_back()
            await self._session.persist()
            await self.dispatch_next()

    async def _settle_store(self, turn: Turn) -> None:
        """The turn's rows committed, then a worktree session's checkpoint of what the turn left."""
        with contextlib.suppress(StoreFailure):
            await self._session.recorder.flush()
        if self._checkpoint is not None and not self._session.stopping:
            with contextlib.suppress(StoreFailure):
                await self._checkpoint(turn.id)

    def _cancel_open_tools(self, turn: Turn, stop: str) -> None:
        """The agent answered the prompt: a cancelled turn's tool calls still open are cancelled with it."""
        if turn.cancel_requested or stop == "cancelled":
            self.close_open_tools(turn, "cancelled", "Tool call cancelled with its turn.")

    def close_open_tools(self, turn: Turn, status: str, why: str) -> None:
        """The tool calls `turn` left open, settled as it ends (cancelled, failed, or cut by a stop): a `tool_result`
        each (`status` `cancelled` or `failed`), recorded before the turn's terminal row so the call closes in the
        same message. ACP: a client marks a cancelled turn's unfinished tool calls cancelled; without this a stop
        during a tool call left it `in_progress` for good."""
        for call_id, name in turn.open_tools.items():
            self._session.record(EventType.TOOL_RESULT, {
                "tool_call_id": call_id, "tool_name": name, "status": status, "tool_result": {"error": why},
                "tool_error": why}, turn_id=turn.id)
        turn.open_tools.clear()

    async def cancel_turn(self) -> bool:
        """ACP session/cancel for the running turn; the agent answers the prompt with `cancelled`."""
        turn = self.turn
        if turn is None or self._session.agent is None:
            return False
        turn.cancel_requested = True
        # ACP: the client answers every pending permission request of a cancelled turn with `cancelled`.
        self._permissions.cancel_all()
        if self._elicitations is not None:
            self._elicitations.cancel_all()
        await self._session.agent.notify("session/cancel", {"sessionId": self._session.rec.acp_session_id})
        return True

    async def cancel_and_wait(self, turn: Turn) -> bool:
        """Cancel `turn` and wait up to `timeout_cancel_grace` for it to end; False if it did not."""
        await self.cancel_turn()
        try:
            grace = self._session.config.supervision.timeout_cancel_grace
            await asyncio.wait_for(asyncio.shield(turn.ended.wait()), grace)
            return True
        except TimeoutError:
            return False

    async def queue_waiting(self) -> bool:
        """Whether queued input (a staged first prompt or a queued prompt) waits for its turn."""
        return await db(self._session.manager.inputs.waiting, self._session.rec.id)

    async def dispatch_next(self) -> None:
        """Run the oldest queued input (a staged first prompt or a queued prompt), if idle. One dispatch at a time,
        under the admission lock: two concurrent ones (a turn's end and a prompt queued just then) would claim two
        entries, and the younger could start first."""
        async with self.admission:
            while await self._dispatch_one():
                pass

    async def _dispatch_one(self) -> bool:
        """Start the oldest queued entry; True when a hook refused it and the next one should be tried."""
        if self.busy or self.handover or self._session.rec.state != SessionState.ACTIVE or self._session.stopping:
            return False
        entry = await db(self._session.manager.inputs.claim_next, self._session.rec.id)
        if entry is not None and (self.busy or self.handover):
            await db(self._session.manager.inputs.mark, entry.id, "queued")  # someone else took the turn meanwhile
            return False
        if entry is None:
            return False
        self._session.marker(MarkerKind.PROMPT_ACCEPTED, "Queued prompt handed to the agent.",
                    {"queue_entry_id": entry.id, "queue_generation": entry.generation, "source": entry.source})
        try:
            await self.start_turn(entry.text, source=entry.source)
        except HookDenied as exc:
            await db(self._session.manager.inputs.mark, entry.id, "failed")
            self._session.marker(MarkerKind.PROMPT_DROPPED, f"Queued prompt refused by a hook: {exc.message}",
                        {"queue_entry_id": entry.id, "reason": "hook_denied"})
            with contextlib.suppress(StoreFailure):
                await self._session.recorder.flush()
            return not self._session.stopping
        except Exception:
            await db(self._session.manager.inputs.mark, entry.id, "failed")
            raise
        await db(self._session.manager.inputs.mark, entry.id, "sent")
        return False

    def _classify_prompt_error(self, exc: AgentRequestError) -> tuple[FailureKind, str]:
        """A prompt the agent refused for want of a login is `provider_auth_failure`, its summary naming the exact
        variable and commands; any other refusal is a `prompt_failure`."""
        if not lifecycle.is_auth_error(exc.code, str(exc)):
            return FailureKind.PROMPT_FAILURE, str(exc)
        provider = self._session.provider
        return FailureKind.PROVIDER_AUTH_FAILURE, f"{exc}; " + auth.next_step(provider.name, self._session.rec.id,
                                                                             provider.key_env)

    async def _turn_failure(self, kind: FailureKind, summary: str) -> FailureDoc:
        """A turn the agent ended with an error: the session stays active, but the failure is on the session
        (status, list, badge) until a later turn succeeds, not only in an `error` event."""
        failure = await self._session.failure(kind, summary)
        metrics.FAILURES.labels(kind=kind.value).inc()
        self._session.rec.failure = Failure.of(failure)
        logger.warning("session %s: turn failed (%s): %s", self._session.rec.id, kind.value, failure["summary"])
        # Saved before the turn's `error` event is recorded: whoever saw the event (the CLI, which exits on it)
        # then finds the failure on the session too, not the record of before the turn until the turn's end.
        try:
            await self._session.persist()
        except Exception:  # the error event is still recorded, and the turn's end saves the record again
            logger.exception("session %s: saving the turn's failure failed", self._session.rec.id)
        return failure

    def _clear_turn_failure(self) -> None:
        failure = self._session.rec.failure
        if failure is not None and str(failure.kind) in TURN_FAILURE_KINDS:
            self._session.rec.failure = None
