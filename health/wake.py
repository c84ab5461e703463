"""The wake service (docs/reference/health.md §4): decide whether HEARTBEAT.md policy may re-orient a session, and send
the synthetic prompt when it may. Every decision returns one reason of the closed `WakeReason` set.

The gate is race-safe without locks:
- a compare-and-set on the session's `WakeState.version` lets one of several concurrent wakes through; the
  others are `wake_coalesced` (a wake in flight or cooling down), or `cooldown_active` for a manual wake;
- the synthetic prompt is sent with "skip if busy" under the runtime's prompt lock: a prompt that started
  after health was read makes it `session_prompt_active_race`, never a second turn.
Wake never touches task runs, claims or leases, and never writes health (a session with no health row stored yet
has it derived from its metadata, as every health read does: `services.present_row`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NotRequired, TypedDict

from django.db import IntegrityError
from django.db.models import F

from compozy_base.config.heartbeat import HeartbeatConfig
from compozy_base.config.loader import get_config
from health import heartbeat, policy, services
from health.enums import HealthState, PolicyStatus, WakeReason, WakeResult, WakeSource
from health.heartbeat import Diagnostic
from health.models import HeartbeatSnapshot, SessionHealth, WakeEvent, WakeState
from sessions.core.errors import Conflict, Unavailable
from sessions.core.live import LiveSession
from sessions.runtime.manager import SessionManager, get_manager
from sessions.store.folder import isoformat, utcnow

logger = logging.getLogger(__name__)

SEND_TIMEOUT = 30.0  # the synthetic prompt is recorded before it reaches the agent: this bounds hooks + flush
PROMPT_HEAD = "Agent Heartbeat requested a reorientation for this existing session."
PROMPT_TAIL = ("This wake assigns no work and transfers no ownership. Before acting, inspect /agent/context, the "
               "session state, your inbox and the task APIs; claim only what those say is yours. If there is "
               "nothing to do, stay idle and end your turn.")


@dataclass
class Cycle:
    """One scheduler cycle: `max_wakes_per_cycle` counts the wakes sent in it."""

    sent: int = 0


class WakeDecision(TypedDict):
    """A wake's decision (docs/reference/health.md §3): built as a dict, sent as JSON as it is."""

    wake_event_id: str | None
    result: str
    reason: str
    policy_snapshot_id: str | None
    policy_digest: str | None
    config_digest: str | None
    synthetic_prompt_id: str | None
    diagnostics: list[Diagnostic]
    session_id: NotRequired[str]  # set by every decision but the bare `_recorded_decision`
    agent_name: NotRequired[str]
    source: NotRequired[str]
    dry_run: NotRequired[bool]


class SessionDecision(TypedDict):
    session_id: str
    workspace_id: str
    state: str
    result: str
    reason: str


class SyntheticWake(TypedDict):
    """What a heartbeat wake's synthetic prompt records of itself (its row's `synthetic`)."""

    reason: str
    summary: str
    wake_event_id: str
    policy_snapshot_id: str
    policy_digest: str
    config_digest: str
    source: str


class WakeStateDto(TypedDict):
    workspace_id: str
    agent_name: str
    session_id: str
    policy_snapshot_id: str | None
    last_wake_at: str | None
    next_allowed_at: str | None
    coalesced_count: int
    last_result: str | None
    last_reason: str | None
    in_flight: bool
    updated_at: str | None


class WakeEventDto(TypedDict):
    id: str
    workspace_id: str | None
    agent_name: str
    session_id: str | None
    policy_snapshot_id: str | None
    source: str
    result: str
    reason: str
    synthetic_prompt_id: str | None
    created_at: str | None
    expires_at: str | None


def _recorded_decision(result: WakeResult, reason: WakeReason, *, policy_snapshot_id: str | None = None,
                       policy_digest: str | None = None, config_digest: str | None = None,
                       diagnostics: list[Diagnostic] | None = None) -> WakeDecision:
    return {"wake_event_id": None, "result": result.value, "reason": reason.value,
            "policy_snapshot_id": policy_snapshot_id, "policy_digest": policy_digest, "config_digest": config_digest,
            "synthetic_prompt_id": None, "diagnostics": [] if diagnostics is None else diagnostics}


def require_recomputed() -> str:
    """Wakes wait until this daemon start's boot recompute finished (docs/reference/health.md §3)."""
    run = services.current_run()
    at = services.recomputed_at(run) if run else None
    if at is None:
        raise Unavailable("session health is being recomputed after a daemon start; retry shortly",
                          code="health_recomputing")
    return at


