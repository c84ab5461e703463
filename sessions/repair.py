"""Repairs after an unclean daemon exit (sessions reference §13). Append-only; never touches wake state."""

from __future__ import annotations

import contextlib
import logging
import os
from datetime import timedelta
from typing import Any

from sessions import catalog
from sessions.enums import FailureKind, SessionState, StopReason
from sessions.runtime import lifecycle
from sessions.store import folder

logger = logging.getLogger(__name__)

STALE_RULES = {
    SessionState.ACTIVE: (StopReason.AGENT_CRASHED, FailureKind.PROCESS_EXIT, "daemon crashed while session active"),
    SessionState.STOPPING: (StopReason.AGENT_CRASHED, FailureKind.PROCESS_EXIT, "stop did not complete"),
    SessionState.STARTING: (StopReason.ERROR, FailureKind.STARTUP_FAILURE, "start did not complete"),
}
STALL_AGE = timedelta(minutes=2)


def _pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    from compozy_site.daemon_record import pid_alive

    return pid_alive(pid)


def stale_fix(meta: dict[str, Any]) -> dict[str, Any] | None:
    """The repaired metadata for a live state no daemon owns, or None when nothing is stale."""
    state = SessionState(meta["state"])
    if state not in STALE_RULES:
        return None
    reason, kind, detail = STALE_RULES[state]
    fixed = dict(meta)
    liveness = dict(fixed.get("liveness") or {})
    pid = liveness.get("subprocess_pid")
    if state != SessionState.STARTING and _pid_alive(pid):
        detail = "daemon exited while session subprocess remained alive"
        last = folder.parse_time((liveness.get("activity") or {}).get("last_activity_at"))
        if last is None or folder.utcnow() - last >= STALL_AGE:
            detail = "daemon exited while stalled session subprocess remained alive"
            liveness["stall_state"] = "stalled"
        fixed["liveness"] = liveness
    fixed["state"] = SessionState.STOPPED.value
    # Keep values already present; fill only the blanks.
    fixed["stop_reason"] = meta.get("stop_reason") or reason.value
    fixed["stop_detail"] = meta.get("stop_detail") or detail
    fixed["failure"] = meta.get("failure") or lifecycle.failure_object(kind, detail)
    if state == SessionState.STARTING:
        fixed["acp_session_id"] = ""
    fixed["updated_at"] = folder.isoformat(folder.utcnow())
    return fixed


def repair_stale_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """Write the stale fix back to meta.json and the catalog; return the (possibly new) metadata."""
    fixed = stale_fix(meta)
    if fixed is None:
        return meta
    liveness = fixed.get("liveness") or {}
    pid = liveness.get("subprocess_pid")
    if _pid_alive(pid):
        # An orphaned agent from the dead daemon: its process group has no owner any more.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pid), 9)
    folder.write_meta(fixed)
    with contextlib.suppress(Exception):
        catalog.upsert_session_row(fixed)
        from sessions.models import InputEntry

        InputEntry.objects.filter(session_id=fixed["id"], status=InputEntry.Status.DISPATCHING).update(
            status=InputEntry.Status.QUEUED)
    logger.info("repaired stale %s session %s: %s", meta["state"], meta["id"], fixed["stop_detail"])
    return fixed


def boot_repair_all() -> dict[str, int]:
    """Every session folder: stale live states → stopped (no daemon owns them after a restart).

    Sessions the new daemon already runs are skipped: they are in the manager.
    """
    from compozy_site.daemon_record import read_daemon_record
    from sessions.runtime.manager import get_manager

    try:
        manager = get_manager()
    except Exception:
        manager = None
    # Sessions this daemon created are never stale; only state older than our start can be.
    started = folder.parse_time((read_daemon_record() or {}).get("started_at")) if manager else None
    repaired = scanned = 0
    for session_id in folder.list_session_dirs():
        if manager is not None and manager.get(session_id) is not None:
            continue
        scanned += 1
        try:
            meta = folder.read_meta(session_id)
        except ValueError:
            logger.warning("boot repair: unreadable meta.json for %s", session_id)
            continue
        if meta is None:
            continue
        updated = folder.parse_time(meta.get("updated_at"))
        if started is not None and updated is not None and updated >= started:
            continue
        if stale_fix(meta) is not None:
            repair_stale_meta(meta)
            repaired += 1
    logger.info("boot repair: scanned %d session(s), repaired %d stale state(s)", scanned, repaired)
    return {"scanned": scanned, "repaired": repaired}
