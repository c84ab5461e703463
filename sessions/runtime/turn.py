"""One prompt turn of a live session: what was asked, its task, and how it ended (a record; `Turns` runs it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class Turn:
    id: str
    text: str  # what the user asked (after prompt hooks): salvage, titles and history use this
    source: str
    started_at: str
    sent: str = ""  # what the agent receives, when it differs (a context replay prepended)
    authored: str = ""  # exactly what was typed, when a prompt hook changed `text`
    started_mono: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    terminal: bool = False
    cancel_requested: bool = False
    reply: str = ""
    outputs: int = 0  # session/update notifications the agent sent during this turn
    # Tool calls the agent started in this turn and has not settled (completed or failed): tool_call_id → name. A
    # turn that ends cancelled, failed or cut by a stop closes them (`Turns.close_open_tools`).
    open_tools: dict[str, str] = field(default_factory=dict)

    def track_tool(self, type_: str, content: Mapping[str, object]) -> None:
        """A tool_call or tool_result row of this turn: which calls are still running."""
        call_id = str(content.get("tool_call_id") or "")
        if not call_id:
            return
        if type_ == "tool_call" and content.get("status") not in ("completed", "failed"):
            self.open_tools.setdefault(call_id, str(content.get("tool_name") or ""))
        else:
            self.open_tools.pop(call_id, None)
