"""Runtime activity supervision (sessions reference §7): inactivity, not elapsed time, is the failure mode.

The huey sweep (`sessions/jobs.py`) reads durable activity (meta.json `liveness.activity`), proposes actions by
the rules here and hands them to the SessionManager's loop, then returns. The runtime that owns the session
verifies each one against its live state before acting, so a stale read can never time out a working agent.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.dispatch import Signal

from compozy_base import process
from sessions.config import Config
from sessions.store import folder

logger = logging.getLogger(__name__)

# The daemon's ticker thread sends the sweep (not huey's scheduler, which has 1 s granularity). Half a
# heartbeat keeps every action within one heartbeat of its configured time even when the tick's message is
# lost to another consumer; below a quarter second the sweep would only repeat the heartbeat's own write.
MIN_TICK_SECONDS = 0.25
MAX_TICK_SECONDS = 5.0

# The stop detail of a supervised-silence stop (stop reason `timeout`): recovery keys on it.
SILENCE_DETAIL = "supervised_silence"
# How long a process-tree verification waits for the group to empty (SIGKILL'd members need a moment to die).
VERIFY_SECONDS = 5.0

# Sent (on the owner's DB thread) after a verified silence stop: session_id, meta, verification. The work app
# listens; a session without a task binding creates nothing.
verified_stop = Signal()

# What the agent does is work evidence; the turn's own start and our waiting on the prompt's response are not,
# or a silent agent could never be stopped. `agent_waiting` is a permission waiting on a person.
WORK_SIGNAL_KINDS = frozenset({
    "agent_message_chunk", "agent_thought_chunk", "user_message_chunk", "tool_call", "tool_call_update", "plan",
    "available_commands_update", "current_mode_update", "config_option_update", "session_info_update",
    "usage_update", "fs", "permission", "agent_waiting",
})
NON_WORK_KINDS = frozenset({"prompt_started"})


def sweep_interval(config: Config) -> float:
    sup = config.supervision
    candidates = [sup.activity_heartbeat_interval / 2]
    for value in (sup.progress_notify_interval, sup.inactivity_warning_after, sup.inactivity_timeout,
                  config.limits_timeout, sup.quiet_after, sup.stop_grace):
        if value > 0:
            candidates.append(value / 4)
    return max(MIN_TICK_SECONDS, min(MAX_TICK_SECONDS, *candidates))


def silence_blocker(activity: dict[str, Any], *, permission_waiting: bool = False) -> str | None:
    """Why a quiet turn must not be stopped: a tool call in flight, a permission waiting on a person, or a last
    signal from a source we cannot classify (it may be work). None: nothing vouches for the turn."""
    if permission_waiting or activity.get("last_activity_kind") == "agent_waiting":
        return "permission_waiting"
    if int(activity.get("tools_in_flight") or 0) > 0:
        return "tool_in_flight"
    kind = activity.get("last_activity_kind")
    if kind and kind not in WORK_SIGNAL_KINDS and kind not in NON_WORK_KINDS:
        return "unknown_source"
    return None


def decide(meta: dict[str, Any], now: datetime, config: Config) -> list[str]:
    """Actions worth proposing for one session: `progress`, `warning`, `timeout`, `wall_clock`, and for supervised
    silence `quiet` (after `quiet_after`) and `silence_stop` (after `stop_grace` more). A session bound to a task
    run is left to the silence path rather than the inactivity timeout: its verified stop is what recovery
    needs, and a cooperative cancel would end the run as if the agent had finished."""
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
    if sup.inactivity_timeout > 0 and idle >= sup.inactivity_timeout and not meta.get("run_id"):
        actions.append("timeout")
    if sup.quiet_after > 0 and idle >= sup.quiet_after:
        blocker = silence_blocker(activity)
        if blocker is None or blocker == "unknown_source":
            actions.append("quiet")
        if blocker is None and sup.stop_grace > 0 and idle >= sup.quiet_after + sup.stop_grace:
            actions.append("silence_stop")
    return actions


@dataclass(frozen=True)
class LiveTurn:
    """What the runtime that owns a turn knows of it when a proposal reaches it: live facts, not meta.json's
    (which lags by up to a heartbeat). Durations in seconds, on the monotonic clock."""

    idle: float  # since the last work signal
    since_progress: float  # since the last progress note, or the turn's start
    warned: bool = False  # this turn's inactivity warning was recorded
    timed_out: bool = False  # this turn's inactivity timeout already acted
    quiet_noted: bool = False  # this turn's quiet_after warning was recorded
    blocker: str | None = None  # silence_blocker() of the live activity
    has_agent: bool = True


def confirmed(action: str, turn: LiveTurn, config: Config) -> bool:
    """The owner's check of a proposal from `decide()` against its live turn: a proposal made from a stale read is
    dropped here, so it can never warn about, or stop, an agent that has worked since. Once per turn for the
    warning, the timeout and the quiet note; the silence stop only after this turn's quiet note."""
    sup = config.supervision
    if action == "progress":
        return sup.progress_notify_interval > 0 and turn.since_progress >= sup.progress_notify_interval * 0.9
    if action == "warning":
        return not turn.warned and sup.inactivity_warning_after > 0 and turn.idle >= sup.inactivity_warning_after
    if action == "timeout":
        return not turn.timed_out and sup.inactivity_timeout > 0 and turn.idle >= sup.inactivity_timeout
    if action not in ("quiet", "silence_stop"):
        return False
    if sup.quiet_after <= 0 or turn.idle < sup.quiet_after or turn.blocker not in (None, "unknown_source"):
        return False
    if action == "quiet":
        return not turn.quiet_noted
    return (turn.blocker is None and sup.stop_grace > 0 and turn.idle >= sup.quiet_after + sup.stop_grace
            and turn.quiet_noted and turn.has_agent)


