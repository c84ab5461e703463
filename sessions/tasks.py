"""huey jobs. They read durable state; when one must act on a live runtime it asks the daemon's
SessionManager on its own loop (never touching an agent subprocess itself)."""

from __future__ import annotations

import logging
import os

from huey.contrib.djhuey import HUEY, db_task

logger = logging.getLogger(__name__)


def _chain_id() -> str:
    """Identifies this daemon run, so a sweep scheduled by a previous daemon dies out instead of doubling."""
    from compozy_site.daemon_record import read_daemon_record

    record = read_daemon_record() or {}
    return f"{os.getpid()}:{record.get('started_at', '')}"


@db_task()
def boot_repair() -> dict[str, int]:
    """At boot, before anything reads health: repair stale live states left by an unclean exit."""
    from sessions.repair import boot_repair_all

    return boot_repair_all()


@db_task()
def supervision_sweep(chain: str) -> dict[str, int] | None:
    """Propose supervision actions, then reschedule itself (huey's periodic tasks are minute-grained)."""
    if chain != _chain_id():
        return None
    from sessions.runtime.manager import get_manager
    from sessions.supervision import sweep, sweep_interval

    try:
        result = sweep()
    except Exception:
        logger.exception("supervision sweep failed")
        result = None
    try:
        manager = get_manager()
    except Exception:
        return result
    if not manager.draining:
        supervision_sweep.schedule(args=(chain,), delay=sweep_interval(manager.config))
    return result


@db_task()
def remove_tombstones() -> int:
    """Finish removals whose folder deletion failed earlier (sessions reference §15: retried later)."""
    import shutil

    from compozy_site.home import sessions_dir

    root = sessions_dir()
    removed = 0
    for tombstone in root.glob(".compozy-delete-*") if root.exists() else []:
        shutil.rmtree(tombstone, ignore_errors=True)
        removed += 0 if tombstone.exists() else 1
    return removed


def schedule_boot_jobs() -> None:
    """Called by the launcher once the daemon listens."""
    boot_repair()
    remove_tombstones()
    supervision_sweep(_chain_id())


__all__ = ["HUEY", "boot_repair", "schedule_boot_jobs", "supervision_sweep"]
