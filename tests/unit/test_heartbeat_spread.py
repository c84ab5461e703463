"""A turn's first activity heartbeat comes somewhere in the last half of the interval, never after it: sessions
prompted together spread their meta.json writes, and the sweep (which judges a heartbeat stale only past the
interval) sees no difference."""

from __future__ import annotations

import random

from sessions.runtime.activity import HEARTBEAT_SPREAD, first_heartbeat_delay


def test_the_first_heartbeat_is_early_by_at_most_the_spread_and_never_late() -> None:
    assert first_heartbeat_delay(30.0, 0.0) == 30.0
    assert first_heartbeat_delay(30.0, 0.999999) > 30.0 * (1 - HEARTBEAT_SPREAD)
    assert first_heartbeat_delay(30.0, 0.5) == 22.5


def test_sessions_started_together_spread_their_first_writes_over_the_window() -> None:
    draws = random.Random(7)
    firsts = [first_heartbeat_delay(30.0, draws.random()) for _ in range(150)]
    assert all(15.0 < t <= 30.0 for t in firsts)
    seconds = {int(t) for t in firsts}  # which second of the interval each lands in
    assert len(seconds) >= 14  # 150 writes over ~15 distinct seconds, not one burst
