"""SessionManager: the daemon's registry of live sessions, created on the daemon's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from compozy_base import metrics
from compozy_base.config.loader import Config
from sessions.catalog import cluster, ownership
from sessions.catalog import index as catalog
from sessions.core.enums import StopReason
from sessions.core.errors import AgentLimitReached, Unavailable
from sessions.core.offload import db, spawn
from sessions.core.record import SessionRecord
from sessions.hooks import HookRunner
from sessions.live import doorbells
from sessions.runtime.inputs import InputQueue
from sessions.runtime.session import SessionRuntime
from sessions.runtime.supervision import Decision
from sessions.store import writer as store_writer

logger = logging.getLogger(__name__)

# How often metadata that could not be written (a full disk) is tried again; space usually returns when
# an operator frees it, so a few seconds is prompt without spinning.
RESAVE_INTERVAL_SECONDS = 2.0

def get_manager() -> SessionManager:
    """The manager of this daemon process, as the runtime knows it; API calls made outside a daemon get 503. The one
    reference is ownership's (`ownership.local_manager()`, the way to ask without raising and without importing the
    runtime); this only narrows it to the runtime's type."""
    manager = ownership.local_manager()
    if manager is None:
        raise Unavailable("the Compozy daemon is not running in this process", code="daemon_unavailable")
    assert isinstance(manager, SessionManager), manager  # only set_manager sets it
    return manager


def set_manager(manager: SessionManager | None) -> None:
    """The one setter (the launcher's, at start and at exit)."""
    ownership.set_local_manager(manager)


