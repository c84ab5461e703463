"""Runtime activity supervision (docs/reference/sessions.md §7): inactivity, not elapsed time, is the failure mode.

Supervision decides once, here. The huey sweep (`sessions/jobs.py`) reads durable activity (meta.json
`liveness.activity`), `decide()`s by the thresholds below and hands the decision to the SessionManager's loop, then
returns. The runtime that owns the session carries the decision out behind its `Fence` (the activation, turn, input
generation and activity stamps it was decided from) and refuses it when any of them moved on (`refusal()`): a stale
read can never time out a working agent, and no threshold is looked at a second time.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TypedDict

from django.dispatch import Signal

from compozy_base import process
from compozy_base.config.loader import Config
from sessions.core.record import ActivityDoc, SessionMeta
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
# or a silent agent could never be stopped. `agent_waiting` is a permission or an elicitation waiting on a person.
WORK_SIGNAL_KINDS = frozenset({
    "agent_message_chunk", "agent_thought_chunk", "user_message_chunk", "tool_call", "tool_call_update", "plan",
    "available_commands_update", "current_mode_update", "config_option_update", "session_info_update",
    "usage_update", "fs", "permission", "agent_waiting", "elicitation",
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


def silence_blocker(activity: ActivityDoc, *, permission_waiting: bool = False) -> str | None:
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


class Action(StrEnum):
    PROGRESS = "progress"
    WARNING = "warning"
    TIMEOUT = "timeout"
    WALL_CLOCK = "wall_clock"
    QUIET = "quiet"
    SILENCE_STOP = "silence_stop"


# Carried out once per turn whatever the number of sweeps that decide them (the progress note is fenced on its own
# stamp instead): the sweep keeps deciding them while the silence lasts, the owner keeps the first.
ONCE_PER_TURN = frozenset({Action.WARNING, Action.TIMEOUT, Action.QUIET})


@dataclass(frozen=True)
class Fence:
    """What a decision was made for, as read from one meta.json: the owner carries it out only while this still
    holds. Stamps are meta.json's own strings, so an equal stamp means nothing happened since the read."""

    activated_at: str | None = None  # the session's activation (a reactivated session has a new one)
    turn_id: str | None = None
    generation: int = 0  # the input generation: an interrupt advances it
    activity_at: str | None = None  # the last work signal idleness was measured from
    progress_at: str | None = None  # the last progress note


@dataclass(frozen=True)
class Decision:
    """The sweep's decision for one session: the actions, in the order they are carried out, and their fence."""

    actions: list[Action] = field(default_factory=list)
    fence: Fence = field(default_factory=Fence)
    idle: float = 0.0  # seconds since the last work signal, at the sweep's `now`
    elapsed: float = 0.0  # seconds since the turn started
    blocker: str | None = None  # silence_blocker() of the activity read, reported with the quiet note


def decide(meta: SessionMeta, now: datetime, config: Config) -> Decision:
    """The one decision for one session: `progress`, `warning`, `timeout`, `wall_clock`, and for supervised silence
    `quiet` (after `quiet_after`) and `silence_stop` (after `stop_grace` more, carried out after the quiet note). A
    session bound to a task run is left to the silence path rather than the inactivity timeout: its verified stop is
    what recovery needs, and a cooperative cancel would end the run as if the agent had finished."""
    sup = config.supervision
    activity = (meta.get("liveness") or {}).get("activity") or {}
    fence = Fence(activated_at=meta.get("activated_at"), turn_id=activity.get("turn_id"),
                  generation=int(meta.get("input_generation") or 0), activity_at=activity.get("last_activity_at"),
                  progress_at=activity.get("last_progress_at"))
    activated = folder.parse_time(meta.get("activated_at"))
    if config.limits_timeout > 0 and activated and (now - activated).total_seconds() >= config.limits_timeout:
        return Decision([Action.WALL_CLOCK], fence)
    if not activity.get("prompt_active"):
        return Decision(fence=fence)
    last = folder.parse_time(activity.get("last_activity_at")) or folder.parse_time(activity.get("turn_started_at"))
    started = folder.parse_time(activity.get("turn_started_at"))
    if last is None or started is None:
        return Decision(fence=fence)
    idle = (now - last).total_seconds()
    actions: list[Action] = []
    progress_ref = folder.parse_time(activity.get("last_progress_at")) or started
    if sup.progress_notify_interval > 0 and (now - progress_ref).total_seconds() >= sup.progress_notify_interval:
        actions.append(Action.PROGRESS)
    if sup.inactivity_warning_after > 0 and idle >= sup.inactivity_warning_after:
        actions.append(Action.WARNING)
    if sup.inactivity_timeout > 0 and idle >= sup.inactivity_timeout and not meta.get("run_id"):
        actions.append(Action.TIMEOUT)
    blocker = silence_blocker(activity)
    if sup.quiet_after > 0 and idle >= sup.quiet_after:
        if blocker is None or blocker == "unknown_source":
            actions.append(Action.QUIET)
        if blocker is None and sup.stop_grace > 0 and idle >= sup.quiet_after + sup.stop_grace:
            actions.append(Action.SILENCE_STOP)
    return Decision(actions, fence, idle=idle, elapsed=(now - started).total_seconds(), blocker=blocker)


@dataclass(frozen=True)
class Live:
    """The owner's side of the fence when a decision reaches it: the same stamps, as the runtime holds them now."""

    active: bool  # state `active` and no stop under way
    fence: Fence
    done: frozenset[Action] = frozenset()  # ONCE_PER_TURN actions already carried out for this turn


def refusal(action: Action, decided: Fence, live: Live) -> str | None:
    """Why the owner must not carry out `action` decided behind `decided`: `stale` when what it was decided for
    moved on (another activation, turn or input generation, or a work signal since the read), so the rest of the
    decision is dropped too; `skipped` when it was carried out already (for this turn, or a progress note since the
    read), or the quiet note that must come before a silence stop was not. None: carry it out. No threshold is
    looked at here."""
    now = live.fence
    if not live.active or now.activated_at != decided.activated_at:
        return "stale"
    if action == Action.WALL_CLOCK:
        return None
    if now.turn_id != decided.turn_id or now.generation != decided.generation:
        return "stale"
    if action == Action.PROGRESS:
        return None if now.progress_at == decided.progress_at else "skipped"
    if now.activity_at != decided.activity_at:
        return "stale"
    if action in live.done or (action == Action.SILENCE_STOP and Action.QUIET not in live.done):
        return "skipped"
    return None


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


class GroupVerification(TypedDict, total=False):
    """Whether an agent's process group is gone (a silence stop's evidence, meta.json `supervision.silence_stop`,
    and the task runner's recovery): a TypedDict, written into meta.json and events as is."""

    pgid: int | None
    verified: bool
    killpg_probe: str
    survivors: list[int]
    zombies: list[int]
    escalated: bool
    checked_at: str | None
    note: str  # why no group was checked (never started, the pid now another process's)
    idle_seconds: float  # a silence stop's: how long the turn gave no work evidence


def verify_group_gone(pgid: int, wait: float = VERIFY_SECONDS) -> GroupVerification:
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


def verify_orphan_group(pgid: int | None, started: int | None) -> GroupVerification:
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
