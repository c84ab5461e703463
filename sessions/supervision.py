"""Runtime activity supervision (sessions reference §7): inactivity, not elapsed time, is the failure mode.

The huey sweep reads durable activity (meta.json `liveness.activity`) and proposes actions; it hands them to
the SessionManager's loop and returns. The runtime that owns the session verifies each one against its live
state before acting, so a stale read can never time out a working agent.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sessions.config import Config
from sessions.store import folder

if TYPE_CHECKING:
    from sessions.runtime.manager import SessionManager

logger = logging.getLogger(__name__)

# The daemon's ticker thread sends the sweep (not huey's scheduler, which has 1 s granularity). Half a
# heartbeat keeps every action within one heartbeat of its configured time even when the tick's message is
# lost to another consumer; below a quarter second the sweep would only repeat the heartbeat's own write.
MIN_TICK_SECONDS = 0.25
MAX_TICK_SECONDS = 5.0


def sweep_interval(config: Config) -> float:
    sup = config.supervision
    candidates = [sup.activity_heartbeat_interval / 2]
    for value in (sup.progress_notify_interval, sup.inactivity_warning_after, sup.inactivity_timeout,
                  config.limits_timeout):
        if value > 0:
            candidates.append(value / 4)
    return max(MIN_TICK_SECONDS, min(MAX_TICK_SECONDS, *candidates))


def decide(meta: dict[str, Any], now: datetime, config: Config) -> list[str]:
    """Actions worth proposing for one session: `progress`, `warning`, `timeout`, `wall_clock`."""
    actions: list[str] = []
    sup = config.supervision
    activated = folder.parse_time(meta.get("activated_at"))
    if config.limits_timeout > 0 and activated and (now - activated).total_seconds() >= config.limits_timeout:
        return ["wall_clock"]
    activity = (meta.get("liveness") or {}).get("activity") or {}
    if not activity.get("prompt_active"):
        return actions
    last = folder.parse_time(activity.get("last_activity_at")) or folder.parse_time(activity.get("turn_started_at"))
    started = folder.parse_time(activity.get("turn_started_at"))
    if last is None or started is None:
        return actions
    idle = (now - last).total_seconds()
    progress_ref = folder.parse_time(activity.get("last_progress_at")) or started
    if sup.progress_notify_interval > 0 and (now - progress_ref).total_seconds() >= sup.progress_notify_interval:
        actions.append("progress")
    if sup.inactivity_warning_after > 0 and idle >= sup.inactivity_warning_after:
        actions.append("warning")
    if sup.inactivity_timeout > 0 and idle >= sup.inactivity_timeout:
        actions.append("timeout")
    return actions


def sweep(manager: SessionManager) -> dict[str, int]:
    """One pass over this daemon's live sessions, on a huey worker thread. It never waits on a runtime: each
    session's actions are handed to its owner on the daemon loop, so one stubborn session (a cancel it ignores,
    a long grace) cannot delay another's warning. Each session is judged on its own: a bad meta.json is skipped."""
    from sessions.services import reap_candidates

    now = folder.utcnow()
    handed = 0
    ids = list(manager.runtimes)
    live: dict[str, dict[str, Any]] = {}  # read once here, reused by the reaping check below
    for session_id in ids:
        try:
            meta = folder.read_meta(session_id)
            if not meta:
                continue
            live[session_id] = meta
            if meta["state"] != "active":
                continue
            actions = decide(meta, now, manager.config)
            if actions:
                turn_id = ((meta.get("liveness") or {}).get("activity") or {}).get("turn_id")
                handed += manager.hand_off_supervision(session_id, actions, turn_id)
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
