"""The work service layer: the task API, the CLI (over HTTP), `compozy status` and the dashboard call this."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Count, Sum

from compozy_base.config.loader import get_config
from sessions.catalog import index as catalog
from sessions.core.errors import Conflict, InvalidRequest, NotFound
from sessions.models import Workspace
from sessions.services.control import stop_session
from sessions.store import folder
from tasks.costs import task_cost
from tasks.enums import RETRYABLE, RunOutcome, RunStatus, TaskAction, TaskEventKind, TaskReason, TaskStatus
from tasks.history import event_record, new_run_id, new_task_id, note
from tasks.leases import finish_run
from tasks.models import DEFAULT_MAX_ATTEMPTS, Task, TaskEvent, TaskRun

MAX_ATTEMPTS_CEILING = 20
# The dashboard and `task list` put what needs a person first, then work in flight, then the rest.
STATUS_ORDER = [TaskStatus.NEEDS_ATTENTION, TaskStatus.RUNNING, TaskStatus.QUEUED, TaskStatus.FAILED,
                TaskStatus.CANCELED, TaskStatus.SUCCEEDED]


# ---- records ---------------------------------------------------------------------------------------------

def run_record(run: TaskRun) -> dict[str, Any]:
    return {"id": run.id, "attempt": run.attempt, "status": run.status, "outcome": run.outcome or None,
            "reason": run.reason or None, "detail": run.detail or None, "session_id": run.session_id or None,
            "lease_owner": run.lease_owner or None, "lease_expires_at": _iso(run.lease_expires_at),
            "heartbeat_at": _iso(run.heartbeat_at), "recovers_run_id": run.recovers_id,
            "created_at": _iso(run.created_at), "claimed_at": _iso(run.claimed_at),
            "finished_at": _iso(run.finished_at)}


def task_record(task: Task, runs: list[TaskRun] | None = None) -> dict[str, Any]:
    runs = runs if runs is not None else list(task.runs.all())
    return {"id": task.id, "title": task.title, "prompt": task.prompt, "agent_name": task.agent_name or None,
            "workspace_id": task.workspace_id, "cwd": task.cwd, "max_attempts": task.max_attempts,
            "status": task.status, "reason": task.reason or None, "detail": task.detail or None,
            "requeued": task.requeued, "attempts": len(runs), "runs": [run_record(r) for r in runs],
            "session_ids": [r.session_id for r in runs if r.session_id],
            "cost": task_cost(runs),
            "created_at": _iso(task.created_at), "updated_at": _iso(task.updated_at)}


def _iso(value: Any) -> str | None:
    return folder.isoformat(value) if value else None


def _task(task_id: str) -> Task:
    task = Task.objects.filter(id=task_id).first()
    if task is None:
        raise NotFound(f"task {task_id} not found", code="task_not_found", data={"task_id": task_id})
    return task


# ---- create, read ----------------------------------------------------------------------------------------

def create_task(body: dict[str, Any], *, coordinated: bool = False) -> dict[str, Any]:
    """A queued task and its first queued run; the dispatcher starts it when an agent slot is free. A coordinated
    task (coordination/) has no run: its steps, run by the workspace's coordinator, are its attempts."""
    config = get_config()
    prompt = (body.get("prompt") or "").strip()
    if not prompt:
        raise InvalidRequest("prompt is required: what the agent should do", code="prompt_required")
    if len(prompt.encode()) > config.busy_input.max_text_bytes:
        raise InvalidRequest(f"prompt exceeds {config.busy_input.max_text_bytes} bytes", code="prompt_too_large")
    title = (body.get("title") or "").strip() or prompt.splitlines()[0][:80]
    if len(title) > 300:
        raise InvalidRequest("title must be at most 300 characters", code="invalid_title")
    max_attempts = body.get("max_attempts")
    max_attempts = DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) \
            or not 1 <= max_attempts <= MAX_ATTEMPTS_CEILING:
        raise InvalidRequest(f"max_attempts must be between 1 and {MAX_ATTEMPTS_CEILING}",
                             code="invalid_max_attempts")
    agent_name = (body.get("agent_name") or "").strip()
    if agent_name and agent_name not in config.agents:
        raise NotFound(f"agent {agent_name!r} is not defined", code="agent_not_found",
                       data={"agent": agent_name, "known": sorted(config.agents)})
    workspace, workspace_path = body.get("workspace"), body.get("workspace_path")
    if bool(workspace) == bool(workspace_path):
        raise InvalidRequest("give exactly one of workspace and workspace_path", code="workspace_required")
    if workspace_path and not os.path.isabs(workspace_path):
        raise InvalidRequest("workspace_path must be an absolute path", code="workspace_path_not_absolute")
    if body.get("cwd") and not os.path.isabs(body["cwd"]):
        raise InvalidRequest("cwd must be an absolute path", code="invalid_cwd")
    # Everything is checked before a new workspace_path is registered: a refused create registers nothing.
    ws: Workspace | None
    if workspace:
        ws = catalog.find_workspace(workspace)
        catalog.check_root(ws)
        named = root = Path(ws.root_dir)
    else:
        ws, named = catalog.workspace_for_path(str(workspace_path))
        root = Path(ws.root_dir) if ws is not None else named
    cwd = body.get("cwd") or str(named)
    resolved = catalog.resolved_path(cwd, "cwd")
    if not resolved.is_dir() or not resolved.is_relative_to(catalog.resolved_path(str(root), "root_dir")):
        raise InvalidRequest(f"cwd {cwd} must be a directory inside the workspace {root}", code="invalid_cwd")
    ws = ws or catalog.register_found(named)
    now = folder.utcnow()
    with transaction.atomic():
        task = Task.objects.create(id=new_task_id(), title=title, prompt=prompt, agent_name=agent_name,
                                   workspace=ws, cwd=str(resolved), max_attempts=max_attempts,
                                   status=TaskStatus.QUEUED, created_at=now, updated_at=now)
        if coordinated:
            note(task.id, TaskEventKind.CREATED, detail={"coordinated": True}, now=now)
            return {"task": task_record(task, [])}
        run = TaskRun.objects.create(id=new_run_id(), task=task, attempt=1, status=RunStatus.QUEUED, created_at=now)
        note(task.id, TaskEventKind.CREATED, run_id=run.id, detail={"max_attempts": max_attempts}, now=now)
    return {"task": task_record(task, [run])}


