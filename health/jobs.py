"""huey jobs of the health app: the stale-health sweep and the wake service's scheduler cycle.

Sent by the daemon's `Ticker` like the sessions jobs (`sessions/jobs.py` explains why nothing reschedules itself),
and each claims its tick in the catalog, so duplicates and extra consumers run a tick once.
"""

from __future__ import annotations

import logging

from huey.contrib.djhuey import db_task

from compozy_base.config.loader import get_config
from health.services import recomputed_at, sweep_stale
from health.wake import run_cycle
from sessions.catalog.claims import claim_tick, owner_id
from sessions.jobs import arrive, this_start

logger = logging.getLogger(__name__)

# Ticks are claimed for half an interval (as the supervision sweep: jitter never skips one, a burst runs once).
CLAIM_SHARE = 0.5
# The stale sweep runs four times per threshold, so a session turns stale at most a quarter late; never more
# often than every 250 ms (tests use thresholds of a second) nor less often than every 30 s.
SWEEP_PER_THRESHOLD = 4
SWEEP_BOUNDS = (0.25, 30.0)
# The wake cycle runs twice per policy floor (`min_interval`, 5 m by default), at most every 30 s.
WAKE_BOUNDS = (0.5, 30.0)


def sweep_every() -> float:
    return min(max(get_config().heartbeat.session_health_stale_after / SWEEP_PER_THRESHOLD, SWEEP_BOUNDS[0]),
               SWEEP_BOUNDS[1])


def wake_every() -> float:
    return min(max(get_config().heartbeat.min_interval / 2, WAKE_BOUNDS[0]), WAKE_BOUNDS[1])


@db_task()
def health_sweep() -> int | None:
    """Age idle sessions into `stale`. Only in the daemon that owns the sessions (their live facts are here)."""

    manager = arrive("health_sweep")
    if manager is None or manager.draining or not manager.runtimes:
        return None
    if not claim_tick(f"health_sweep:{owner_id()}", sweep_every() * CLAIM_SHARE):
        return None
    return sweep_stale()


@db_task()
def wake_cycle(run: str) -> dict[str, int] | None:
    """The wake service's scheduler cycle. Refuses to run until this daemon start's health recompute finished."""

    if not this_start(run):
        return None  # another daemon start's (another node's) cycle: its own ticker runs it there
    manager = arrive("wake")
    if manager is None or manager.draining:
        return None
    if recomputed_at(run) is None:
        logger.info("wake cycle waits: health not recomputed yet for this daemon start")
        return None
    if not claim_tick(f"wake_cycle:{owner_id()}", wake_every() * CLAIM_SHARE):
        return None
    return run_cycle()


__all__ = ["health_sweep", "sweep_every", "wake_cycle", "wake_every"]
