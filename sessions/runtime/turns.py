"""Turns: one prompt at a time per session. The user_message is committed before the prompt reaches the
agent; a turn the agent ends with an error puts the failure on the session until a later turn succeeds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from compozy_base import metrics
from sessions.acp.driver import AgentRequestError, TransportClosed
from sessions.acp.mapping import normalize_usage
from sessions.enums import EventType, FailureKind, MarkerKind, SessionState
from sessions.runtime import lifecycle
from sessions.runtime.tasks import db, spawn
from sessions.store import folder
from sessions.store.failures import StoreFailure
from sessions.store.ids import new_turn_id
from sessions.store.redact import redact_text

logger = logging.getLogger(__name__)

# Failures a turn puts on a live session; the next turn that succeeds clears them.
TURN_FAILURE_KINDS = frozenset({FailureKind.PROMPT_FAILURE.value, FailureKind.PROVIDER_AUTH_FAILURE.value})


@dataclass
class Turn:
    id: str
    text: str  # what the user asked (after prompt hooks): salvage, titles and history use this
    source: str
    started_at: str
    sent: str = ""  # what the agent receives, when it differs (a context replay prepended)
    authored: str = ""  # exactly what was typed, when a prompt hook changed `text`
    started_mono: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    terminal: bool = False
    cancel_requested: bool = False
    reply: str = ""
    outputs: int = 0  # session/update notifications the agent sent during this turn


class TurnsMixin:
    """SessionRuntime's turns: start, run, cancel, and dispatch of queued input."""

    @property
    def busy(self) -> bool:
        return self.turn is not None

    async def start_turn(self, text: str, *, source: str = "user", authored: str | None = None,
                         extra: dict[str, Any] | None = None) -> Turn:
        """Record user_message (committed) before the prompt reaches ACP, then run the turn."""
        async with self.prompt_lock:
            if self.turn is not None:
                from sessions.errors import Conflict

                raise Conflict("a prompt is already in progress", code="prompt_in_progress")
            outcome = await self.hook("input.pre_submit", message=text, context_blocks=[], attachments=[],
                                      input_class="user_message" if source == "user" else "synthetic_reentry")
            if outcome is not None:
                if not outcome.ok:
                    from sessions.errors import HookDenied

                    raise HookDenied(outcome.error, data={"hook": outcome.hook_name,
                                                          "stops_session": outcome.hook_required})
                patched = str(outcome.payload.get("message") or text)
                if patched != text:
                    authored, text = authored if authored is not None else text, patched
            turn = Turn(new_turn_id(), text, source, folder.isoformat(folder.utcnow()) or "")
            if self.projection is not None:
                # Context rebuilt from log: the agent receives the projection; the store keeps what was typed.
                turn.sent = f"{self.projection}\n\nUser request: {text}"
                self.projection = None
            self.turn = turn
            # The interrupt's salvage is fenced to the next input (sessions reference §6): a turn in between ends it,
            # so a later steer cannot compose it with text it was never meant for.
            self.salvage = None
            content: dict[str, Any] = {"text": text, "source": source, **(extra or {})}
            if authored is not None and authored != text:
                content["authored_text"] = authored
                turn.authored = authored
            if turn.sent:
                content["context_replay"] = True
            # A daemon-originated prompt (a heartbeat wake) is stored as such, never as something a user typed.
            kind = EventType.SYNTHETIC_REENTRY if source == "synthetic" else EventType.USER_MESSAGE
            self.record(kind, content, turn_id=turn.id)
            try:
                await self.recorder.flush()
            except StoreFailure as exc:
                # Nothing reached the agent: the prompt is refused whole (the session stops on its own).
                self.turn = None
                turn.ended.set()
                from sessions.errors import StorageError

                raise StorageError.from_failure(exc) from exc
            activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
            activity.update({"turn_id": turn.id, "turn_source": source, "turn_started_at": turn.started_at,
                             "current_tool": None, "tool_call_id": None, "last_progress_at": None})
            activity["prompt_active"] = True
            self.touch_activity("prompt_started")
            started = await self.hook("turn.start", turn_id=turn.id, input_class=source, user_message=text)
            if started is not None and not started.ok and started.hook_required:
                turn.terminal = True
                self.record(EventType.ERROR, {"error": started.error}, turn_id=turn.id)
                self.turn = None
                turn.ended.set()
                from sessions.errors import HookDenied

                raise HookDenied(started.error, data={"hook": started.hook_name, "stops_session": True})
            # Health follows prompt activity (health reference §3): `prompting` and wake-ineligible once the turn
            # is allowed to start, not at its first heartbeat (30 s). Not awaited: the turn never waits on it.
            spawn(self.persist())
            turn.task = spawn(self._run_turn(turn))
            self.announce()  # `running` on the dashboard now, not once the write above lands
        self.supervisor.beat()
        return turn

    async def _run_turn(self, turn: Turn) -> None:
        assert self.agent
        try:
            result = await self.agent.request("session/prompt", {
                "sessionId": self.meta["acp_session_id"],
                "prompt": [{"type": "text", "text": turn.sent or turn.text}],
            })
            result = result if isinstance(result, dict) else {}
            stop = str(result.get("stopReason") or "end_turn")
            content: dict[str, Any] = {"stop_reason": stop, "prompt_stop_reason": stop}
            if isinstance(result.get("usage"), dict):
                content["usage"] = normalize_usage(result["usage"])
                self.recorder.merge_usage(turn.id, content["usage"])
            if stop == "end_turn" and turn.outputs == 0 and not turn.cancel_requested:
                # An agent whose model server is down ends the turn at once with nothing said; that is a
                # failure the user must see, not a quiet success.
                failure = await self._turn_failure(
                    FailureKind.PROMPT_FAILURE, "the agent ended the turn without any output (stop reason "
                    "end_turn); its model or model server may be unavailable")
                self.record(EventType.ERROR, {**content, "error": failure["summary"], "failure": failure},
                            turn_id=turn.id)
            else:
                self.record(EventType.DONE, content, turn_id=turn.id)
                self._clear_turn_failure()
            turn.terminal = True
            # A heartbeat wake is the daemon talking, not the user: it never names the session.
            if turn.reply and turn.source != "synthetic" and self._title_eligible():
                self.meta["auto_title"] = {"status": "pending"}
                spawn(self._auto_title(turn))
        except AgentRequestError as exc:
            kind = FailureKind.PROVIDER_AUTH_FAILURE if lifecycle.is_auth_error(exc.code, str(exc)) \
                else FailureKind.PROMPT_FAILURE
            failure = await self._turn_failure(kind, str(exc))
            self.record(EventType.ERROR, {"error": failure["summary"], "failure": failure}, turn_id=turn.id)
            turn.terminal = True
        except TransportClosed:
            # The exit watcher classifies the death; the stop path records this turn's error and marker,
            # so the turn must still be current when it looks (it cancels this task when done).
            await self.stopped.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("turn %s failed", turn.id)
            self.record(EventType.ERROR, {"error": redact_text(str(exc))}, turn_id=turn.id)
            turn.terminal = True
        finally:
            metrics.TURN_SECONDS.observe(time.monotonic() - turn.started_mono)
            self.permissions.cancel_all()
            with contextlib.suppress(StoreFailure):
                await self.recorder.flush()
            if self.turn is turn:
                self.turn = None
                activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
                activity.update({"prompt_active": False, "current_tool": None, "tool_call_id": None})
                self.meta["liveness"]["stall_state"] = ""
            turn.ended.set()
        with contextlib.suppress(Exception):
            await self.hook("turn.end", turn_id=turn.id, input_class=turn.source, user_message=turn.text)
        if self.state == SessionState.ACTIVE and not self.stopping and not self.handover:
            await self._steer_fallback()
            await self.persist()
            await self.dispatch_next()

    async def cancel_turn(self) -> bool:
        """ACP session/cancel for the running turn; the agent answers the prompt with `cancelled`."""
        turn = self.turn
        if turn is None or self.agent is None:
            return False
        turn.cancel_requested = True
        # ACP: the client answers every pending permission request of a cancelled turn with `cancelled`.
        self.permissions.cancel_all()
        await self.agent.notify("session/cancel", {"sessionId": self.meta.get("acp_session_id")})
        return True

    async def dispatch_next(self) -> None:
        """Run the oldest queued input (a staged first prompt or a queued prompt), if idle."""
        if self.busy or self.handover or self.state != SessionState.ACTIVE or self.stopping:
            return
        entry = await db(self.manager.inputs.claim_next, self.id)
        if entry is not None and (self.busy or self.handover):
            await db(self.manager.inputs.mark, entry.id, "queued")  # someone else took the turn meanwhile
            return
        if entry is None:
            return
        self.marker(MarkerKind.PROMPT_ACCEPTED, "Queued prompt handed to the agent.",
                    {"queue_entry_id": entry.id, "queue_generation": entry.generation, "source": entry.source})
        from sessions.errors import HookDenied

        try:
            await self.start_turn(entry.text, source=entry.source)
        except HookDenied as exc:
            await db(self.manager.inputs.mark, entry.id, "failed")
            self.marker(MarkerKind.PROMPT_DROPPED, f"Queued prompt refused by a hook: {exc.message}",
                        {"queue_entry_id": entry.id, "reason": "hook_denied"})
            with contextlib.suppress(StoreFailure):
                await self.recorder.flush()
            if not self.stopping:
                await self.dispatch_next()
            return
        except Exception:
            await db(self.manager.inputs.mark, entry.id, "failed")
            raise
        await db(self.manager.inputs.mark, entry.id, "sent")

    async def _turn_failure(self, kind: FailureKind, summary: str) -> dict[str, Any]:
        """A turn the agent ended with an error: the session stays active, but the failure is on the session
        (status, list, badge) until a later turn succeeds, not only in an `error` event."""
        failure = await self.failure(kind, summary)
        metrics.FAILURES.labels(kind=kind.value).inc()
        self.meta["failure"] = failure
        logger.warning("session %s: turn failed (%s): %s", self.id, kind.value, failure["summary"])
        return failure

    def _clear_turn_failure(self) -> None:
        if (self.meta.get("failure") or {}).get("kind") in TURN_FAILURE_KINDS:
            self.meta["failure"] = None