def list_tasks(status: str | None = None, limit: int = 100) -> dict[str, Any]:
    if status and status not in set(TaskStatus):
        raise InvalidRequest(f"status must be one of {', '.join(TaskStatus)}", code="invalid_status")
    if not 1 <= limit <= 500:
        raise InvalidRequest("limit must be between 1 and 500", code="invalid_limit")
    rows = Task.objects.all().order_by("-updated_at", "id")
    if status:
        rows = rows.filter(status=status)
    tasks = list(rows.prefetch_related("runs")[:limit])
    tasks.sort(key=lambda t: STATUS_ORDER.index(TaskStatus(t.status)))  # stable: newest first within a status
    return {"tasks": [task_record(t, list(t.runs.all())) for t in tasks], "totals": totals()}


def get_task(task_id: str) -> dict[str, Any]:
    task = _task(task_id)
    history = [event_record(e) for e in TaskEvent.objects.filter(task_id=task_id).order_by("created_at", "id")]
    return {"task": task_record(task), "history": history}


def totals() -> dict[str, Any]:
    """Counts for `compozy status`: tasks by status, the `requeued` total (recoveries), what needs a person."""
    by_status = dict(Task.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    requeued = Task.objects.aggregate(n=Sum("requeued"))["n"] or 0
    return {"total": sum(by_status.values()), "by_status": by_status, "requeued": requeued,
            "needs_attention": by_status.get(TaskStatus.NEEDS_ATTENTION, 0),
            "running_runs": TaskRun.objects.filter(status=RunStatus.RUNNING).count()}


# ---- cancel, retry ---------------------------------------------------------------------------------------

def cancel_task_record(task_id: str) -> tuple[dict[str, Any], list[str]]:
    """Cancel first, in the catalog: a recovery or settlement racing it then finds the task not running, so an
    explicitly canceled task never retries. Returns the record and the sessions still to stop."""
    now = folder.utcnow()
    with transaction.atomic():
        task = _task(task_id)
        if task.status == TaskStatus.CANCELED:
            return {"task": task_record(task)}, []
        if task.status == TaskStatus.SUCCEEDED:
            raise Conflict("task already succeeded", code="task_finished", data={"status": task.status})
        if Task.objects.filter(id=task_id, status=task.status).update(
                status=TaskStatus.CANCELED, reason=TaskReason.CANCELED_BY_USER, detail="", updated_at=now) != 1:
            raise Conflict("task changed meanwhile; try again", code="task_busy")
        stop = []
        for run in TaskRun.objects.filter(task_id=task_id, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]):
            if run.status == RunStatus.QUEUED:
                TaskRun.objects.filter(id=run.id, status=RunStatus.QUEUED).update(
                    status=RunStatus.FINISHED, outcome=RunOutcome.CANCELED, finished_at=now)
            elif finish_run(run.id, None, RunOutcome.CANCELED, TaskReason.CANCELED_BY_USER, now=now) \
                    and run.session_id:
                stop.append(run.session_id)
        note(task_id, TaskEventKind.CANCELED, reason=TaskReason.CANCELED_BY_USER, action=TaskAction.STOP,
             detail={"sessions": stop}, now=now)
    return {"task": task_record(_task(task_id))}, stop


async def cancel_task(task_id: str) -> dict[str, Any]:
    from asgiref.sync import sync_to_async

    result, sessions = await sync_to_async(cancel_task_record)(task_id)
    for session_id in sessions:
        await stop_session(session_id, detail="task canceled")
    return result


def retry_task(task_id: str) -> dict[str, Any]:
    """A person's retry: one new queued attempt linked to the last, with a fresh automatic budget."""
    now = folder.utcnow()
    with transaction.atomic():
        task = _task(task_id)
        if task.status not in RETRYABLE:
            raise Conflict(f"task is {task.status}; only failed, canceled or needs_attention tasks can be retried",
                           code="task_not_retryable", data={"status": task.status})
        last = task.runs.order_by("-attempt").first()
        attempt = (last.attempt if last else 0) + 1
        if Task.objects.filter(id=task_id, status=task.status).update(
                status=TaskStatus.QUEUED, reason=TaskReason.RETRIED_BY_USER, detail="", budget_from=attempt,
                updated_at=now) != 1:
            raise Conflict("task changed meanwhile; try again", code="task_busy")
        run = TaskRun.objects.create(id=new_run_id(), task_id=task_id, attempt=attempt, status=RunStatus.QUEUED,
                                     recovers=last, created_at=now)
        note(task_id, TaskEventKind.RETRIED, run_id=run.id, reason=TaskReason.RETRIED_BY_USER,
             action=TaskAction.REQUEUE, detail={"attempt": attempt, "previous_status": task.status}, now=now)
    return {"task": task_record(_task(task_id))}
