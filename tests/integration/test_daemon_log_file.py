"""A daemon in the foreground (`make run`, its stderr a terminal) writes `$COMPOZY_HOME/logs/daemon.log` too, owner-
only and rotated, and a session's evidence bundle carries its lines (issue 48: bundles had 0 daemon-log lines)."""

from __future__ import annotations

import io
import json
import logging
import logging.handlers
import stat
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from compozy.daemon.logs import RedactFilter, add_log_file
from tests.conftest import Daemon, start_daemon, wait_for


def _start_with_stderr_elsewhere(home: Path) -> Daemon:
    """As `make run` starts it, its stdout and stderr not a file (here /dev/null, a terminal at a desk)."""
    return start_daemon(home, output=subprocess.DEVNULL, log_path=home / "logs" / "daemon.log")


def test_a_foreground_daemon_writes_its_log_file_and_evidence_carries_it(tmp_path: Path, workspace: Path) -> None:
    daemon = _start_with_stderr_elsewhere(tmp_path / "home")
    try:
        log = daemon.home / "logs" / "daemon.log"
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        wait_for(lambda: "compozy daemon listening on" in log.read_text(), timeout=10, what="the ready line logged")
        sid = daemon.create(workspace)["id"]
        daemon.run_turn(sid, "crash")  # a death the daemon logs, naming the session
        daemon.wait_state(sid, {"stopped"})
        response = daemon.http.get(daemon.scoped(sid, "/evidence"))
        assert response.status_code == 200, response.text[:300]
        with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as archive:
            names = {m.name.split("/")[-1]: m for m in archive.getmembers()}
            manifest = json.loads(archive.extractfile(names["manifest.json"]).read())  # type: ignore[union-attr]
            lines = archive.extractfile(names["daemon-log.txt"]).read().decode()  # type: ignore[union-attr]
        assert sid in lines, lines
        assert lines.count("\n") == _count(manifest, "daemon_log_lines") > 0, manifest
    finally:
        daemon.stop()


def test_the_log_file_is_rotated_and_redacted(tmp_path: Path) -> None:
    """The handler settings.LOGGING gets, built as dictConfig builds it (without reconfiguring this process)."""
    path = tmp_path / "logs" / "daemon.log"
    path.parent.mkdir()
    config: dict[str, Any] = {"handlers": {}, "root": {"handlers": ["console"]}}
    add_log_file(config, path, max_bytes=2000, backups=2)
    assert config["root"]["handlers"] == ["console", "file"]
    spec = dict(config["handlers"]["file"])
    assert spec.pop("class") == "logging.handlers.RotatingFileHandler"
    assert spec.pop("formatter") == "plain" and spec.pop("filters") == ["redact"]
    handler = logging.handlers.RotatingFileHandler(**spec)
    handler.addFilter(RedactFilter())
    logger = logging.getLogger("compozy.rotation-test")
    logger.propagate, logger.level = False, logging.INFO
    logger.addHandler(handler)
    try:
        for i in range(100):
            logger.warning("line %d of the rotation test %s", i, "x" * 40)
        logger.warning("a key: sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789")
        assert (tmp_path / "logs" / "daemon.log.1").exists() and (tmp_path / "logs" / "daemon.log.2").exists()
        assert not (tmp_path / "logs" / "daemon.log.3").exists()
        assert path.stat().st_size <= 2000 and "line 99 " in path.read_text()
        assert "abcdefghijklmnopqrstuvwxyz0123456789" not in path.read_text()
    finally:
        logger.removeHandler(handler)
        handler.close()


def _count(manifest: object, key: str) -> int:
    """`key`'s value wherever it sits in the manifest."""
    if isinstance(manifest, dict):
        if key in manifest:
            return int(manifest[key])
        return next((c for v in manifest.values() if (c := _count(v, key)) >= 0), -1)
    return -1