Snaps = dict[tuple[str, str], HeartbeatSnapshot]


def _snapshot(agent_name: str, workspace_id: str, cfg: HeartbeatConfig, snaps: Snaps | None) -> HeartbeatSnapshot:
    """The policy's snapshot, resolved once per (agent, workspace) when the caller keeps `snaps` (one file read and
    digest each, not one per session)."""
    if snaps is None:
        return policy.resolve(agent_name, workspace_id, cfg)
    key = (agent_name, workspace_id)
    if key not in snaps:
        snaps[key] = policy.resolve(agent_name, workspace_id, cfg)
    return snaps[key]


def policy_reason(cfg: HeartbeatConfig, snap: HeartbeatSnapshot | None, now: datetime) -> WakeReason | None:
    """Steps 1-3 of the pipeline: why the agent's policy refuses every wake now (config off, no valid snapshot, the
    file's own toggle, a quiet window), or None when its sessions' own state decides."""
    if not cfg.enabled:
        return WakeReason.HEARTBEAT_DISABLED
    if snap is None or snap.status == PolicyStatus.MISSING:
        return WakeReason.HEARTBEAT_NO_POLICY
    if snap.status == PolicyStatus.INVALID:
        return WakeReason.HEARTBEAT_INVALID
    if snap.status != PolicyStatus.VALID:
        return WakeReason.HEARTBEAT_NO_POLICY
    # `resolve` re-resolved the snapshot if the config digest changed
    if not snap.policy.get("enabled", True):
        return WakeReason.HEARTBEAT_DISABLED
    if not heartbeat.allowed_at(snap.policy, now):
        return WakeReason.QUIET_WINDOW
    return None


def wake(agent_name: str, session_id: str, *, source: WakeSource = WakeSource.MANUAL, dry_run: bool = False,
         cycle: Cycle | None = None, now: datetime | None = None, audit_repeats: bool = True, peek: bool = False,
         snaps: Snaps | None = None) -> WakeDecision:
    """Decide (and unless `dry_run`, act on) one wake request. Numbered as the reference's pipeline.

    `peek` is the decision a dry run would reach without recording anything of the wake (no audit row, not even a
    first wake-state row; resolving the policy may store its snapshot, as any status read does): what `agent
    heartbeat status` shows per session."""
    now = now or utcnow()
    dry_run = dry_run or peek
    cfg = get_config().heartbeat
    row = services.present_row(session_id)
    workspace_id = row.workspace_id if row else ""
    ctx = _Ctx(agent_name, session_id, workspace_id, source, now, cfg, dry_run, audit_repeats)
    # 1. config
    if not cfg.enabled:
        return ctx.decide(WakeResult.SKIPPED, WakeReason.HEARTBEAT_DISABLED)
    if row is not None and row.agent_name != agent_name:
        return ctx.decide(WakeResult.SKIPPED, WakeReason.HEARTBEAT_NO_ELIGIBLE_SESSION)
    # 2. the latest snapshot of the policy, 3. policy checks
    snap = _snapshot(agent_name, workspace_id, cfg, snaps)
    ctx.snap = snap
    refused = policy_reason(cfg, snap, now)
    if refused is not None:
        return ctx.decide(WakeResult.SKIPPED, refused)
    # 4. cooldown and wakes in flight
    state = None
    if row is not None:
        state = WakeState.objects.filter(session_id=session_id).first() if peek else \
            _state(session_id, workspace_id, agent_name, now)
    if (held := _held_back(state, source, now)) is not None:
        result, reason = held
        return ctx.decide(result, reason, coalesce=result == WakeResult.COALESCED)
    # 5. session health
    if row is None or (state is None and not peek):
        return ctx.decide(WakeResult.SKIPPED, WakeReason.SESSION_NOT_FOUND)
    if not row.eligible_for_wake:
        return ctx.decide(WakeResult.SKIPPED, _mapped(row))
    if cycle is not None and cycle.sent >= cfg.max_wakes_per_cycle:
        return ctx.decide(WakeResult.RATE_LIMITED, WakeReason.HEARTBEAT_RATE_LIMITED)
    # 6. dry run: the decision a real wake would reach here, without ids or side effects
    if dry_run:
        return ctx.decide(WakeResult.SENT, WakeReason.WAKE_SENT)
    # 7. claim the gate, record the decision's id, send with "skip if busy"
    assert state is not None  # a missing state returned at 5 unless `peek`, and a peek is a dry run (returned at 6)
    claimed = WakeState.objects.filter(session_id=session_id, version=state.version, in_flight=False).update(
        in_flight=True, version=F("version") + 1, updated_at=now)
    if claimed != 1:
        return ctx.decide(WakeResult.COALESCED, WakeReason.WAKE_COALESCED, coalesce=True)
    return _send(ctx, snap, cycle)


