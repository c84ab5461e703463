"""Closed sets of the health app (docs/reference/health.md §1, §4): a value outside them cannot be written."""

from __future__ import annotations

from enum import StrEnum


class HealthState(StrEnum):
    IDLE = "idle"
    PROMPTING = "prompting"
    STOPPED = "stopped"
    DETACHED = "detached"


class HealthValue(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    STALE = "stale"
    DEAD = "dead"
    UNKNOWN = "unknown"


class WakeReason(StrEnum):
    """The seed's thirteen wake reasons, plus the success value and the catch-all of the original."""

    SESSION_NOT_FOUND = "session_not_found"
    SESSION_UNHEALTHY = "session_unhealthy"
    SESSION_NOT_ATTACHABLE = "session_not_attachable"
    SESSION_PROMPT_ACTIVE = "session_prompt_active"
    SESSION_PROMPT_ACTIVE_RACE = "session_prompt_active_race"
    COOLDOWN_ACTIVE = "cooldown_active"
    QUIET_WINDOW = "quiet_window"
    HEARTBEAT_DISABLED = "heartbeat_disabled"
    HEARTBEAT_INVALID = "heartbeat_invalid"
    HEARTBEAT_NO_POLICY = "heartbeat_no_policy"
    HEARTBEAT_RATE_LIMITED = "heartbeat_rate_limited"
    WAKE_COALESCED = "wake_coalesced"
    SYNTHETIC_PROMPT_FAILED = "synthetic_prompt_failed"
    WAKE_SENT = "wake_sent"
    HEARTBEAT_NO_ELIGIBLE_SESSION = "heartbeat_no_eligible_session"


# What a health row's `ineligibility_reason` may hold: the seed calls it a reason "from the wake-state set".
HEALTH_REASONS = (WakeReason.SESSION_UNHEALTHY, WakeReason.SESSION_NOT_ATTACHABLE, WakeReason.SESSION_PROMPT_ACTIVE)


class WakeResult(StrEnum):
    SENT = "sent"
    SKIPPED = "skipped"
    COALESCED = "coalesced"
    RATE_LIMITED = "rate_limited"
    FAILED = "failed"


class WakeSource(StrEnum):
    SCHEDULER = "scheduler"
    MANUAL = "manual"
    HARNESS_REENTRY = "harness_reentry"


class PolicyStatus(StrEnum):
    """Validation status of an agent's HEARTBEAT.md."""

    VALID = "valid"
    INVALID = "invalid"
    MISSING = "missing"
