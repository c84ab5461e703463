"""Closed sets of the work app: a value outside these cannot be written to a task, a run or its history."""

from __future__ import annotations

from enum import StrEnum


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    NEEDS_ATTENTION = "needs_attention"


# A person may retry these; the others are still in flight or done well.
RETRYABLE = frozenset({TaskStatus.FAILED, TaskStatus.CANCELED, TaskStatus.NEEDS_ATTENTION})
FINAL = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELED, TaskStatus.NEEDS_ATTENTION})


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"  # claimed: a lease is held, a session is starting or working
    FINISHED = "finished"


class RunOutcome(StrEnum):
    SUCCEEDED = "succeeded"  # the turn ended `done`
    FAILED = "failed"  # the agent answered with an error, crashed, or the session could not start
    CANCELED = "canceled"  # a person canceled the task
    SILENT_STOPPED = "silent_stopped"  # supervision stopped it after quiet_after + stop_grace, tree verified gone
    LEASE_EXPIRED = "lease_expired"  # its daemon stopped renewing the lease (killed, or shut down)


class TaskReason(StrEnum):
    NONE = ""
    SUPERVISED_SILENCE = "supervised_silence"
    SUPERVISED_SILENCE_EXHAUSTED = "supervised_silence_exhausted"
    LEASE_EXPIRED = "lease_expired"
    LEASE_EXPIRED_EXHAUSTED = "lease_expired_exhausted"
    TURN_FAILED = "turn_failed"
    SESSION_STOPPED = "session_stopped"
    START_FAILED = "start_failed"
    # The stop was made but a process of the agent's group outlived it: repeating the work could run it twice.
    STOP_UNVERIFIED = "stop_unverified"
    CANCELED_BY_USER = "canceled_by_user"
    RETRIED_BY_USER = "retried_by_user"
    # Its attempts together reached the cost budget (`max_cost_usd`): no further attempt starts.
    BUDGET_EXCEEDED = "budget_exceeded"


# Recovery reason → the reason a task carries once its attempt budget is spent.
EXHAUSTED = {TaskReason.SUPERVISED_SILENCE: TaskReason.SUPERVISED_SILENCE_EXHAUSTED,
             TaskReason.LEASE_EXPIRED: TaskReason.LEASE_EXPIRED_EXHAUSTED}


class TaskEventKind(StrEnum):
    CREATED = "task.created"
    RUN_CLAIMED = "task.run_claimed"
    RUN_STARTED = "task.run_started"
    RUN_SUCCEEDED = "task.run_succeeded"
    RUN_FAILED = "task.run_failed"
    RUN_RECOVERED = "task.run_recovered"
    RUN_RELEASED = "task.run_released"
    NEEDS_ATTENTION = "task.needs_attention"
    CANCELED = "task.canceled"
    RETRIED = "task.retried"


class TaskAction(StrEnum):
    NONE = ""
    REQUEUE = "requeue"
    ESCALATE = "escalate"  # to a person: needs_attention
    STOP = "stop"
