"""A recorded pid is only that process if its start matches (compozy_base/process.py): pids are reused. One rule
for agents (meta.json's wall-clock start), daemons (daemon.json) and task runs (the kernel's start ticks)."""

from __future__ import annotations

import subprocess
import sys
import time

from compozy_base import process
from tests.conftest import wait_for


def test_a_live_process_is_recognised_by_pid_and_wall_clock_start() -> None:
    before = time.time()
    proc = subprocess.Popen(["sleep", "30"])
    try:
        started = process.started_at(proc.pid)
        assert started is not None and abs(started - before) < 3
        assert process.same_process(proc.pid, wall=before)
        # Same pid, different start: a reused pid must never be taken for our agent.
        assert not process.same_process(proc.pid, wall=before - 3600)
    finally:
        proc.kill()
        proc.wait()
    assert not process.same_process(proc.pid, wall=before), "a dead pid is nobody's"


def test_the_kernels_start_ticks_name_a_process_exactly() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        ticks = process.start_ticks(proc.pid)
        assert ticks is not None
        assert process.same_process(proc.pid, ticks=ticks)
        assert not process.same_process(proc.pid, ticks=ticks + 1)
    finally:
        proc.kill()
        proc.wait()
    assert process.start_ticks(proc.pid) is None


def test_a_zombie_exists_but_is_not_alive() -> None:
    # A child that has exited and is not reaped yet: the kernel keeps its pid, and kill(0) still answers.
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: (process.stat_fields(proc.pid) or ["Z"])[0] in ("Z", "X"), 10, "the child to exit unreaped")
    assert process.exists(proc.pid)
    assert not process.alive(proc.pid)
    proc.wait()
    assert not process.exists(proc.pid)


def test_garbage_pids_are_never_ours() -> None:
    assert not process.same_process(None, wall=time.time())
    assert not process.same_process(-1, wall=time.time())
    assert not process.same_process(True, wall=time.time())
    assert not process.same_process(1, wall=None)  # a bare pid, no start to compare: nobody's
