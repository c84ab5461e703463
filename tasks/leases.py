"""Run ownership: ClaimNextRun, HeartbeatRunLease and lease expiry, each a compare-and-set in the catalog.

The shape of healthchecks' `sendalerts`: read a candidate, then move it with
`filter(id=…, <the state read>).update(…)`; exactly one changed row means this worker won. No lock is held
while the work runs, so any number of huey consumers (threads or processes on one catalog) may race and a run
is still claimed, renewed or recovered by exactly one of them.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timedelta

from django.db import transaction

from compozy_base.home import compozy_home
from sessions.store import folder
from tasks.enums import RunOutcome, RunStatus, TaskEventKind, TaskReason, TaskStatus
from tasks.history import note
from tasks.models import Task, TaskRun

# How many queued candidates one claim looks at before giving up this tick: each loss means another worker
# took that run, and the next tick tries again.
CLAIM_CANDIDATES = 8

# One incarnation per daemon process: after a kill -9 and a restart on the same home, the new daemon is not the
# old lease's owner, so it never renews a lease the dead one held; that lease lapses and the run is recovered.
_INCARNATION = f"{os.getpid()}-{time.time_ns()}"


def lease_owner() -> str:
    return f"{socket.gethostname()}:{compozy_home()}#{_INCARNATION}"


def claim_next_run(owner: str, ttl: float, *, now: datetime | None = None) -> TaskRun | None:
    """ClaimNextRun: the oldest queued run of a queued task, now `running` under `owner`'s lease; None when
    there is none or every candidate went to another worker.

    1. Read a few queued runs of queued tasks, oldest first.
    2. Compare-and-set the run queued → running with the lease (one changed row: ours).
    3. In the same transaction, compare-and-set its task queued → running. A task canceled between step 1
       and here loses the race the other way: the run is finished `canceled`, never started.
    """
    now = now or folder.utcnow()
    candidates = list(TaskRun.objects.filter(status=RunStatus.QUEUED, task__status=TaskStatus.QUEUED)
                      .order_by("created_at", "id").values_list("id", "task_id")[:CLAIM_CANDIDATES])
    for run_id, task_id in candidates:
        with transaction.atomic():
            won = TaskRun.objects.filter(id=run_id, status=RunStatus.QUEUED).update(
                status=RunStatus.RUNNING, lease_owner=owner, lease_expires_at=now + timedelta(seconds=ttl),
                heartbeat_at=now, claimed_at=now)
            if won != 1:
                continue
            if Task.objects.filter(id=task_id, status=TaskStatus.QUEUED).update(
                    status=TaskStatus.RUNNING, reason="", detail="", updated_at=now) != 1:
                TaskRun.objects.filter(id=run_id).update(status=RunStatus.FINISHED, outcome=RunOutcome.CANCELED,
                                                         finished_at=now)
                continue
            note(task_id, TaskEventKind.RUN_CLAIMED, run_id=run_id, detail={"lease_owner": owner}, now=now)
        return TaskRun.objects.select_related("task").get(id=run_id)
    return None


def heartbeat_run_lease(run_id: str, owner: str, ttl: float, *, now: datetime | None = None) -> bool:
    """HeartbeatRunLease: renew the lease only while `owner` still holds the running run. False means the
    lease is lost (it lapsed and was recovered, or the task was canceled): the owner must stop working on it."""
    now = now or folder.utcnow()
    return TaskRun.objects.filter(id=run_id, status=RunStatus.RUNNING, lease_owner=owner).update(
        lease_expires_at=now + timedelta(seconds=ttl), heartbeat_at=now) == 1


def finish_run(run_id: str, owner: str | None, outcome: RunOutcome, reason: TaskReason = TaskReason.NONE,
               detail: str = "", *, now: datetime | None = None) -> bool:
    """Move a running run to finished; with `owner`, only while that owner holds it. One winner per run."""
    now = now or folder.utcnow()
    rows = TaskRun.objects.filter(id=run_id, status=RunStatus.RUNNING)
    if owner is not None:
        rows = rows.filter(lease_owner=owner)
    return rows.update(status=RunStatus.FINISHED, outcome=outcome, reason=reason, detail=detail[:2048],
                       finished_at=now, lease_expires_at=None) == 1


def release_run(run_id: str, owner: str, *, now: datetime | None = None) -> bool:
    """Hand a claimed run back to the queue before its session existed (no agent slot free after all)."""
    now = now or folder.utcnow()
    with transaction.atomic():
        run = TaskRun.objects.filter(id=run_id, status=RunStatus.RUNNING, lease_owner=owner, session_id="").first()
        if run is None or TaskRun.objects.filter(id=run_id, status=RunStatus.RUNNING, lease_owner=owner).update(
                status=RunStatus.QUEUED, lease_owner="", lease_expires_at=None, claimed_at=None) != 1:
            return False
        Task.objects.filter(id=run.task_id, status=TaskStatus.RUNNING).update(status=TaskStatus.QUEUED,
                                                                              updated_at=now)
    return True


def expired_runs(now: datetime | None = None) -> list[TaskRun]:
    """Running runs whose lease lapsed, each won with a compare-and-set on the expiry that was read: a second
    worker reading the same expiry changes no row, so each lapsed run is recovered once."""
    now = now or folder.utcnow()
    won = []
    for run in TaskRun.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now).select_related("task"):
        if TaskRun.objects.filter(id=run.id, status=RunStatus.RUNNING, lease_expires_at=run.lease_expires_at).update(
                status=RunStatus.FINISHED, outcome=RunOutcome.LEASE_EXPIRED, reason=TaskReason.LEASE_EXPIRED,
                finished_at=now) == 1:
            run.status, run.outcome, run.reason = RunStatus.FINISHED, RunOutcome.LEASE_EXPIRED, TaskReason.LEASE_EXPIRED
            won.append(run)
    return won
