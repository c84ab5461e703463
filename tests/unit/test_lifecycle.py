"""The state machine and the stop classification rules (docs/reference/sessions.md §4, §10, §11)."""

from __future__ import annotations

import signal

import pytest

from sessions.core.enums import Badge, FailureKind, SessionState, StopReason
from sessions.core.lifecycle import (
    IllegalTransition,
    badge,
    check_transition,
    classify_unexpected_exit,
    failure_object,
    user_stop_reason,
)


@pytest.mark.parametrize(("current", "target"), [
    ("starting", "active"), ("starting", "stopping"), ("starting", "stopped"), ("active", "stopping"),
    ("stopping", "stopped"), ("stopped", "starting"),
])
def test_allowed_transitions(current: str, target: str) -> None:
    check_transition(current, target)


@pytest.mark.parametrize(("current", "target"), [
    ("active", "starting"), ("active", "stopped"), ("stopped", "active"), ("stopping", "active"),
    ("stopped", "stopping"),
])
def test_illegal_transitions_are_refused(current: str, target: str) -> None:
    with pytest.raises(IllegalTransition):
        check_transition(current, target)


def test_a_crash_mid_turn_is_agent_crashed_process_exit() -> None:
    reason, kind, detail = classify_unexpected_exit(-signal.SIGKILL, turn_active=True)
    assert (reason, kind) == (StopReason.AGENT_CRASHED, FailureKind.PROCESS_EXIT)
    assert "SIGKILL" in detail


def test_a_clean_exit_mid_turn_is_an_error() -> None:
    assert classify_unexpected_exit(0, turn_active=True)[:2] == (StopReason.ERROR, FailureKind.PROCESS_EXIT)


def test_a_clean_exit_while_idle_is_completion() -> None:
    assert classify_unexpected_exit(0, turn_active=False)[:2] == (StopReason.COMPLETED, None)


def test_user_stop_details_that_name_a_limit_classify_by_that_limit() -> None:
    assert user_stop_reason("") == StopReason.USER_CANCELED
    assert user_stop_reason("hit max_iterations") == StopReason.MAX_ITERATIONS
    assert user_stop_reason("budget_exceeded after 3 runs") == StopReason.BUDGET_EXCEEDED


# The details tests/integration/test_stop_reasons.py sends through a live daemon's stop (max_iterations there).
@pytest.mark.parametrize("limit", ["max_iterations", "loop_detected", "budget_exceeded"])
def test_each_limit_named_in_a_stop_detail_is_its_stop_reason(limit: str) -> None:
    assert user_stop_reason(f"{limit}: the agent went on too long") == StopReason(limit)
    assert user_stop_reason(f"{limit.upper()} reached") == StopReason(limit)
    assert user_stop_reason(f"{limit.replace('_', ' ')} reached") == StopReason.USER_CANCELED


def test_failure_summary_is_redacted_and_bounded() -> None:
    failure = failure_object(FailureKind.PROCESS_EXIT, "token=ghp_" + "a" * 36 + " " + "x" * 5000)
    assert "ghp_" not in failure["summary"]
    assert len(failure["summary"].encode()) <= 2048
    assert failure["summary"].endswith("...[truncated]")
    assert failure == {"kind": "process_exit", "summary": failure["summary"], "crash_bundle_path": None}


def test_badge_precedence() -> None:
    assert badge(SessionState.STOPPED, {"kind": "process_exit"}) == Badge.FAILED
    assert badge(SessionState.STOPPED, {"kind": "cancellation"}) == Badge.STOPPED
    assert badge(SessionState.STOPPED, None) == Badge.STOPPED
    assert badge(SessionState.ACTIVE, None, stalled=True) == Badge.HUNG
    assert badge(SessionState.ACTIVE, None, prompting=True) == Badge.RUNNING
    assert badge(SessionState.ACTIVE, None) == Badge.IDLE
    assert badge(SessionState.STARTING, None) == Badge.RUNNING
