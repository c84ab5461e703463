"""Redact secrets in every log record before any handler sees it."""

from __future__ import annotations

import logging

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
