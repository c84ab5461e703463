"""huey jobs. They read durable state; when one must act on a live runtime it asks the daemon's
manager through its loop, never touching an agent subprocess itself."""

from __future__ import annotations

import logging

from huey.contrib.djhuey import db_task

logger = logging.getLogger(__name__)


@db_task()
def boot_repair() -> dict[str, int]:
    """At boot, before anything reads health: repair stale live states left by an unclean exit."""
    from sessions.repair import boot_repair_all

    return boot_repair_all()


def schedule_boot_jobs() -> None:
    """Called by the launcher once the daemon listens."""
    boot_repair()
