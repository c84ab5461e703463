"""SessionRuntime: one live session, its agent process, its turns and its stop path.

Everything here runs on the daemon's asyncio loop. Events are recorded synchronously into the
group-commit recorder; meta.json and the catalog row are rewritten on every lifecycle change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compozy_site.home import crash_bundles_dir
from sessions import catalog
from sessions.acp import client_side
from sessions.acp.driver import AgentNotFound, AgentProcess, AgentRequestError, TransportClosed
from sessions.acp.mapping import map_update, normalize_usage
from sessions.config import AgentConfig, Config, ProviderConfig
from sessions.enums import START_FAILURE_STOP_REASON, EventType, FailureKind, MarkerKind, SessionState, StopReason
from sessions.runtime import lifecycle, signals
from sessions.runtime.recorder import Recorder
from sessions.runtime.tasks import db, spawn
from sessions.store import folder
from sessions.store.crash_bundles import BUNDLE_FAILURE_KINDS, write_crash_bundle
from sessions.store.events import EventLog
from sessions.store.ids import new_turn_id
from sessions.store.redact import bound_text, redact_text

if TYPE_CHECKING:
    from sessions.runtime.manager import SessionManager

logger = logging.getLogger(__name__)

INITIALIZE_TIMEOUT = 30.0
NEW_SESSION_TIMEOUT = 60.0
# Reference §8: cancel budget before the subprocess shutdown path starts.
CANCEL_BUDGET_SECONDS = 1.0
STDERR_IN_EVENTS_BYTES = 4096


@dataclass
class Turn:
    id: str
    text: str
    source: str
    started_at: str
    started_mono: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    terminal: bool = False
    cancel_requested: bool = False


class StartFailed(Exception):
    def __init__(self, kind: FailureKind, summary: str) -> None:
        super().__init__(summary)
        self.kind = kind
        self.summary = summary


class SessionRuntime:
    def __init__(self, manager: SessionManager, meta: dict[str, Any], *, config: Config,
                 agent: AgentConfig, provider: ProviderConfig, roots: list[Path]) -> None:
        self.manager = manager
        self.meta = meta
        self.id: str = meta["id"]
        self.config = config
        self.agent_cfg = agent
        self.provider = provider
        self.roots = roots
        self.cwd = Path(meta["cwd"])
        log = EventLog(folder.events_path(self.id), meta["agent_name"], redact=config.redact_enabled)
        self.recorder = Recorder(log, self._on_commit)
        self.agent: AgentProcess | None = None
        self.turn: Turn | None = None
        self.tool_titles: dict[str, str] = {}
        self.prompt_lock = asyncio.Lock()
        self.stopping = False
        self.stopped = asyncio.Event()
        self.active = asyncio.Event()
        self._exit_watch: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._loading = False
        self._stop_task: asyncio.Task[None] | None = None
        self.boot_task: asyncio.Task[None] | None = None

    # ---- state -----------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return str(self.meta["state"])

    async def persist(self) -> None:
        """meta.json first (the per-session truth), then the catalog mirror, then the doorbell."""
        self.meta["updated_at"] = folder.isoformat(folder.utcnow())
        folder.write_meta(self.meta)
        await db(catalog.upsert_session_row, dict(self.meta))
        signals.ring_catalog("upserted", self.meta["workspace_id"], self.id)

    async def transition(self, target: SessionState, **fields: Any) -> None:
        lifecycle.check_transition(self.state, target)
        self.meta["state"] = target.value
        self.meta.update(fields)
        await self.persist()

    # ---- recording -------------------------------------------------------------------------

    def record(self, type_: str, content: dict[str, Any], turn_id: str | None = None) -> None:
        tid = turn_id if turn_id is not None else (self.turn.id if self.turn else "")
        if self.meta.get("acp_session_id"):
            content = {"session_id": self.meta["acp_session_id"], **content}
        self.recorder.record(type_, tid, content)

    def marker(self, kind: MarkerKind, summary: str, evidence: dict[str, Any] | None = None,
               turn_id: str | None = None) -> None:
        raw = {"kind": f"transcript_marker.{kind.value}", "occurred_at": folder.isoformat(folder.utcnow()),
               "summary": bound_text(redact_text(summary), 2048)}
        if evidence:
            raw["evidence"] = evidence
        self.record(EventType.TRANSCRIPT_MARKER, {"title": kind.value, "text": raw["summary"], "raw": raw}, turn_id)

    def _on_commit(self, stored: list[dict[str, Any]]) -> None:
        if stored:
            signals.ring_events(self.id, stored[-1]["sequence"])

    def touch_activity(self, kind: str, detail: str = "", tool: str | None = None,
                       tool_call_id: str | None = None) -> None:
        activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
        now = folder.isoformat(folder.utcnow())
        activity.update({"last_activity_at": now, "last_activity_kind": kind, "last_activity_detail": detail[:200]})
        if tool is not None:
            activity["current_tool"] = tool
            activity["tool_call_id"] = tool_call_id
        self.meta["liveness"]["last_update_at"] = now

    # ---- agent callbacks -------------------------------------------------------------------

    def on_update(self, params: dict[str, Any]) -> None:
        """Called synchronously by the driver's observer, in arrival order."""
        if self._loading:
            return  # session/load replays history we already hold; never record it twice
        update = params.get("update")
        if not isinstance(update, dict):
            return
        mapped = map_update(update, self.tool_titles)
        if mapped is None:
            return
        type_, content = mapped
        self.record(type_, content)
        if type_ == EventType.USAGE and self.turn:
            self.recorder.log.merge_usage(self.turn.id, content.get("usage", {}))
        tool = content.get("tool_name") if type_ in (EventType.TOOL_CALL, EventType.TOOL_RESULT) else None
        self.touch_activity(str(update.get("sessionUpdate", type_)), tool=tool,
                            tool_call_id=content.get("tool_call_id"))

    async def on_request(self, method: str, params: dict[str, Any]) -> Any:
        from acp.exceptions import RequestError

        if method == "session/request_permission":
            return self._answer_permission(params)
        if method in ("fs/read_text_file", "fs/write_text_file"):
            path = str(params.get("path", ""))
            try:
                resolved = client_side.confine(path, self.roots)
            except client_side.OutsideWorkspace as exc:
                self.record(EventType.PERMISSION, {
                    "action": method, "resource": path, "decision": "denied",
                    "title": "path outside the workspace", "error": str(exc),
                })
                raise RequestError.invalid_params({"path": path, "reason": "outside the workspace"}) from exc
            self.touch_activity("fs", f"{method} {resolved}")
            try:
                if method == "fs/read_text_file":
                    text = await asyncio.to_thread(client_side.read_text, resolved, params.get("line"),
                                                   params.get("limit"))
                    return {"content": text}
                await asyncio.to_thread(client_side.write_text, resolved, str(params.get("content", "")))
                return {}
            except (OSError, ValueError) as exc:
                raise RequestError.internal_error({"path": path, "error": str(exc)}) from exc
        raise RequestError.method_not_found(method)

    def _answer_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        tool_call = params.get("toolCall") if isinstance(params.get("toolCall"), dict) else {}
        options = [o for o in params.get("options", []) if isinstance(o, dict)]
        mode = str(self.meta.get("effective_permissions") or self.config.permissions_mode)
        decision, option_id = client_side.policy_decision(mode, tool_call, options)
        call_id = str(tool_call.get("toolCallId", ""))
        self.record(EventType.PERMISSION, {
            "request_id": call_id, "action": str(tool_call.get("kind") or "tool"),
            "resource": self.tool_titles.get(call_id) or str(tool_call.get("title") or ""),
            "decision": decision, "decision_source": f"policy:{mode}", "title": tool_call.get("title"),
            "tool_call_id": call_id, "raw": {"toolCall": tool_call, "options": options},
        })
        self.touch_activity("permission", decision)
        return client_side.permission_response(option_id)

    # ---- start -----------------------------------------------------------------------------

    async def boot(self, *, reactivate: bool = False) -> None:
        """Background start: spawn → initialize → session/new (or load) → active → queued input."""
        try:
            await self._start_agent(reactivate=reactivate)
        except StartFailed as exc:
            await self._fail_start(exc.kind, exc.summary)
            return
        except asyncio.CancelledError:
            await self._fail_start(FailureKind.CANCELLATION, "start canceled")
            raise
        except Exception as exc:
            logger.exception("session %s failed to start", self.id)
            await self._fail_start(FailureKind.STARTUP_FAILURE, f"unexpected start error: {exc}")
            return
        if self.stopping:
            return
        await self.transition(SessionState.ACTIVE)
        self.active.set()
        try:
            await self.dispatch_next()
        except Exception:
            logger.exception("session %s: dispatching queued input failed", self.id)

    async def _start_agent(self, *, reactivate: bool) -> None:
        agent = AgentProcess(self.provider.command, cwd=self.cwd, env=self.provider.env,
                             on_update=self.on_update, on_request=self.on_request)
        self.agent = agent
        try:
            await agent.start()
        except AgentNotFound as exc:
            raise StartFailed(FailureKind.STARTUP_FAILURE, str(exc)) from exc
        self.meta.setdefault("liveness", {}).update(
            {"subprocess_pid": agent.pid, "subprocess_started_at": agent.started_at}
        )
        self._exit_watch = spawn(self._watch_exit())
        try:
            init = await agent.initialize(INITIALIZE_TIMEOUT)
        except (TransportClosed, AgentRequestError, TimeoutError) as exc:
            await asyncio.sleep(0.05)
            raise StartFailed(FailureKind.HANDSHAKE_FAILURE, self._with_exit(f"ACP initialize failed: {exc}")) from exc
        caps = init.get("agentCapabilities") if isinstance(init.get("agentCapabilities"), dict) else {}
        self.meta["acp_caps"] = {"supports_load_session": bool(caps.get("loadSession")),
                                 "agent_info": init.get("agentInfo")}
        await self._open_acp_session(reactivate=reactivate)

    async def _open_acp_session(self, *, reactivate: bool) -> None:
        assert self.agent
        params = {"cwd": str(self.cwd), "mcpServers": []}
        if self.roots[1:]:
            params["additionalDirectories"] = [str(r) for r in self.roots[1:]]
        try:
            result = await self.agent.request("session/new", params, timeout=NEW_SESSION_TIMEOUT)
        except (TransportClosed, AgentRequestError, TimeoutError) as exc:
            raise StartFailed(FailureKind.STARTUP_FAILURE, self._with_exit(f"ACP session/new failed: {exc}")) from exc
        if not isinstance(result, dict) or not result.get("sessionId"):
            raise StartFailed(FailureKind.PROTOCOL_FAILURE, "ACP session/new returned no sessionId")
        self.meta["acp_session_id"] = str(result["sessionId"])

    def _with_exit(self, message: str) -> str:
        if self.agent and self.agent.returncode is not None:
            message += f"; {lifecycle.describe_exit(self.agent.returncode)}"
        tail = self.agent.stderr.text().strip() if self.agent else ""
        if tail:
            message += f"; stderr: {tail[-500:]}"
        return message

    async def _fail_start(self, kind: FailureKind, summary: str) -> None:
        if self.stopping or self.stopped.is_set():
            return  # a stop raced the start; the stop path finishes the session
        reason = START_FAILURE_STOP_REASON.get(kind, StopReason.ERROR)
        if self.agent is not None:
            await self.agent.shutdown(grace=0.2)
        failure = self._failure(kind, summary)
        self.record(EventType.ERROR, {"error": failure["summary"], "failure": failure,
                                      "text": self._stderr_excerpt()}, turn_id="")
        await self._finish(reason, summary, failure)

    # ---- prompts ---------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.turn is not None

    async def start_turn(self, text: str, *, source: str = "user", authored: str | None = None) -> Turn:
        """Record user_message (committed) before the prompt reaches ACP, then run the turn."""
        async with self.prompt_lock:
            turn = Turn(new_turn_id(), text, source, folder.isoformat(folder.utcnow()) or "")
            self.turn = turn
            content: dict[str, Any] = {"text": text, "source": source}
            if authored is not None and authored != text:
                content["authored_text"] = authored
            self.record(EventType.USER_MESSAGE, content, turn_id=turn.id)
            self.recorder.flush()
            activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
            activity.update({"turn_id": turn.id, "turn_source": source, "turn_started_at": turn.started_at,
                             "current_tool": None, "tool_call_id": None, "last_progress_at": None})
            self.touch_activity("prompt_started")
            turn.task = spawn(self._run_turn(turn))
        return turn

    async def _run_turn(self, turn: Turn) -> None:
        assert self.agent
        try:
            result = await self.agent.request("session/prompt", {
                "sessionId": self.meta["acp_session_id"],
                "prompt": [{"type": "text", "text": turn.text}],
            })
            result = result if isinstance(result, dict) else {}
            stop = str(result.get("stopReason") or "end_turn")
            content: dict[str, Any] = {"stop_reason": stop, "prompt_stop_reason": stop}
            if isinstance(result.get("usage"), dict):
                content["usage"] = normalize_usage(result["usage"])
                self.recorder.log.merge_usage(turn.id, content["usage"])
            self.record(EventType.DONE, content, turn_id=turn.id)
            turn.terminal = True
        except AgentRequestError as exc:
            failure = self._failure(FailureKind.PROMPT_FAILURE, str(exc), bundle=False)
            self.record(EventType.ERROR, {"error": failure["summary"], "failure": failure}, turn_id=turn.id)
            turn.terminal = True
        except TransportClosed:
            # The exit watcher classifies the death and terminalizes this turn in the stop path.
            pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("turn %s failed", turn.id)
            self.record(EventType.ERROR, {"error": redact_text(str(exc))}, turn_id=turn.id)
            turn.terminal = True
        finally:
            self.recorder.flush()
            self.turn = None if self.turn is turn else self.turn
            turn.ended.set()
        if self.state == SessionState.ACTIVE and not self.stopping:
            await self.persist()
            await self.dispatch_next()

    async def cancel_turn(self) -> bool:
        """ACP session/cancel for the running turn; the agent answers the prompt with `cancelled`."""
        turn = self.turn
        if turn is None or self.agent is None:
            return False
        turn.cancel_requested = True
        await self.agent.notify("session/cancel", {"sessionId": self.meta.get("acp_session_id")})
        return True

    async def dispatch_next(self) -> None:
        """Run the oldest queued input (a staged first prompt or a queued prompt), if idle."""
        if self.busy or self.state != SessionState.ACTIVE or self.stopping:
            return
        entry = await db(self.manager.inputs.claim_next, self.id)
        if entry is None:
            return
        self.marker(MarkerKind.PROMPT_ACCEPTED, "Queued prompt handed to the agent.",
                    {"queue_entry_id": entry.id, "queue_generation": entry.generation, "source": entry.source})
        try:
            await self.start_turn(entry.text, source=entry.source)
        except Exception:
            await db(self.manager.inputs.mark, entry.id, "failed")
            raise
        await db(self.manager.inputs.mark, entry.id, "sent")

    # ---- stop ------------------------------------------------------------------------------

    async def _watch_exit(self) -> None:
        assert self.agent
        await self.agent.exited.wait()
        if self.stopping or self.stopped.is_set():
            return
        code = self.agent.returncode
        turn_active = self.turn is not None
        if self.state == SessionState.STARTING:
            return  # the start path reports this as a handshake/startup failure
        reason, kind, detail = lifecycle.classify_unexpected_exit(code, turn_active)
        failure = self._failure(kind, f"{detail}") if kind else None
        await self.stop(reason, detail, failure=failure, process_gone=True)

    async def stop(self, reason: StopReason, detail: str = "", *, failure: dict[str, Any] | None = None,
                   process_gone: bool = False) -> None:
        """The cooperative stop path (reference §8). Concurrent callers share one stop."""
        if self._stop_task is None:
            self._stop_task = spawn(self._stop(reason, detail, failure, process_gone))
        await asyncio.shield(self._stop_task)

    async def _stop(self, reason: StopReason, detail: str, failure: dict[str, Any] | None,
                    process_gone: bool) -> None:
        self.stopping = True
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
                await asyncio.wait_for(turn.ended.wait(), CANCEL_BUDGET_SECONDS)
        # 4-5. wait for exit, escalating through SIGTERM and SIGKILL of the process group
        if self.agent is not None:
            await self.agent.shutdown()
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
        tail = self._stderr_excerpt()
        if tail and failure:
            stopped["text"] = tail
        self.record(EventType.SESSION_STOPPED, stopped, turn_id="")
        with contextlib.suppress(Exception):
            self.recorder.close()
        if self._heartbeat:
            self._heartbeat.cancel()
        await self.transition(SessionState.STOPPED, stop_reason=reason.value, stop_detail=detail,
                              failure=failure)
        self.stopped.set()
        self.active.clear()
        self.manager.forget(self.id)

    def _stderr_excerpt(self) -> str:
        if not self.agent:
            return ""
        return bound_text(redact_text(self.agent.stderr.text()[-STDERR_IN_EVENTS_BYTES:]), STDERR_IN_EVENTS_BYTES)

    def _failure(self, kind: FailureKind, summary: str, *, bundle: bool = True) -> dict[str, Any]:
        path = None
        if bundle and kind in BUNDLE_FAILURE_KINDS:
            try:
                path = str(write_crash_bundle(
                    crash_bundles_dir(), session_id=self.id, agent_name=self.meta["agent_name"],
                    provider=self.meta.get("provider") or "", state=self.state, failure_kind=kind.value,
                    summary=summary,
                    process={"pid": self.agent.pid if self.agent else None,
                             "command": self.provider.command[0], "args": list(self.provider.command[1:]),
                             "cwd": str(self.cwd),
                             "started_at": self.agent.started_at if self.agent else None,
                             "returncode": self.agent.returncode if self.agent else None},
                    error=summary, stderr=self.agent.stderr.text() if self.agent else "",
                ))
            except OSError:
                logger.exception("could not write the crash bundle for %s", self.id)
        return lifecycle.failure_object(kind, summary, path)
