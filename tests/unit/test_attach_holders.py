"""A CLI holder of an attach lease is gone when its process is (sessions/core/attach_holders.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from compozy_base import process
from sessions.core.attach_holders import cli_holder, holder_gone


def test_a_running_cli_holds_and_an_exited_one_does_not() -> None:
    mine = cli_holder(os.getpid(), process.start_ticks(os.getpid()))
    assert not holder_gone(mine)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = process.start_ticks(child.pid)
    child.wait()
    assert holder_gone(cli_holder(child.pid, ticks))


def test_a_reused_pid_is_another_process_and_other_holders_are_never_gone() -> None:
    ticks = process.start_ticks(os.getpid())
    assert ticks is not None
    assert holder_gone(cli_holder(os.getpid(), ticks + 1))  # the same pid, started at another time
    assert not holder_gone(cli_holder(1, 0, host="another-host"))  # not ours to judge
    assert not holder_gone("ci-job-42") and not holder_gone("cli:1234") and not holder_gone("")
