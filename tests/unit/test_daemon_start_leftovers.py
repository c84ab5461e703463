"""What a daemon start finds from an earlier run (compozy/daemon/launcher.py): an oversized daemon.log is kept as one
older generation, so a flood cannot keep growing it start after start; a stale socket lock is cleared."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from compozy.daemon.background import rotate_log
from compozy.daemon.launcher import _clear_stale_lock


def test_a_daemon_log_over_the_limit_is_kept_as_one_generation_at_start(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    assert rotate_log(log, limit=10) is False  # none yet
    log.write_text("short\n")
    assert rotate_log(log, limit=10) is False and log.read_text() == "short\n"
    log.write_text("x" * 11)
    (tmp_path / "daemon.log.1").write_text("older generation")
    assert rotate_log(log, limit=10) is True
    assert not log.exists() and (tmp_path / "daemon.log.1").read_text() == "x" * 11


def test_a_stale_socket_lock_is_cleared_and_a_running_daemons_is_kept(tmp_path: Path) -> None:
    """Twisted's lock names the holder's pid and outlives a kill -9: a restart failed ("Cannot acquire lock") while
    that pid ran again as something else, or while the dead daemon was a zombie."""
    lock = tmp_path / "daemon.sock.lock"
    other = subprocess.Popen(["sleep", "30"])
    # Lives until killed (it waits on its stdin), and "compozy" is in its command line as in a daemon's.
    daemon_like = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "compozy.cli"],
                                   stdin=subprocess.PIPE)
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        for pid, kept in ((other.pid, False), (gone.pid, False), (daemon_like.pid, True)):
            lock.unlink(missing_ok=True)
            os.symlink(str(pid), lock)
            _clear_stale_lock(lock)
            assert lock.is_symlink() == kept, pid
    finally:
        other.kill()
        daemon_like.kill()
