"""A coordinated task's steps. The task itself is a tasks.Task with no runs: its steps are its attempts."""

from __future__ import annotations

from django.db import models

from tasks.models import Task

STEP_STATUSES = ("queued", "running", "succeeded", "needs_attention")
MAX_STEP_ATTEMPTS = 2  # the supervised-work rule: a failed step is retried once, then needs a person


class Step(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="steps")
    step_id = models.CharField(max_length=64)
    prompt = models.TextField()
    after = models.JSONField(default=list)  # the step ids that must succeed first
    position = models.PositiveIntegerField()
    status = models.CharField(max_length=20, choices=[(s, s) for s in STEP_STATUSES], default="queued",
                              db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    session_id = models.CharField(max_length=40, blank=True, default="")  # the spawned child of this attempt
    coordinator_id = models.CharField(max_length=40, blank=True, default="")
    sessions = models.JSONField(default=list)  # every attempt's child, oldest first
    detail = models.CharField(max_length=2048, blank=True, default="")
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["task_id", "position"]
        constraints = [models.UniqueConstraint(fields=["task", "step_id"], name="coordination_step_unique")]
