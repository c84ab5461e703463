"""What a SessionRuntime needs from the manager that owns it.

The manager creates runtimes, so it imports them; a runtime only knows its host through this protocol,
which keeps the dependency one-way (no runtime ↔ manager import circle).
"""

from __future__ import annotations

from typing import Any, Protocol

from sessions.hooks import HookRunner
from sessions.runtime.inputs import InputQueue


class RuntimeHost(Protocol):
    hooks: HookRunner | None
    inputs: InputQueue

    def forget(self, session_id: str) -> None:
        """The runtime stopped: drop it from the registry of live sessions."""

    def keep_unsaved(self, meta: dict[str, Any]) -> None:
        """Writing this metadata snapshot failed: serve it to readers and retry the write."""

    def supersede_unsaved(self, session_id: str) -> None:
        """A newer snapshot is about to be written: an older unsaved one must never be retried after it."""
