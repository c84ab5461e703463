"""Redact secrets in every log record before any handler sees it."""

from __future__ import annotations

import logging
import time

from sessions.store.redact import redact_text


class RedactFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        record.msg = redact_text(message)
        record.args = None
        return True


class RepeatedFailure:
    """A background loop's failure, logged in full the first time and then once a minute while the same error
    repeats (a full disk made every 2 s tick log a traceback: 84 in 90 s buried the one line that mattered)."""

    def __init__(self, logger: logging.Logger, every: float = 60.0) -> None:
        self.logger, self.every = logger, every
        self._last: dict[str, tuple[str, float, int]] = {}  # key -> (error, logged at, repeats since)

    def log(self, key: str, message: str, exc: BaseException) -> None:
        error = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        seen = self._last.get(key)
        if seen is None or seen[0] != error:
            self.logger.error(message, exc_info=exc)
            self._last[key] = (error, now, 0)
        elif now - seen[1] >= self.every:
            self.logger.error("%s (still failing: %s; %d more time(s) since the last report)", message, error,
                              seen[2] + 1)
            self._last[key] = (error, now, 0)
        else:
            self._last[key] = (error, seen[1], seen[2] + 1)

    def ok(self, key: str) -> None:
        if self._last.pop(key, None) is not None:
            self.logger.warning("%s: working again", key)
