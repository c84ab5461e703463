"""The daemon's log file (compozy_site/launcher.py): a background start keeps an oversized daemon.log as one older
generation, so a flood in one run cannot keep growing the file across starts."""

from __future__ import annotations

from pathlib import Path

from compozy_site.launcher import rotate_log


def test_a_daemon_log_over_the_limit_is_kept_as_one_generation_at_start(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    assert rotate_log(log, limit=10) is False  # none yet
    log.write_text("short\n")
    assert rotate_log(log, limit=10) is False and log.read_text() == "short\n"
    log.write_text("x" * 11)
    (tmp_path / "daemon.log.1").write_text("older generation")
    assert rotate_log(log, limit=10) is True
    assert not log.exists() and (tmp_path / "daemon.log.1").read_text() == "x" * 11
