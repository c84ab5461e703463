"""Coordinated tasks: made with their plan, and their steps read back (`GET /api/tasks/{id}/steps`)."""

from __future__ import annotations

from typing import Any, TypedDict

from django.db import transaction

from coordination import plan as plans
from coordination.models import Step
from sessions.core.errors import InvalidRequest, NotFound
from sessions.store import folder
from tasks import services as task_services
from tasks.models import Task


class StepOut(TypedDict):
    id: str
    prompt: str
    after: list[str]
    status: str
    attempts: int
    session_id: str | None
    sessions: list[str]
    coordinator_id: str | None
    detail: str


def create(body: dict[str, Any]) -> dict[str, Any]:
    """A task whose plan runs through the workspace's coordinator; the plan is checked whole first."""
    try:
        steps = plans.parse(body.get("plan"))
    except plans.PlanError as exc:
        raise InvalidRequest(f"plan: {exc}", code="invalid_plan") from exc
    fields = {k: v for k, v in body.items() if k != "plan"}
    fields["max_attempts"] = 1  # a step is retried once by itself; the task as a whole is not rerun
    with transaction.atomic():
        made = task_services.create_task(fields, coordinated=True)
        now = folder.utcnow()
        Step.objects.bulk_create([Step(task_id=made["task"]["id"], step_id=s.id, prompt=s.prompt,
                                       after=list(s.after), position=i, updated_at=now)
                                  for i, s in enumerate(steps)])
    return {**made, "steps": steps_of(made["task"]["id"])["steps"]}


def _out(s: Step) -> StepOut:
    return StepOut(id=s.step_id, prompt=s.prompt, after=list(s.after), status=s.status, attempts=s.attempts,
                   session_id=s.session_id or None, sessions=list(s.sessions), coordinator_id=s.coordinator_id or None,
                   detail=s.detail)


def steps_of(task_id: str) -> dict[str, Any]:
    if not Task.objects.filter(id=task_id).exists():
        raise NotFound("task not found", code="task_not_found", data={"task_id": task_id})
    return {"task_id": task_id, "steps": [_out(s) for s in Step.objects.filter(task_id=task_id)]}
