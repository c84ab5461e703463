"""The daemon's side of task runs, one claimed tick at a time (the `task_cycle` huey job, sent by the Ticker).

1. Recover runs whose lease lapsed, whoever held them: a killed daemon renews nothing (`recovery.py`).
2. For each run this daemon holds: renew its lease while the session lives here (HeartbeatRunLease); settle
   the outcome once the task's turn ended (`done` → succeeded, an error → failed) or the session stopped.
3. Dispatch queued runs while agent slots are free: ClaimNextRun, then a session created on the daemon's loop
   with the task's prompt staged; the run binds the session id, the session's meta carries task_id/run_id.

Like the supervision sweep it never waits on a runtime: session starts and stops are handed to the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from pathlib import Path
from typing import Any, TypedDict

from django.db import transaction

from compozy_base.config.loader import Config
from compozy_base.process import start_ticks
from sessions import services
from sessions.core.enums import LIVE_STATES, StopReason
from sessions.core.errors import AgentLimitReached, CompozyError, Unavailable
from sessions.core.live import LiveSession
from sessions.core.offload import db
from sessions.core.record import WorktreeDoc
from sessions.runtime.supervision import SILENCE_DETAIL
from sessions.services.create import CreateBody, TaskBinding
from sessions.store import folder
from sessions.worktree import git
from tasks.costs import budget_left
from tasks.enums import RunOutcome, RunStatus, TaskEventKind, TaskReason, TaskStatus
from tasks.history import note
from tasks.leases import claim_next_run, expired_runs, finish_run, heartbeat_run_lease, lease_owner, release_run
from tasks.models import Task, TaskRun
from tasks.recovery import recover_lapsed

logger = logging.getLogger(__name__)

MIN_TICK_SECONDS = 0.5
MAX_TICK_SECONDS = 2.0  # a queued task waits at most this long for a free slot to be noticed
RENEW_AT_SHARE = 2 / 3  # renew when less than this share of the lease is left
_starting: set[str] = set()  # runs whose session is being created on the loop: they hold a slot already


def tick_seconds(config: Config) -> float:
    """Four ticks per lease: a lease survives three missed renewals (a busy machine, a lost message)."""
    return max(MIN_TICK_SECONDS, min(MAX_TICK_SECONDS, config.task_lease_ttl / 4))


def has_work() -> bool:
    return TaskRun.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).exists()


def cycle(manager: Any) -> dict[str, int]:
    owner = lease_owner()
    ttl = manager.config.task_lease_ttl
    counts: Counter[str] = Counter()
    for run in expired_runs():
        try:
            recover_lapsed(run)
            counts["recovered"] += 1
        except Exception:
            logger.exception("recovery of lapsed run %s failed", run.id)
    for run in TaskRun.objects.filter(status=RunStatus.RUNNING, lease_owner=owner).select_related("task"):
        try:
            counts[_keep(manager, run, owner, ttl)] += 1
        except Exception:
            logger.exception("task run %s skipped this tick", run.id)
    counts["dispatched"] = _dispatch(manager, owner, ttl)
    return dict(counts)


def _renew(run: TaskRun, owner: str, ttl: float) -> bool:
    """HeartbeatRunLease once a third of the lease is used: a write per run every few ticks, not every tick,
    and still two renewals missed before the lease lapses."""
    left = (run.lease_expires_at - folder.utcnow()).total_seconds() if run.lease_expires_at else 0.0
    return left > ttl * RENEW_AT_SHARE or heartbeat_run_lease(run.id, owner, ttl)


# ---- runs this daemon holds ------------------------------------------------------------------------------

def _keep(manager: Any, run: TaskRun, owner: str, ttl: float) -> str:
    if not run.session_id:
        return "renewed" if run.id in _starting and _renew(run, owner, ttl) else "waiting"
    runtime: LiveSession | None = manager.get(run.session_id)
    if runtime is not None and not runtime.stopped.is_set():
        if not _renew(run, owner, ttl):
            manager.hand_off_stop(run.session_id, StopReason.USER_CANCELED, "task run lease lost")
            return "lost"
        agent = runtime.agent
        if run.agent_pgid is None and agent is not None and agent.pid:
            TaskRun.objects.filter(id=run.id).update(agent_pgid=agent.pid, agent_started=start_ticks(agent.pid))
        if runtime.state == "active" and not runtime.stopping and runtime.turn is None:
            outcome = turn_outcome(run.session_id)
            if outcome is not None:
                settle(run, owner, *outcome)
                manager.hand_off_stop(run.session_id, StopReason.COMPLETED, f"task run {outcome[0].value}")
                return "settled"
        return "renewed"
    meta = folder.read_meta(run.session_id)
    if meta is not None and meta["state"] in LIVE_STATES and manager.owns(run.session_id):
        return "renewed" if _renew(run, owner, ttl) else "lost"
    if manager.draining or meta is None or meta.get("stop_detail") == SILENCE_DETAIL \
            or meta.get("stop_reason") == StopReason.SHUTDOWN:
        # The verified-stop path settles a silence stop; a shutdown's runs lapse and are recovered after restart.
        return "waiting"
    outcome = turn_outcome(run.session_id)
    if outcome is None or outcome[0] != RunOutcome.SUCCEEDED:
        failure = meta.get("failure") or {}
        detail = failure.get("summary") or meta.get("stop_detail") or meta.get("stop_reason") or "session stopped"
        outcome = (RunOutcome.FAILED, TaskReason.SESSION_STOPPED, f"{meta.get('stop_reason')}: {detail}")
    settle(run, owner, *outcome)
    return "settled"


def turn_outcome(session_id: str) -> tuple[RunOutcome, TaskReason, str] | None:
    """How the task's turn ended (sessions/services/outcomes.py): `done` with end_turn → succeeded; `done` with
    any other stop reason (cancelled, refusal, max_tokens) or an `error` → failed. None: still going."""
    outcome = services.turn_outcome(session_id)
    if outcome is None:
        return None
    if outcome.succeeded:
        return RunOutcome.SUCCEEDED, TaskReason.NONE, ""
    return RunOutcome.FAILED, TaskReason.TURN_FAILED, outcome.detail


def settle(run: TaskRun, owner: str, outcome: RunOutcome, reason: TaskReason, detail: str) -> bool:
    """Finish the run (compare-and-set: once) and carry its outcome to the task, unless a person canceled it."""
    now = folder.utcnow()
    with transaction.atomic():
        if not finish_run(run.id, owner, outcome, reason, detail, now=now):
            return False
        status = TaskStatus.SUCCEEDED if outcome == RunOutcome.SUCCEEDED else TaskStatus.FAILED
        Task.objects.filter(id=run.task_id, status=TaskStatus.RUNNING).update(
            status=status, reason=reason, detail=detail[:2048], updated_at=now)
        kind = TaskEventKind.RUN_SUCCEEDED if outcome == RunOutcome.SUCCEEDED else TaskEventKind.RUN_FAILED
        note(run.task_id, kind, run_id=run.id, reason=reason,
             detail={"session_id": run.session_id, "detail": detail[:2048]}, now=now)
    logger.info("task %s: run %s %s", run.task_id, run.id, outcome.value)
    return True


# ---- dispatch --------------------------------------------------------------------------------------------

def _dispatch(manager: Any, owner: str, ttl: float) -> int:
    loop = manager.loop
    if manager.draining or loop is None or loop.is_closed():
        return 0
    free = manager.config.max_concurrent_agents - len(manager.runtimes) - manager.admitting - len(_starting)
    started = 0
    while free > 0:
        run = claim_next_run(owner, ttl)
        if run is None:
            break
        _starting.add(run.id)
        try:
            asyncio.run_coroutine_threadsafe(_start(manager, run, owner), loop)
        except RuntimeError:  # the loop closed under us: give the run back
            _starting.discard(run.id)
            release_run(run.id, owner)
            break
        free -= 1
        started += 1
    return started


async def _start(manager: Any, run: TaskRun, owner: str) -> None:
    """On the daemon's loop: create the run's session with the task's prompt staged, then bind it to the run."""
    task = run.task
    left = await db(budget_left, task)
    if left is not None and left <= 0:
        await db(settle, run, owner, RunOutcome.FAILED, TaskReason.BUDGET_EXCEEDED,
                 "the task's attempts reached its cost budget")
        _starting.discard(run.id)
        return
    isolation = await db(_isolation, task, manager.config)
    binding: TaskBinding = {"task_id": task.id, "run_id": run.id, "cwd": task.cwd, "budget_usd": left,
                            **isolation}
    body: CreateBody = {"workspace": task.workspace_id, "agent_name": task.agent_name, "prompt": task.prompt,
            "name": f"{task.title} (attempt {run.attempt})"[:300], "task_binding": binding}
    try:
        try:
            payload = await services.create_session(body)
        except (AgentLimitReached, Unavailable):
            # Another create took the slot, or the daemon is draining: the run waits in the queue.
            await db(release_run, run.id, owner)
            return
        except Exception as exc:  # noqa: BLE001 - any failure is the run's: logged, settled as start_failed
            message = exc.message if isinstance(exc, CompozyError) else str(exc)
            logger.warning("task %s: run %s could not start its session: %s", task.id, run.id, message)
            await db(settle, run, owner, RunOutcome.FAILED, TaskReason.START_FAILED, message)
            return
        if not await db(_bind, run, owner, payload["id"]):
            manager.hand_off_stop(payload["id"], StopReason.USER_CANCELED, "task run lease lost before start")
    finally:
        _starting.discard(run.id)


