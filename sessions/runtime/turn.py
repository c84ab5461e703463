"""One prompt turn of a live session: what was asked, its task, and how it ended (a record; `Turns` runs it)."""

from __future__ import annotations

import asyncio
import time
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
