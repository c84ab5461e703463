"""The daemon's children run SCHED_BATCH (sessions/core/batch_scheduling.py): an agent, what the agent starts in turn,
and the store writer process; the thread that started them is back to normal after. Real processes, read back
from the kernel."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path

import pytest

from sessions.acp.spawn import spawn
from sessions.core.batch_scheduling import forking_batch
from sessions.store.writer import shared as store_writer
from sessions.store.writer.recorder import Recorder

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")

# The agent prints its own policy, then its child's (started after it, as npx starts node).
REPORT = ("import os, subprocess, sys; print(os.sched_getscheduler(0)); sys.stdout.flush(); "
          "subprocess.run([sys.executable, '-c', 'import os; print(os.sched_getscheduler(0))'])")


def test_an_agent_and_what_it_starts_run_as_batch(tmp_path: Path) -> None:
    async def main() -> list[int]:
        child = await spawn([sys.executable, "-c", REPORT], cwd=tmp_path, env=dict(os.environ), umask=0o077,
                            limit=2**16)
        out = await asyncio.wait_for(child.stdout.read(), 30)
        await child.wait()
        return [int(line) for line in out.split()]

    assert asyncio.run(main()) == [os.SCHED_BATCH, os.SCHED_BATCH]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the test's own thread was never touched


def test_the_starting_thread_is_back_to_normal_after() -> None:
    seen: list[int] = []

    def run() -> None:
        with forking_batch():
            seen.append(os.sched_getscheduler(0))
        seen.append(os.sched_getscheduler(0))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [os.SCHED_BATCH, os.SCHED_OTHER]


def test_the_store_writer_process_runs_as_batch(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "events.db", "general", lambda stored, rows: None)

    async def main() -> int:
        writer = store_writer.for_loop(asyncio.get_running_loop())
        writer.forced = "process"
        rec.record("user_message", "t1", {"text": "hi"})
        await rec.flush()  # committed by the process: it has set its policy by now
        assert writer._process is not None
        policy = os.sched_getscheduler(writer._process.pid)
        await rec.close()
        await writer.shutdown()
        return policy

    assert asyncio.run(main()) == os.SCHED_BATCH
