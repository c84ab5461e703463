"""Backpressure for event streams. daphne gives the app none: every frame written for a viewer that stopped reading
was queued in the daemon, and eight such viewers of one fast turn queued 15 GB before the kernel killed it. Past
HIGH_WATER bytes queued for its connection, a stream writes nothing more until the client takes them; one that
takes nothing for `[http] stream_stall_timeout` (60 s) has its connection closed, which drops what was queued for
it (it resumes from the store with Last-Event-ID when it reconnects). The transport's hard cap
(compozy/api/http_server.py) is a safety net behind this. `compozy status` shows the streams waiting on their
clients.

A frame larger than PIECE_BYTES (one agent message can be 50 MiB) is written in pieces, each once the queue has
room for it, so what is queued for one viewer stays under HIGH_WATER_BYTES whatever the frame size. The frame
itself is built once and shared by every viewer (sessions/live/feed.py `FeedRow.frame`); a viewer holds a reference to
it and copies out one piece at a time (docs/architecture.md, "Slow viewers and large frames")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import TypedDict

from compozy_base.config.loader import get_config

logger = logging.getLogger(__name__)

HIGH_WATER_BYTES = 1024 * 1024
DRAIN_POLL_SECONDS = 0.02
BACKLOG = "compozy.backlog"  # scope key: bytes queued for this connection (compozy.api.http_server)
ABORT = "compozy.abort"  # scope key: close this connection at once, dropping what is queued for it
# Frames up to this size are written whole (joined with their neighbours); larger ones are cut into pieces of it.
PIECE_BYTES = 256 * 1024

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


def pieces(frames: bytes | list[bytes]) -> Iterator[bytes]:
    """What to write, in order: runs of small frames joined up to PIECE_BYTES, a large frame cut into pieces.
    A large frame is never joined to another (a join would copy it for this viewer alone)."""
    run: list[bytes] = []
    size = 0
    for data in [frames] if isinstance(frames, bytes) else frames:
        if len(data) <= PIECE_BYTES:
            if size + len(data) > PIECE_BYTES and run:
                yield b"".join(run)
                run, size = [], 0
            run.append(data)
            size += len(data)
            continue
        if run:
            yield b"".join(run)
            run, size = [], 0
        view = memoryview(data)
        for start in range(0, len(data), PIECE_BYTES):
            yield bytes(view[start:start + PIECE_BYTES])
    if run:
        yield b"".join(run)


async def room_for(backlog: Callable[[], int] | None, size: int, stream: str) -> bool:
    """Wait until a write of `size` bytes may go; False (logged) when the client stopped reading: the caller closes
    its connection. A large frame's pieces wait until the queue has room for the piece under the high-water mark,
    so one frame never takes the queue past it; a small write waits for the plain mark."""
    high_water = HIGH_WATER_BYTES - size if size >= PIECE_BYTES else HIGH_WATER_BYTES
    if await drained(backlog, high_water=high_water):
        return True
    logger.warning("closed a %s stream whose client read nothing for %g s", stream, stall_seconds())
    return False


class PressureReport(TypedDict):
    waiting_on_client: int
    queued_bytes: int
    max_queued_bytes: int
    high_water_bytes: int
    stall_seconds: float


def report() -> PressureReport:
    """For `compozy status`: streams waiting on a slow client and what is queued for them."""
    queued = []
    for backlog in list(_waiting):
        try:
            queued.append(int(backlog()))
        except (AttributeError, TypeError):  # the connection was torn down under us
            continue
    return {"waiting_on_client": len(queued), "queued_bytes": sum(queued), "max_queued_bytes": max(queued, default=0),
            "high_water_bytes": HIGH_WATER_BYTES, "stall_seconds": stall_seconds()}
