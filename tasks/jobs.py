"""The task-run cycle as a huey job (sessions/jobs.py says how jobs are scheduled and claimed)."""

from __future__ import annotations

from huey.contrib.djhuey import db_task

from compozy_base.config.loader import get_config
from sessions.catalog.claims import claim_tick, owner_id
from sessions.jobs import SWEEP_CLAIM_SHARE, arrive
from tasks.runner import cycle, has_work, tick_seconds


def task_every() -> float:
    return tick_seconds(get_config())


@db_task()
def task_cycle() -> dict[str, int] | None:
    """Task runs (`tasks/runner.py`): recover lapsed leases, renew and settle ours, dispatch queued ones."""
    manager = arrive("tasks")
    # No queued or running run, nothing to do: an idle daemon writes nothing to the catalog.
    if manager is None or manager.loop is None or manager.draining or not has_work():
        return None
    if not claim_tick(f"tasks:{owner_id()}", task_every() * SWEEP_CLAIM_SHARE):
        return None
    return cycle(manager)
