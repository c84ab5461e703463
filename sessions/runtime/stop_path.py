"""The stop path (sessions reference §8): cooperative first, forceful only when needed, classified, and
recorded before the session reads `stopped`. Concurrent stops share one; a failed stop is retried."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from compozy_base import metrics
from compozy_base.home import crash_bundles_dir
from sessions.enums import EventType, FailureKind, MarkerKind, SessionState, StopReason
from sessions.runtime import lifecycle
from sessions.runtime.tasks import spawn
from sessions.store.crash_bundles import BUNDLE_FAILURE_KINDS, write_crash_bundle
from sessions.store.redact import bound_tail, redact_text

logger = logging.getLogger(__name__)

STDERR_IN_EVENTS_BYTES = 4096


class StopPathMixin:
    """SessionRuntime's stop path and failure objects (with crash bundles)."""

    async def _watch_exit(self) -> None:
        assert self.agent
        await self.agent.exited.wait()
        if self.stopping or self.stopped.is_set():
            return
        code = self.agent.returncode
        turn_active = self.turn is not None
        with contextlib.suppress(Exception):
            await self.hook("agent.crashed" if code else "agent.stopped", pid=self.agent.pid, error=str(code))
        if self.state == SessionState.STARTING:
            return  # the start path reports this as a handshake/startup failure
        if self.agent.killed_for_closed_stdout:
            reason, kind, detail = (StopReason.ERROR, FailureKind.TRANSPORT_FAILURE,
                                    "the agent closed its stdout and kept running; the daemon stopped it")
        else:
            reason, kind, detail = lifecycle.classify_unexpected_exit(code, turn_active)
        failure = await self.failure(kind, f"{detail}") if kind else None
        await self.stop(reason, detail, failure=failure, process_gone=True)

    async def stop(self, reason: StopReason, detail: str = "", *, failure: dict[str, Any] | None = None,
                   process_gone: bool = False) -> None:
        """The cooperative stop path (reference §8). Concurrent callers share one stop."""
        if self._stop_task is None or (self._stop_task.done() and not self.stopped.is_set()):
            # A stop that failed (its task ended without the session stopping) is retried, never re-raised.
            self._stop_task = spawn(self._stop(reason, detail, failure, process_gone))
        await asyncio.shield(self._stop_task)

    async def _stop(self, reason: StopReason, detail: str, failure: dict[str, Any] | None,
                    process_gone: bool) -> None:
        self.stopping = True
        if not self.fenced and not await self._lease_held():
            # Another node took the session while we were cut off: its meta.json and events.db are not ours.
            logger.error("session %s: its lease is held elsewhere; stopping the agent without recording", self.id)
            self.fenced = True
            self.recorder.closed = True
        with contextlib.suppress(Exception):
            await self.hook("session.pre_stop", stop_reason=reason.value, stop_detail=detail)
        if self.state == SessionState.ACTIVE:
            await self.transition(SessionState.STOPPING)
        if self.boot_task is not None and not self.boot_task.done():
            self.boot_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.boot_task
        # 2. wait for any in-flight prompt setup to finish
        async with self.prompt_lock:
            pass
        turn = self.turn
        # 3. ACP session/cancel, and give the agent the cancel budget to end the turn
        if turn is not None and not process_gone and self.agent and self.agent.returncode is None:
            await self.cancel_turn()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(turn.ended.wait(), self.config.timeouts.stop_cancel_grace)
        # 4-5. wait for exit, escalating through SIGTERM and SIGKILL of the process group
        if self.agent is not None:
            await self.agent.shutdown(grace=self.config.timeouts.stop_cancel_grace)
        if turn is not None and turn.task and not turn.task.done():
            turn.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await turn.task
        if turn is not None and not turn.terminal:
            if failure is not None:
                self.record(EventType.ERROR, {"error": failure["summary"], "failure": failure,
                                              "stop_reason": reason.value, "text": self._stderr_excerpt()},
                            turn_id=turn.id)
            marker = {StopReason.USER_CANCELED: MarkerKind.PROMPT_INTERRUPTED,
                      StopReason.SHUTDOWN: MarkerKind.PROMPT_INTERRUPTED,
                      StopReason.TIMEOUT: MarkerKind.PROMPT_TIMEOUT}.get(reason, MarkerKind.PROVIDER_FAILURE)
            self.marker(marker, f"Turn ended by session stop ({reason.value}).", {"stop_reason": reason.value},
                        turn_id=turn.id)
        await self._finish(reason, detail, failure)

    async def _finish(self, reason: StopReason, detail: str, failure: dict[str, Any] | None) -> None:
        """6-9: classify, record session_stopped, close the recorder, write final meta, stopped."""
        self.stopping = True
        if self.state == SessionState.ACTIVE:
            await self.transition(SessionState.STOPPING)
        stopped: dict[str, Any] = {"stop_reason": reason.value, "stop_detail": detail}
        if failure:
            stopped["failure"] = failure
            stopped["error"] = failure["summary"]
            metrics.FAILURES.labels(kind=str(failure.get("kind"))).inc()
        tail = self._stderr_excerpt()
        if tail and failure:
            stopped["text"] = tail
        self.record(EventType.SESSION_STOPPED, stopped, turn_id="")
        logger.info("session %s stopped: %s%s", self.id, reason.value, f" ({failure['kind']})" if failure else "")
        try:
            await self.recorder.close()
        except Exception:
            logger.exception("session %s: closing the event store failed", self.id)
        self.supervisor.halt()
        if self.state != SessionState.STOPPED:
            await self.transition(SessionState.STOPPED, stop_reason=reason.value, stop_detail=detail,
                                  failure=failure)
        if self.manager.hooks is not None and self.manager.hooks.has_hooks("session.post_stop"):
            # The store is closed now; post_stop runs observe only and are not recorded per session.
            with contextlib.suppress(Exception):
                await self.manager.hooks.dispatch("session.post_stop", self.hook_payload("session.post_stop", {
                    "stop_reason": reason.value, "stop_detail": detail}), record_run=lambda row: None)
        self.stopped.set()
        self.active.clear()
        self.manager.forget(self.id)

    async def _lease_held(self) -> bool:
        from sessions import cluster
        from sessions.runtime.tasks import db

        try:
            return await db(cluster.holds, self.id)
        except Exception:  # the catalog is unreachable: writing our own stop beats leaving it unrecorded
            logger.warning("session %s: lease not readable at stop", self.id, exc_info=True)
            return True

    def _stderr_excerpt(self) -> str:
        if not self.agent:
            return ""
        # The tail is the evidence: what the agent wrote just before it failed.
        return bound_tail(redact_text(self.agent.stderr.text()), STDERR_IN_EVENTS_BYTES)

    async def failure(self, kind: FailureKind, summary: str) -> dict[str, Any]:
        """The failure object, with a crash bundle written off the loop (two fsyncs) for the kinds that get one."""
        path = None
        command = self.agent.command if self.agent else list(self.provider.command)
        cwd = self.agent.cwd if self.agent else self.cwd
        if kind in BUNDLE_FAILURE_KINDS:
            try:
                path = str(await asyncio.to_thread(
                    write_crash_bundle,
                    crash_bundles_dir(), session_id=self.id, agent_name=self.meta["agent_name"],
                    provider=self.meta.get("provider") or "", state=self.state, failure_kind=kind.value,
                    summary=summary,
                    process={"pid": self.agent.pid if self.agent else None,
                             # What was started: an agent.pre_start hook may have patched command and cwd.
                             "command": command[0], "args": command[1:], "cwd": str(cwd),
                             "started_at": self.agent.started_at if self.agent else None,
                             "returncode": self.agent.returncode if self.agent else None},
                    error=summary, stderr=self.agent.stderr.text() if self.agent else "",
                ))
            except OSError:
                logger.exception("could not write the crash bundle for %s", self.id)
        return lifecycle.failure_object(kind, summary, path)
