"""A recorded agent pid is only ours if its start time matches: pids are reused."""

from __future__ import annotations

import subprocess
import time

from compozy_base.daemon_record import is_same_process, process_started_at


def test_a_live_process_is_recognised_by_pid_and_start_time() -> None:
    before = time.time()
    proc = subprocess.Popen(["sleep", "30"])
    try:
        started = process_started_at(proc.pid)
        assert started is not None and abs(started - before) < 3
        assert is_same_process(proc.pid, before)
        # Same pid, different start: a reused pid must never be taken for our agent.
        assert not is_same_process(proc.pid, before - 3600)
    finally:
        proc.kill()
        proc.wait()
    assert not is_same_process(proc.pid, before), "a dead pid is nobody's"


def test_garbage_pids_are_never_ours() -> None:
    assert not is_same_process(None, time.time())
    assert not is_same_process(-1, time.time())
    assert not is_same_process(1, None)
