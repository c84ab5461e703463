"""What health does when another app signals: Django signal receivers, connected in `HealthConfig.ready()`."""

from __future__ import annotations

from typing import Any

from health.services import boot_recompute, on_meta_saved
from sessions.core.record import SessionRecord


def derive_health(sender: object, *, record: SessionRecord, **_: Any) -> None:
    """`sessions.catalog.index.meta_saved`: the session's health row derived from the record just saved."""
    on_meta_saved(record)


def recompute_after_boot(sender: object, *, run: str, **_: Any) -> None:
    """`sessions.repair.boot.boot_repair_finished`: every session's health from the repaired metadata."""
    boot_recompute(run)
