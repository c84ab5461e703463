"""Backpressure for event streams. daphne gives the app none: every frame written for a viewer that stopped reading
was queued in the daemon, and eight such viewers of one fast turn queued 15 GB before the kernel killed it. Past
HIGH_WATER bytes queued for its connection, a stream writes nothing more until the client takes them; one that
takes nothing for `[http] stream_stall_timeout` (60 s) is ended (it resumes from the store with Last-Event-ID when
it reads again). The transport's hard cap (compozy/api/http_server.py) is a safety net behind this. `compozy
status` shows the streams waiting on their clients."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sessions.config import get_config

logger = logging.getLogger(__name__)

HIGH_WATER_BYTES = 1024 * 1024
DRAIN_POLL_SECONDS = 0.02
BACKLOG = "compozy.backlog"  # scope key: bytes queued for this connection (compozy.api.http_server)

# The backlogs of the streams waiting on their client now (one per connection). Written on the loop, read by status.
_waiting: set[Callable[[], int]] = set()


def stall_seconds() -> float:
    return get_config().timeouts.stream_stall


async def drained(backlog: Callable[[], int] | None, *, high_water: int = HIGH_WATER_BYTES,
                  stall: float | None = None) -> bool:
    """Wait until at most `high_water` bytes are queued for the client; False when it took none for `stall`
    seconds (a viewer gone quiet: end its stream). `backlog` is the connection's count, or None (no transport
    to ask): nothing to wait for."""
    if backlog is None:
        return True
    queued = backlog()
    if queued <= high_water:
        return True
    stall = stall_seconds() if stall is None else stall
    loop = asyncio.get_running_loop()
    progress_at = loop.time()
    _waiting.add(backlog)
    try:
        while queued > high_water:
            await asyncio.sleep(DRAIN_POLL_SECONDS)
            now_queued = backlog()
            if now_queued < queued:
                progress_at = loop.time()
            elif loop.time() - progress_at >= stall:
                return False
            queued = now_queued
        return True
    finally:
        _waiting.discard(backlog)


async def writable(backlog: Callable[[], int] | None, stream: str) -> bool:
    """`drained`, for a stream about to write: False (logged) when its client stopped reading, so it ends."""
    if await drained(backlog):
        return True
    logger.warning("ended a %s stream whose client read nothing for %g s", stream, stall_seconds())
    return False


def report() -> dict[str, Any]:
    """For `compozy status`: streams waiting on a slow client and what is queued for them."""
    queued = []
    for backlog in list(_waiting):
        try:
            queued.append(int(backlog()))
        except (AttributeError, TypeError):  # the connection was torn down under us
            continue
    return {"waiting_on_client": len(queued), "queued_bytes": sum(queued), "max_queued_bytes": max(queued, default=0),
            "high_water_bytes": HIGH_WATER_BYTES, "stall_seconds": stall_seconds()}
