"""stragglers.kill_marked over real processes: a process that left its group (setsid) is found by its run's mark
in its environment and killed; one with another mark, or none, is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sessions.acp import stragglers


def sleeper(mark: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != stragglers.MARK_ENV}
    if mark is not None:
        env[stragglers.MARK_ENV] = mark
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env=env,
                            start_new_session=True)


def test_only_the_processes_that_carry_the_mark_are_killed() -> None:
    mine = stragglers.mark("sess-1", "2026-12-01T00:00:00.000001Z")
    marked = sleeper(mine)
    other = sleeper(stragglers.mark("sess-1", "2026-12-01T00:00:00.000002Z"))
    unmarked = sleeper(None)
    try:
        entry = f"{stragglers.MARK_ENV}={mine}".encode()
        deadline = time.monotonic() + 10  # the environment is readable once the exec is done
        while entry not in Path(f"/proc/{marked.pid}/environ").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stragglers.kill_marked(mine) == 1
        assert marked.wait(10) == -9
        assert other.poll() is None and unmarked.poll() is None
        assert stragglers.kill_marked(mine) == 0  # nothing left carries it
    finally:
        for process in (marked, other, unmarked):
            process.kill()
            process.wait()


def test_without_proc_nothing_is_found(tmp_path: Path) -> None:
    assert stragglers.kill_marked("x@y", proc=tmp_path / "missing") == 0
