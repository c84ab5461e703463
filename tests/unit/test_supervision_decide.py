"""What the supervision sweep proposes (`sessions/supervision.decide`, docs/reference/sessions.md §7) from meta.json's
durable
activity and a given `now`, branch by branch: the wall-clock limit, progress notes, the inactivity warning and
timeout, and the sessions nothing is proposed for; how often the sweep runs (`sweep_interval`); and the fence the
owner carries a decision out behind (`refusal`): what a stale read decided is refused, and nothing is decided twice.
Supervised silence's proposals (`quiet`, `silence_stop`) are tests/unit/test_supervised_silence.py's. The daemon tests
keep the wiring: the runtime carrying out a fenced decision (tests/integration/test_stop_reasons.py, test_sweeps.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.django_env import ensure_django

ensure_django()

from compozy_base.config.loader import Config, SupervisionConfig  # noqa: E402
from sessions.runtime.supervision import (  # noqa: E402
    MAX_TICK_SECONDS,
    MIN_TICK_SECONDS,
    Action,
    Fence,
    Live,
    decide,
    refusal,
    sweep_interval,
)
from sessions.store.folder import isoformat  # noqa: E402

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
    assert decide(meta(idle=1, turn_age=PROGRESS - 1), NOW, CONFIG).actions == []


def test_an_idle_session_without_a_turn_gets_nothing_however_long_it_was_quiet() -> None:
    assert decide(meta(idle=TIMEOUT * 10, turn_age=TIMEOUT * 10, prompt_active=False), NOW, CONFIG).actions == []
    no_activity = {"id": "sess_00000000000000a1", "state": "active", "activated_at": ago(60), "liveness": {}}
    assert decide(no_activity, NOW, CONFIG).actions == []


def test_a_turn_without_its_start_time_gets_nothing() -> None:
    # Without turn_started_at neither idleness nor progress can be measured (a meta.json a crash cut short).
    assert decide(meta(idle=TIMEOUT * 10, turn_age=None), NOW, CONFIG).actions == []
    assert decide(meta(idle=None, turn_age=None), NOW, CONFIG).actions == []


def test_the_wall_clock_limit_is_proposed_alone_from_activation_whatever_the_turn() -> None:
    assert decide(meta(active_for=LIMIT - 1), NOW, CONFIG).actions == []
    assert decide(meta(active_for=LIMIT), NOW, CONFIG).actions == ["wall_clock"]
    # Alone: an idle, timed-out turn adds nothing to it, and no turn at all still stops the session.
    assert decide(meta(active_for=LIMIT, idle=TIMEOUT, turn_age=TIMEOUT), NOW, CONFIG).actions == ["wall_clock"]
    assert decide(meta(active_for=LIMIT, prompt_active=False), NOW, CONFIG).actions == ["wall_clock"]


def test_no_wall_clock_limit_when_it_is_off_or_the_session_never_activated() -> None:
    assert decide(meta(active_for=LIMIT * 100), NOW, replace(CONFIG, limits_timeout=0)).actions == []
    never = meta()
    del never["activated_at"]
    assert decide(never, NOW, CONFIG).actions == []


def test_progress_is_due_every_interval_from_the_turn_start_then_from_the_last_note() -> None:
    assert decide(meta(turn_age=PROGRESS - 1), NOW, CONFIG).actions == []
    assert decide(meta(turn_age=PROGRESS), NOW, CONFIG).actions == ["progress"]
    # A note written 10 s ago holds the next one off, however old the turn.
    assert decide(meta(turn_age=PROGRESS * 10, progress_age=10), NOW, CONFIG).actions == []
    assert decide(meta(turn_age=PROGRESS * 10, progress_age=PROGRESS), NOW, CONFIG).actions == ["progress"]
    # Progress is about elapsed time, not silence: a busy turn gets it too.
    assert decide(meta(idle=0, turn_age=PROGRESS), NOW, CONFIG).actions == ["progress"]
    assert decide(meta(turn_age=PROGRESS * 10), NOW, with_sup(progress_notify_interval=0)).actions == []


def test_the_warning_and_the_timeout_follow_the_last_activity() -> None:
    young = PROGRESS - 1  # a turn too young for a progress note, so only idleness speaks
    config = with_sup(progress_notify_interval=0)
    assert decide(meta(idle=WARN - 1, turn_age=young), NOW, config).actions == []
    assert decide(meta(idle=WARN, turn_age=WARN), NOW, config).actions == ["warning"]
    assert decide(meta(idle=TIMEOUT - 1, turn_age=TIMEOUT), NOW, config).actions == ["warning"]
    assert decide(meta(idle=TIMEOUT, turn_age=TIMEOUT), NOW, config).actions == ["warning", "timeout"]


def test_a_turn_with_no_activity_yet_is_idle_from_its_start() -> None:
    config = with_sup(progress_notify_interval=0)
    assert decide(meta(idle=None, turn_age=WARN - 1), NOW, config).actions == []
    assert decide(meta(idle=None, turn_age=TIMEOUT), NOW, config).actions == ["warning", "timeout"]


def test_a_zero_warning_or_timeout_turns_that_action_off() -> None:
    idle = meta(idle=TIMEOUT * 10, turn_age=TIMEOUT * 10)
    assert decide(idle, NOW, with_sup(progress_notify_interval=0, inactivity_warning_after=0)).actions == ["timeout"]
    assert decide(idle, NOW, with_sup(progress_notify_interval=0, inactivity_timeout=0)).actions == ["warning"]


def test_every_due_action_is_proposed_together() -> None:
    assert decide(meta(idle=TIMEOUT, turn_age=TIMEOUT), NOW, CONFIG).actions == ["progress", "warning", "timeout"]


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


# ---- the fence the owner carries a decision out behind -------------------------------------------

FENCE = Fence(activated_at=ago(60), turn_id="turn_00000000000000a1", generation=2, activity_at=ago(TIMEOUT),
              progress_at=ago(PROGRESS))
IDLE_ACTIONS = (Action.WARNING, Action.TIMEOUT, Action.QUIET, Action.SILENCE_STOP)


def live(done: frozenset[Action] = frozenset({Action.QUIET}), active: bool = True, **moved: Any) -> Live:
    return Live(active=active, fence=replace(FENCE, **moved), done=done)


def test_the_decision_carries_the_stamps_it_was_made_from() -> None:
    m = meta(idle=TIMEOUT, turn_age=TIMEOUT, progress_age=PROGRESS, input_generation=2)
    decision = decide(m, NOW, CONFIG)
    activity = m["liveness"]["activity"]
    assert decision.fence == Fence(activated_at=m["activated_at"], turn_id=activity["turn_id"], generation=2,
                                   activity_at=activity["last_activity_at"], progress_at=activity["last_progress_at"])
    assert (decision.idle, decision.elapsed) == (TIMEOUT, TIMEOUT)


def test_a_decision_whose_fence_holds_is_carried_out_as_decided() -> None:
    for action in Action:
        # The one fact of the turn that counts: a silence stop follows this turn's quiet note (carried out first).
        done = frozenset({Action.QUIET}) if action == Action.SILENCE_STOP else frozenset()
        assert refusal(action, FENCE, live(done=done)) is None, action


def test_a_work_signal_since_the_read_makes_the_idle_actions_stale_but_not_the_progress_note() -> None:
    # meta.json said idle for the timeout; the live turn heard from the agent since: nothing idle is carried out.
    worked = live(activity_at=ago(1))
    for action in IDLE_ACTIONS:
        assert refusal(action, FENCE, worked) == "stale", action
    assert refusal(Action.PROGRESS, FENCE, worked) is None  # progress is about elapsed time, not silence
    assert refusal(Action.WALL_CLOCK, FENCE, worked) is None


def test_another_turn_or_input_generation_makes_a_turn_decision_stale() -> None:
    for moved in ({"turn_id": "turn_00000000000000b2"}, {"turn_id": None}, {"generation": 3}):
        for action in (Action.PROGRESS, *IDLE_ACTIONS):
            assert refusal(action, FENCE, live(**moved)) == "stale", (moved, action)
        assert refusal(Action.WALL_CLOCK, FENCE, live(**moved)) is None  # the wall clock is the session's


def test_another_activation_or_a_session_no_longer_active_refuses_everything() -> None:
    for stale in (live(activated_at=ago(1)), live(active=False)):
        for action in Action:
            assert refusal(action, FENCE, stale) == "stale", action


def test_the_warning_the_timeout_and_the_quiet_note_are_carried_out_once_per_turn() -> None:
    for action in (Action.WARNING, Action.TIMEOUT, Action.QUIET):
        assert refusal(action, FENCE, live(done=frozenset())) is None, action
        assert refusal(action, FENCE, live(done=frozenset({action}))) == "skipped", action


def test_a_progress_note_written_since_the_read_is_not_written_twice() -> None:
    assert refusal(Action.PROGRESS, FENCE, live(progress_at=ago(1))) == "skipped"


def test_the_silence_stop_comes_only_after_this_turns_quiet_note() -> None:
    assert refusal(Action.SILENCE_STOP, FENCE, live(done=frozenset())) == "skipped"
    assert refusal(Action.SILENCE_STOP, FENCE, live(done=frozenset({Action.QUIET}))) is None


def test_decide_proposes_the_quiet_note_before_the_silence_stop_in_one_decision() -> None:
    silent = with_sup(progress_notify_interval=0, inactivity_warning_after=0, inactivity_timeout=0, quiet_after=QUIET,
                      stop_grace=GRACE)
    assert decide(meta(idle=QUIET + GRACE, turn_age=QUIET + GRACE), NOW, silent).actions == ["quiet", "silence_stop"]


QUIET, GRACE = 50.0, 20.0
