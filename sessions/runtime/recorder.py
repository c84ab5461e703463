"""Group commit: events recorded during one loop tick are written in one transaction.

`record` is synchronous so the ACP observer can call it in arrival order; the flush runs on the
next loop iteration (or at once through `flush`) and rings the doorbell only after the commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sessions.store.events import EventLog, NewEvent

logger = logging.getLogger(__name__)


class Recorder:
    def __init__(self, log: EventLog, on_commit: Callable[[list[dict[str, Any]]], None]) -> None:
        self.log = log
        self.on_commit = on_commit
        self._pending: list[NewEvent] = []
        self._scheduled = False
        self.closed = False

    def record(self, type_: str, turn_id: str, content: dict[str, Any]) -> None:
        if self.closed:
            logger.warning("event %s recorded after the recorder closed; dropped", type_)
            return
        self._pending.append(NewEvent(type_, turn_id, content))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> list[dict[str, Any]]:
        """Commit everything pending now; returns the stored rows."""
        if not self._pending:
            return []
        batch, self._pending = self._pending, []
        stored = self.log.append(batch)
        self.on_commit(stored)
        return stored

    def close(self) -> None:
        self.flush()
        self.closed = True
        self.log.close()