class _Isolation(TypedDict, total=False):
    isolation: str
    worktree: WorktreeDoc


def default_isolation(root: Path) -> str:
    """Supervised work's isolation when none is configured: `worktree` when the workspace is a git repository
    (parallel work never writes over each other), else `none`. Task runs and coordinated steps. Blocking (git)."""
    return "worktree" if git.is_repository(root) else "none"


def _isolation(task: Task, config: Config) -> _Isolation:
    """`[tasks] isolation` (default: default_isolation), and a retry's worktree: the earlier attempt's, continued
    (its work is the retry's starting point, not thrown away). Blocking (git)."""
    chosen = config.task_isolation or default_isolation(Path(task.workspace.root_dir))
    found: _Isolation = {"isolation": chosen}
    if chosen != "worktree":
        return found
    for session_id in (TaskRun.objects.filter(task_id=task.id).exclude(session_id="").order_by("-attempt")
                       .values_list("session_id", flat=True)):
        try:
            meta = folder.read_meta(session_id)
        except ValueError:
            continue
        doc = meta.get("worktree") if meta is not None else None
        if doc and Path(doc.get("path", "")).is_dir():
            found["worktree"] = doc
            break
    return found


def _bind(run: TaskRun, owner: str, session_id: str) -> bool:
    with transaction.atomic():
        if TaskRun.objects.filter(id=run.id, status=RunStatus.RUNNING, lease_owner=owner, session_id="").update(
                session_id=session_id) != 1:
            return False
        note(run.task_id, TaskEventKind.RUN_STARTED, run_id=run.id,
             detail={"session_id": session_id, "attempt": run.attempt})
    return True
