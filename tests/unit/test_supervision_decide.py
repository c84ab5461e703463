"""What the supervision sweep proposes (`sessions/supervision.decide`, sessions reference §7) from meta.json's durable
activity and a given `now`, branch by branch: the wall-clock limit, progress notes, the inactivity warning and
timeout, and the sessions nothing is proposed for; how often the sweep runs (`sweep_interval`); and the owner's
check of each proposal against its live turn (`confirmed`), which drops what a stale read proposed. Supervised
silence's proposals (`quiet`, `silence_stop`) are tests/unit/test_supervised_silence.py's. The daemon tests keep the
wiring: the runtime acting on a confirmed proposal (tests/integration/test_stop_reasons.py, test_sweeps.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.django_env import ensure_django

ensure_django()

from sessions.config import Config, SupervisionConfig  # noqa: E402
from sessions.store.folder import isoformat  # noqa: E402
from sessions.supervision import (  # noqa: E402
    MAX_TICK_SECONDS,
    MIN_TICK_SECONDS,
    LiveTurn,
    confirmed,
    decide,
    sweep_interval,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WARN, TIMEOUT, PROGRESS, LIMIT = 60.0, 120.0, 30.0, 3600.0
# Silence off here: its actions would join every list below.
SUP = replace(SupervisionConfig(), progress_notify_interval=PROGRESS, inactivity_warning_after=WARN,
              inactivity_timeout=TIMEOUT, quiet_after=0, stop_grace=0)
CONFIG = Config(supervision=SUP, limits_timeout=LIMIT)


def ago(seconds: float) -> str:
    return isoformat(NOW - timedelta(seconds=seconds))


def meta(*, idle: float | None = 0.0, turn_age: float | None = 10.0, progress_age: float | None = None,
         active_for: float = 60.0, prompt_active: bool = True, **extra: Any) -> dict[str, Any]:
    activity: dict[str, Any] = {"prompt_active": prompt_active, "turn_id": "turn_00000000000000a1",
                                "last_activity_kind": "agent_message_chunk"}
    if idle is not None:
        activity["last_activity_at"] = ago(idle)
    if turn_age is not None:
        activity["turn_started_at"] = ago(turn_age)
    if progress_age is not None:
        activity["last_progress_at"] = ago(progress_age)
    return {"id": "sess_00000000000000a1", "state": "active", "activated_at": ago(active_for),
            "liveness": {"activity": activity}, **extra}


def with_sup(**fields: float) -> Config:
    return replace(CONFIG, supervision=replace(SUP, **fields))


def test_a_working_turn_gets_nothing() -> None:
    assert decide(meta(idle=1, turn_age=PROGRESS - 1), NOW, CONFIG) == []


def test_an_idle_session_without_a_turn_gets_nothing_however_long_it_was_quiet() -> None:
    assert decide(meta(idle=TIMEOUT * 10, turn_age=TIMEOUT * 10, prompt_active=False), NOW, CONFIG) == []
    no_activity = {"id": "sess_00000000000000a1", "state": "active", "activated_at": ago(60), "liveness": {}}
    assert decide(no_activity, NOW, CONFIG) == []


def test_a_turn_without_its_start_time_gets_nothing() -> None:
    # Without turn_started_at neither idleness nor progress can be measured (a meta.json a crash cut short).
    assert decide(meta(idle=TIMEOUT * 10, turn_age=None), NOW, CONFIG) == []
    assert decide(meta(idle=None, turn_age=None), NOW, CONFIG) == []


def test_the_wall_clock_limit_is_proposed_alone_from_activation_whatever_the_turn() -> None:
    assert decide(meta(active_for=LIMIT - 1), NOW, CONFIG) == []
    assert decide(meta(active_for=LIMIT), NOW, CONFIG) == ["wall_clock"]
    # Alone: an idle, timed-out turn adds nothing to it, and no turn at all still stops the session.
    assert decide(meta(active_for=LIMIT, idle=TIMEOUT, turn_age=TIMEOUT), NOW, CONFIG) == ["wall_clock"]
    assert decide(meta(active_for=LIMIT, prompt_active=False), NOW, CONFIG) == ["wall_clock"]


def test_no_wall_clock_limit_when_it_is_off_or_the_session_never_activated() -> None:
    assert decide(meta(active_for=LIMIT * 100), NOW, replace(CONFIG, limits_timeout=0)) == []
    never = meta()
    del never["activated_at"]
    assert decide(never, NOW, CONFIG) == []


def test_progress_is_due_every_interval_from_the_turn_start_then_from_the_last_note() -> None:
    assert decide(meta(turn_age=PROGRESS - 1), NOW, CONFIG) == []
    assert decide(meta(turn_age=PROGRESS), NOW, CONFIG) == ["progress"]
    # A note written 10 s ago holds the next one off, however old the turn.
    assert decide(meta(turn_age=PROGRESS * 10, progress_age=10), NOW, CONFIG) == []
    assert decide(meta(turn_age=PROGRESS * 10, progress_age=PROGRESS), NOW, CONFIG) == ["progress"]
    # Progress is about elapsed time, not silence: a busy turn gets it too.
    assert decide(meta(idle=0, turn_age=PROGRESS), NOW, CONFIG) == ["progress"]
    assert decide(meta(turn_age=PROGRESS * 10), NOW, with_sup(progress_notify_interval=0)) == []


def test_the_warning_and_the_timeout_follow_the_last_activity() -> None:
    young = PROGRESS - 1  # a turn too young for a progress note, so only idleness speaks
    config = with_sup(progress_notify_interval=0)
    assert decide(meta(idle=WARN - 1, turn_age=young), NOW, config) == []
    assert decide(meta(idle=WARN, turn_age=WARN), NOW, config) == ["warning"]
    assert decide(meta(idle=TIMEOUT - 1, turn_age=TIMEOUT), NOW, config) == ["warning"]
    assert decide(meta(idle=TIMEOUT, turn_age=TIMEOUT), NOW, config) == ["warning", "timeout"]


def test_a_turn_with_no_activity_yet_is_idle_from_its_start() -> None:
    config = with_sup(progress_notify_interval=0)
    assert decide(meta(idle=None, turn_age=WARN - 1), NOW, config) == []
    assert decide(meta(idle=None, turn_age=TIMEOUT), NOW, config) == ["warning", "timeout"]


def test_a_zero_warning_or_timeout_turns_that_action_off() -> None:
    idle = meta(idle=TIMEOUT * 10, turn_age=TIMEOUT * 10)
    assert decide(idle, NOW, with_sup(progress_notify_interval=0, inactivity_warning_after=0)) == ["timeout"]
    assert decide(idle, NOW, with_sup(progress_notify_interval=0, inactivity_timeout=0)) == ["warning"]


def test_every_due_action_is_proposed_together() -> None:
    assert decide(meta(idle=TIMEOUT, turn_age=TIMEOUT), NOW, CONFIG) == ["progress", "warning", "timeout"]


@pytest.mark.parametrize(("sup", "limit", "expected"), [
    # Half a heartbeat, or a quarter of the shortest supervision time, whichever is shorter...
    (SupervisionConfig(), 0.0, 5.0),
    (replace(SupervisionConfig(), activity_heartbeat_interval=2.0), 0.0, 1.0),
    (replace(SupervisionConfig(), activity_heartbeat_interval=30.0, inactivity_warning_after=8.0), 0.0, 2.0),
    (replace(SupervisionConfig(), activity_heartbeat_interval=30.0), 6.0, 1.5),
    (replace(SupervisionConfig(), activity_heartbeat_interval=30.0, quiet_after=4.0), 0.0, 1.0),
    # ...never below MIN_TICK_SECONDS nor above MAX_TICK_SECONDS; a zero (off) time is not a candidate.
    (replace(SupervisionConfig(), activity_heartbeat_interval=0.1, stop_grace=0.2), 0.0, MIN_TICK_SECONDS),
    (replace(SupervisionConfig(), activity_heartbeat_interval=3600.0, progress_notify_interval=0,
             inactivity_warning_after=0, inactivity_timeout=0, quiet_after=0, stop_grace=0), 0.0, MAX_TICK_SECONDS),
])
def test_the_sweep_runs_often_enough_for_the_shortest_supervision_time(sup: SupervisionConfig, limit: float,
                                                                        expected: float) -> None:
    assert sweep_interval(Config(supervision=sup, limits_timeout=limit)) == expected


# ---- the owner's check of a proposal -------------------------------------------------------------

QUIET, GRACE = 50.0, 20.0
SILENT = with_sup(quiet_after=QUIET, stop_grace=GRACE)


def test_progress_is_confirmed_a_little_early_but_not_twice_in_a_row() -> None:
    # 90% of the interval: a sweep tick that lands just short of the interval does not delay the note a whole tick.
    assert not confirmed("progress", LiveTurn(idle=0, since_progress=PROGRESS * 0.9 - 0.01), CONFIG)
    assert confirmed("progress", LiveTurn(idle=0, since_progress=PROGRESS * 0.9), CONFIG)
    assert not confirmed("progress", LiveTurn(idle=0, since_progress=PROGRESS * 10),
                         with_sup(progress_notify_interval=0))


def test_a_warning_or_timeout_proposed_from_a_stale_read_is_dropped_when_the_agent_worked_since() -> None:
    # meta.json said idle for the timeout; the live turn heard from the agent a second ago.
    for action, after in (("warning", WARN), ("timeout", TIMEOUT)):
        assert not confirmed(action, LiveTurn(idle=1, since_progress=0), CONFIG), action
        assert not confirmed(action, LiveTurn(idle=after - 0.01, since_progress=0), CONFIG), action
        assert confirmed(action, LiveTurn(idle=after, since_progress=0), CONFIG), action


def test_the_warning_and_the_timeout_act_once_per_turn_and_not_when_off() -> None:
    assert not confirmed("warning", LiveTurn(idle=WARN, since_progress=0, warned=True), CONFIG)
    assert not confirmed("timeout", LiveTurn(idle=TIMEOUT, since_progress=0, timed_out=True), CONFIG)
    assert not confirmed("warning", LiveTurn(idle=WARN * 10, since_progress=0), with_sup(inactivity_warning_after=0))
    assert not confirmed("timeout", LiveTurn(idle=TIMEOUT * 10, since_progress=0), with_sup(inactivity_timeout=0))


def test_the_quiet_note_needs_the_live_silence_and_comes_once_per_turn() -> None:
    assert not confirmed("quiet", LiveTurn(idle=QUIET - 0.01, since_progress=0), SILENT)
    assert confirmed("quiet", LiveTurn(idle=QUIET, since_progress=0), SILENT)
    assert not confirmed("quiet", LiveTurn(idle=QUIET, since_progress=0, quiet_noted=True), SILENT)
    # An unknown source may be work: it gets the note, not the stop. A tool or a person waiting gets neither.
    assert confirmed("quiet", LiveTurn(idle=QUIET, since_progress=0, blocker="unknown_source"), SILENT)
    for blocker in ("tool_in_flight", "permission_waiting"):
        assert not confirmed("quiet", LiveTurn(idle=QUIET * 10, since_progress=0, blocker=blocker), SILENT), blocker
    assert not confirmed("quiet", LiveTurn(idle=QUIET * 10, since_progress=0), with_sup(quiet_after=0))


def test_the_silence_stop_needs_the_quiet_note_the_whole_grace_nothing_vouching_and_an_agent() -> None:
    due = LiveTurn(idle=QUIET + GRACE, since_progress=0, quiet_noted=True)
    assert confirmed("silence_stop", due, SILENT)
    assert not confirmed("silence_stop", replace(due, idle=QUIET + GRACE - 0.01), SILENT)
    assert not confirmed("silence_stop", replace(due, quiet_noted=False), SILENT)  # the note comes first
    for blocker in ("unknown_source", "tool_in_flight", "permission_waiting"):
        assert not confirmed("silence_stop", replace(due, blocker=blocker), SILENT), blocker
    assert not confirmed("silence_stop", replace(due, has_agent=False), SILENT)
    assert not confirmed("silence_stop", replace(due, idle=QUIET * 100), with_sup(quiet_after=QUIET, stop_grace=0))


def test_an_action_the_rules_do_not_know_is_never_confirmed() -> None:
    assert not confirmed("reboot", LiveTurn(idle=10**6, since_progress=10**6), SILENT)