def _held_back(state: WakeState | None, source: WakeSource, now: datetime) -> tuple[WakeResult, WakeReason] | None:
    """Step 4: a wake in flight coalesces; one inside the cooldown is rate limited (asked by hand) or coalesces."""
    if state is not None and state.in_flight:
        return WakeResult.COALESCED, WakeReason.WAKE_COALESCED
    if state is not None and state.next_allowed_at is not None and state.next_allowed_at > now:
        if source == WakeSource.MANUAL:
            return WakeResult.RATE_LIMITED, WakeReason.COOLDOWN_ACTIVE
        return WakeResult.COALESCED, WakeReason.WAKE_COALESCED
    return None


def _send(ctx: _Ctx, snap: HeartbeatSnapshot, cycle: Cycle | None) -> WakeDecision:
    """Step 7 once the gate is ours: record the decision's id and send the prompt with "skip if busy"."""
    session_id, source = ctx.session_id, ctx.source
    event_id = "wke_" + secrets.token_hex(8)
    try:
        turn_id = send_synthetic(session_id, _prompt_text(snap), {
            "reason": "agent_heartbeat_wake", "summary": snap.policy.get("summary") or "",
            "wake_event_id": event_id, "policy_snapshot_id": snap.id, "policy_digest": snap.digest,
            "config_digest": snap.config_digest, "source": source.value})
    except Conflict as exc:
        if exc.code == "prompt_in_progress":
            return ctx.decide(WakeResult.SKIPPED, WakeReason.SESSION_PROMPT_ACTIVE_RACE, event_id=event_id,
                              release=True)
        return ctx.decide(WakeResult.FAILED, WakeReason.SYNTHETIC_PROMPT_FAILED, event_id=event_id, release=True)
    except Exception as exc:  # noqa: BLE001 - any failure of the prompt is the wake's: logged, recorded as failed
        logger.warning("wake of %s: synthetic prompt failed: %s", session_id, exc)
        return ctx.decide(WakeResult.FAILED, WakeReason.SYNTHETIC_PROMPT_FAILED, event_id=event_id, release=True)
    if cycle is not None:
        cycle.sent += 1
    return ctx.decide(WakeResult.SENT, WakeReason.WAKE_SENT, event_id=event_id, release=True, turn_id=turn_id)


def not_found(agent_name: str, session_id: str, *, source: WakeSource = WakeSource.MANUAL,
              dry_run: bool = False) -> WakeDecision:
    """The decision for a session id that resolves to no session (or not in the given workspace): skipped,
    `session_not_found`, and nothing recorded (no audit row, no wake state for an id anybody can make up)."""
    out = _recorded_decision(WakeResult.SKIPPED, WakeReason.SESSION_NOT_FOUND)
    out.update({"session_id": session_id, "agent_name": agent_name, "source": source.value, "dry_run": dry_run})
    return out


def session_decisions(agent_name: str, *, workspace_id: str = "", session_id: str = "",
                      now: datetime | None = None, limit: int = 100) -> list[SessionDecision]:
    """What a wake of each of the agent's sessions would decide now (`peek`: no wake recorded): its live sessions,
    newest first, or only `session_id` (whatever its state or agent); within `workspace_id` when given."""
    now = now or utcnow()
    if session_id:
        services.present_row(session_id)  # a session whose row is not stored yet is listed all the same
    rows = SessionHealth.objects.filter(session_id=session_id) if session_id else \
        SessionHealth.objects.filter(agent_name=agent_name).exclude(state=HealthState.STOPPED)
    if workspace_id:
        rows = rows.filter(workspace_id=workspace_id)
    snaps: Snaps = {}
    out: list[SessionDecision] = []
    for row in rows.order_by("-updated_at", "session_id")[:limit]:
        decision = wake(agent_name, row.session_id, now=now, peek=True, snaps=snaps)
        out.append({"session_id": row.session_id, "workspace_id": row.workspace_id, "state": row.state,
                    "result": decision["result"], "reason": decision["reason"]})
    return out


