"""Batch scheduling for the daemon's children: its agents and its store writer process.

Every session, stream and request shares the daemon's one event loop. On a busy machine the loop spent a fifth of
its time runnable but not running: a child woke (an agent on its own timer, the store writer on the pipe the loop
had just written) and the kernel let it preempt the loop on that core. A handle probe at 200 streaming sessions
found a 6.6 KB write to the store writer's pipe taking 3-6 ms, the process committing in the loop's place.

SCHED_BATCH takes away only that wake-up preemption: the child keeps its full share of CPU (same nice) and runs
when a core is free or at the next tick, which neither a model's stream nor a 5 ms commit window notices. Measured
with `python -m bench --only capacity` at 200 sessions, three alternating pairs each: the store writer as batch,
loop lag p99 8.3-23.7 ms against 12.7-30.9; the agents as batch too, the loop's involuntary switches halved
(4,600-7,500 against 10,700-12,800 in 10 s) and lag p99 8.2-11.9 ms against 9.7-14.4.

Linux only. Where the policy is missing or the kernel refuses it (a seccomp profile), nothing changes: logged once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

logger = logging.getLogger(__name__)

_refused = threading.Event()  # said once


def _set(policy: int) -> bool:
    """The calling thread's policy (a thread's, not the process's: Linux schedules threads)."""
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except (AttributeError, OSError) as exc:
        if not _refused.is_set():
            _refused.set()
            logger.warning("batch scheduling is not available here (%s): children preempt the event loop as they "
                           "wake", exc)
        return False
    return True


def become_batch() -> None:
    """This thread (a child's only one) from now on."""
    if hasattr(os, "SCHED_BATCH"):
        _set(os.SCHED_BATCH)


@contextlib.contextmanager
def forking_batch() -> Iterator[None]:
    """Processes this thread starts inside inherit batch scheduling from the start, before they can fork children of
    their own (npx starts node); the thread is back to normal after."""
    try:  # a thread already under another policy (the daemon started under one) is left as it is
        normal = hasattr(os, "SCHED_BATCH") and os.sched_getscheduler(0) == os.SCHED_OTHER
    except OSError:
        normal = False
    if not normal or not _set(os.SCHED_BATCH):
        yield
        return
    try:
        yield
    finally:
        _set(os.SCHED_OTHER)
