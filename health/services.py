"""The health service layer: keep each session's health row, serve the health DTO to every surface.

Rows are written from three places only, all off the event loop:
1. `on_meta_saved`, run after every `catalog.save_meta` (the `meta_saved` signal's receiver: health/receivers.py) on the
   runtime's DB thread after every lifecycle change, turn end and turn heartbeat (so supervision feeds health
   through activity and never writes it);
2. `sweep_stale`, the claimed periodic job that ages idle sessions into `stale`;
3. `boot_recompute`, once per daemon start, before any wake consumer runs.
Presence touches (`touch_presence`) only move `last_presence_at`.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.db import DatabaseError, IntegrityError, transaction

from compozy_base.config.loader import get_config
from compozy_base.daemon_record import read_daemon_record
from health.derive import LiveFacts, derive, eligibility, is_stale
from health.enums import HealthState, HealthValue, WakeReason
from health.models import SessionHealth, WakeState
from sessions import services
from sessions.catalog import cluster
from sessions.catalog.ownership import local_manager
from sessions.core.errors import Conflict, NotFound, Unavailable
from sessions.core.live import LiveSession
from sessions.core.offload import spawn
from sessions.core.record import SessionRecord
from sessions.models import Session
from sessions.services import ring_catalog_threadsafe
from sessions.services.reads import SessionList
from sessions.store.folder import isoformat, load_meta, session_dir, utcnow

logger = logging.getLogger(__name__)

HOOK_EVENT = "session.health.update.after"
# Fields whose change is a transition (docs/reference/hooks.md §7); presence and activity touches alone never fire.
TRANSITION_FIELDS = ("state", "health", "eligible_for_wake", "ineligibility_reason")

_recomputed: dict[str, str] = {}  # daemon start (`started_at`) → when its boot recompute finished
_recompute_lock = threading.Lock()


def _manager() -> Any:
    return local_manager()


def live_facts(session_id: str) -> LiveFacts:
    """Read from the owner's runtime (any thread: attribute reads only)."""
    manager = _manager()
    runtime: LiveSession | None = manager.get(session_id) if manager is not None else None
    if runtime is None:
        return LiveFacts()
    agent = runtime.agent
    return LiveFacts(runtime=True, process_running=agent is not None and agent.returncode is None,
                     stopping=bool(runtime.stopping))


class HealthDto(TypedDict):
    """The health DTO (docs/reference/health.md §1): built as a dict, sent as JSON as it is."""

    session_id: str
    workspace_id: str
    agent_name: str
    state: str
    health: str
    active_prompt: bool
    attachable: bool
    eligible_for_wake: bool
    ineligibility_reason: str | None
    last_activity_at: str | None
    last_presence_at: str | None
    last_error: str | None
    updated_at: str | None


class HealthAnswer(TypedDict):
    health: HealthDto


def row_dict(row: SessionHealth) -> HealthDto:
    """The health DTO (docs/reference/health.md §1; docs/reference/surfaces.md §4.8): the same for CLI, HTTP and UDS."""
    return {
        "session_id": row.session_id, "workspace_id": row.workspace_id, "agent_name": row.agent_name,
        "state": row.state, "health": row.health, "active_prompt": row.active_prompt, "attachable": row.attachable,
        "eligible_for_wake": row.eligible_for_wake, "ineligibility_reason": row.ineligibility_reason or None,
        "last_activity_at": isoformat(row.last_activity_at), "last_presence_at": isoformat(row.last_presence_at),
        "last_error": row.last_error or None, "updated_at": isoformat(row.updated_at),
    }


# ---- writing -----------------------------------------------------------------------------------------

def on_meta_saved(rec: SessionRecord, live: LiveFacts | None = None) -> SessionHealth | None:
    """Derive and store the health row of a session whose meta.json was just written. Never raises: a health
    write must not fail the lifecycle write it follows (the next save or the sweep catches up)."""
    try:
        return _upsert(rec, live if live is not None else live_facts(rec.id))
    except Exception:
        logger.exception("session %s: health row not updated", rec.id)
        return None


def _upsert(rec: SessionRecord, live: LiveFacts, now: datetime | None = None,
            force_stale: bool = False) -> SessionHealth | None:
    now = now or utcnow()
    cfg = get_config().heartbeat
    with transaction.atomic():
        row = SessionHealth.objects.select_for_update().filter(session_id=rec.id).first()
        before = _transition_key(row) if row is not None else None
        fields = derive(rec, live, presence=row.last_presence_at if row else None, now=now,
                        stale_after=cfg.session_health_stale_after)
        if force_stale:
            fields.update({"health": HealthValue.STALE.value, "eligible_for_wake": False,
                           "ineligibility_reason": WakeReason.SESSION_UNHEALTHY.value})
        if row is None:
            if not Session.objects.filter(id=rec.id).exists():
                return None  # the catalog row is gone (a removal raced this write)
            row = SessionHealth(session_id=rec.id)
        row.workspace_id = rec.workspace_id
        row.agent_name = rec.agent_name
        for key, value in fields.items():
            setattr(row, key, value)
        row.updated_at = now
        fire = before != _transition_key(row) and _hook_due(row, now, cfg.session_health_hook_min_interval)
        if fire:
            row.hook_fired_at = now
        try:
            with transaction.atomic():
                row.save()
        except IntegrityError:
            # Another writer stored the row first (a metadata save and a read deriving a missing row, at once): that
            # row stands. None when the session row was deleted between our check and the insert.
            return SessionHealth.objects.filter(session_id=rec.id).first()
    if fire:
        _fire_hook(row, rec)
    return row


