"""Boot repair (docs/reference/sessions.md §13): at daemon start, every session's stale live state is repaired and
the transcript of a session that crashed is checked once per run, each session on its own, so one unreadable
meta.json never stops the others. The rules themselves are in `sessions/repair/transcript.py`."""


from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path
from typing import Final, TypedDict, cast

from django.dispatch import Signal

from compozy_base.daemon_record import read_daemon_record
from compozy_base.home import boot_report_path
from sessions.catalog.claims import claim_lease
from sessions.catalog.ownership import LocalManager, local_manager
from sessions.core.enums import LIVE_STATES, EventType, SessionState
from sessions.core.failures import classify
from sessions.core.record import SessionMeta, SessionRecord
from sessions.repair.git_ops import repair_git_ops
from sessions.repair.stale import repair_row_only, repair_stale_meta, stale_fix
from sessions.repair.transcript import (
    NO_TURN_IDS,
    REPAIRABLE_STOP_REASONS,
    IssueCode,
    Severity,
    leased_elsewhere,
    repair_transcript,
)
from sessions.store import events as event_store
from sessions.store import folder, replica

logger = logging.getLogger(__name__)

# Sent with the daemon start's `run` once its boot repair has run, even one that failed (sessions/jobs.py): apps that
# derive state from session metadata (health connects its recompute, health/apps.py) do it from the repaired
# metadata, before any of their consumers start (the pattern of sessions.catalog.index.meta_saved).
boot_repair_finished = Signal()


def _interrupted(path: Path) -> bool:
    """Cheap boot pre-check: does the last turn lack a terminal event? (The full inspection decides.)"""
    if not path.exists():
        return False
    conn = event_store.connect(path, readonly=True)
    try:
        row = conn.execute("SELECT turn_id FROM events WHERE type != ? ORDER BY rowid DESC LIMIT 1",
                           (EventType.SESSION_STOPPED.value,)).fetchone()
        if row is None or row[0] in NO_TURN_IDS:
            return False
        terminal = conn.execute("SELECT 1 FROM events WHERE turn_id = ? AND type IN (?, ?) LIMIT 1",
                                (row[0], EventType.DONE.value, EventType.ERROR.value)).fetchone()
        return terminal is None
    except sqlite3.DatabaseError:
        return True  # let the full inspection report what is wrong
    finally:
        conn.close()


# meta.json key holding boot repair's verdict on one run of a session: later boots skip that run's events.db
# (reopening every store that ever crashed made each boot slower as history grew: 1.3 s at 10k sessions).
TRANSCRIPT_MARK: Final = "transcript_repair"


def _run_key(meta: SessionMeta) -> str:
    """One run of a session: a reactivation sets a new `activated_at`, so a later crash is checked again."""
    return str(meta.get("activated_at") or meta.get("created_at") or "")


def transcript_checked(meta: SessionMeta) -> bool:
    mark = meta.get(TRANSCRIPT_MARK)
    return isinstance(mark, dict) and mark.get("run") == _run_key(meta)


def transcript_check_pending(meta: SessionMeta) -> bool:
    return (meta["state"] == SessionState.STOPPED and meta.get("stop_reason") in REPAIRABLE_STOP_REASONS
            and not transcript_checked(meta))


def _boot_transcript_repair(session_id: str) -> str:
    """`repaired`, `clean` (nothing interrupted) or `blocked` (error issues: left to a person)."""
    if not _interrupted(folder.events_path(session_id)):
        return "clean"
    result = repair_transcript(session_id, dry_run=False, force=False)
    if result["persisted"]:
        return "repaired"
    codes = sorted({i["code"] for i in result["issues"] if i["severity"] == Severity.ERROR})
    if codes:
        logger.warning("boot repair: transcript of %s not repaired: %s", session_id, ", ".join(codes))
        return "blocked"
    return "clean"


