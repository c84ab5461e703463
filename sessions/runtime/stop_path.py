"""The stop path (docs/reference/sessions.md §8): cooperative first, forceful only when needed, classified, and
recorded before the session reads `stopped`. Concurrent stops share one; a failed stop is retried."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict

from accounts.actor import DAEMON, ActorFields
from compozy_base import metrics
from compozy_base.home import crash_bundles_dir
from sessions.acp.driver import AgentRequestError, TransportClosed
from sessions.catalog import cluster
from sessions.core import lifecycle
from sessions.core.enums import EventType, FailureKind, MarkerKind, SessionState, StopReason
from sessions.core.offload import db, spawn
from sessions.core.record import Failure, FailureDoc
from sessions.core.redact import bound_tail, redact_text
from sessions.store.crash_bundles import BUNDLE_FAILURE_KINDS, write_crash_bundle
from sessions.store.folder import isoformat, utcnow

if TYPE_CHECKING:
    from sessions.runtime.host import SessionCore
    from sessions.runtime.terminal_gateway import TerminalGateway
    from sessions.runtime.turn import Turn

logger = logging.getLogger(__name__)


class SessionStoppedContent(TypedDict, total=False):
    """The `session_stopped` row (`finish`)."""

    stop_reason: str
    stop_detail: str
    failure: FailureDoc
    error: str
    text: str  # the end of the agent's stderr, with a failure
    actor: ActorFields  # `daemon` for a stop no person asked for (a person's stop is in the audit log by the API)

STDERR_IN_EVENTS_BYTES = 4096


async def _audit_daemon_stop(session_id: str, reason: str, detail: str) -> None:
    """A stop the daemon decided (a timeout, a reap, a shutdown, the agent's exit) in the audit log as `daemon`'s:
    not awaited by the stop, and a failure to log is logged with its cause."""
    from accounts import services as accounts

    try:
        await db(accounts.record, DAEMON, "session.stop", utcnow(), session_id=session_id,
                 detail={"stop_reason": reason, "stop_detail": detail[:200]})
    except Exception:  # the stop stands; the lost row is logged
        logger.exception("session %s: the audit row of its stop could not be written", session_id)


class TurnsToStop(Protocol):
    """What the stop path needs of the turns: the running one, the lock its setup holds, and its cancel."""

    @property
    def turn(self) -> Turn | None: ...

    @property
    def prompt_lock(self) -> asyncio.Lock: ...

    async def cancel_turn(self) -> bool: ...

    def close_open_tools(self, turn: Turn, status: str, why: str) -> None: ...


class StopPath:
    """A session's stop path and failure objects (with crash bundles). Owns whether a stop is under way, the one
    stop task concurrent callers share, and the fence set when another node took the session's lease."""

    def __init__(self, session: SessionCore, turns: TurnsToStop, *, active: asyncio.Event,
                 boot_task: Callable[[], asyncio.Task[None] | None], halt_heartbeat: Callable[[], None],
                 terminals: TerminalGateway | None = None) -> None:
        self._session = session
        self._terminals = terminals
        self._turns = turns
        self._active = active
        self._boot_task = boot_task
        self._halt_heartbeat = halt_heartbeat
        self.stopping = False
        # Set when another node took this session's lease (we were cut off past its TTL): the agent is stopped
        # here, but meta.json, the catalog row and events.db are the new owner's, so nothing more is written.
        self.fenced = False
        self._stop_task: asyncio.Task[None] | None = None
        self._exit_watch: asyncio.Task[None] | None = None

    def watch_exit(self) -> None:
        """The agent started: an exit nobody asked for stops the session, classified."""
        self._exit_watch = spawn(self._watch_exit())

    async def _watch_exit(self) -> None:
        session = self._session
        agent = session.agent
        assert agent is not None
        await agent.exited.wait()
        if self.stopping or session.stopped.is_set():
            return
        code = agent.returncode
        turn_active = self._turns.turn is not None
        await session.observe("agent.crashed" if code else "agent.stopped", pid=agent.pid, error=str(code))
        if session.rec.state == SessionState.STARTING:
            return  # the start path reports this as a handshake/startup failure
        kind: FailureKind | None
        if agent.killed_for_closed_stdout:
            reason, kind, detail = (StopReason.ERROR, FailureKind.TRANSPORT_FAILURE,
                                    "the agent closed its stdout and kept running; the daemon stopped it")
        else:
            reason, kind, detail = lifecycle.classify_unexpected_exit(code, turn_active)
        failure = await self.failure(kind, f"{detail}") if kind else None
        await self.stop(reason, detail, failure=failure, process_gone=True)

    async def stop(self, reason: StopReason, detail: str = "", *, failure: FailureDoc | None = None,
                   process_gone: bool = False) -> None:
        """The cooperative stop path (docs/reference/sessions.md §8). Concurrent callers share one stop."""
        if self._stop_task is None or (self._stop_task.done() and not self._session.stopped.is_set()):
            # A stop that failed (its task ended without the session stopping) is retried, never re-raised.
            self._stop_task = spawn(self._stop(reason, detail, failure, process_gone))
        await asyncio.shield(self._stop_task)

    async def _stop(self, reason: StopReason, detail: str, failure: FailureDoc | None,
                    process_gone: bool) -> None:
        session = self._session
        self.stopping = True
        if not self.fenced and not await self._lease_held():
            # Another node took the session while we were cut off: its meta.json and events.db are not ours.
            logger.error("session %s: its lease is held elsewhere; stopping the agent without recording",
                         session.rec.id)
            self.fenced = True
            session.recorder.closed = True
        await session.observe("session.pre_stop", stop_reason=reason.value, stop_detail=detail)
        if session.rec.state == SessionState.ACTIVE:
            await session.transition(SessionState.STOPPING)
        boot = self._boot_task()
        if boot is not None and not boot.done():
            boot.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # the start path logs its own failures
                await boot
        # 2. wait for any in-flight prompt setup to finish
        async with self._turns.prompt_lock:
            pass
        turn = self._turns.turn
        # 3. ACP session/cancel, and give the agent the cancel budget to end the turn
        if turn is not None and not process_gone and session.agent and session.agent.returncode is None:
            await self._turns.cancel_turn()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(turn.ended.wait(), session.config.timeouts.stop_cancel_grace)
        # 4-5. ACP session/close when offered, then wait for exit, escalating through SIGTERM and SIGKILL
        if session.agent is not None:
            if not process_gone:
                await self._close_acp_session()
            await self._close_terminals()
            await session.agent.shutdown(grace=session.config.timeouts.stop_cancel_grace)
        if turn is not None and turn.task and not turn.task.done():
            turn.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await turn.task
        if turn is not None and not turn.terminal:
            # The stop closes the turn: its open tool calls first (cancelled when the stop cancelled the turn, failed
            # when the agent died under it), then its terminal row: the failure's error, else the cancelled end.
            cancelled = turn.cancel_requested and failure is None
            self._turns.close_open_tools(turn, "cancelled" if cancelled else "failed",
                                         f"Tool call {'cancelled' if cancelled else 'cut off'} by the session stop "
                                         f"({reason.value}).")
            if failure is not None:
                session.record(EventType.ERROR, {"error": failure["summary"], "failure": failure,
                                              "stop_reason": reason.value, "text": self.stderr_excerpt()},
                            turn_id=turn.id)
            else:
                session.record(EventType.DONE, {"stop_reason": "cancelled", "prompt_stop_reason": "cancelled",
                                                "session_stop_reason": reason.value}, turn_id=turn.id)
            turn.terminal = True
            marker = {StopReason.USER_CANCELED: MarkerKind.PROMPT_INTERRUPTED,
                      StopReason.SHUTDOWN: MarkerKind.PROMPT_INTERRUPTED,
                      StopReason.TIMEOUT: MarkerKind.PROMPT_TIMEOUT}.get(reason, MarkerKind.PROVIDER_FAILURE)
            session.marker(marker, f"Turn ended by session stop ({reason.value}).", {"stop_reason": reason.value},
                        turn_id=turn.id)
        await self.finish(reason, detail, failure)

    async def _close_terminals(self) -> None:
        """The commands the agent ran through client terminals die with its session (their own process groups)."""
        if self._terminals is not None:
            try:
                await self._terminals.close_all()
            except Exception:  # the stop goes on; what could not be killed is in the log with its cause
                logger.exception("session %s: closing its terminals failed", self._session.rec.id)

    async def _close_acp_session(self) -> None:
        """`session/close` lets the agent release the session before its process is shut down. Bounded by the
        cancel grace; a refusal, a timeout or a dead pipe is logged and the stop goes on."""
        session = self._session
        agent, sid = session.agent, session.rec.acp_session_id
        if agent is None or agent.returncode is not None or not sid \
                or not (session.rec.acp_caps and session.rec.acp_caps.supports_close):
            return
        try:
            await agent.request("session/close", {"sessionId": sid}, timeout=session.config.timeouts.stop_cancel_grace)
        except (AgentRequestError, TransportClosed, TimeoutError) as exc:
            logger.warning("session %s: ACP session/close failed (%s); stopping the agent anyway", session.rec.id,
                           exc)

    async def finish(self, reason: StopReason, detail: str, failure: FailureDoc | None) -> None:
        """6-9: classify, record session_stopped, close the recorder, write final meta, stopped."""
        session = self._session
        self.stopping = True
        if session.rec.state == SessionState.ACTIVE:
            await session.transition(SessionState.STOPPING)
        stopped: SessionStoppedContent = {"stop_reason": reason.value, "stop_detail": detail}
        if failure:
            stopped["failure"] = failure
            stopped["error"] = failure["summary"]
            metrics.FAILURES.labels(kind=str(failure.get("kind"))).inc()
        tail = self.stderr_excerpt()
        if tail and failure:
            stopped["text"] = tail
        if reason != StopReason.USER_CANCELED:
            stopped["actor"] = DAEMON.fields()
            if reason != StopReason.SHUTDOWN:  # the daemon's own end is its log's, and its DB thread is closing
                spawn(_audit_daemon_stop(session.rec.id, reason.value, detail))
        session.record(EventType.SESSION_STOPPED, stopped, turn_id="")
        logger.info("session %s stopped: %s%s", session.rec.id, reason.value,
                    f" ({failure['kind']})" if failure else "")
        try:
            await session.recorder.close()
        except Exception:  # the stop must reach `stopped` whatever the store did; the cause is logged
            logger.exception("session %s: closing the event store failed", session.rec.id)
        self._halt_heartbeat()
        if session.rec.state != SessionState.STOPPED:
            # stopped_at: when this stop happened (a failed stop's webhook is keyed by it, so the next one is new).
            await session.transition(SessionState.STOPPED, stop=(reason.value, detail, Failure.of(failure)),
                                     stopped_at=isoformat(utcnow()))
        hooks = session.manager.hooks
        if hooks is not None and hooks.has_hooks("session.post_stop"):
            # The store is closed now; post_stop runs observe only and are not recorded per session.
            payload = lifecycle.hook_payload(session.rec, "session.post_stop", {"stop_reason": reason.value,
                                                                        "stop_detail": detail})
            try:
                await hooks.dispatch("session.post_stop", payload, record_run=lambda row: None)
            except Exception:  # observe only: the stop goes on; the cause goes to the log
                logger.exception("session %s: hook event session.post_stop failed", session.rec.id)
        session.stopped.set()
        self._active.clear()
        session.manager.forget(session.rec.id)

    async def _lease_held(self) -> bool:
        try:
            return await db(cluster.holds, self._session.rec.id)
        except Exception:  # the catalog is unreachable (logged): writing our own stop beats leaving it unrecorded
            logger.warning("session %s: lease not readable at stop", self._session.rec.id, exc_info=True)
            return True

    def stderr_excerpt(self) -> str:
        if not self._session.agent:
            return ""
        # The tail is the evidence: what the agent wrote just before it failed.
        return bound_tail(redact_text(self._session.agent.stderr.text()), STDERR_IN_EVENTS_BYTES)

    async def failure(self, kind: FailureKind, summary: str) -> FailureDoc:
        """The failure object, with a crash bundle written off the loop (two fsyncs) for the kinds that get one."""
        session = self._session
        path = None
        command = session.agent.command if session.agent else list(session.provider.command)
        cwd = session.agent.cwd if session.agent else Path(session.rec.cwd)
        if kind in BUNDLE_FAILURE_KINDS:
            try:
                path = str(await asyncio.to_thread(
                    write_crash_bundle,
                    crash_bundles_dir(), session_id=session.rec.id, agent_name=session.rec.agent_name,
                    provider=session.rec.provider or "", state=session.rec.state.value, failure_kind=kind.value,
                    summary=summary,
                    process={"pid": session.agent.pid if session.agent else None,
                             # What was started: an agent.pre_start hook may have patched command and cwd.
                             "command": command[0], "args": command[1:], "cwd": str(cwd),
                             "started_at": session.agent.started_at if session.agent else None,
                             "returncode": session.agent.returncode if session.agent else None},
                    error=summary, stderr=session.agent.stderr.text() if session.agent else "",
                ))
            except OSError:
                logger.exception("could not write the crash bundle for %s", session.rec.id)
        return lifecycle.failure_object(kind, summary, path)
