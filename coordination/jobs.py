"""The coordination cycle as a huey job (sessions/jobs.py says how jobs are scheduled and claimed)."""

from __future__ import annotations

from huey.contrib.djhuey import db_task

from coordination.runner import TICK_SECONDS, cycle, has_work
from sessions.catalog.claims import claim_tick, owner_id
from sessions.jobs import SWEEP_CLAIM_SHARE, arrive


def coordination_every() -> float:
    return TICK_SECONDS


@db_task()
def coordination_cycle() -> dict[str, int] | None:
    """Coordinated tasks (coordination/runner.py): a coordinator per workspace, a spawned child per runnable step."""
    manager = arrive("coordination")
    if manager is None or manager.loop is None or manager.draining or not has_work():
        return None
    if not claim_tick(f"coordination:{owner_id()}", TICK_SECONDS * SWEEP_CLAIM_SHARE):
        return None
    return cycle(manager)