def _mark_checked(session_id: str, outcome: str, manager: LocalManager | None) -> None:
    """Record the verdict in meta.json (not `updated_at`: nothing about the session changed)."""
    if manager is not None and manager.owns(session_id):
        return  # reactivated meanwhile: the runtime owns meta.json now
    meta = folder.read_meta(session_id)
    if meta is None:
        return
    meta[TRANSCRIPT_MARK] = {"run": _run_key(meta), "outcome": outcome,
                             "checked_at": folder.isoformat(folder.utcnow())}
    folder.write_meta(SessionRecord.from_meta(meta))


# A run's transcript is judged once, whichever node gets there first: nodes sharing a sessions folder may boot or
# fail over together, and two appended repairs would close one turn twice. The claim is a lease, not for ever: a
# daemon killed between its claim and its verdict left the turn open for good (followers hung, `repair --all`
# said all was well). Once the lease ends, or at once when the holder was a process of this host that is gone,
# the judgement runs again; it is idempotent (the store says whether the turn is still open).
TRANSCRIPT_CLAIM_LEASE = 60.0


def check_transcript_once(session_id: str, meta: SessionMeta, manager: LocalManager | None, *,
                          writer: bool = False) -> str | None:
    """Transcript repair of a crashed run not judged yet, claimed in the catalog; None when there is nothing to do
    or another node claimed it. In a cluster whose nodes keep their own disks only the node that continues the
    session (`writer`: it holds the lease) repairs it: another's events.db is a copy of the database's, and a row
    written into it would be nobody's."""
    if not transcript_check_pending(meta) or (replica.enabled() and not writer):
        return None
    if not claim_lease(f"transcript:{session_id}:{_run_key(meta)}", TRANSCRIPT_CLAIM_LEASE):
        return None
    outcome = _boot_transcript_repair(session_id)
    _mark_checked(session_id, outcome, manager)
    return outcome


def transcript_settled(session_id: str, meta: SessionMeta) -> bool:
    """Whether a stopped session's transcript is final: a crashed run's cut turn is closed (by whoever judges
    it first, boot repair or this read) before a reader is told the session stopped, so a follower never closes
    on `session_stopped` one repair row short. False while another node holds the judgement: ask again later.
    Reads the store; callers on the event loop test `transcript_check_pending` first, which reads nothing."""
    if not transcript_check_pending(meta) or replica.enabled():
        return True  # (a copy: the node that continues the session closes the cut turn, check_transcript_once)
    try:
        if check_transcript_once(session_id, meta, local_manager()) is not None:
            return True
    except Exception as exc:  # noqa: BLE001 - a broken store is repair's to report (logged); a reader must not wait on it
        _log_failure(exc, "transcript check of %s failed", session_id)
        return True
    latest = folder.read_meta(session_id)
    return latest is None or not transcript_check_pending(latest)


def _log_failure(exc: Exception, what: str, session_id: str) -> None:
    """A storage condition (a store locked by another process, a full disk) is expected and judged again later (the
    run keeps no verdict): one warning line. Anything else is a bug, with its traceback."""
    reason = classify(exc)
    if reason is not None:
        logger.warning(what + " (%s; tried again later): %s", session_id, reason, exc)
    else:
        logger.exception(what, session_id)


