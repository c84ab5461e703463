"""The daemon's side of coordinated work, one claimed tick at a time (the `coordination` huey job, sent by the
Ticker): each workspace with coordinated tasks gets one `coordinator` session (the root of its children's
lineage), created once executable coordinated work is enqueued; each runnable step is leased (queued → running,
by compare-and-set) and spawned as a `spawned` child of it; a child's outcome settles its step; a failed step is
retried once, then the task needs attention; a coordinator with no work left is stopped. Children are reaped by
the supervision sweep when their TTL expires or their coordinator stops (sessions/catalog/lineage.py).

Like the task cycle it never waits on a runtime: creates, spawns and stops are handed to the loop.

Isolation: when the workspace is a git repository, each step's child gets a worktree of its own (the worktree
sessions' `isolation = "worktree"`, docs/reference/worktrees.md), so parallel steps never write over each other;
elsewhere children share the workspace's root."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from django.db import transaction

from coordination.models import MAX_STEP_ATTEMPTS, Step
from coordination.plan import runnable
from sessions import services
from sessions.core.enums import LIVE_STATES, SessionState, SessionType, StopReason
from sessions.core.offload import db
from sessions.models import Session
from sessions.services.create import CreateBody
from sessions.store import folder
from tasks.enums import TaskEventKind, TaskReason, TaskStatus
from tasks.history import note
from tasks.models import Task
from tasks.runner import default_isolation

logger = logging.getLogger(__name__)

TICK_SECONDS = 1.0
STEP_TTL_SECONDS = 24 * 3600
ACTIVE = (TaskStatus.QUEUED, TaskStatus.RUNNING)
_starting: set[str] = set()  # workspaces whose coordinator is being created on the loop
_spawning: set[int] = set()  # steps whose child is being spawned on the loop


def has_work() -> bool:
    return Step.objects.filter(task__status__in=ACTIVE).exists() or bool(_idle_coordinators())


def coordinator_of(workspace_id: str) -> Session | None:
    return (Session.objects.filter(workspace_id=workspace_id, session_type=SessionType.COORDINATOR,
                                   state__in=list(LIVE_STATES)).order_by("-created_at").first())


def _idle_coordinators() -> list[Session]:
    busy = set(Task.objects.filter(status__in=ACTIVE, steps__isnull=False).values_list("workspace_id", flat=True))
    return [s for s in Session.objects.filter(session_type=SessionType.COORDINATOR, state=SessionState.ACTIVE)
            if s.workspace_id not in busy]


def cycle(manager: Any) -> dict[str, int]:
    counts: Counter[str] = Counter()
    tasks = (Task.objects.filter(status__in=ACTIVE, steps__isnull=False).distinct().select_related("workspace")
             .order_by("created_at"))
    by_workspace: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        by_workspace[task.workspace_id].append(task)
    for workspace_id, ws_tasks in by_workspace.items():
        coordinator = coordinator_of(workspace_id)
        for task in ws_tasks:
            try:
                counts.update(_settle(manager, task, coordinator))
            except Exception:  # one task's failure is logged with its cause; the others go on
                logger.exception("coordinated task %s skipped this tick", task.id)
        if coordinator is None:
            if workspace_id not in _starting and not manager.draining:
                _start_coordinator(manager, workspace_id, ws_tasks[0].agent_name)
                counts["coordinators"] += 1
            continue
        if coordinator.state == SessionState.ACTIVE:
            for task in ws_tasks:
                counts["spawned"] += _dispatch(manager, task, coordinator.id)
    for idle in _idle_coordinators():
        manager.hand_off_stop(idle.id, StopReason.COMPLETED, "coordinated work done")
        counts["coordinators_stopped"] += 1
    return dict(counts)


# ---- the coordinator ---------------------------------------------------------------------------------------

def _start_coordinator(manager: Any, workspace_id: str, agent_name: str) -> None:
    _starting.add(workspace_id)
    try:
        asyncio.run_coroutine_threadsafe(_create_coordinator(workspace_id, agent_name), manager.loop)
    except RuntimeError:  # the loop closed under us: the next daemon start looks again
        _starting.discard(workspace_id)


async def _create_coordinator(workspace_id: str, agent_name: str) -> None:
    try:
        body: CreateBody = {"workspace": workspace_id, "name": "coordinator"}
        if agent_name:
            body["agent_name"] = agent_name
        created = await services.create_session(body, SessionType.COORDINATOR)
        logger.info("workspace %s: coordinator %s started", workspace_id, created["id"])
    except Exception:  # a coordinator that cannot start is tried again next tick, its cause logged
        logger.exception("workspace %s: the coordinator could not start", workspace_id)
    finally:
        _starting.discard(workspace_id)


# ---- steps -------------------------------------------------------------------------------------------------

def _dispatch(manager: Any, task: Task, coordinator_id: str) -> int:
    steps = list(Step.objects.filter(task=task))
    statuses = {s.step_id: s.status for s in steps}
    ready = set(runnable(statuses, {s.step_id: tuple(s.after) for s in steps}))
    started = 0
    for step in steps:
        if step.step_id not in ready or step.pk in _spawning:
            continue
        with transaction.atomic():  # the lease: queued → running once, whoever else looks
            if Step.objects.filter(pk=step.pk, status="queued").update(
                    status="running", attempts=step.attempts + 1, session_id="", coordinator_id=coordinator_id,
                    updated_at=folder.utcnow()) != 1:
                continue
            if Task.objects.filter(id=task.id, status=TaskStatus.QUEUED).update(
                    status=TaskStatus.RUNNING, updated_at=folder.utcnow()):
                note(task.id, TaskEventKind.RUN_STARTED, detail={"coordinator": coordinator_id})
        _spawning.add(step.pk)
        try:
            asyncio.run_coroutine_threadsafe(_spawn(step.pk, coordinator_id, task.title, step.step_id, step.prompt,
                                                    task.workspace.root_dir), manager.loop)
        except RuntimeError:
            _spawning.discard(step.pk)
            Step.objects.filter(pk=step.pk).update(status="queued", attempts=step.attempts)
            break
        started += 1
    return started


async def _spawn(step_pk: int, coordinator_id: str, title: str, step_id: str, prompt: str,
                 workspace_root: str) -> None:
    try:
        body: dict[str, Any] = {"role": f"step:{step_id}", "ttl_seconds": STEP_TTL_SECONDS, "prompt": prompt,
                                "name": f"{title} · {step_id}"[:300]}
        if await asyncio.to_thread(default_isolation, Path(workspace_root)) == "worktree":
            body["isolation"] = "worktree"
        child = await services.spawn_child(coordinator_id, body)
        await db(_bind, step_pk, child["id"])
    except Exception as exc:  # noqa: BLE001 - a step whose child cannot start fails, as an attempt, visibly
        logger.warning("step %s: its child could not start: %s", step_id, exc)
        await db(_failed, step_pk, f"the step's session could not start: {getattr(exc, 'message', exc)}")
    finally:
        _spawning.discard(step_pk)


def _bind(step_pk: int, session_id: str) -> None:
    step = Step.objects.get(pk=step_pk)
    Step.objects.filter(pk=step_pk).update(session_id=session_id, sessions=[*step.sessions, session_id],
                                           updated_at=folder.utcnow())


def _settle(manager: Any, task: Task, coordinator: Session | None) -> Counter[str]:
    counts: Counter[str] = Counter()
    for step in Step.objects.filter(task=task, status="running"):
        if not step.session_id:
            continue  # its child is being spawned
        outcome = services.turn_outcome(step.session_id)
        meta = folder.read_meta(step.session_id)
        stopped = meta is None or meta.get("state") == SessionState.STOPPED
        if outcome is not None and outcome.succeeded:
            Step.objects.filter(pk=step.pk).update(status="succeeded", detail="", updated_at=folder.utcnow())
            if not stopped:
                manager.hand_off_stop(step.session_id, StopReason.COMPLETED, f"step {step.step_id} succeeded")
            counts["succeeded"] += 1
        elif outcome is not None or stopped:
            detail = meta.get("stop_detail") if meta is not None else "its folder is gone"
            why = outcome.detail if outcome is not None else f"its session stopped: {detail}"
            if coordinator is None or coordinator.id != step.coordinator_id or coordinator.state != SessionState.ACTIVE:
                why = f"its coordinator {step.coordinator_id} stopped ({why})"
                Step.objects.filter(pk=step.pk).update(attempts=MAX_STEP_ATTEMPTS)
            _failed(step.pk, why)
            if not stopped:
                manager.hand_off_stop(step.session_id, StopReason.ERROR, f"step {step.step_id} failed")
            counts["failed"] += 1
    _finish(task)
    return counts


def _failed(step_pk: int, detail: str) -> None:
    """A failed attempt: the step is queued again once (the supervised-work rule), then needs a person."""
    step = Step.objects.get(pk=step_pk)
    retry = step.attempts < MAX_STEP_ATTEMPTS
    Step.objects.filter(pk=step_pk).update(status="queued" if retry else "needs_attention", session_id="",
                                           detail=detail[:2048], updated_at=folder.utcnow())
    note(step.task_id, TaskEventKind.RUN_RECOVERED if retry else TaskEventKind.RUN_FAILED,
         reason=TaskReason.TURN_FAILED, detail={"step": step.step_id, "attempt": step.attempts, "detail": detail[:500]})
    logger.info("task %s: step %s attempt %d failed (%s); %s", step.task_id, step.step_id, step.attempts, detail,
                "retried" if retry else "needs attention")


def _finish(task: Task) -> None:
    statuses = set(Step.objects.filter(task=task).values_list("status", flat=True))
    now = folder.utcnow()
    if statuses == {"succeeded"}:
        if Task.objects.filter(id=task.id, status__in=ACTIVE).update(status=TaskStatus.SUCCEEDED, updated_at=now):
            note(task.id, TaskEventKind.RUN_SUCCEEDED, detail={"steps": "all succeeded"}, now=now)
    elif "needs_attention" in statuses and "running" not in statuses:
        detail = "; ".join(f"{s.step_id}: {s.detail}" for s in Step.objects.filter(task=task, status="needs_attention"))
        if Task.objects.filter(id=task.id, status__in=ACTIVE).update(
                status=TaskStatus.NEEDS_ATTENTION, reason=TaskReason.TURN_FAILED, detail=detail[:2048],
                updated_at=now):
            note(task.id, TaskEventKind.NEEDS_ATTENTION, reason=TaskReason.TURN_FAILED, detail={"steps": detail[:500]},
                 now=now)
