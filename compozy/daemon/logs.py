"""Redact secrets in every log record before any handler sees it."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from sessions.core.redact import redact_text


class RedactFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - the handler reports a message it cannot format; a filter must not raise
            return True
        record.msg = redact_text(message)
        record.args = None
        return True


class RepeatedFailure:
    """A background loop's failure, logged in full the first time and then once a minute while the same error
    repeats (a full disk made every 2 s tick log a traceback: 84 in 90 s buried the one line that mattered).

    `growth` above 1 widens the interval after each report (up to `most`), for a failure that may last hours (a
    queue server gone); `traceback=False` logs the first report as one line too. Thread-safe: several loops may
    report one shared failure (the queue's workers, scheduler and ticker)."""

    def __init__(self, logger: logging.Logger, every: float = 60.0, *, growth: float = 1.0, most: float = 3600.0,
                 traceback: bool = True) -> None:
        self.logger, self.every, self.growth, self.most, self.traceback = logger, every, growth, most, traceback
        self._last: dict[str, tuple[str, float, int, float]] = {}  # key -> (error, logged at, repeats, interval)
        self._lock = threading.Lock()

    def failing(self, key: str) -> bool:
        return key in self._last

    def log(self, key: str, message: str, exc: BaseException) -> None:
        error = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        with self._lock:
            seen = self._last.get(key)
            if seen is None or seen[0] != error:
                report = "first"
                self._last[key] = (error, now, 0, self.every)
            elif now - seen[1] >= seen[3]:
                report, repeats = "again", seen[2] + 1
                self._last[key] = (error, now, 0, min(seen[3] * self.growth, self.most))
            else:
                report = ""
                self._last[key] = (error, seen[1], seen[2] + 1, seen[3])
        if report == "first" and self.traceback:
            self.logger.error(message, exc_info=exc)
        elif report == "first":
            self.logger.error("%s: %s", message, error)
        elif report:
            self.logger.error("%s (still failing: %s; %d more time(s) since the last report)", message, error,
                              repeats)

    def ok(self, key: str) -> None:
        if key not in self._last:  # the usual case, checked without the lock: a working loop calls this often
            return
        with self._lock:
            gone = self._last.pop(key, None)
        if gone is not None:
            self.logger.warning("%s: working again", key)


# `$COMPOZY_HOME/logs/daemon.log` of a daemon in the foreground (`make run`): rotated at this size, this many old
# files kept (daemon.log.1 …). A first hour wrote ~120 lines; a busy daemon some MiB a day.
LOG_FILE_BYTES = 10 * 1024 * 1024
LOG_FILE_BACKUPS = 5


def log_file(home: Path) -> Path | None:
    """Where a foreground daemon's log also goes: `logs/daemon.log`, unless its stderr goes there already (a
    detached start sends it there). A foreground daemon's log went only to its terminal, and evidence had none."""
    path = home / "logs" / "daemon.log"
    with contextlib.suppress(OSError):
        if Path(os.readlink("/proc/self/fd/2")) == path:
            return None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def add_log_file(config: dict[str, Any], path: Path, max_bytes: int = LOG_FILE_BYTES,
                 backups: int = LOG_FILE_BACKUPS) -> None:
    """`config` (a logging dictConfig, settings.LOGGING) with a rotating, redacting handler on `path` at its root.
    Changed in place: Django configures logging from settings.LOGGING again whenever it is set up (the ASGI app
    does so once more), which drops any handler added beside it."""
    config.setdefault("handlers", {})["file"] = {
        "class": "logging.handlers.RotatingFileHandler", "filename": str(path), "maxBytes": max_bytes,
        "backupCount": backups, "encoding": "utf-8", "formatter": "plain", "filters": ["redact"]}
    root = config.setdefault("root", {})
    root["handlers"] = [*[h for h in root.get("handlers", []) if h != "file"], "file"]