def boot_repair_all(run: str | None = None) -> dict[str, int]:
    """Every session folder, each on its own (one bad folder never stops the others):

    1. unreadable or invalid meta.json → reported with `session_meta_invalid`, left alone;
    2. a stale live state → stopped (no daemon owns it after a restart);
    3. a stopped `agent_crashed`/`error` session not yet checked for this run → transcript repair of an
       interrupted last turn, then the verdict is recorded in meta.json so no later boot opens that store again.

    Sessions the new daemon owns are skipped: they are in the manager, and their events.db is its to write.
    `run` (the daemon start, daemon.json `started_at`) goes into the report: `daemon start` waits for it.
    """
    manager = local_manager()
    # Sessions this daemon created are never stale; only state older than our start can be.
    started = folder.parse_time((read_daemon_record() or {}).get("started_at")) if manager else None
    counts = dict.fromkeys(("scanned", "repaired", "transcripts_checked", "transcripts_repaired", "invalid",
                            "failed", "git_ops_repaired"), 0)
    needs_a_person: dict[str, list[str]] = {"invalid": [], "failed": []}
    for session_id in folder.list_session_dirs():
        if manager is not None and manager.owns(session_id):
            continue
        counts["scanned"] += 1
        try:
            meta = folder.read_meta(session_id)
        except ValueError as exc:
            counts["invalid"] += 1
            needs_a_person["invalid"].append(session_id)
            logger.warning("boot repair: %s %s: %s", IssueCode.SESSION_META_INVALID.value, session_id, exc)
            if not leased_elsewhere(session_id):
                # Its row may still say `active` from the crashed run: no daemon runs it, so the row says stopped.
                try:
                    repair_row_only(session_id)
                except Exception as exc:  # noqa: BLE001 - logged with the cause; the scan goes on
                    _log_failure(exc, "boot repair: catalog row of %s not corrected", session_id)
            continue
        if meta is None:
            continue
        if meta["state"] in LIVE_STATES and leased_elsewhere(session_id):
            continue  # another node of the cluster runs it (a shared sessions folder)
        try:
            updated = folder.parse_time(meta.get("updated_at"))
            fresh = started is not None and updated is not None and updated >= started
            fixed = None if fresh else stale_fix(meta)
            if fixed is not None:
                meta = repair_stale_meta(meta, fixed)
                counts["repaired"] += 1
            # A checkpoint, rewind or merge a crash cut short: finished or rolled back before anything reads it.
            if repair_git_ops(session_id) is not None:
                counts["git_ops_repaired"] += 1
            # Not limited to state older than our start: a read may already have repaired the stale meta.
            outcome = check_transcript_once(session_id, meta, manager)
            if outcome is not None:
                counts["transcripts_checked"] += 1
                counts["transcripts_repaired"] += outcome == "repaired"
        except Exception as exc:  # noqa: BLE001 - one session's failure is counted and logged; the scan goes on
            counts["failed"] += 1
            needs_a_person["failed"].append(session_id)
            _log_failure(exc, "boot repair of %s failed", session_id)
    logger.info("boot repair: scanned %d session(s), repaired %d stale state(s) and %d transcript(s) "
                "(%d store(s) opened); %d invalid meta.json, %d failed", counts["scanned"], counts["repaired"],
                counts["transcripts_repaired"], counts["transcripts_checked"], counts["invalid"], counts["failed"])
    _write_report(counts, needs_a_person, run)
    return counts


# The last boot repair's verdict, for `compozy doctor`: which sessions it could not repair (a person must look).
REPORT_IDS = 100  # per kind; the counts say how many in all


class BootReport(TypedDict):
    """boot-repair.json: when and for which daemon start, the counts, and (up to REPORT_IDS each) the sessions
    whose meta.json was invalid or whose repair failed."""

    at: str | None
    run: str | None
    counts: dict[str, int]
    invalid: list[str]
    failed: list[str]


def _write_report(counts: dict[str, int], needs_a_person: dict[str, list[str]], run: str | None) -> None:
    report: BootReport = {"at": folder.isoformat(folder.utcnow()), "run": run, "counts": counts,
                          "invalid": needs_a_person["invalid"][:REPORT_IDS],
                          "failed": needs_a_person["failed"][:REPORT_IDS]}
    try:
        folder.write_json_atomic(boot_report_path(), report)
    except OSError:
        logger.warning("boot repair report not written", exc_info=True)


def read_report() -> BootReport | None:
    try:
        return cast(BootReport, json.loads(boot_report_path().read_text()))  # as `_write_report` wrote it
    except (OSError, ValueError):
        return None
