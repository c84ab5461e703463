"""Stale metadata after an unclean daemon exit (docs/reference/sessions.md §13): a live state no daemon owns becomes
`stopped`, on read and at boot, and what the dead daemon's agent left running is killed. Transcript repair is
`repair/transcript.py`."""

from __future__ import annotations

import contextlib
import logging
import os
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

from compozy_base import process
from sessions.acp import stragglers
from sessions.catalog import index as catalog
from sessions.core import lifecycle
from sessions.core.enums import FailureKind, SessionState, StopReason
from sessions.core.record import FailureDoc, LivenessDoc, SessionMeta, SessionRecord, activity_of
from sessions.models import InputEntry, Session
from sessions.store import folder

if TYPE_CHECKING:
    from sessions.models import Session

logger = logging.getLogger(__name__)

STALE_RULES = {
    SessionState.ACTIVE: (StopReason.AGENT_CRASHED, FailureKind.PROCESS_EXIT, "daemon crashed while session active"),
    SessionState.STOPPING: (StopReason.AGENT_CRASHED, FailureKind.PROCESS_EXIT, "stop did not complete"),
    SessionState.STARTING: (StopReason.ERROR, FailureKind.STARTUP_FAILURE, "start did not complete"),
}
STALL_AGE = timedelta(minutes=2)


class _RecordedStop(TypedDict, total=False):
    stop_reason: str
    stop_detail: str
    failure: FailureDoc | None


def _agent_alive(liveness: LivenessDoc) -> bool:
    """The recorded agent still runs, checked by pid AND start time (the pid may have been reused)."""
    started = folder.parse_time(liveness.get("subprocess_started_at"))
    return process.same_process(liveness.get("subprocess_pid"), wall=started.timestamp() if started else None)


def _recorded_stop(meta: SessionMeta) -> _RecordedStop:
    """The stop the daemon decided but could not write to meta.json (a full sessions disk): the catalog row is
    written first in that case (`catalog.save_meta`), so a newer stopped row with its cause is the truth."""
    from django.db import DatabaseError


    try:
        row = Session.objects.filter(id=meta["id"]).first()
    except DatabaseError:
        return {}
    updated = folder.parse_time(meta.get("updated_at"))
    if row is None or row.state != SessionState.STOPPED or not row.stop_reason or \
            (updated is not None and row.updated_at is not None and row.updated_at < updated):
        return {}
    return {"stop_reason": row.stop_reason, "stop_detail": row.stop_detail, "failure": row.failure}


def stale_fix(meta: SessionMeta, now: datetime | None = None) -> SessionMeta | None:
    """The repaired metadata for a live state no daemon owns, or None when nothing is stale. `now` (default: the
    clock) dates the repair and ages the surviving agent's last activity against STALL_AGE."""
    now = now or folder.utcnow()
    state = SessionState(meta["state"])
    if state not in STALE_RULES:
        return None
    # "Daemon crashed" only when the daemon recorded no stop of its own: a storage failure stays one.
    meta = {**meta, **_recorded_stop(meta)}
    reason, kind, detail = STALE_RULES[state]
    fixed = meta.copy()
    liveness = (fixed.get("liveness") or {}).copy()
    if state != SessionState.STARTING and _agent_alive(liveness):
        detail = "daemon exited while session subprocess remained alive"
        last = folder.parse_time(activity_of(meta).last_activity_at)
        if last is None or now - last >= STALL_AGE:
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
    fixed["updated_at"] = folder.isoformat(now)
    return fixed


def _kill_orphaned_group(session_id: str, liveness: LivenessDoc) -> None:
    """The dead daemon's agent group has no owner any more: its leader if it still runs, and whatever it started
    (a build, a test run: they kept changing the workspace with nobody watching, even after the agent exited).
    With the leader gone its pid still names the group, and Linux never reuses a pid a process group still holds;
    a pid that runs again as another process means the group is gone, and that process's group is not ours.
    What the agent started outside its group carries the run's mark (sessions/acp/stragglers.py)."""
    started_at = liveness.get("subprocess_started_at")
    if isinstance(started_at, str) and started_at:
        stragglers.kill_marked(stragglers.mark(session_id, started_at))
    pid = liveness.get("subprocess_pid")
    if not isinstance(pid, int) or pid <= 1:
        return
    if not _agent_alive(liveness) and process.exists(pid):
        return  # the pid was reused: never signal another process's group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, 9)


def repair_stale_meta(meta: SessionMeta, fixed: SessionMeta | None = None) -> SessionMeta:
    """Write the stale fix (`fixed`, when the caller computed it already) back to meta.json and the catalog; return
    the (possibly new) metadata."""
    fixed = fixed or stale_fix(meta)
    if fixed is None:
        return meta
    _kill_orphaned_group(fixed["id"], fixed.get("liveness") or {})
    rec = SessionRecord.from_meta(fixed)
    folder.write_meta(rec)
    try:
        catalog.upsert_session_row(rec)
        catalog.announce_saved(rec)

        InputEntry.objects.filter(session_id=fixed["id"], status=InputEntry.Status.DISPATCHING).update(
            status=InputEntry.Status.QUEUED)
    except Exception:  # meta.json holds the fix: the row follows it on the next save or rebuild_catalog
        logger.warning("stale repair of %s: the catalog was not updated", fixed["id"], exc_info=True)
    logger.info("repaired stale %s session %s: %s", meta["state"], meta["id"], fixed["stop_detail"])
    return fixed


def repair_row_only(session_id: str, row: Session | None = None) -> SessionMeta | None:
    """The stale-state rules applied to a catalog row alone, for a session whose meta.json cannot be read here
    (another node's disk, or invalid): it must not read `active` with no daemon running it. A `row` already read
    is used, and updated in place when the compare-and-set on its state lands."""

    row = row or Session.objects.filter(id=session_id).first()
    if row is None:
        return None
    fixed = stale_fix(catalog.row_meta(row))
    if fixed is None:
        return None
    changes = {"state": fixed["state"], "stop_reason": fixed["stop_reason"], "stop_detail": fixed["stop_detail"],
               "failure": fixed["failure"]}
    now = folder.utcnow()
    if Session.objects.filter(id=session_id, state=row.state).update(**changes, updated_at=now):
        for key, value in {**changes, "updated_at": now}.items():
            setattr(row, key, value)
    else:
        row.refresh_from_db()  # changed meanwhile (reactivated, or fixed by another reader): theirs stands
    return fixed
