"""Pure health derivation (docs/reference/health.md §2): from a meta.json snapshot and live runtime facts to the
fields of a health row. No I/O, so the rules are testable on their own and identical at boot and at runtime."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypedDict

from health.enums import HealthState, HealthValue, WakeReason
from sessions.core.enums import FailureKind, SessionState
from sessions.core.record import Failure, SessionRecord
from sessions.core.redact import bound_text, redact_text
from sessions.store.folder import parse_time

LAST_ERROR_BYTES = 2048


@dataclass(frozen=True)
class LiveFacts:
    """What the owning daemon knows that meta.json does not: is there a runtime, and is its process up."""

    runtime: bool = False
    process_running: bool = False
    stopping: bool = False


def attachable(rec: SessionRecord, live: LiveFacts) -> bool:
    """The attach rules of the session payload, and the agent's subprocess still running."""
    failure_kind = rec.failure.kind if rec.failure is not None else None
    stalled = rec.liveness.stall_state == "stalled"
    return (rec.state == SessionState.ACTIVE and live.runtime and live.process_running and not live.stopping
            and failure_kind in (None, FailureKind.PROMPT_FAILURE) and not stalled)


def prompt_active(rec: SessionRecord) -> bool:
    return rec.liveness.activity.prompt_active


def state_of(rec: SessionRecord, live: LiveFacts) -> HealthState:
    if rec.state == SessionState.STOPPED:
        return HealthState.STOPPED
    if rec.state == SessionState.ACTIVE and live.runtime and prompt_active(rec):
        return HealthState.PROMPTING
    if attachable(rec, live):
        return HealthState.IDLE
    return HealthState.DETACHED


def health_of(rec: SessionRecord, live: LiveFacts) -> HealthValue:
    if rec.state == SessionState.STOPPED:
        return HealthValue.DEAD
    if rec.liveness.stall_state == "stalled":
        return HealthValue.DEGRADED
    if rec.state != SessionState.ACTIVE or not live.runtime:
        return HealthValue.UNKNOWN
    return HealthValue.HEALTHY


def idle_since(rec: SessionRecord) -> datetime | None:
    """Last real activity, else the moment the session became active: the idle clock's start."""
    return parse_time(rec.liveness.activity.last_activity_at) or parse_time(rec.activated_at) \
        or parse_time(rec.created_at)


def is_stale(state: str, health: str, active: bool, since: datetime | None, presence: datetime | None,
             now: datetime, stale_after: float) -> bool:
    """Idle, no prompt, healthy so far, and neither activity nor a presence touch within `stale_after`."""
    if state != HealthState.IDLE or active or health != HealthValue.HEALTHY:
        return False
    latest = max((t for t in (since, presence) if t is not None), default=None)
    return latest is None or now - latest > timedelta(seconds=stale_after)


def eligibility(state: str, health: str, active: bool, attachable_now: bool) -> tuple[bool, str]:
    """First match wins (docs/reference/health.md §2); health-level reasons collapse to `session_unhealthy`."""
    if health != HealthValue.HEALTHY:
        return False, WakeReason.SESSION_UNHEALTHY.value
    if active or state == HealthState.PROMPTING:
        return False, WakeReason.SESSION_PROMPT_ACTIVE.value
    if not attachable_now or state == HealthState.DETACHED:
        return False, WakeReason.SESSION_NOT_ATTACHABLE.value
    if state != HealthState.IDLE:
        return False, WakeReason.SESSION_UNHEALTHY.value
    return True, ""


def last_error(failure: Failure | None) -> str:
    text = failure.summary if failure is not None else ""
    if failure is None or not text:
        return ""
    # Only the summary is redacted: the kind is a closed value, and redacted with it `provider_auth_failure: …` read as
    # a secret key and its value (`provider_auth_failure: [REDACTED] required`).
    return bound_text(f"{failure.kind or 'error'}: {redact_text(text)}", LAST_ERROR_BYTES)


class DerivedFields(TypedDict):
    """The derived columns of a health row (`SessionHealth(**fields)`)."""

    state: str
    health: str
    active_prompt: bool
    attachable: bool
    eligible_for_wake: bool
    ineligibility_reason: str
    last_activity_at: datetime | None
    last_error: str


def derive(rec: SessionRecord, live: LiveFacts, *, presence: datetime | None, now: datetime,
           stale_after: float) -> DerivedFields:
    """Every derived field of a health row (identity and timestamps of writing excluded)."""
    state = state_of(rec, live)
    health = health_of(rec, live)
    active = state == HealthState.PROMPTING
    can_attach = attachable(rec, live)
    activity = rec.liveness.activity
    if is_stale(state, health, active, idle_since(rec), presence, now, stale_after):
        health = HealthValue.STALE
    eligible, reason = eligibility(state, health, active, can_attach)
    return {
        "state": state.value, "health": health.value, "active_prompt": active, "attachable": can_attach,
        "eligible_for_wake": eligible, "ineligibility_reason": reason,
        "last_activity_at": parse_time(activity.last_activity_at), "last_error": last_error(rec.failure),
    }