def _log_release_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("a session lease was not released (it expires instead): %s", task.exception())


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
        # Metadata snapshots whose write failed (a full disk): reads serve them, a retry loop lands them.
        self.unsaved_meta: dict[str, SessionRecord] = {}
        self._resave: asyncio.Task[None] | None = None
        # Creates and reactivations admitted but not launched yet: they count against the agent limit too.
        self.admitting = 0

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def get(self, session_id: str) -> SessionRuntime | None:
        return self.runtimes.get(session_id)

    def owns(self, session_id: str) -> bool:
        return session_id in self.runtimes or session_id in self.reserved

    @contextlib.contextmanager
    def admission(self) -> Iterator[None]:
        """Hold a slot of `[limits] max_concurrent_agents` from the check until the runtime is registered.

        Runs on the daemon's loop, so the check and the slot are taken with no await between them: two concurrent
        creates cannot both take the last slot. A stopped session leaves `runtimes` and frees its slot.
        """
        limit = self.config.max_concurrent_agents
        live = len(self.runtimes) + self.admitting
        if live >= limit:
            raise AgentLimitReached(f"{live} agent sessions are live, the limit is {limit} ([limits] "
                                    "max_concurrent_agents); stop one or try again later",
                                    data={"live": live, "max_concurrent_agents": limit})
        self.admitting += 1
        try:
            yield
        finally:
            self.admitting -= 1

    def launch(self, rec: SessionRecord, *, provider: Any, roots: list[Path],
               reactivate: bool = False) -> SessionRuntime:
        if self.draining:
            raise Unavailable("the daemon is shutting down", code="daemon_draining")
        if rec.id in self.runtimes:
            return self.runtimes[rec.id]
        runtime = SessionRuntime(self, rec, config=self.config, provider=provider, roots=roots)
        self.runtimes[runtime.id] = runtime
        self.reserved.discard(runtime.id)
        task = spawn(runtime.boot(reactivate=reactivate))
        runtime.boot_task = task
        self._boot_tasks.add(task)
        task.add_done_callback(self._boot_tasks.discard)
        return runtime

    # ---- hand-offs from the huey sweep (any thread); the work runs on this manager's loop -----------

    def hand_off_supervision(self, session_id: str, decision: Decision) -> bool:
        """Schedule the sweep's decision on the owner's loop and return at once: the sweep never waits on a runtime."""
        return self._hand_off(f"supervise:{session_id}", session_id,
                              lambda runtime: self._supervise(runtime, decision))

    def hand_off_reap(self, session_id: str, reason: str) -> bool:
        """Stop a spawned child whose TTL expired or whose parent stopped, without waiting for the stop."""
        return self._hand_off(f"reap:{session_id}", session_id,
                              lambda runtime: runtime.stop(StopReason.USER_CANCELED, reason))

    def hand_off_stop(self, session_id: str, reason: StopReason, detail: str) -> bool:
        """Stop a session for its task run (settled, canceled, or its lease lost), without waiting."""
        return self._hand_off(f"stop:{session_id}", session_id, lambda runtime: runtime.stop(reason, detail))

    def hand_off_fence(self, session_id: str, holder: str) -> bool:
        """Another node holds this session's lease now: stop the agent here without writing anything more."""
        def fence(runtime: SessionRuntime) -> Coroutine[Any, Any, Any]:
            runtime.fenced = True
            runtime.recorder.closed = True  # records are dropped (and logged), never written to its events.db
            detail = ("session lease ended by failover while this node was cut off" if holder == "failover"
                      else f"session lease lost to node {holder}")
            return runtime.stop(StopReason.AGENT_CRASHED, detail)

        return self._hand_off(f"fence:{session_id}", session_id, fence)

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

    async def _supervise(self, runtime: SessionRuntime, decision: Decision) -> None:
        for action in decision.actions:
            outcome = await runtime.supervisor.carry_out(action, decision)
            metrics.SUPERVISION_ACTIONS.labels(action=action, result=outcome).inc()
            if outcome not in ("skipped", "stale"):
                logger.info("supervision %s on %s: %s", action, runtime.id, outcome)
            if outcome in ("stale", "stopped"):
                return

    def forget(self, session_id: str) -> None:
        """The runtime stopped: its lease goes too, after the final metadata (same DB thread, in order)."""
        if self.runtimes.pop(session_id, None) is not None:
            spawn(db(cluster.release, session_id)).add_done_callback(_log_release_failure)

    # ---- metadata that could not be written ---------------------------------------------------

    def keep_unsaved(self, rec: SessionRecord) -> None:
        self.unsaved_meta[rec.id] = rec
        if self._resave is None or self._resave.done():
            self._resave = spawn(self._resave_loop())

    def supersede_unsaved(self, session_id: str) -> None:
        """A newer snapshot is about to be written: the older unsaved one must never be retried after it."""
        self.unsaved_meta.pop(session_id, None)

    async def _resave_loop(self) -> None:

        while self.unsaved_meta:
            await asyncio.sleep(RESAVE_INTERVAL_SECONDS)
            for session_id, rec in list(self.unsaved_meta.items()):
                runtime = self.runtimes.get(session_id)
                if runtime is not None and not await runtime.lease_allows_write():
                    # Failed over while it waited: another node's meta.json now.
                    if self.unsaved_meta.get(session_id) is rec:
                        del self.unsaved_meta[session_id]
                    logger.error("session %s: unsaved metadata dropped: this node lost the session's lease",
                                 session_id)
                    continue
                try:
                    await db(catalog.save_meta, rec)
                except Exception as exc:  # noqa: BLE001 - any write failure: logged, retried next round
                    logger.warning("session %s: metadata still unwritable: %s", session_id, exc)
                    continue
                if self.unsaved_meta.get(session_id) is rec:
                    del self.unsaved_meta[session_id]
                logger.info("session %s: metadata written after an earlier failure", session_id)
                doorbells.ring_catalog("upserted", rec.workspace_id, session_id)

    async def shutdown(self, timeout: float = 20.0) -> None:
        """Stop every live session with reason `shutdown`, concurrently and bounded in time."""
        self.draining = True
        runtimes = list(self.runtimes.values())
        if runtimes:
            await self._stop_all(runtimes, timeout)
        if self.hooks is not None:
            await self.hooks.drain()
        # Every store is closed by now: the store writer process ends with its input.
        await store_writer.shutdown(asyncio.get_running_loop())

    async def _stop_all(self, runtimes: list[SessionRuntime], timeout: float) -> None:
        logger.info("stopping %d live session(s) for shutdown", len(runtimes))
        stops = [spawn(rt.stop(StopReason.SHUTDOWN, "daemon shutdown")) for rt in runtimes]
        done, pending = await asyncio.wait(stops, timeout=timeout)
        for task in pending:
            task.cancel()
        for task in done:
            if task.exception():
                logger.error("shutdown stop failed: %s", task.exception())
