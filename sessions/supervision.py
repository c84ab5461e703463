"""Runtime activity supervision (sessions reference §7): inactivity, not elapsed time, is the failure mode.

The huey sweep reads durable activity (meta.json `liveness.activity`) and proposes actions; the runtime
that owns the session verifies each one against its live state before acting, so a stale read can
never time out a working agent.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from sessions.config import Config
from sessions.store import folder

logger = logging.getLogger(__name__)

# huey's scheduler has one-second granularity; ticks below that would only repeat work.
MIN_TICK_SECONDS = 1.0
MAX_TICK_SECONDS = 5.0


def sweep_interval(config: Config) -> float:
    sup = config.supervision
    candidates = [sup.activity_heartbeat_interval]
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


def sweep() -> dict[str, int]:
    """One pass over this daemon's live sessions. Runs in a huey worker thread."""
    from sessions.runtime.manager import get_manager

    manager = get_manager()
    if manager.loop is None or manager.draining:
        return {"sessions": 0, "proposed": 0}
    now = folder.utcnow()
    proposed = 0
    ids = list(manager.runtimes)
    live: dict[str, dict[str, Any]] = {}  # read once here, reused by the reaping check below
    for session_id in ids:
        try:
            meta = folder.read_meta(session_id)
        except ValueError:
            continue
        if not meta:
            continue
        live[session_id] = meta
        if meta.get("state") != "active":
            continue
        turn_id = ((meta.get("liveness") or {}).get("activity") or {}).get("turn_id")
        for action in decide(meta, now, manager.config):
            proposed += 1
            future = asyncio.run_coroutine_threadsafe(manager.supervise(session_id, action, turn_id), manager.loop)
            try:
                outcome = future.result(timeout=manager.config.supervision.timeout_cancel_grace + 30)
            except Exception:
                logger.exception("supervision action %s failed for %s", action, session_id)
                continue
            if outcome not in ("skipped", "stale"):
                logger.info("supervision %s on %s: %s", action, session_id, outcome)
    from sessions.services import reap_candidates

    reaped = 0
    for session_id, reason in reap_candidates(live):
        future = asyncio.run_coroutine_threadsafe(manager.reap(session_id, reason), manager.loop)
        try:
            future.result(timeout=60)
            reaped += 1
            logger.info("reaped %s: %s", session_id, reason)
        except Exception:
            logger.exception("reaping %s failed", session_id)
    return {"sessions": len(ids), "proposed": proposed, "reaped": reaped}
