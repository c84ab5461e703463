"""Where a batch commits (`sessions/store/writer/placement.py`): the rules alone, their clock a parameter."""

from __future__ import annotations

import pytest

from sessions.store.writer.placement import (
    MOVES_PER_HAND_OFF,
    PROCESS_ABOVE,
    THREAD_BELOW,
    Home,
    LoadGauge,
    entry,
    shared,
)


@pytest.mark.parametrize(("detached", "leased", "home"), [
    (False, False, None),  # the shared writer places it
    (True, False, Home.OWN),  # a store that was locked, failing or slow stays on its own thread
    (False, True, Home.OWN),  # a cluster's store waits for its lease there, not in every session's way
    (True, True, Home.OWN),
])
def test_a_batch_enters_the_shared_writer_unless_its_store_left_it_or_waits_on_a_lease(
        detached: bool, leased: bool, home: Home | None) -> None:
    assert entry(detached=detached, leased=leased) is home


def test_in_process_mode_at_most_a_few_stores_a_hand_off_move_from_the_thread() -> None:
    assert shared(Home.THREAD, open_on_thread=False, in_process=True, moved=0) is Home.THREAD
    assert shared(Home.PROCESS, open_on_thread=True, in_process=False, moved=MOVES_PER_HAND_OFF) is Home.PROCESS
    assert shared(Home.PROCESS, open_on_thread=True, in_process=False, moved=MOVES_PER_HAND_OFF + 1) is Home.THREAD
    # a store the process already holds, or one no thread has open, is not a move: it goes however many moved
    assert shared(Home.PROCESS, open_on_thread=True, in_process=True, moved=100) is Home.PROCESS
    assert shared(Home.PROCESS, open_on_thread=False, in_process=False, moved=100) is Home.PROCESS


def window(gauge: LoadGauge, now: float, batches: int, *, broken: bool = False) -> tuple[bool, bool]:
    """One full window of `batches`, ending at `now`: (whether the process was warmed, whether the mode changed)."""
    assert gauge.observe(now, batches)
    warm = gauge.warm(broken=broken, forced=None)
    return warm, gauge.decide(broken=broken)


def test_the_mode_follows_the_load_with_hysteresis_and_only_once_a_second() -> None:
    gauge = LoadGauge(window_start=100.0)
    assert not gauge.observe(100.5, int(PROCESS_ABOVE * 10))  # half a second: not measured yet
    assert gauge.mode is Home.THREAD
    assert window(gauge, 101.0, 0) == (True, True)  # the early batches count, over the second
    assert gauge.mode is Home.PROCESS and gauge.rate == PROCESS_ABOVE * 10 * 1.0
    assert window(gauge, 102.0, int(THREAD_BELOW)) == (False, False)  # between the bounds: it stays
    assert window(gauge, 103.0, int(THREAD_BELOW) - 1) == (False, True)  # below THREAD_BELOW: back to the thread
    assert gauge.mode is Home.THREAD
    # between the bounds from the thread: the process is started, idle, but the thread still commits
    assert window(gauge, 104.0, int(THREAD_BELOW)) == (True, False)
    assert gauge.mode is Home.THREAD


def test_a_broken_process_keeps_the_thread_and_is_not_warmed() -> None:
    gauge = LoadGauge(window_start=0.0)
    assert window(gauge, 1.0, int(PROCESS_ABOVE) * 2, broken=True) == (False, False)
    assert gauge.mode is Home.THREAD
    assert window(gauge, 2.0, int(PROCESS_ABOVE) * 2) == (True, True)
    assert window(gauge, 3.0, int(PROCESS_ABOVE) * 2, broken=True) == (False, True)  # it broke: back
    assert gauge.mode is Home.THREAD


def test_a_forced_thread_never_warms_the_process_and_a_forced_mode_wins() -> None:
    gauge = LoadGauge(window_start=0.0)
    assert gauge.observe(1.0, int(PROCESS_ABOVE) * 2)
    assert not gauge.warm(broken=False, forced=Home.THREAD)
    assert gauge.warm(broken=False, forced=Home.PROCESS)