# ---- the verified process-tree stop -------------------------------------------------------------

def group_members(pgid: int) -> tuple[list[int], list[int]]:
    """(live, zombie) pids whose process group is `pgid`, from a /proc scan. Zombies are dead: they wait for a
    parent (PID 1 for orphans, which may never reap in a container) and can do nothing."""
    live, zombies = list[int](), list[int]()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = process.stat_fields(int(entry.name))
        if fields and int(fields[2]) == pgid:
            (zombies if fields[0] in ("Z", "X") else live).append(int(entry.name))
    return sorted(live), sorted(zombies)


def _probe(pgid: int) -> str:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return "ProcessLookupError"
    except PermissionError:
        return "PermissionError"
    return "exists"


def verify_group_gone(pgid: int, wait: float = VERIFY_SECONDS) -> dict[str, Any]:
    """Check that every process of the agent's group is gone: `killpg(pgid, 0)` must raise ProcessLookupError
    (or find only zombies) and a /proc scan must find no live member. Survivors get SIGKILL, and are checked
    again until `wait` runs out. Blocking: run it in a thread."""
    deadline = time.monotonic() + wait
    escalated = False
    while True:
        probe = _probe(pgid)
        live, zombies = group_members(pgid)
        if probe == "ProcessLookupError" or not live:
            break
        if time.monotonic() >= deadline:
            break
        if not escalated:
            escalated = True
            logger.warning("process group %d outlived the stop (%s); sending SIGKILL", pgid, live)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    return {"pgid": pgid, "verified": not live, "killpg_probe": probe, "survivors": live, "zombies": zombies,
            "escalated": escalated, "checked_at": folder.isoformat(folder.utcnow())}


def verify_orphan_group(pgid: int | None, started: int | None) -> dict[str, Any]:
    """The same check for an agent whose daemon died: its group may have lived on, orphaned. A leader pid now
    held by a different process (another start time) means our group is long gone: the kernel keeps a pgid
    from reuse while any member lives. Otherwise what remains of the group is killed and verified gone."""
    if pgid is None:
        return {"pgid": None, "verified": True, "note": "no agent process was started"}
    leader_start = process.start_ticks(pgid)
    if leader_start is not None and started is not None and leader_start != started:
        return {"pgid": pgid, "verified": True, "note": "the pid now belongs to another process",
                "checked_at": folder.isoformat(folder.utcnow())}
    live, _ = group_members(pgid)
    if live:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return verify_group_gone(pgid)