def _transition_key(row: SessionHealth) -> tuple[Any, ...]:
    return tuple(getattr(row, f) for f in TRANSITION_FIELDS)


def _hook_due(row: SessionHealth, now: datetime, min_interval: float) -> bool:
    return row.hook_fired_at is None or now - row.hook_fired_at >= timedelta(seconds=min_interval)


def _fire_hook(row: SessionHealth, rec: SessionRecord) -> None:
    """Hand `session.health.update.after` to the daemon's loop (async-only event: nobody waits for it)."""
    manager = _manager()
    if manager is None or manager.loop is None or manager.hooks is None or not manager.hooks.has_hooks(HOOK_EVENT):
        return
    payload = {k: v for k, v in row_dict(row).items() if k not in ("session_id", "workspace_id", "agent_name")}

    def start() -> None:
        runtime: LiveSession | None = manager.get(row.session_id)
        if runtime is not None:
            spawn(runtime.hook(HOOK_EVENT, **payload))
            return
        spawn(manager.hooks.dispatch(HOOK_EVENT, {
            "event": HOOK_EVENT, "session_id": row.session_id, "session_name": rec.name or "",
            "session_type": rec.session_type or "user", "agent_name": row.agent_name,
            "workspace_id": row.workspace_id, "acp_session_id": rec.acp_session_id or "", **payload}))

    try:
        manager.loop.call_soon_threadsafe(start)
    except RuntimeError:
        pass  # the loop closed: the daemon is going away


def touch_presence(session_id: str) -> None:
    """A health/status/inspect read of a live session: metadata only, never a transition."""
    if not live_facts(session_id).runtime:
        return
    now = utcnow()
    try:
        SessionHealth.objects.filter(session_id=session_id).exclude(state=HealthState.STOPPED).update(
            last_presence_at=now, updated_at=now)
    except DatabaseError as exc:
        # A read must answer even when the catalog cannot take a write (a full disk is when the operator reads
        # most): presence is a freshness hint, and the next read touches it again.
        logger.warning("presence of %s not recorded: %s", session_id, exc)


def sweep_stale(now: datetime | None = None) -> int:
    """Age idle sessions whose last activity and presence are older than `session_health_stale_after`."""

    now = now or utcnow()
    cfg = get_config().heartbeat
    changed = 0
    elsewhere: set[str] | None = None
    for row in SessionHealth.objects.filter(state=HealthState.IDLE, health=HealthValue.HEALTHY, active_prompt=False):
        if elsewhere is None:
            elsewhere = cluster.held_elsewhere(now)
        if row.session_id in elsewhere:
            continue  # another node runs it: without its runtime here, a derivation would read it detached
        since = _idle_since(row)
        if not is_stale(row.state, row.health, row.active_prompt, since, row.last_presence_at, now,
                        cfg.session_health_stale_after):
            continue
        rec = _record(row.session_id)
        if rec is None:
            continue
        # Re-derived from meta.json under the row lock, so a prompt that began since the read is never aged.
        updated = _upsert(rec, live_facts(row.session_id), now)
        if updated is not None and updated.health != row.health:
            changed += 1
            _ring_catalog(updated)
    return changed


def _ring_catalog(row: SessionHealth) -> None:
    """A session aged into `stale` changed no meta.json: ring the catalog doorbell so lists refetch."""

    try:
        ring_catalog_threadsafe("upserted", row.workspace_id, row.session_id)
    except Exception:
        logger.debug("catalog doorbell not rung for %s", row.session_id, exc_info=True)


def _idle_since(row: SessionHealth) -> datetime | None:
    if row.last_activity_at is not None:
        return row.last_activity_at
    session = Session.objects.filter(id=row.session_id).only("created_at", "last_activity_at").first()
    return session.created_at if session else None


def _record(session_id: str) -> SessionRecord | None:
    try:
        return SessionRecord.from_meta(load_meta(session_id))
    except (NotFound, Conflict, ValueError):
        # Gone, or unreadable (a field of the wrong type too): the caller judges from the row alone.
        return None


