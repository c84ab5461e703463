"""Activity and supervision on the owner's side (docs/reference/sessions.md §7).

`Activity` keeps a session's work signals in memory (touched on every event, so cheap) and stamps them into the
record's `liveness.activity` when it is written. `Supervisor` writes the metadata-only heartbeats while a turn runs
(waiting on a person counts as activity) and carries out what the huey sweep decided
(`sessions.runtime.supervision.decide`),
behind the decision's fence: the same activation, turn, input generation and activity stamps, or it is refused as
stale. It never decides again: the thresholds live in `sessions/runtime/supervision.py` alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, cast

from sessions.core import lifecycle
from sessions.core.enums import EventType, FailureKind, MarkerKind, SessionState, StopReason
from sessions.core.failures import StoreFailure
from sessions.core.offload import db, spawn
from sessions.core.record import Activity as ActivityRecord
from sessions.core.record import ActivityDoc, SessionRecord
from sessions.runtime import supervision
from sessions.runtime.supervision import Action, Decision
from sessions.store import folder

if TYPE_CHECKING:
    from sessions.runtime.elicitations import ElicitationBoard
    from sessions.runtime.host import SessionCore
    from sessions.runtime.permissions import PermissionBoard
    from sessions.runtime.turn import Turn

logger = logging.getLogger(__name__)


# The first heartbeat of a loop comes up to this share of the interval early. Sessions prompted together (a fan-out,
# the capacity benchmark's steps) otherwise wrote their heartbeats in the same second every interval: at 150
# streaming sessions, 150 meta.json writes and catalog updates at once on the runtime's DB thread, whose Python held
# the GIL against the loop. Early, never late: the sweep judges a heartbeat stale only past the interval.
HEARTBEAT_SPREAD = 0.5


def first_heartbeat_delay(interval: float, draw: float) -> float:
    """When a heartbeat loop first writes: somewhere in the last `HEARTBEAT_SPREAD` of the interval, by `draw`
    (uniform in [0, 1)), so that sessions started together spread their writes."""
    return interval * (1 - HEARTBEAT_SPREAD * draw)


def _stamp(at: float) -> str:
    return folder.isoformat(datetime.fromtimestamp(at, UTC)) or ""


def _apply_touch(activity: ActivityRecord, chunk_kind: str | None, at: float) -> str:
    """The touches kept in memory (the last chunk's kind, the wall-clock time), applied to an activity block: the
    record's own when it is written, a copy for a read. Returns the time stamp."""
    if chunk_kind is not None:
        activity.last_activity_kind = chunk_kind
        activity.last_activity_detail = ""
    stamp = _stamp(at)
    activity.last_activity_at = stamp
    return stamp


class Activity:
    """A session's work signals: the last one's kind and time, and the tool calls still without a result."""

    def __init__(self, rec: SessionRecord) -> None:
        self._rec = rec
        self.at: float | None = None  # time.time() of the last activity; stamped into the record on write
        self.mono: float | None = None  # time.monotonic() of the same touch, for idle durations
        self._chunk_kind: str | None = None  # the last streamed chunk's kind, stamped into the record on write
        self._tools_in_flight: set[str] = set()  # tool calls without a result: work supervised silence never stops

    def touch(self, kind: str, detail: str = "", tool: str | None = None, tool_call_id: str | None = None,
              tool_done: bool = False) -> None:
        """Called for every event: keep it cheap. The wall-clock time is formatted only when written."""
        activity = self._rec.activity_to_write()
        self._chunk_kind = None  # this touch is newer than any chunk's
        activity.last_activity_kind = kind
        activity.last_activity_detail = detail[:200]
        in_flight = self._tools_in_flight
        if kind == "prompt_started":
            in_flight.clear()
        if tool is not None:
            activity.current_tool = tool
            activity.tool_call_id = tool_call_id
        if tool_call_id:
            # A tool call without its result is work in flight (a long build): supervised silence never stops it.
            (in_flight.discard if tool_done else in_flight.add)(tool_call_id)
        activity.tools_in_flight = len(in_flight)
        self.at, self.mono = time.time(), time.monotonic()

    def touch_chunk(self, kind: str) -> None:
        """`touch` for a streamed text chunk (thousands a second): a kind and a time, written to the record only
        when it is written."""
        self._chunk_kind = kind
        self.at, self.mono = time.time(), time.monotonic()

    def stamp(self) -> None:
        """Write the touches kept in memory into the record (before it is saved, or read for a report)."""
        if self.at is None:
            return
        kind, self._chunk_kind = self._chunk_kind, None
        self._rec.liveness_to_write().last_update_at = _apply_touch(self._rec.activity_to_write(), kind, self.at)

    def stamped_at(self) -> str | None:
        """The `last_activity_at` meta.json gets for the last touch: the supervision fence compares it with the one
        a decision was made from."""
        if self.at is None:
            return self._rec.liveness.activity.last_activity_at
        return _stamp(self.at)

    def idle(self, turn: Turn) -> float:
        """Seconds since the last touch (or the turn's start), on the monotonic clock."""
        last = self.mono if self.mono is not None and self.mono >= turn.started_mono else turn.started_mono
        return time.monotonic() - last

    def live(self, turn: Turn | None) -> ActivityDoc:
        """The activity as of now, for reads: meta.json's copy lags by up to a heartbeat (chunks touch only
        memory). Touches are applied to a copy, so a read on a worker thread cannot race the loop's touches."""
        activity = self._rec.liveness.activity.model_copy()
        if self.at is not None:
            _apply_touch(activity, self._chunk_kind, self.at)
        return self._with_turn(activity, turn)

    def report(self, turn: Turn) -> ActivityDoc:
        """The activity a supervision event carries: the record's, stamped first."""
        self.stamp()
        return self._with_turn(self._rec.liveness.activity, turn)

    def _with_turn(self, block: ActivityRecord, turn: Turn | None) -> ActivityDoc:
        activity = cast(ActivityDoc, block.model_dump(mode="json", exclude_unset=True))  # the model's own keys
        if turn is None:
            return activity
        now = time.monotonic()
        activity.update({"turn_id": turn.id, "turn_source": turn.source, "turn_started_at": turn.started_at,
                         "idle_seconds": round(self.idle(turn), 3),
                         "elapsed_seconds": round(now - turn.started_mono, 3),
                         "elapsed_ms": int((now - turn.started_mono) * 1000)})
        return activity


class TurnControl(Protocol):
    """What supervision needs of the turns: the running one, and a cooperative cancel of it."""

    @property
    def turn(self) -> Turn | None: ...

    async def cancel_and_wait(self, turn: Turn) -> bool: ...


class Supervisor:
    """Heartbeats while a turn runs, and the sweep's decisions carried out behind their fence."""

    def __init__(self, session: SessionCore, activity: Activity, turns: TurnControl,
                 permissions: PermissionBoard, elicitations: ElicitationBoard | None = None) -> None:
        self._session = session
        self._elicitations = elicitations
        self._activity = activity
        self._turns = turns
        self._permissions = permissions
        self._heartbeat: asyncio.Task[None] | None = None
        self._done_turn: str | None = None  # the turn `_done` belongs to
        self._done: set[Action] = set()  # ONCE_PER_TURN actions carried out for that turn

    # ---- heartbeats ------------------------------------------------------------------------------

    def beat(self) -> None:
        """A turn started: make sure the heartbeat runs (one loop per session)."""
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = spawn(self._heartbeat_loop())

    def halt(self) -> None:
        """The session stopped: no more heartbeats."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()

    async def _heartbeat_loop(self) -> None:
        """Metadata-only heartbeats while a turn runs; never events. Waiting on a person counts as activity."""
        session = self._session
        interval = max(0.2, session.config.supervision.activity_heartbeat_interval)
        wait = first_heartbeat_delay(interval, random.random())
        while self._turns.turn is not None and not session.stopping:
            await asyncio.sleep(wait)
            wait = interval
            turn = self._turns.turn
            if turn is None or session.stopping:
                break
            if self._permissions.waiting:
                self._activity.touch("agent_waiting", "waiting for a permission decision")
            elif self._elicitations is not None and self._elicitations.waiting:
                self._activity.touch("agent_waiting", "waiting for an answer to a question")
            activity = session.rec.activity_to_write()
            activity.idle_seconds = round(self._activity.idle(turn), 3)
            activity.elapsed_seconds = round(time.monotonic() - turn.started_mono, 3)
            try:
                await session.persist()
            except Exception:  # a heartbeat is metadata only: the next one tries again; the cause is logged
                logger.exception("heartbeat write failed for %s", session.rec.id)

    # ---- the sweep's decisions -------------------------------------------------------------------

    def _live(self, turn: Turn | None) -> supervision.Live:
        """The owner's side of the fence: the stamps a decision was made from, as they are now."""
        session = self._session
        rec = session.rec
        turn_id = turn.id if turn is not None else None
        fence = supervision.Fence(
            activated_at=rec.activated_at, turn_id=turn_id, generation=rec.input_generation,
            activity_at=self._activity.stamped_at(), progress_at=rec.liveness.activity.last_progress_at)
        done = frozenset(self._done) if turn_id is not None and self._done_turn == turn_id else frozenset()
        return supervision.Live(active=session.rec.state == SessionState.ACTIVE and not session.stopping, fence=fence,
                                done=done)

    def _carried_out(self, turn: Turn, action: Action) -> None:
        if self._done_turn != turn.id:
            self._done_turn, self._done = turn.id, set()
        self._done.add(action)

    async def carry_out(self, action: Action, decision: Decision) -> str:
        """One action of the sweep's decision, run on this loop by the manager (one decision at a time per session).
        Refused (`stale`, `skipped`: `supervision.refusal`) when what it was decided for moved on; the sweep does not
        wait for the outcome."""
        turn = self._turns.turn
        refused = supervision.refusal(action, decision.fence, self._live(turn))
        if refused is not None:
            return refused
        if action == Action.WALL_CLOCK:
            await self._session.stop(StopReason.TIMEOUT, "session wall-clock limit (session.limits.timeout) reached",
                                     failure=lifecycle.failure_object(FailureKind.TIMEOUT,
                                                                      "session wall-clock limit reached"))
            return "stopped"
        assert turn is not None  # the fence holds a turn for every other action
        if action in supervision.ONCE_PER_TURN:
            self._carried_out(turn, action)
        if action == Action.PROGRESS:
            return self._progress(turn, decision)
        if action == Action.WARNING:
            self._session.record(EventType.RUNTIME_WARNING, {
                "text": f"Runtime activity is stale ({int(decision.idle)} seconds idle).",
                "runtime": self._activity.report(turn)})
            return "recorded"
        if action == Action.TIMEOUT:
            return await self._timeout(turn, decision)
        if action == Action.QUIET:
            return self._quiet(turn, decision)
        return await self._silence_stop(turn, decision)

    def _progress(self, turn: Turn, decision: Decision) -> str:
        report = self._activity.report(turn)
        minutes = int(decision.elapsed // 60)
        tool = report.get("current_tool")
        text = f"Still working... ({minutes} min elapsed" + (f", running: {tool})" if tool else ")")
        self._session.record(EventType.RUNTIME_PROGRESS, {"text": text, "runtime": report})
        self._session.rec.activity_to_write().last_progress_at = folder.isoformat(folder.utcnow())
        return "recorded"

    async def _timeout(self, turn: Turn, decision: Decision) -> str:
        session, idle = self._session, decision.idle
        liveness = session.rec.liveness_to_write()
        liveness.stall_state, liveness.stall_reason = "stalled", "activity_timeout"
        session.marker(MarkerKind.PROMPT_TIMEOUT, f"Prompt idle for {int(idle)} seconds; canceling.",
                       {"idle_seconds": round(idle, 3), "turn_id": turn.id})
        # §7 order: stall, marker, this warning (events reference: "again on timeout"), cancel, grace, stop.
        session.record(EventType.RUNTIME_WARNING, {"text": f"Runtime activity timed out ({int(idle)} seconds idle).",
                                                   "runtime": self._activity.report(turn)})
        with contextlib.suppress(StoreFailure):
            await session.recorder.flush()
        await session.persist()
        if not await self._turns.cancel_and_wait(turn):
            await session.stop(StopReason.TIMEOUT, "activity_timeout", failure=lifecycle.failure_object(
                FailureKind.TIMEOUT, f"prompt inactive for {int(idle)} s and did not stop within timeout_cancel_grace"))
            return "stopped"
        return "canceled"

    def _quiet(self, turn: Turn, decision: Decision) -> str:
        """Supervised silence (docs/reference/health.md §6): one `runtime_warning` after `quiet_after`."""
        sup = self._session.config.supervision
        then = f"; its process tree is stopped after {int(sup.stop_grace)} s more" if sup.stop_grace > 0 else ""
        self._session.record(EventType.RUNTIME_WARNING, {
            "text": f"No work evidence for {int(decision.idle)} seconds (quiet_after){then}.",
            "runtime": self._activity.report(turn),
            "supervision": {"rule": "quiet_after", "quiet_after": sup.quiet_after, "stop_grace": sup.stop_grace,
                            "blocker": decision.blocker}})
        return "recorded"

    async def _silence_stop(self, turn: Turn, decision: Decision) -> str:
        """After `stop_grace` more: a stop of the agent's process tree, verified gone, recorded in meta.json
        (`supervision.silence_stop`) and handed to task recovery."""
        session, idle = self._session, decision.idle
        pgid = session.agent.pid if session.agent is not None else None
        session.marker(MarkerKind.PROMPT_TIMEOUT, f"No work evidence for {int(idle)} seconds; stopping the agent's "
                       "process tree (supervised silence).", {"idle_seconds": round(idle, 3), "turn_id": turn.id,
                                                                "pgid": pgid})
        with contextlib.suppress(StoreFailure):
            await session.recorder.flush()
        await session.stop(StopReason.TIMEOUT, supervision.SILENCE_DETAIL, failure=lifecycle.failure_object(
            FailureKind.TIMEOUT, f"no work evidence for {int(idle)} s (quiet_after + stop_grace)"))
        verification: supervision.GroupVerification = await asyncio.to_thread(
            supervision.verify_group_gone, pgid) if pgid else {"pgid": None, "verified": True,
                                                               "note": "the agent never started"}
        verification["idle_seconds"] = round(idle, 3)
        session.rec.supervision_to_write()["silence_stop"] = verification
        await session.persist()
        logger.info("session %s: silence stop, process tree %s", session.rec.id,
                    "verified gone" if verification["verified"] else f"NOT gone: {verification.get('survivors')}")
        await db(supervision.verified_stop.send, sender=type(session), session_id=session.rec.id,
                 meta=session.rec.to_meta(), verification=verification)
        return "stopped"
