"""The admission rule of a prompt (issue 50, row 1; sessions reference §6): a session runs a prompt at once only when
it is idle and nothing waits in its queue, and the queue keeps the order entries were admitted in whatever the clock
does. The race it closes runs against the real daemon in tests/integration/test_queue_order.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from compozy_base.config.loader import BusyInputConfig  # noqa: E402
from compozy_base.config.modes import BusyMode  # noqa: E402
from sessions.catalog import index as catalog  # noqa: E402
from sessions.core.record import SessionRecord  # noqa: E402
from sessions.models import InputEntry  # noqa: E402
from sessions.runtime.busy_input import START, route  # noqa: E402
from sessions.runtime.inputs import InputQueue, queue_stamp  # noqa: E402
from sessions.store import folder  # noqa: E402
from sessions.store.ids import new_queue_entry_id, new_session_id  # noqa: E402

T0 = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)


@pytest.fixture
def session_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A catalog row of a session, for queue entries to belong to."""
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    root = tmp_path / "repo"
    root.mkdir()
    ws = catalog.register_workspace(str(root))
    sid = new_session_id()
    catalog.upsert_session_row(SessionRecord.from_meta({
        "id": sid, "agent_name": "scripted", "provider": "scripted", "workspace_id": ws.id, "cwd": str(root),
        "state": "active", "created_at": "2026-01-01T00:00:00.000000Z", "updated_at": "2026-01-01T00:00:00.000000Z"}))
    return sid


@pytest.mark.parametrize("mode", [None, "queue", "interrupt", "steer"])
def test_an_idle_session_with_an_empty_queue_starts_the_prompt_whatever_its_mode(mode: str | None) -> None:
    assert route(busy=False, handover=False, queue_waiting=False, mode=mode, default_mode="queue") == START


@pytest.mark.parametrize("mode", [None, "queue"])
def test_between_two_turns_a_prompt_goes_behind_the_input_queued_before_it(mode: str | None) -> None:
    assert route(busy=False, handover=False, queue_waiting=True, mode=mode, default_mode="queue") == "queue"


def test_between_two_turns_a_steer_has_no_turn_to_steer_and_takes_its_queue_fallback() -> None:
    assert route(busy=False, handover=False, queue_waiting=True, mode="steer", default_mode="queue") == "queue"
    assert route(busy=False, handover=True, queue_waiting=False, mode=None, default_mode="steer") == "queue"


def test_between_two_turns_an_interrupt_still_interrupts() -> None:
    """An interrupt fences older input off (it drops the queue), so it never waits behind it."""
    assert route(busy=False, handover=False, queue_waiting=True, mode="interrupt", default_mode="queue") == "interrupt"


@pytest.mark.parametrize(("mode", "default", "expected"), [
    (None, "queue", "queue"), (None, "interrupt", "interrupt"), (None, "steer", "steer"),
    ("queue", "steer", "queue"), ("interrupt", "queue", "interrupt"), ("steer", "queue", "steer")])
def test_a_busy_session_takes_the_mode_given_or_the_default(mode: str | None, default: str, expected: str) -> None:
    for waiting in (False, True):
        assert route(busy=True, handover=False, queue_waiting=waiting, mode=mode, default_mode=default) == expected


def test_a_hand_over_between_turns_counts_as_busy() -> None:
    assert route(busy=False, handover=True, queue_waiting=False, mode=None, default_mode="queue") == "queue"


def test_the_first_entry_takes_the_clock() -> None:
    assert queue_stamp(T0, None) == T0


def test_an_entry_after_the_newest_takes_the_clock() -> None:
    assert queue_stamp(T0 + timedelta(milliseconds=3), T0) == T0 + timedelta(milliseconds=3)


@pytest.mark.parametrize("step", [timedelta(0), timedelta(microseconds=-1), timedelta(seconds=-30)],
                         ids=["same-tick", "one-tick-back", "clock-stepped-back"])
def test_an_entry_whose_clock_reads_no_later_than_the_newest_still_sorts_after_it(step: timedelta) -> None:
    newest = T0
    stamps = []
    for _ in range(3):
        newest = queue_stamp(T0 + step, newest)
        stamps.append(newest)
    assert stamps == sorted(stamps) and len(set(stamps)) == 3
    assert stamps[0] > T0


def test_the_queue_runs_entries_in_the_order_they_were_admitted_even_after_the_clock_stepped_back(
        session_id: str) -> None:
    queue = InputQueue(BusyInputConfig(BusyMode.QUEUE, 10, 65536))
    # An entry stamped an hour ahead of now: the clock stepped back since it was queued.
    ahead = folder.utcnow() + timedelta(hours=1)
    InputEntry.objects.create(id=new_queue_entry_id(), session_id=session_id, text="first", created_at=ahead,
                              updated_at=ahead)
    for text in ("second", "third"):
        queue.enqueue(session_id, text)
    claimed = []
    while (entry := queue.claim_next(session_id)) is not None:
        claimed.append(entry.text)
        queue.mark(entry.id, "sent")
    assert claimed == ["first", "second", "third"]


def test_queued_input_waits_until_it_was_handed_on_and_a_staged_steer_does_not_count(session_id: str) -> None:
    queue = InputQueue(BusyInputConfig(BusyMode.QUEUE, 10, 65536))
    assert not queue.waiting(session_id)
    queue.enqueue(session_id, "a steer", mode="steer")
    assert not queue.waiting(session_id)  # it waits for a tool result, not for the next turn
    entry, _ = queue.enqueue(session_id, "queued")
    assert queue.waiting(session_id)
    assert queue.claim_next(session_id) is not None
    assert queue.waiting(session_id)  # dispatching: its turn is starting, a prompt arriving now goes behind it
    queue.mark(entry.id, "sent")
    assert not queue.waiting(session_id)
