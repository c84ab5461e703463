"""huey jobs: boot repair, tombstone clean-up, the supervision and reaping sweep (the task-run cycle is
tasks/jobs.py).

How they are scheduled, and why it survives lost messages and extra consumers:
1. The daemon's `Ticker` thread (`compozy/daemon/consumer.py`) enqueues each job when it falls due: the sweep
   every `sweep_interval`, tombstones every minute. Nothing reschedules itself. Boot repair (until it has run for
   this daemon start) and the wake cycle belong to one daemon start: the ticker runs them in its own process, and a
   consumer that gets one for another start (another node's) ignores it. When a job's previous message has not
   reached the daemon by the time the next one is due (lost, or taken by a consumer that cannot run it), the
   ticker also runs the job itself, so no number of lost messages can stop supervision.
2. Each job first claims its tick in the catalog with a compare-and-set (`sessions/catalog/claims.py`): a burst
   of queued duplicates, or two consumer threads taking two messages at once, still runs each tick once.
3. A job acts only in the process whose SessionManager owns the sessions (the daemon). A consumer without
   one (`manage.py run_huey` on the same queue) returns without claiming, so the owner's next message finds
   its tick still due. A job never waits on a runtime: actions are handed to the manager's loop.
"""

from __future__ import annotations

import logging
import shutil
import time
from typing import TYPE_CHECKING, Any

from huey.contrib.djhuey import HUEY, db_task

from compozy_base.home import sessions_dir
from sessions.catalog import cluster
from sessions.catalog.claims import claim_tick, owner_id
from sessions.catalog.ownership import local_manager
from sessions.repair.boot import boot_repair_all, boot_repair_finished
from sessions.runtime.supervision import decide, sweep_interval
from sessions.services.create import reap_candidates
from sessions.store import folder
from sessions.store.folder import parse_time

if TYPE_CHECKING:
    from sessions.core.record import SessionMeta
    from sessions.runtime.manager import SessionManager

logger = logging.getLogger(__name__)

# A sweep tick is claimed for half an interval: the ticker sends one message per interval, so timer jitter
# never finds the tick not yet due, while a burst of duplicates (a backed-up queue) still runs once.
SWEEP_CLAIM_SHARE = 0.5
TOMBSTONE_EVERY = 60.0  # failed folder deletions are rare; a minute is soon enough to retry them
BOOT_CLAIM_EVERY = 0.001  # boot repair's claim is keyed on the daemon's start time: once per start

_boot_runs: set[str] = set()  # daemon starts whose boot repair this process claimed
_arrived: dict[str, float] = {}  # job name → time.monotonic() it last reached this (owning) process
_warned_foreign = False


def _owner() -> Any:
    """This process's SessionManager, or None in a consumer that owns no sessions."""
    global _warned_foreign
    manager = local_manager()
    if manager is not None:
        return manager
    if not _warned_foreign:
        _warned_foreign = True
        # Once per process: this consumer takes daemon jobs from the shared queue and can only drop them.
        logger.warning("a Compozy job reached a huey consumer outside the daemon; it is dropped here and the "
                       "daemon's ticker sends it again")
    return None


def boot_repaired(run: str) -> bool:
    return run in _boot_runs


def arrived(name: str) -> float:
    """When a message for `name` last reached this process (0.0: never): tells the ticker whether its last
    message was lost or taken by a consumer that cannot run it."""
    return _arrived.get(name, 0.0)


def arrive(name: str) -> Any:
    """This process's SessionManager when it owns sessions (the daemon), noting that a message for `name` came."""
    manager = _owner()
    if manager is not None:
        _arrived[name] = time.monotonic()
    return manager


def this_start(run: str) -> bool:
    """Whether `run` is this process's daemon start. A job of another start (another node's, taken from the shared
    queue, or an earlier start's left in it) is ignored here: its own daemon runs it (`Ticker`, `START_JOBS`)."""
    me = cluster.identity()
    return me is not None and me.run == run


@db_task()
def boot_repair(run: str) -> dict[str, int] | None:
    """Once per daemon start (`run` = its `started_at`): repair stale live states and interrupted transcripts."""
    if not this_start(run) or arrive("boot") is None or run in _boot_runs:
        return None
    if not claim_tick(f"boot_repair:{owner_id()}", BOOT_CLAIM_EVERY, now=parse_time(run)):
        _boot_runs.add(run)  # this start's repair was claimed already (a duplicate message)
        return None
    _boot_runs.add(run)
    try:
        return boot_repair_all(run)
    finally:
        # health's recompute, before any wake consumer (they wait for it)
        boot_repair_finished.send(sender=None, run=run)


@db_task()
def supervision_sweep() -> dict[str, int] | None:
    """Read durable activity, decide (once: the owner carries the decision out behind its fence), hand each
    decision to the session's owner and return."""
    manager = arrive("sweep")
    # No live session, nothing to supervise: an idle daemon writes nothing to the catalog.
    if manager is None or manager.loop is None or manager.draining or not manager.runtimes:
        return None
    if not claim_tick(f"supervision:{owner_id()}", sweep_interval(manager.config) * SWEEP_CLAIM_SHARE):
        return None
    return _sweep(manager)


def _sweep(manager: SessionManager) -> dict[str, int]:
    """One pass over this daemon's live sessions, on a huey worker thread. It never waits on a runtime: each
    session's actions are handed to its owner on the daemon loop, so one stubborn session (a cancel it ignores,
    a long grace) cannot delay another's warning. Each session is judged on its own: a bad meta.json is skipped."""
    now = folder.utcnow()
    handed = 0
    ids = list(manager.runtimes)
    live: dict[str, SessionMeta] = {}  # read once here, reused by the reaping check below
    for session_id in ids:
        try:
            meta = folder.read_meta(session_id)
            if not meta:
                continue
            live[session_id] = meta
            if meta["state"] != "active":
                continue
            decision = decide(meta, now, manager.config)
            if decision.actions:
                handed += manager.hand_off_supervision(session_id, decision)
        except Exception:
            logger.exception("supervision sweep skipped %s", session_id)
    reaped = 0
    for session_id, meta in live.items():
        if not meta.get("lineage"):
            continue
        try:  # one child at a time: bad lineage data in one must not stop the reaping of the others
            for child, reason in reap_candidates({session_id: meta}):
                reaped += manager.hand_off_reap(child, reason)
        except Exception:
            logger.exception("reaping check skipped %s", session_id)
    return {"sessions": len(ids), "handed_off": handed, "reaped": reaped}


@db_task()
def remove_tombstones() -> int | None:
    """Finish removals whose folder deletion failed earlier (docs/reference/sessions.md §15: retried later)."""
    if arrive("tombstones") is None or not claim_tick(f"tombstones:{owner_id()}", TOMBSTONE_EVERY * SWEEP_CLAIM_SHARE):
        return None
    root = sessions_dir()
    removed = 0
    for tombstone in root.glob(".compozy-delete-*") if root.exists() else []:
        try:
            shutil.rmtree(tombstone)
            removed += 1
        except OSError:
            logger.warning("tombstone %s not removed yet; retrying later", tombstone, exc_info=True)
    return removed


__all__ = ["HUEY", "arrived", "boot_repair", "boot_repaired", "remove_tombstones", "supervision_sweep"]
