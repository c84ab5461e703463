"""SessionManager: the daemon's registry of live sessions, created on the daemon's event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from sessions.config import Config
from sessions.enums import StopReason
from sessions.errors import Unavailable
from sessions.hooks import HookRunner
from sessions.runtime.inputs import InputQueue
from sessions.runtime.session import SessionRuntime
from sessions.runtime.tasks import spawn

logger = logging.getLogger(__name__)

_manager: SessionManager | None = None


def get_manager() -> SessionManager:
    """The manager of this daemon process; API calls made outside a daemon get 503."""
    if _manager is None:
        raise Unavailable("the Compozy daemon is not running in this process", code="daemon_unavailable")
    return _manager


def set_manager(manager: SessionManager | None) -> None:
    global _manager
    _manager = manager


class SessionManager:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.inputs = InputQueue(config.busy_input)
        # One runner for the daemon (one bounded async pool); each dispatch writes to its session's store.
        self.hooks = HookRunner(config.hooks, redact=config.redact_enabled) if config.hooks else None
        self.runtimes: dict[str, SessionRuntime] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.draining = False
        self._boot_tasks: set[asyncio.Task[None]] = set()
        self._handed: dict[str, asyncio.Task[Any]] = {}  # supervision/reaping in flight, by kind and session
        # Ids whose folders exist but whose runtime is not registered yet (create in progress).
        self.reserved: set[str] = set()

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def get(self, session_id: str) -> SessionRuntime | None:
        return self.runtimes.get(session_id)

    def owns(self, session_id: str) -> bool:
        return session_id in self.runtimes or session_id in self.reserved

    def launch(self, meta: dict[str, Any], *, provider: Any, roots: list[Path],
               reactivate: bool = False) -> SessionRuntime:
        if self.draining:
            raise Unavailable("the daemon is shutting down", code="daemon_draining")
        if meta["id"] in self.runtimes:
            return self.runtimes[meta["id"]]
        runtime = SessionRuntime(self, meta, config=self.config, provider=provider, roots=roots)
        self.runtimes[runtime.id] = runtime
        self.reserved.discard(runtime.id)
        task = spawn(runtime.boot(reactivate=reactivate))
        runtime.boot_task = task
        self._boot_tasks.add(task)
        task.add_done_callback(self._boot_tasks.discard)
        return runtime

    # ---- hand-offs from the huey sweep (any thread); the work runs on this manager's loop -----------

    def hand_off_supervision(self, session_id: str, actions: list[str], turn_id: str | None) -> bool:
        """Schedule `actions` on the owner's loop and return at once: the sweep never waits on a runtime."""
        return self._hand_off(f"supervise:{session_id}", session_id,
                              lambda runtime: self._supervise(runtime, actions, turn_id))

    def hand_off_reap(self, session_id: str, reason: str) -> bool:
        """Stop a spawned child whose TTL expired or whose parent stopped, without waiting for the stop."""
        return self._hand_off(f"reap:{session_id}", session_id,
                              lambda runtime: runtime.stop(StopReason.USER_CANCELED, reason))

    def _hand_off(self, key: str, session_id: str,
                  work: Callable[[SessionRuntime], Coroutine[Any, Any, Any]]) -> bool:
        loop = self.loop
        if loop is None or loop.is_closed():
            return False
        try:
            loop.call_soon_threadsafe(self._start_handed, key, session_id, work)
        except RuntimeError:  # the loop closed between the check and the call
            return False
        return True

    def _start_handed(self, key: str, session_id: str,
                      work: Callable[[SessionRuntime], Coroutine[Any, Any, Any]]) -> None:
        # On the loop. One piece of supervision per session at a time: a second sweep must not pile a second
        # timeout on a session still in its cancel grace; whatever it proposed is proposed again next tick.
        runtime = self.runtimes.get(session_id)
        if runtime is None or self.draining or key in self._handed:
            return
        task = spawn(work(runtime))
        self._handed[key] = task
        task.add_done_callback(lambda done: self._handed_done(key, done))

    def _handed_done(self, key: str, task: asyncio.Task[Any]) -> None:
        if self._handed.get(key) is task:
            del self._handed[key]
        if not task.cancelled() and task.exception() is not None:
            logger.error("%s failed", key, exc_info=task.exception())

    async def _supervise(self, runtime: SessionRuntime, actions: list[str], turn_id: str | None) -> None:
        for action in actions:
            outcome = await runtime.supervise(action, turn_id)
            if outcome not in ("skipped", "stale"):
                logger.info("supervision %s on %s: %s", action, runtime.id, outcome)
            if outcome in ("stale", "stopped"):
                return

    def forget(self, session_id: str) -> None:
        self.runtimes.pop(session_id, None)

    async def shutdown(self, timeout: float = 20.0) -> None:
        """Stop every live session with reason `shutdown`, concurrently and bounded in time."""
        self.draining = True
        runtimes = list(self.runtimes.values())
        if not runtimes:
            if self.hooks is not None:
                await self.hooks.drain()
            return
        logger.info("stopping %d live session(s) for shutdown", len(runtimes))
        stops = [spawn(rt.stop(StopReason.SHUTDOWN, "daemon shutdown")) for rt in runtimes]
        done, pending = await asyncio.wait(stops, timeout=timeout)
        for task in pending:
            task.cancel()
        for task in done:
            if task.exception():
                logger.error("shutdown stop failed: %s", task.exception())
        if self.hooks is not None:
            await self.hooks.drain()
