"""Where a batch commits: the one place that decides (docs/architecture.md, "The write path").

A session writes through one object, its `Recorder`; every batch it hands off commits in one of three homes:

- `THREAD`: the shared writer's thread, in the daemon's process: cheapest while the load is light (a queue put and
  one callback back);
- `PROCESS`: the store writer process: above `PROCESS_ABOVE` batches a second every SQLite call's GIL hand-off with
  the busy loop made the thread's commits queue, and a process has its own interpreter;
- `OWN`: the store's own thread, which retries with backoff: a store that left the shared writer (locked, failing
  or slow: it must stall only its own session) or a cluster's store, whose every commit first waits for its lease.

Two rules decide, both here: `entry` (on the session's side, at each hand-off: its own thread or the shared writer)
and `shared` (in the shared writer, for each batch of a hand-off: thread or process, from `LoadGauge`'s mode).

A batch changes homes mid-flight only one way, and only because the design needs it: from the shared writer to its
store's own thread (`Outcome.retry`), when the shared writer could not commit it (the store was locked or failing,
the batch could not be drafted, or the process died with it unanswered: then it may have landed, and the own thread
looks for it by its first event's id before writing it). The shared writer never waits on a store or retries, so
that one bad store never holds every other session's commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Home(StrEnum):
    THREAD = "thread"
    PROCESS = "process"
    OWN = "own"


# Batches a second (every session's, over the last second) above which the process commits, and below which the
# thread takes over again. Measured with `python -m bench --only capacity`: at 50 sessions (1,000 batches a second)
# both hold; at 100 (2,000) the thread's commits queued behind the GIL in one run of two (agent → stored p99 75-97
# ms) while the process held 3 runs of 4; at 20 sessions with a big turn beside (the latency benchmark) the process
# cost p99 13 → 39 ms and loop lag 4 → 15 ms, since each lone event paid a pipe write and two wake-ups and the
# process competed with the loop for a core.
PROCESS_ABOVE = 1500.0
THREAD_BELOW = 1000.0  # also where the process is started, idle, so that it is ready when the load rises
# Stores the thread holds open move to the process at most this many a hand-off: each costs the process an open
# (~0.7 ms), and a hundred at once held every other session's commits for a few hundred milliseconds.
MOVES_PER_HAND_OFF = 8
# How long the load is measured over before the mode is looked at again.
WINDOW_SECONDS = 1.0


def entry(*, detached: bool, leased: bool) -> Home | None:
    """At a session's hand-off: `OWN` for a store that left the shared writer or waits on a cluster lease before
    each commit (waiting there would hold every other session's commits); None: the shared writer places it."""
    return Home.OWN if detached or leased else None


def shared(mode: Home, *, open_on_thread: bool, in_process: bool, moved: int) -> Home:
    """In the shared writer, one batch of a hand-off: the mode's home, except that at most `MOVES_PER_HAND_OFF`
    stores the thread holds open move to the process a hand-off (`moved` counts them, this one included)."""
    if mode is Home.THREAD:
        return Home.THREAD
    if open_on_thread and not in_process and moved > MOVES_PER_HAND_OFF:
        return Home.THREAD
    return Home.PROCESS


@dataclass(slots=True)
class LoadGauge:
    """Every session's batches a second over the last full window, and the shared writer's mode from it, with
    hysteresis (`PROCESS_ABOVE` up, `THREAD_BELOW` down) so a load near a bound does not flap. The clock is a
    parameter (the loop's time), so the rule is tested without a loop. Each hand-off: `observe`; when it says a
    window is full, `warm` (start the process, idle, if it says so) and then `decide`."""

    window_start: float
    mode: Home = Home.THREAD
    window_batches: int = 0
    rate: float = 0.0  # every session's batches a second, over the last full window measured

    def observe(self, now: float, batches: int) -> bool:
        """Count this hand-off's batches; True when a window is full (`rate` measured again)."""
        self.window_batches += batches
        elapsed = now - self.window_start
        if elapsed < WINDOW_SECONDS:
            return False
        self.rate = self.window_batches / elapsed
        self.window_start, self.window_batches = now, 0
        return True

    def warm(self, *, broken: bool, forced: Home | None) -> bool:
        """Whether to start the process now, before it is needed, so its start-up is in no commit's way."""
        return self.mode is Home.THREAD and self.rate >= THREAD_BELOW and not broken and forced is not Home.THREAD

    def decide(self, *, broken: bool) -> bool:
        """The mode from the last window's rate; True when it changed. A broken process (it kept dying, or could not
        start) keeps the thread."""
        before = self.mode
        if before is Home.THREAD and self.rate >= PROCESS_ABOVE and not broken:
            self.mode = Home.PROCESS
        elif before is Home.PROCESS and (self.rate < THREAD_BELOW or broken):
            self.mode = Home.THREAD
        return self.mode is not before
