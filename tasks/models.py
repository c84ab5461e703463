"""Tasks, their runs (attempts) and their history, in the catalog.

Ownership of a run lives only here: `status`, `lease_owner` and `lease_expires_at` move by compare-and-set
(`leases.py`), never by reading session health. A run's `session_id` and the session's meta.json
`task_id`/`run_id` are correlation keys both ways.
"""

from __future__ import annotations

from django.db import models

from sessions.models import Workspace
from tasks.enums import RunOutcome, RunStatus, TaskAction, TaskEventKind, TaskReason, TaskStatus

DEFAULT_MAX_ATTEMPTS = 2  # the first attempt and one automatic recovery


def _choices(enum: type) -> list[tuple[str, str]]:
    return [(m.value, m.value or "none") for m in enum]  # type: ignore[attr-defined]


class Task(models.Model):
    id = models.CharField(primary_key=True, max_length=40)
    title = models.CharField(max_length=300)
    prompt = models.TextField()
    agent_name = models.CharField(max_length=200, blank=True, default="")
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="tasks")
    cwd = models.CharField(max_length=4096)
    max_attempts = models.PositiveIntegerField(default=DEFAULT_MAX_ATTEMPTS)
    status = models.CharField(max_length=20, choices=_choices(TaskStatus), default=TaskStatus.QUEUED, db_index=True)
    reason = models.CharField(max_length=40, choices=_choices(TaskReason), blank=True, default="")
    detail = models.CharField(max_length=2048, blank=True, default="")
    requeued = models.PositiveIntegerField(default=0)  # automatic recoveries (supervised silence, lost leases)
    # The attempt number the automatic budget counts from: a person's retry starts a fresh budget.
    budget_from = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at", "id"]


class TaskRun(models.Model):
    id = models.CharField(primary_key=True, max_length=40)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="runs")
    attempt = models.PositiveIntegerField()
    status = models.CharField(max_length=20, choices=_choices(RunStatus), default=RunStatus.QUEUED, db_index=True)
    outcome = models.CharField(max_length=20, choices=_choices(RunOutcome), blank=True, default="")
    reason = models.CharField(max_length=40, choices=_choices(TaskReason), blank=True, default="")
    detail = models.CharField(max_length=2048, blank=True, default="")
    session_id = models.CharField(max_length=40, blank=True, default="", db_index=True)
    lease_owner = models.CharField(max_length=400, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The agent's process group, and its leader's start time (/proc stat field 22): after a daemon crash the
    # recovery verifies that group is gone, and the start time tells a reused pid from our agent.
    agent_pgid = models.IntegerField(null=True, blank=True)
    agent_started = models.BigIntegerField(null=True, blank=True)
    recovers = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="recovered_by")
    created_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["attempt"]
        # Two recoveries racing to add the same next attempt: the second insert fails, so one attempt is added.
        constraints = [models.UniqueConstraint(fields=["task", "attempt"], name="work_run_attempt_unique")]


class TaskEvent(models.Model):
    """The task's audit history: append-only rows (`task.run_recovered` with reason and action, …)."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="history")
    run = models.ForeignKey(TaskRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="history")
    kind = models.CharField(max_length=40, choices=_choices(TaskEventKind))
    reason = models.CharField(max_length=40, choices=_choices(TaskReason), blank=True, default="")
    action = models.CharField(max_length=20, choices=_choices(TaskAction), blank=True, default="")
    detail = models.JSONField(default=dict)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["created_at", "id"]
