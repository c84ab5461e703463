"""Doorbells on the channel layer. The store is the truth: these only tell readers to look again.

Every cross-process signal goes through the channel layer, never a module global, so a Redis layer
carries them between daemons unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from channels.layers import InMemoryChannelLayer, get_channel_layer

logger = logging.getLogger(__name__)
# Strong references: the loop keeps only weak ones, and a collected task would drop its doorbell.
_in_flight: set[asyncio.Task[None]] = set()

CATALOG_GROUP = "compozy.catalog"


def session_group(session_id: str) -> str:
    return f"compozy.session.{session_id}"


def _fire(group: str, message: dict[str, str | int]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return

    async def send() -> None:
        # A full in-memory layer raises ChannelFull; readers also poll, so a dropped ring is harmless.
        with contextlib.suppress(Exception):
            await layer.group_send(group, message)

    task = loop.create_task(send())
    _in_flight.add(task)
    task.add_done_callback(_in_flight.discard)


def ring_events(session_id: str, sequence: int) -> None:
    _fire(session_group(session_id), {"type": "events.appended", "sequence": sequence})


def ring_events_elsewhere(session_id: str, sequence: int) -> None:
    """The doorbell for feeds in other processes. The writer hands committed rows to this process's feed
    directly, and on a process-local layer (the embedded default) there is no other process: a ring there
    would only wake our own feed to find it already has the rows (a send, a receive and a check per commit)."""
    if not isinstance(get_channel_layer(), InMemoryChannelLayer):
        ring_events(session_id, sequence)


def ring_catalog(kind: str, workspace_id: str, session_id: str) -> None:
    _fire(CATALOG_GROUP, {"type": "catalog.changed", "kind": kind, "workspace_id": workspace_id,
                          "session_id": session_id})
