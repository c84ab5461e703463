"""Activity supervision on the owner's side (sessions reference §7). The huey sweep proposes actions from
durable activity; the runtime verifies each against its live state and acts on its own loop. Heartbeats are
metadata only; waiting on a person counts as activity."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from datetime import UTC, datetime
from typing import Any

from sessions import supervision
from sessions.enums import EventType, FailureKind, MarkerKind, StopReason
from sessions.runtime import lifecycle
from sessions.runtime.tasks import db
from sessions.runtime.turns import Turn
from sessions.store import folder
from sessions.store.failures import StoreFailure

logger = logging.getLogger(__name__)


def _apply_touch(activity: dict[str, Any], chunk_kind: str | None, at: float) -> str:
    """The touches kept in memory (the last chunk's kind, the wall-clock time), applied to an activity dict: meta's
    own when it is written, a copy for a read. Returns the time stamp."""
    if chunk_kind is not None:
        activity["last_activity_kind"] = chunk_kind
        activity["last_activity_detail"] = ""
    stamp = folder.isoformat(datetime.fromtimestamp(at, UTC))
    activity["last_activity_at"] = stamp
    return stamp


class ActivityMixin:
    """SessionRuntime's activity: touches, heartbeats, and the supervision actions it verifies."""

    def touch_activity(self, kind: str, detail: str = "", tool: str | None = None,
                       tool_call_id: str | None = None, tool_done: bool = False) -> None:
        """Called for every event: keep it cheap. The wall-clock time is formatted only when written."""
        activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
        self._chunk_kind = None  # this touch is newer than any chunk's
        activity["last_activity_kind"] = kind
        activity["last_activity_detail"] = detail[:200]
        in_flight = self._tools_in_flight
        if kind == "prompt_started":
            in_flight.clear()
        if tool is not None:
            activity["current_tool"] = tool
            activity["tool_call_id"] = tool_call_id
        if tool_call_id:
            # A tool call without its result is work in flight (a long build): supervised silence never stops it.
            (in_flight.discard if tool_done else in_flight.add)(tool_call_id)
        activity["tools_in_flight"] = len(in_flight)
        self._activity_at = time.time()
        if self.turn is not None:
            self.turn.last_activity_mono = time.monotonic()

    def touch_chunk(self, kind: str) -> None:
        """touch_activity for a streamed text chunk (thousands a second): a kind and a time, written to meta only
        when meta is written."""
        self._chunk_kind = kind
        self._activity_at = time.time()
        if self.turn is not None:
            self.turn.last_activity_mono = time.monotonic()

    def _stamp_activity(self) -> None:
        if self._activity_at is None:
            return
        activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
        kind, self._chunk_kind = self._chunk_kind, None
        self.meta["liveness"]["last_update_at"] = _apply_touch(activity, kind, self._activity_at)

    async def _heartbeat_loop(self) -> None:
        """Metadata-only heartbeats while a turn runs; never events. Waiting on a person counts as activity."""
        interval = max(0.2, self.config.supervision.activity_heartbeat_interval)
        while self.turn is not None and not self.stopping:
            await asyncio.sleep(interval)
            if self.turn is None or self.stopping:
                break
            if self.permissions.waiting:
                self.touch_activity("agent_waiting", "waiting for a permission decision")
            activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
            activity["idle_seconds"] = round(time.monotonic() - self.turn.last_activity_mono, 3)
            activity["elapsed_seconds"] = round(time.monotonic() - self.turn.started_mono, 3)
            try:
                await self.persist()
            except Exception:
                logger.exception("heartbeat write failed for %s", self.id)

    async def supervise(self, action: str, turn_id: str | None, now: float | None = None) -> str:
        """A supervision decision proposed by the huey sweep, run on this loop by the manager (one at a time per
        session); verified here against live state first (`supervision.confirmed`, at `now` on the monotonic
        clock). The sweep does not wait for the outcome."""
        turn = self.turn
        if action == "wall_clock":
            await self.stop(StopReason.TIMEOUT, "session wall-clock limit (session.limits.timeout) reached",
                            failure=lifecycle.failure_object(FailureKind.TIMEOUT, "session wall-clock limit reached"))
            return "stopped"
        if turn is None or turn.id != turn_id or self.stopping:
            return "stale"
        if action not in ("progress", "warning", "timeout", "quiet", "silence_stop"):
            return "unknown"
        now = time.monotonic() if now is None else now
        idle = now - turn.last_activity_mono
        runtime = self._runtime_payload(turn)
        live = supervision.LiveTurn(
            idle=idle, since_progress=now - turn.last_progress_mono, warned=turn.warned, timed_out=turn.timed_out,
            quiet_noted=self._quiet_turn == turn.id, has_agent=self.agent is not None,
            blocker=supervision.silence_blocker(runtime, permission_waiting=self.permissions.waiting))
        if not supervision.confirmed(action, live, self.config):
            return "skipped"
        if action == "progress":
            turn.last_progress_mono = now
            minutes = int((now - turn.started_mono) // 60)
            tool = runtime.get("current_tool")
            text = f"Still working... ({minutes} min elapsed" + (f", running: {tool})" if tool else ")")
            self.record(EventType.RUNTIME_PROGRESS, {"text": text, "runtime": runtime})
            self.meta["liveness"]["activity"]["last_progress_at"] = folder.isoformat(folder.utcnow())
            return "recorded"
        if action == "warning":
            turn.warned = True
            self.record(EventType.RUNTIME_WARNING,
                        {"text": f"Runtime activity is stale ({int(idle)} seconds idle).", "runtime": runtime})
            return "recorded"
        if action == "timeout":
            turn.timed_out = True
            self.meta["liveness"].update({"stall_state": "stalled", "stall_reason": "activity_timeout"})
            self.marker(MarkerKind.PROMPT_TIMEOUT, f"Prompt idle for {int(idle)} seconds; canceling.",
                        {"idle_seconds": round(idle, 3), "turn_id": turn.id})
            # §7 order: stall, marker, this warning (events reference: "again on timeout"), cancel, grace, stop.
            self.record(EventType.RUNTIME_WARNING,
                        {"text": f"Runtime activity timed out ({int(idle)} seconds idle).", "runtime": runtime})
            with contextlib.suppress(StoreFailure):
                await self.recorder.flush()
            await self.persist()
            if not await self._cancel_and_wait(turn):
                await self.stop(StopReason.TIMEOUT, "activity_timeout",
                                failure=lifecycle.failure_object(
                                    FailureKind.TIMEOUT, f"prompt inactive for {int(idle)} s and did not stop "
                                    f"within timeout_cancel_grace"))
                return "stopped"
            return "canceled"
        return await self._supervise_silence(action, turn, idle, runtime, live.blocker)

    async def _supervise_silence(self, action: str, turn: Turn, idle: float, runtime: dict[str, Any],
                                 blocker: str | None) -> str:
        """Supervised silence (health reference §6), confirmed against live state: one `runtime_warning` after
        `quiet_after`, then after `stop_grace` more a stop of the agent's process tree, verified gone, recorded
        in meta.json (`supervision.silence_stop`) and handed to task recovery."""
        sup = self.config.supervision
        if action == "quiet":
            self._quiet_turn = turn.id
            then = f"; its process tree is stopped after {int(sup.stop_grace)} s more" if sup.stop_grace > 0 else ""
            self.record(EventType.RUNTIME_WARNING, {
                "text": f"No work evidence for {int(idle)} seconds (quiet_after){then}.", "runtime": runtime,
                "supervision": {"rule": "quiet_after", "quiet_after": sup.quiet_after, "stop_grace": sup.stop_grace,
                                "blocker": blocker}})
            return "recorded"
        pgid = self.agent.pid if self.agent is not None else None  # confirmed() required an agent
        self.marker(MarkerKind.PROMPT_TIMEOUT, f"No work evidence for {int(idle)} seconds; stopping the agent's "
                    "process tree (supervised silence).", {"idle_seconds": round(idle, 3), "turn_id": turn.id,
                                                             "pgid": pgid})
        with contextlib.suppress(StoreFailure):
            await self.recorder.flush()
        await self.stop(StopReason.TIMEOUT, supervision.SILENCE_DETAIL, failure=lifecycle.failure_object(
            FailureKind.TIMEOUT, f"no work evidence for {int(idle)} s (quiet_after + stop_grace)"))
        verification = await asyncio.to_thread(supervision.verify_group_gone, pgid) if pgid else {
            "pgid": None, "verified": True, "note": "the agent never started"}
        verification["idle_seconds"] = round(idle, 3)
        self.meta.setdefault("supervision", {})["silence_stop"] = verification
        await self.persist()
        logger.info("session %s: silence stop, process tree %s", self.id,
                    "verified gone" if verification["verified"] else f"NOT gone: {verification.get('survivors')}")
        await db(supervision.verified_stop.send, sender=type(self), session_id=self.id,
                 meta=copy.deepcopy(self.meta), verification=verification)
        return "stopped"

    def _runtime_payload(self, turn: Turn) -> dict[str, Any]:
        self._stamp_activity()
        return self._activity_view(turn)

    def live_activity(self) -> dict[str, Any]:
        """The activity as of now, for reads: meta.json's copy lags by up to a heartbeat (chunks touch only
        memory). No writes, so a read on a worker thread cannot race the loop's touches."""
        activity = self._activity_view(self.turn)
        if self._activity_at is not None:
            _apply_touch(activity, self._chunk_kind, self._activity_at)
        return activity

    def _activity_view(self, turn: Turn | None) -> dict[str, Any]:
        activity = dict((self.meta.get("liveness") or {}).get("activity") or {})
        if turn is None:
            return activity
        now = time.monotonic()
        activity.update({"turn_id": turn.id, "turn_source": turn.source, "turn_started_at": turn.started_at,
                         "idle_seconds": round(now - turn.last_activity_mono, 3),
                         "elapsed_seconds": round(now - turn.started_mono, 3),
                         "elapsed_ms": int((now - turn.started_mono) * 1000)})
        return activity
