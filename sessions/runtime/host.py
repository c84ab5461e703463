"""What a SessionRuntime needs from the manager that owns it, and what its components need from it.

The manager creates runtimes, so it imports them; a runtime only knows its host through `RuntimeHost`, which keeps
the dependency one-way (no runtime ↔ manager import circle). Likewise each component of a runtime (turns, the
permission gate, supervision, the stop path, the start path) knows the session it serves only through
`SessionCore`: its record and its recording, its hooks, and the few facts every stage reads (its state, whether a
stop is under way). What a component needs of another component it is handed by name when it is built.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sessions.hooks import HookRunner
from sessions.runtime.inputs import InputQueue

if TYPE_CHECKING:
    from compozy_base.config.agents import ProviderConfig
    from compozy_base.config.loader import Config
    from sessions.acp.driver import AgentProcess
    from sessions.core.enums import FailureKind, MarkerKind, SessionState, StopReason
    from sessions.core.jsonobj import EventContent
    from sessions.core.live import MarkerEvidence
    from sessions.core.record import Failure, FailureDoc, SessionRecord
    from sessions.store.writer import Recorder


class RuntimeHost(Protocol):
    hooks: HookRunner | None
    inputs: InputQueue

    def forget(self, session_id: str) -> None:
        """The runtime stopped: drop it from the registry of live sessions."""

    def keep_unsaved(self, rec: SessionRecord) -> None:
        """Writing this metadata snapshot failed: serve it to readers and retry the write."""

    def supersede_unsaved(self, session_id: str) -> None:
        """A newer snapshot is about to be written: an older unsaved one must never be retried after it."""


class SessionCore(Protocol):
    """One live session as its components see it (SessionRuntime is the one implementation)."""

    rec: SessionRecord  # its id, state, cwd and the rest of meta.json
    config: Config
    provider: ProviderConfig
    roots: list[Path]
    manager: RuntimeHost
    recorder: Recorder
    agent: AgentProcess | None
    stopped: asyncio.Event

    @property
    def stopping(self) -> bool: ...

    async def persist(self) -> None: ...

    def announce(self) -> None: ...

    async def transition(self, target: SessionState, *, stop: tuple[str, str, Failure | None] | None = None,
                         activated_at: str | None = None, stopped_at: str | None = None) -> None: ...

    def record(self, type_: str, content: EventContent, turn_id: str | None = None) -> None: ...

    def marker(self, kind: MarkerKind, summary: str, evidence: MarkerEvidence | None = None,
               turn_id: str | None = None) -> None: ...

    def protocol_violation(self, what: str) -> None: ...

    async def hook(self, event: str, **extra: Any) -> Any: ...

    async def observe(self, event: str, **extra: Any) -> None: ...

    async def stop(self, reason: StopReason, detail: str = "", *, failure: FailureDoc | None = None,
                   process_gone: bool = False) -> None: ...

    async def failure(self, kind: FailureKind, summary: str) -> FailureDoc: ...