def boot_recompute(run: str) -> dict[str, int]:
    """Once per daemon start, after boot repair and before any wake consumer (docs/reference/health.md §3):
    1. recompute every stored row this node may judge from its meta.json and the runtime facts of this daemon:
       not a session another live node holds the lease of (its runtime is there: here it would read detached), nor
       one stored on another node's disk (no shared folder: its meta.json is not missing, only not here);
    2. a session whose meta.json is gone reads `detached` + `stale`;
    3. run the stale sweep; then record completion, which the wake service waits for."""

    counts = {"recomputed": 0, "missing_meta": 0, "stale": 0, "elsewhere": 0}
    with _recompute_lock:
        if run in _recomputed:
            return counts
        elsewhere, here = cluster.held_elsewhere(), cluster.node_id()
        for session in Session.objects.all().iterator():
            if session.id in elsewhere:
                counts["elsewhere"] += 1
                continue
            rec = _record(session.id)
            if rec is None and session.folder_node not in ("", here) and not session_dir(session.id).exists():
                counts["elsewhere"] += 1
                continue
            if rec is None:
                _mark_missing(session)
                counts["missing_meta"] += 1
                continue
            if _upsert(rec, live_facts(session.id)) is not None:
                counts["recomputed"] += 1
        counts["stale"] = sweep_stale()

        # A wake in flight when the last daemon died never finished: release its gate.
        WakeState.objects.filter(in_flight=True).update(in_flight=False)
        _recomputed[run] = isoformat(utcnow()) or ""
    logger.info("health recomputed at boot: %s", counts)
    return counts


def _mark_missing(session: Session) -> None:
    now = utcnow()
    eligible, reason = eligibility(HealthState.DETACHED, HealthValue.STALE, False, False)
    SessionHealth.objects.update_or_create(session_id=session.id, defaults={
        "workspace_id": session.workspace_id, "agent_name": session.agent_name, "state": HealthState.DETACHED,
        "health": HealthValue.STALE, "active_prompt": False, "attachable": False, "eligible_for_wake": eligible,
        "ineligibility_reason": reason, "last_error": "session metadata missing", "updated_at": now})


def recomputed_at(run: str) -> str | None:
    """When this daemon start's boot recompute finished (None: not yet; wakes must wait)."""
    return _recomputed.get(run)


def current_run() -> str:
    record = read_daemon_record() or {}
    return str(record.get("started_at") or "")


# ---- reading -----------------------------------------------------------------------------------------

def health_row(session_id: str, workspace_ref: str | None = None, *, touch: bool = True) -> SessionHealth:
    """The stored row of a session (the session must exist, and belong to `workspace_ref` when given). A
    session with no row yet gets one derived now, so health is always present."""

    meta = services.scoped_meta(session_id, workspace_ref, row_ok=True)
    try:
        rec = SessionRecord.from_meta(meta)
    except ValueError as exc:  # read_meta checked its keys and state; a field of the wrong type is found here
        raise Conflict(f"session metadata is unreadable: {exc}", code="session_meta_invalid") from exc
    if touch:
        touch_presence(session_id)
    row = SessionHealth.objects.filter(session_id=session_id).first()
    if row is None:
        live = live_facts(session_id)
        try:
            row = _upsert(rec, live)
        except DatabaseError as exc:
            # As for presence: a read must answer when the catalog cannot take a write (a full disk). The health
            # is derived all the same; the next metadata save or the boot recompute stores it.
            logger.warning("health of %s derived but not stored: %s", session_id, exc)
            row = _derived(rec, live)
    if row is None:
        raise Unavailable("session health is unavailable", code="health_unavailable")
    return row


def present_row(session_id: str) -> SessionHealth | None:
    """The health row of a session as every health surface reads it: stored, or derived now from its metadata when
    none is stored yet (the row follows each metadata save, after meta.json: a read between the two, or a derivation
    that failed, finds none). None when no session has that id. What the wake service decides by (issue 50: a wake
    right after a create answered `session_not_found` for a session every other surface showed)."""
    row = SessionHealth.objects.filter(session_id=session_id).first()
    if row is not None:
        return row
    try:
        return health_row(session_id, touch=False)
    except NotFound:
        return None


def _derived(rec: SessionRecord, live: LiveFacts) -> SessionHealth:
    """The row `_upsert` would store, unsaved."""
    now = utcnow()
    fields = derive(rec, live, presence=None, now=now, stale_after=get_config().heartbeat.session_health_stale_after)
    return SessionHealth(session_id=rec.id, workspace_id=rec.workspace_id, agent_name=rec.agent_name,
                         updated_at=now, **fields)


def health_dto(session_id: str, workspace_ref: str | None = None) -> HealthAnswer:
    return {"health": row_dict(health_row(session_id, workspace_ref))}


def decorate_list(result: SessionList) -> SessionList:
    """`GET /api/sessions?include_health=true`: each payload gains `health` (one query, no presence touch)."""
    ids = [s["id"] for s in result["sessions"]]
    sweep_stale()  # the list is where an operator looks for stale sessions: age them before answering
    rows = {r.session_id: r for r in SessionHealth.objects.filter(session_id__in=ids)}
    for payload in result["sessions"]:
        row = rows.get(payload["id"])
        payload["health"] = row_dict(row) if row is not None else None
    return result