def _mapped(row: SessionHealth) -> WakeReason:
    try:
        return WakeReason(row.ineligibility_reason)
    except ValueError:
        return WakeReason.HEARTBEAT_NO_ELIGIBLE_SESSION


def _prompt_text(snap: HeartbeatSnapshot) -> str:
    summary = snap.policy.get("summary") or "(none)"
    guidance = snap.body.strip() or "(none)"
    return f"{PROMPT_HEAD}\n\nPolicy summary: {summary}\n\nPolicy guidance:\n{guidance}\n\n{PROMPT_TAIL}"


def _state(session_id: str, workspace_id: str, agent_name: str, now: datetime) -> WakeState:
    try:
        state, _ = WakeState.objects.get_or_create(session_id=session_id, defaults={
            "workspace_id": workspace_id, "agent_name": agent_name, "updated_at": now})
    except IntegrityError:  # created by a concurrent wake between our read and insert
        state = WakeState.objects.get(session_id=session_id)
    return state


def send_synthetic(session_id: str, text: str, synthetic: SyntheticWake) -> str:
    """Run the synthetic turn on the daemon's loop from this (worker) thread; its turn id is returned."""
    manager = get_manager()
    if manager.loop is None:
        raise Unavailable("the daemon loop is not running")
    future = asyncio.run_coroutine_threadsafe(_start(manager, session_id, text, synthetic), manager.loop)
    return future.result(SEND_TIMEOUT)


async def _start(manager: SessionManager, session_id: str, text: str, synthetic: SyntheticWake) -> str:
    runtime: LiveSession | None = manager.get(session_id)
    if runtime is None or runtime.stopping or runtime.state != "active":
        raise Conflict("session is not active", code="session_not_active")
    # Skip if busy, never queue; input queued earlier and still waiting for its turn counts as busy (it runs next).
    async with runtime.admission:
        if runtime.busy or runtime.handover or await runtime.queue_waiting():
            raise Conflict("a prompt is already in progress", code="prompt_in_progress")
        turn = await runtime.start_turn(text, source="synthetic", extra={"synthetic": synthetic})
    return str(turn.id)


class _Ctx:
    """One decision's context: writes its audit row and wake state, then shapes the decision DTO."""

    def __init__(self, agent_name: str, session_id: str, workspace_id: str, source: WakeSource, now: datetime,
                 cfg: HeartbeatConfig, dry_run: bool, audit_repeats: bool) -> None:
        self.agent_name, self.session_id, self.workspace_id = agent_name, session_id, workspace_id
        self.source, self.now, self.cfg, self.dry_run, self.audit_repeats = source, now, cfg, dry_run, audit_repeats
        self.snap: HeartbeatSnapshot | None = None

    def decide(self, result: WakeResult, reason: WakeReason, *, event_id: str | None = None, coalesce: bool = False,
               release: bool = False, turn_id: str | None = None) -> WakeDecision:
        snap = self.snap
        out = _recorded_decision(result, reason, policy_snapshot_id=snap.id if snap else None,
                                 policy_digest=(snap.digest or None) if snap else None,
                                 config_digest=snap.config_digest if snap else None,
                                 diagnostics=list(snap.diagnostics) if snap else [])
        out.update({"session_id": self.session_id, "agent_name": self.agent_name, "source": self.source.value,
                    "dry_run": self.dry_run})
        if self.dry_run:
            out.update({"wake_event_id": None, "policy_snapshot_id": None})
            return out
        exists = SessionHealth.objects.filter(session_id=self.session_id).exists()
        previous = WakeState.objects.filter(session_id=self.session_id).first() if exists else None
        repeat = previous is not None and previous.last_reason == reason.value and result != WakeResult.SENT
        if exists:
            self._update_state(result, reason, coalesce=coalesce, release=release)
        if repeat and not self.audit_repeats:
            return out  # the scheduler does not audit the same skip every cycle
        event_id = event_id or "wke_" + secrets.token_hex(8)
        WakeEvent.objects.create(
            id=event_id, workspace_id=self.workspace_id, agent_name=self.agent_name, session_id=self.session_id,
            policy_snapshot_id=snap.id if snap else "", source=self.source, result=result, reason=reason,
            synthetic_prompt_id=turn_id or "", created_at=self.now,
            expires_at=self.now + timedelta(seconds=self.cfg.wake_event_retention))
        out.update({"wake_event_id": event_id, "synthetic_prompt_id": turn_id})
        return out

    def _update_state(self, result: WakeResult, reason: WakeReason, *, coalesce: bool, release: bool) -> None:
        fields: dict[str, object] = {"last_result": result.value, "last_reason": reason.value, "updated_at": utcnow(),
                                  "policy_snapshot_id": self.snap.id if self.snap else ""}
        if coalesce:
            fields["coalesced_count"] = F("coalesced_count") + 1
        if release:
            fields["in_flight"] = False
        if result == WakeResult.SENT:
            fields.update(last_wake_at=self.now, coalesced_count=0,
                          next_allowed_at=self.now + timedelta(seconds=self.cfg.wake_cooldown))
        if not WakeState.objects.filter(session_id=self.session_id).update(**fields):
            _state(self.session_id, self.workspace_id, self.agent_name, self.now)
            WakeState.objects.filter(session_id=self.session_id).update(**fields)


