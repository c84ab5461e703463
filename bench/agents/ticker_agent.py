#!/usr/bin/env python3
"""Latency-benchmark ACP agent on the `agent-client-protocol` SDK.

Prompt `tick N INTERVAL_MS`: N agent_message chunks, INTERVAL_MS apart on an absolute schedule (no drift),
each chunk's text being `t<ns>;` with this process's `time.time_ns()` taken just before the SDK sends it. The
benchmark client subtracts that from its own receive time: agent → daemon → events.db → SSE → viewer. The
store merges the adjacent chunks of one write batch into one row, so a row may carry several stamps: the
`t…;` delimiters keep them apart.
Any other prompt is echoed. Imports are the stdlib and `acp` only, so the file runs as a plain script.
"""

from __future__ import annotations

import os
import sys

# Run as a script, Python puts this file's directory first on sys.path, where a sibling could shadow stdlib.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.helpers import update_agent_message_text
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    StopReason,
    TextContentBlock,
)

log = logging.getLogger("ticker-agent")


class TickerAgent:
    def __init__(self) -> None:
        self._conn: Client | None = None
        self._sessions: set[str] = set()
        self._cancels: dict[str, asyncio.Event] = {}

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    @property
    def client(self) -> Client:
        if self._conn is None:
            raise RequestError.internal_error({"details": "no client connection"})
        return self._conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=False),
            agent_info=Implementation(name="ticker-agent", title="Compozy latency bench agent", version="1.0"),
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        session_id = f"ticker-{uuid.uuid4().hex}"
        self._sessions.add(session_id)
        return NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **_: Any) -> None:
        event = self._cancels.get(session_id)
        if event is not None:
            event.set()

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        if session_id not in self._sessions:
            raise RequestError.resource_not_found(session_id)
        cancel = asyncio.Event()
        self._cancels[session_id] = cancel
        text = "\n".join(block.text for block in prompt if isinstance(block, TextContentBlock))
        words = text.split()
        try:
            if words and words[0].lower() == "tick":
                stop = await self._tick(session_id, words[1:], cancel)
            else:
                await self._say(session_id, f"echo: {text}")
                stop = "end_turn"
        finally:
            if self._cancels.get(session_id) is cancel:
                del self._cancels[session_id]
        return PromptResponse(stop_reason=stop)

    async def _say(self, session_id: str, text: str) -> None:
        await self.client.session_update(session_id=session_id, update=update_agent_message_text(text))

    async def _tick(self, session_id: str, args: list[str], cancel: asyncio.Event) -> StopReason:
        try:
            count = int(args[0])
            interval = float(args[1]) / 1000.0 if len(args) > 1 else 0.05
        except (IndexError, ValueError):
            raise RequestError.invalid_params({"details": "usage: tick N INTERVAL_MS"}) from None
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(count):
            if cancel.is_set():
                return "cancelled"
            await self._say(session_id, f"t{time.time_ns()};")
            if i < count - 1:
                delay = start + (i + 1) * interval - loop.time()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(cancel.wait(), timeout=max(delay, 0.0))
        return "cancelled" if cancel.is_set() else "end_turn"


def main() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="ticker-agent: %(levelname)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_agent(TickerAgent()))


if __name__ == "__main__":
    main()
