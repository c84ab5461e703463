"""REST routes for tasks (`/api/tasks…`). Thin: schemas are the contract; tasks.services does the work."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from compozy.api.schemas import Ident, Name, PathText, Ref, StrictIn, Text, WholeInt, responses
from coordination import services as coordination
from tasks import services
from tasks.enums import TaskStatus

router = Router(tags=["tasks"])


class TaskCreateIn(StrictIn):
    """A misspelt field is refused, never silently dropped; text is bounded and readable (no NUL, no lone
    surrogate) as in every other body."""

    prompt: Text = Field(..., description="What the agent should do; staged as the session's first prompt.")
    title: Name | None = Field(None, description="Defaults to the prompt's first line.")
    agent_name: Ref | None = Field(None, description="Defaults to the workspace's, then the config's agent.")
    workspace: Ref | None = Field(None, description="A registered workspace id, name or path.")
    workspace_path: PathText | None = Field(None, description="An absolute path; registered when new.")
    cwd: PathText | None = Field(None, description="Where the agent works, inside the workspace; defaults to its root.")
    max_attempts: WholeInt = Field(2, description="Attempts in all, automatic recoveries included; 1 disables them.")
    plan: dict[str, Any] | None = Field(None, description='Coordinated sub-work: {"steps": [{"id", "prompt", '
                                        '"after": [ids]}]}, run by the workspace\'s coordinator session, each step in '
                                        "a spawned child; `prompt` is then the task's description.")


class RunOut(Schema):
    id: str
    attempt: int
    status: str
    outcome: str | None
    reason: str | None
    detail: str | None
    session_id: str | None
    lease_owner: str | None
    lease_expires_at: str | None
    heartbeat_at: str | None
    recovers_run_id: str | None
    created_at: str | None
    claimed_at: str | None
    finished_at: str | None


class TaskOut(Schema):
    id: str
    title: str
    prompt: str
    agent_name: str | None
    workspace_id: str
    cwd: str
    max_attempts: int
    status: TaskStatus
    reason: str | None
    detail: str | None
    requeued: int
    attempts: int
    runs: list[RunOut]
    session_ids: list[str]
    cost: dict[str, Any] | None = None  # what its attempts' agents reported together ({amount, currency})
    created_at: str | None
    updated_at: str | None


class TaskEventOut(Schema):
    kind: str
    task_id: str
    run_id: str | None
    reason: str | None
    action: str | None
    detail: dict[str, Any]
    created_at: str


class TotalsOut(Schema):
    total: int
    by_status: dict[str, int]
    requeued: int
    needs_attention: int
    running_runs: int


class TaskEnvelope(Schema):
    task: TaskOut


class TaskDetailOut(Schema):
    task: TaskOut
    history: list[TaskEventOut]


class TaskListOut(Schema):
    tasks: list[TaskOut]
    totals: TotalsOut


class TaskListQuery(Schema):
    status: TaskStatus | None = None
    limit: int = Field(100, ge=1, le=500)


class StepOut(Schema):
    id: str
    prompt: str
    after: list[str]
    status: str
    attempts: int
    session_id: str | None
    sessions: list[str]
    coordinator_id: str | None
    detail: str


class StepsOut(Schema):
    task_id: str
    steps: list[StepOut]


class TaskCreatedOut(Schema):
    task: TaskOut
    steps: list[StepOut]  # a coordinated task's plan, as made; empty for a plain task


@router.post("/tasks", response=responses({201: TaskCreatedOut}))
async def create_task(request: HttpRequest, body: TaskCreateIn) -> tuple[int, dict[str, Any]]:
    fields = body.model_dump()
    if fields.get("plan") is not None:
        return 201, await sync_to_async(coordination.create)(fields)
    fields.pop("plan", None)
    return 201, {**await sync_to_async(services.create_task)(fields), "steps": []}


@router.get("/tasks/{task_id}/steps", response=responses({200: StepsOut}))
async def task_steps(request: HttpRequest, task_id: Ident) -> dict[str, Any]:
    """A coordinated task's steps: status, attempts, each attempt's spawned child (empty for a plain task)."""
    return await sync_to_async(coordination.steps_of)(task_id)


@router.get("/tasks", response=responses({200: TaskListOut}))
async def list_tasks(request: HttpRequest, filters: Query[TaskListQuery]) -> dict[str, Any]:
    status = filters.status.value if filters.status else None
    return await sync_to_async(services.list_tasks)(status=status, limit=filters.limit)


@router.get("/tasks/{task_id}", response=responses({200: TaskDetailOut}))
async def get_task(request: HttpRequest, task_id: Ident) -> dict[str, Any]:
    return await sync_to_async(services.get_task)(task_id)


@router.post("/tasks/{task_id}/cancel", response=responses({200: TaskEnvelope}))
async def cancel_task(request: HttpRequest, task_id: Ident) -> dict[str, Any]:
    return await services.cancel_task(task_id)


@router.post("/tasks/{task_id}/retry", response=responses({200: TaskEnvelope}))
async def retry_task(request: HttpRequest, task_id: Ident) -> dict[str, Any]:
    return await sync_to_async(services.retry_task)(task_id)
