"""Session health, HEARTBEAT.md snapshots, per-session wake state and the wake audit (docs/reference/health.md §1-§5).

Health is metadata the daemon derives; supervision feeds it through activity updates and never writes it.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from health.enums import HEALTH_REASONS, HealthState, HealthValue, PolicyStatus, WakeReason, WakeResult, WakeSource


def _choices(enum: type) -> list[tuple[str, str]]:
    return [(v.value, v.value) for v in enum]  # type: ignore[attr-defined]


def _in(field: str, values: object) -> Q:
    return Q(**{f"{field}__in": [v.value for v in values]})  # type: ignore[attr-defined]


class SessionHealth(models.Model):
    """One row per session (cascade-deleted with it): the seed's table plus identity."""

    session = models.OneToOneField("compozy_sessions.Session", on_delete=models.CASCADE, primary_key=True,
                                   related_name="health")
    workspace_id = models.CharField(max_length=40)
    agent_name = models.CharField(max_length=200, db_index=True)
    state = models.CharField(max_length=20, choices=_choices(HealthState))
    health = models.CharField(max_length=20, choices=_choices(HealthValue), db_index=True)
    active_prompt = models.BooleanField(default=False)
    attachable = models.BooleanField(default=False)
    eligible_for_wake = models.BooleanField(default=False)
    ineligibility_reason = models.CharField(max_length=40, blank=True, default="")
    last_activity_at = models.DateTimeField(null=True, blank=True)
    last_presence_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=2048, blank=True, default="")
    updated_at = models.DateTimeField()
    # When session.health.update.after last fired for this session (its per-session rate limit).
    hook_fired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "session_health"
        constraints = [
            models.CheckConstraint(condition=_in("state", HealthState), name="session_health_state_enum"),
            models.CheckConstraint(condition=_in("health", HealthValue), name="session_health_health_enum"),
            models.CheckConstraint(condition=Q(ineligibility_reason="") | _in("ineligibility_reason", HEALTH_REASONS),
                                   name="session_health_reason_enum"),
        ]


class HeartbeatSnapshot(models.Model):
    """An immutable resolution of one agent's HEARTBEAT.md (valid or not); the newest one per agent decides."""

    id = models.CharField(primary_key=True, max_length=40)
    agent_name = models.CharField(max_length=200)
    workspace_id = models.CharField(max_length=40, blank=True, default="")
    source_path = models.CharField(max_length=4096, blank=True, default="")
    status = models.CharField(max_length=20, choices=_choices(PolicyStatus))
    digest = models.CharField(max_length=80, blank=True, default="")
    file_digest = models.CharField(max_length=80, blank=True, default="")
    config_digest = models.CharField(max_length=80, blank=True, default="")
    policy = models.JSONField(default=dict)  # canonical frontmatter, defaults resolved
    body = models.TextField(blank=True, default="")
    diagnostics = models.JSONField(default=list)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "agent_heartbeat_snapshots"
        indexes = [models.Index(fields=["agent_name", "workspace_id", "-created_at"])]
        constraints = [models.CheckConstraint(condition=_in("status", PolicyStatus), name="heartbeat_status_enum")]


class WakeState(models.Model):
    """Per-session wake bookkeeping. `version` is the compare-and-set token of the wake gate."""

    session_id = models.CharField(primary_key=True, max_length=40)
    workspace_id = models.CharField(max_length=40)
    agent_name = models.CharField(max_length=200)
    policy_snapshot_id = models.CharField(max_length=40, blank=True, default="")
    last_wake_at = models.DateTimeField(null=True, blank=True)
    next_allowed_at = models.DateTimeField(null=True, blank=True)
    coalesced_count = models.IntegerField(default=0)
    last_result = models.CharField(max_length=20, blank=True, default="", choices=_choices(WakeResult))
    last_reason = models.CharField(max_length=40, blank=True, default="", choices=_choices(WakeReason))
    in_flight = models.BooleanField(default=False)
    version = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "agent_heartbeat_wake_state"


class WakeEvent(models.Model):
    """The audit of every wake decision, kept `wake_event_retention`."""

    id = models.CharField(primary_key=True, max_length=40)
    workspace_id = models.CharField(max_length=40, blank=True, default="")
    agent_name = models.CharField(max_length=200)
    session_id = models.CharField(max_length=40, blank=True, default="", db_index=True)
    policy_snapshot_id = models.CharField(max_length=40, blank=True, default="")
    source = models.CharField(max_length=20, choices=_choices(WakeSource))
    result = models.CharField(max_length=20, choices=_choices(WakeResult))
    reason = models.CharField(max_length=40, choices=_choices(WakeReason))
    synthetic_prompt_id = models.CharField(max_length=40, blank=True, default="")
    created_at = models.DateTimeField(db_index=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "agent_heartbeat_wake_events"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=_in("result", WakeResult), name="wake_event_result_enum"),
            models.CheckConstraint(condition=_in("reason", WakeReason), name="wake_event_reason_enum"),
        ]