# ---- the scheduler cycle -------------------------------------------------------------------------------

def run_cycle(now: datetime | None = None) -> dict[str, int]:
    """One scheduler cycle: wake each live session whose agent's policy interval has passed since its last wake
    (or last activity), at most `max_wakes_per_cycle` sent; then drop audit rows past retention."""
    now = now or utcnow()
    cfg = get_config().heartbeat
    counts = {"considered": 0, "sent": 0}
    WakeEvent.objects.filter(expires_at__lt=now).delete()
    if not cfg.enabled:
        return counts
    cycle = Cycle()
    snaps: Snaps = {}
    states = {s.session_id: s for s in WakeState.objects.all()}
    for row in SessionHealth.objects.exclude(state=HealthState.STOPPED).select_related("session").order_by(
            "updated_at"):
        snap = _snapshot(row.agent_name, row.workspace_id, cfg, snaps)
        if snap.status == PolicyStatus.MISSING:
            continue  # no HEARTBEAT.md: wake policy is off for the agent, and nothing to audit
        state = states.get(row.session_id)
        # The interval runs from the last wake, the last activity, or the session's creation: a new session is
        # not woken the moment it starts.
        since = max(t for t in (state.last_wake_at if state else None, row.last_activity_at, row.session.created_at)
                    if t is not None)
        interval = heartbeat.interval_of(snap.policy) if snap.policy else timedelta(seconds=cfg.default_interval)
        if now - since < interval:
            continue
        counts["considered"] += 1
        decision = wake(row.agent_name, row.session_id, source=WakeSource.SCHEDULER, cycle=cycle, now=now,
                        audit_repeats=False, snaps=snaps)
        counts["sent"] += decision["result"] == WakeResult.SENT
    return counts


# ---- reads ---------------------------------------------------------------------------------------------

def wake_state_dto(session_id: str) -> WakeStateDto | None:
    state = WakeState.objects.filter(session_id=session_id).first()
    if state is None:
        return None
    return {"workspace_id": state.workspace_id, "agent_name": state.agent_name, "session_id": state.session_id,
            "policy_snapshot_id": state.policy_snapshot_id or None, "last_wake_at": isoformat(state.last_wake_at),
            "next_allowed_at": isoformat(state.next_allowed_at), "coalesced_count": state.coalesced_count,
            "last_result": state.last_result or None, "last_reason": state.last_reason or None,
            "in_flight": state.in_flight, "updated_at": isoformat(state.updated_at)}


def event_dto(ev: WakeEvent) -> WakeEventDto:
    return {"id": ev.id, "workspace_id": ev.workspace_id or None, "agent_name": ev.agent_name,
            "session_id": ev.session_id or None, "policy_snapshot_id": ev.policy_snapshot_id or None,
            "source": ev.source, "result": ev.result, "reason": ev.reason,
            "synthetic_prompt_id": ev.synthetic_prompt_id or None, "created_at": isoformat(ev.created_at),
            "expires_at": isoformat(ev.expires_at)}


def recent_events(*, session_id: str | None = None, agent_name: str | None = None,
                  limit: int = 10) -> list[WakeEventDto]:
    qs = WakeEvent.objects.all()
    if session_id:
        qs = qs.filter(session_id=session_id)
    if agent_name:
        qs = qs.filter(agent_name=agent_name)
    return [event_dto(ev) for ev in qs.order_by("-created_at", "-id")[:limit]]
