"""Recovering supervised work (docs/reference/health.md §6): after a verified stop, one linked queued attempt while the
task's `max_attempts` budget allows, else `needs_attention`.

Two ways in, one set of rules:
- supervision stopped a silent session and verified its process tree gone (`verified_stop`, sent by the runtime
  that owned the session): reason `supervised_silence`;
- a run's lease lapsed (its daemon was killed or shut down): the agent's process group is verified gone here,
  then reason `lease_expired` (or `supervised_silence` when the session's meta shows that stop was made).

Recovery never makes external effects exactly once: a new attempt starts from the committed files, and whatever
the silent attempt did outside them (a push, a message, a payment) may be repeated. Workers must inspect partial
effects and use the destination's idempotency keys.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.dispatch import receiver

from sessions.core.record import SessionMeta
from sessions.runtime.supervision import SILENCE_DETAIL, GroupVerification, verified_stop, verify_orphan_group
from sessions.store import folder
from tasks.enums import EXHAUSTED, RunOutcome, RunStatus, TaskAction, TaskEventKind, TaskReason, TaskStatus
from tasks.history import new_run_id, note
from tasks.leases import finish_run, lease_owner
from tasks.models import Task, TaskRun

logger = logging.getLogger(__name__)


def recover(run: TaskRun, reason: TaskReason, evidence: dict[str, Any]) -> TaskAction:
    """The rules, for a run already finished by the caller's compare-and-set (so they run once per run).

    1. A task that is no longer running (a person canceled it) never retries.
    2. A stop whose process tree was not verified gone is not repeated: `needs_attention`, `stop_unverified`.
    3. Attempts used since the budget began (earlier lease recoveries included) < `max_attempts`: one new queued
       attempt linked to this run (same task, agent, workspace, cwd), `requeued` + 1, `task.run_recovered`.
    4. Otherwise `needs_attention` with `<reason>_exhausted`.
    """
    now = folder.utcnow()
    with transaction.atomic():
        task = Task.objects.select_for_update().get(id=run.task_id)
        if task.status != TaskStatus.RUNNING:
            return TaskAction.NONE
        if not evidence.get("verified", False):
            Task.objects.filter(id=task.id, status=TaskStatus.RUNNING).update(
                status=TaskStatus.NEEDS_ATTENTION, reason=TaskReason.STOP_UNVERIFIED,
                detail="a process of the agent's group outlived the stop", updated_at=now)
            note(task.id, TaskEventKind.NEEDS_ATTENTION, run_id=run.id, reason=TaskReason.STOP_UNVERIFIED,
                 action=TaskAction.ESCALATE, detail=evidence, now=now)
            return TaskAction.ESCALATE
        used = run.attempt - task.budget_from + 1
        if used < task.max_attempts:
            try:
                with transaction.atomic():
                    nxt = TaskRun.objects.create(id=new_run_id(), task_id=task.id, attempt=run.attempt + 1,
                                                 status=RunStatus.QUEUED, recovers_id=run.id, created_at=now)
            except IntegrityError:  # another recovery of this task added the attempt first
                return TaskAction.NONE
            Task.objects.filter(id=task.id, status=TaskStatus.RUNNING).update(
                status=TaskStatus.QUEUED, reason=reason, detail="", requeued=task.requeued + 1, updated_at=now)
            note(task.id, TaskEventKind.RUN_RECOVERED, run_id=run.id, reason=reason, action=TaskAction.REQUEUE,
                 detail={**evidence, "new_run_id": nxt.id, "attempt": nxt.attempt, "attempts_used": used,
                         "max_attempts": task.max_attempts}, now=now)
            logger.info("task %s: run %s recovered (%s); attempt %d queued", task.id, run.id, reason, nxt.attempt)
            return TaskAction.REQUEUE
        exhausted = EXHAUSTED[reason]
        Task.objects.filter(id=task.id, status=TaskStatus.RUNNING).update(
            status=TaskStatus.NEEDS_ATTENTION, reason=exhausted,
            detail=f"{used} of {task.max_attempts} attempts used", updated_at=now)
        note(task.id, TaskEventKind.NEEDS_ATTENTION, run_id=run.id, reason=exhausted, action=TaskAction.ESCALATE,
             detail={**evidence, "attempts_used": used, "max_attempts": task.max_attempts}, now=now)
        logger.warning("task %s needs attention: %s", task.id, exhausted)
        return TaskAction.ESCALATE


@receiver(verified_stop)
def after_verified_stop(sender: object, session_id: str, meta: SessionMeta, verification: GroupVerification,
                        **_: Any) -> None:
    """Supervision stopped a silent session: finish its run (if it has one and we hold it) and recover it.
    A session without a task binding never creates a retry."""
    run_id = meta.get("run_id")
    if not run_id:
        return
    run = TaskRun.objects.filter(id=run_id, session_id=session_id).first()
    if run is None:
        return
    evidence = {**verification, "session_id": session_id}
    if not finish_run(run.id, lease_owner(), RunOutcome.SILENT_STOPPED, TaskReason.SUPERVISED_SILENCE,
                      "stopped after quiet_after + stop_grace without work evidence"):
        return  # the lease is not ours any more: whoever took the run recovers it
    recover(run, TaskReason.SUPERVISED_SILENCE, evidence)


def recover_lapsed(run: TaskRun) -> TaskAction:
    """A run whose lease lapsed (already finished `lease_expired` by the expiry compare-and-set): verify the
    agent's process group is gone (a killed daemon leaves its agents orphaned), then the same rules."""
    verification = verify_orphan_group(run.agent_pgid, run.agent_started)
    reason = TaskReason.LEASE_EXPIRED
    meta = _session_meta(run.session_id)
    silence = ((meta.get("supervision") if meta else None) or {}).get("silence_stop") or {}
    if meta and meta.get("stop_detail") == SILENCE_DETAIL and silence.get("verified"):
        # The silence stop was made and verified, but its recovery never ran (the daemon died in between).
        reason = TaskReason.SUPERVISED_SILENCE
        TaskRun.objects.filter(id=run.id).update(outcome=RunOutcome.SILENT_STOPPED, reason=reason)
    evidence = {**verification, "session_id": run.session_id or None, "lease_owner": run.lease_owner,
                "lease_expired_at": folder.isoformat(run.lease_expires_at) if run.lease_expires_at else None}
    return recover(run, reason, evidence)


def _session_meta(session_id: str) -> SessionMeta | None:
    if not session_id:
        return None
    try:
        return folder.read_meta(session_id)
    except (OSError, ValueError):
        return None
