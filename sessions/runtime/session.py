"""SessionRuntime: one live session, its agent process, its turns and its stop path.

Everything here runs on the daemon's asyncio loop. Events are recorded synchronously into the
group-commit recorder; meta.json and the catalog row are rewritten on every lifecycle change.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from compozy_site import metrics
from compozy_site.home import crash_bundles_dir
from sessions import catalog
from sessions.acp import client_side
from sessions.acp.driver import AgentNotFound, AgentProcess, AgentRequestError, TransportClosed
from sessions.acp.mapping import map_update, normalize_usage
from sessions.config import Config, ProviderConfig
from sessions.enums import START_FAILURE_STOP_REASON, EventType, FailureKind, MarkerKind, SessionState, StopReason
from sessions.runtime import lifecycle, signals
from sessions.runtime.host import RuntimeHost
from sessions.runtime.permissions import PermissionBoard, option_for
from sessions.runtime.recorder import Recorder
from sessions.runtime.tasks import db, spawn
from sessions.store import folder
from sessions.store.crash_bundles import BUNDLE_FAILURE_KINDS, write_crash_bundle
from sessions.store.failures import StoreFailure
from sessions.store.ids import new_turn_id
from sessions.store.redact import bound_tail, bound_text, redact_text

logger = logging.getLogger(__name__)

INITIALIZE_TIMEOUT = 30.0
NEW_SESSION_TIMEOUT = 60.0
# Reference §8: cancel budget before the subprocess shutdown path starts.
CANCEL_BUDGET_SECONDS = 1.0
STDERR_IN_EVENTS_BYTES = 4096
# Hook events whose required denial (or required failure) stops the session with hook_stopped (hooks.md §5).
GATED_HOOK_EVENTS = frozenset({"input.pre_submit", "prompt.post_assemble", "turn.start", "tool.pre_call",
                               "permission.request"})
HOOK_STOP_SUMMARY = "session stopped by hook policy"
# Failures a turn puts on a live session; the next turn that succeeds clears them.
TURN_FAILURE_KINDS = frozenset({FailureKind.PROMPT_FAILURE.value, FailureKind.PROVIDER_AUTH_FAILURE.value})


@dataclass
class Turn:
    id: str
    text: str  # what the user asked (after prompt hooks): salvage, titles and history use this
    source: str
    started_at: str
    sent: str = ""  # what the agent receives, when it differs (a context replay prepended)
    authored: str = ""  # exactly what was typed, when a prompt hook changed `text`
    started_mono: float = field(default_factory=time.monotonic)
    last_activity_mono: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    terminal: bool = False
    cancel_requested: bool = False
    warned: bool = False
    timed_out: bool = False
    reply: str = ""
    outputs: int = 0  # session/update notifications the agent sent during this turn
    last_progress_mono: float = field(default_factory=time.monotonic)


@dataclass
class StagedSteer:
    entry_id: str
    text: str
    generation: int
    delivering: bool = False


class StartFailed(Exception):
    def __init__(self, kind: FailureKind, summary: str, code: str | None = None) -> None:
        super().__init__(summary)
        self.kind = kind
        self.summary = summary
        self.code = code


class SessionRuntime:
    def __init__(self, manager: RuntimeHost, meta: dict[str, Any], *, config: Config,
                 provider: ProviderConfig, roots: list[Path]) -> None:
        self.manager = manager
        self.meta = meta
        self.id: str = meta["id"]
        self.config = config
        self.provider = provider
        self.roots = roots
        self.cwd = Path(meta["cwd"])
        self.recorder = Recorder(folder.events_path(self.id), meta["agent_name"], self._on_commit,
                                 self._on_store_failure, redact=config.redact_enabled)
        self.recorder.commit_seconds = metrics.STORE_COMMIT_SECONDS.observe
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
        self.permissions = PermissionBoard()
        # Busy input: the canceled text a dedicated interrupt keeps for one steer, and the staged steer.
        self.salvage: dict[str, Any] | None = None
        self.steer: StagedSteer | None = None
        # Provider context recovery: a projection of this session's log, prepended to the next prompt.
        self.projection: str | None = None
        # Set while an interrupt or a steer hands the session from one turn to the next: the ending turn
        # must not dispatch queued input into the gap (ACP runs one prompt per session at a time).
        self.handover = False
        self._activity_at: float | None = None  # time.time() of the last activity; stamped into meta on write

    # ---- state -----------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return str(self.meta["state"])

    async def persist(self) -> None:
        """meta.json first (the per-session truth), then the catalog mirror, then the doorbell.

        Both writes run on the runtime's one DB thread: meta.json's two fsyncs on the event loop stalled
        every other session's stream (20-60 ms under load), and one FIFO thread still lands a session's
        snapshots in the order they were taken."""
        self._stamp_activity()
        self.meta["updated_at"] = folder.isoformat(folder.utcnow())
        snapshot = copy.deepcopy(self.meta)
        try:
            await db(catalog.save_meta, snapshot)
        except Exception as exc:
            # A lifecycle change must never be lost to a full disk or a locked catalog: reads serve the
            # snapshot until a retry lands it (manager.unsaved_meta), and the failure is in the log.
            logger.error("session %s: writing its metadata failed (%s); retrying in the background", self.id, exc)
            self.manager.keep_unsaved(snapshot)
            return
        self.manager.saved(self.id, snapshot)
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

    def _on_commit(self, stored: list[dict[str, Any]], rows: list[tuple[Any, ...]]) -> None:
        """After each commit: hand the rows to this process's live feed (no read-back), then ring the
        doorbell for everyone else (other processes' feeds, the fallback poll's early wake)."""
        from sessions.feed import offer_rows

        metrics.EVENTS_APPENDED.inc(len(stored))
        offer_rows(self.id, rows)
        signals.ring_events(self.id, stored[-1]["sequence"])

    def _on_store_failure(self, failure: StoreFailure) -> None:
        """The store stayed unwritable: stop the session with a visible failure, never keep going as if
        its events were being kept."""
        summary = f"event store unwritable ({failure.reason}): {failure.detail}"
        logger.error("session %s: %s; stopping it", self.id, summary)
        spawn(self.stop(StopReason.ERROR, "event store unwritable",
                        failure=lifecycle.failure_object(FailureKind.STORAGE_FAILURE, redact_text(summary))))

    def touch_activity(self, kind: str, detail: str = "", tool: str | None = None,
                       tool_call_id: str | None = None) -> None:
        """Called for every event: keep it cheap. The wall-clock time is formatted only when written."""
        activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
        activity["last_activity_kind"] = kind
        activity["last_activity_detail"] = detail[:200]
        if tool is not None:
            activity["current_tool"] = tool
            activity["tool_call_id"] = tool_call_id
        self._activity_at = time.time()
        if self.turn is not None:
            self.turn.last_activity_mono = time.monotonic()

    def _stamp_activity(self) -> None:
        if self._activity_at is None:
            return
        stamp = folder.isoformat(datetime.fromtimestamp(self._activity_at, UTC))
        self.meta.setdefault("liveness", {}).setdefault("activity", {})["last_activity_at"] = stamp
        self.meta["liveness"]["last_update_at"] = stamp

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
        if self.turn is not None:
            self.turn.outputs += 1
        if type_ == EventType.AGENT_MESSAGE and self.turn is not None and len(self.turn.reply) < 600:
            self.turn.reply += content.get("text", "")
        if type_ == EventType.USAGE and self.turn:
            self.recorder.merge_usage(self.turn.id, content.get("usage", {}))
        tool = content.get("tool_name") if type_ in (EventType.TOOL_CALL, EventType.TOOL_RESULT) else None
        self.touch_activity(str(update.get("sessionUpdate", type_)), tool=tool,
                            tool_call_id=content.get("tool_call_id"))
        if type_ == EventType.TOOL_RESULT and self.manager.hooks is not None:
            event = "tool.post_error" if content.get("tool_error") else "tool.post_call"
            if self.manager.hooks.has_hooks(event):
                spawn(self.hook(event, tool_call_id=content.get("tool_call_id"), tool_id=content.get("tool_name"),
                                tool_name=content.get("tool_name"), title=content.get("tool_name"),
                                tool_result=content.get("tool_result"), error=content.get("tool_error")))
        if type_ == EventType.TOOL_RESULT and self.steer is not None and not self.steer.delivering and self.turn:
            self.steer.delivering = True
            spawn(self._deliver_steer(self.turn))

    async def on_request(self, method: str, params: dict[str, Any]) -> Any:
        from acp.exceptions import RequestError

        if method == "session/request_permission":
            return await self._answer_permission(params)
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
                raise client_side.fs_error(path, exc) from exc
        raise RequestError.method_not_found(method)

    async def _answer_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        """Policy first; `approve-reads` leaves anything but reads to a person (API/CLI/dashboard)."""
        tool_call = params.get("toolCall") if isinstance(params.get("toolCall"), dict) else {}
        options = [o for o in params.get("options", []) if isinstance(o, dict)]
        mode = str(self.meta.get("effective_permissions") or self.config.permissions_mode)
        call_id = str(tool_call.get("toolCallId", ""))
        base = {
            "request_id": call_id, "action": str(tool_call.get("kind") or "tool"),
            "resource": self.tool_titles.get(call_id) or str(tool_call.get("title") or ""),
            "title": tool_call.get("title"), "tool_call_id": call_id,
        }
        turn_id = self.turn.id if self.turn else ""
        gate = await self._permission_hooks(tool_call, options, base, mode)
        if gate is not None:
            decision, option_id, source = gate
        elif mode == "approve-reads" and str(tool_call.get("kind", "")) not in client_side.READ_KINDS:
            if self.turn is not None and self.turn.cancel_requested:
                decision, option_id, source = "cancelled", None, "turn_cancelled"
            else:
                pending = self.permissions.open(call_id or f"perm-{len(self.permissions.pending)}", turn_id,
                                                tool_call, options)
                self.record(EventType.PERMISSION, {**base, "request_id": pending.request_id, "decision": "pending",
                                                   "decision_source": "person", "raw": {"toolCall": tool_call,
                                                                                        "options": options}})
                await self.recorder.flush()
                self.touch_activity("agent_waiting", "waiting for a permission decision")
                try:
                    person, chosen = await pending.answer
                finally:
                    self.permissions.close(pending.request_id)
                if person == "cancelled":
                    decision, option_id, source = "cancelled", None, "turn_cancelled"
                else:
                    option_id = option_for(options, person, chosen)
                    decision = "approved" if person == "approve" else "denied"
                    source = "person"
                    if option_id is None:
                        decision, source = "cancelled", "no_matching_option"
                base["request_id"] = pending.request_id
        else:
            decision, option_id = client_side.policy_decision(mode, tool_call, options)
            source = f"policy:{mode}"
        self.record(EventType.PERMISSION, {**base, "decision": decision, "decision_source": source,
                                           "option_id": option_id, "raw": {"toolCall": tool_call, "options": options}},
                    turn_id=turn_id)
        self.touch_activity("permission", decision)
        with contextlib.suppress(Exception):
            await self.hook("permission.denied" if decision != "approved" else "permission.resolved",
                            **{**base, "decision": decision, "decision_class": decision, "tool_name": base["resource"],
                               "tool_call": tool_call})
        return client_side.permission_response(option_id)

    async def _permission_hooks(self, tool_call: dict[str, Any], options: list[dict[str, Any]],
                                base: dict[str, Any], mode: str) -> tuple[str, str | None, str] | None:
        """tool.pre_call (the gate) and permission.request run before our client answers the agent, so a
        hook can deny; a permission.request patch may also decide for a person. None = no hook decided."""
        kind = str(tool_call.get("kind") or "")
        read_only = kind in client_side.READ_KINDS
        pre = await self.hook("tool.pre_call", tool_call_id=base["tool_call_id"], tool_id=base["resource"],
                              tool_name=base["resource"], read_only=read_only, tool_input=tool_call.get("rawInput"))
        if pre is not None and not pre.ok:
            return "denied", client_side.reject_option(options), f"hook:{pre.hook_name or 'tool.pre_call'}"
        policy, _ = client_side.policy_decision(mode, tool_call, options)
        if mode == "approve-reads" and not read_only:
            policy = "pending"
        request = await self.hook("permission.request", **{**base, "decision": policy, "decision_class": policy,
                                                           "tool_name": base["resource"], "tool_input":
                                                           tool_call.get("rawInput"), "tool_call": tool_call,
                                                           "options": options})
        if request is None:
            return None
        if not request.ok:
            return "denied", client_side.reject_option(options), f"hook:{request.hook_name or 'permission.request'}"
        patched = str(request.payload.get("decision") or policy)
        if patched != policy and patched in ("approved", "denied"):
            chosen = client_side.allow_option(options) if patched == "approved" else client_side.reject_option(options)
            return patched if chosen else "cancelled", chosen, "hook:permission.request"
        return None

    def decide_permission(self, request_id: str, decision: str, option_id: str | None = None) -> bool:
        return self.permissions.resolve(request_id, decision, option_id)

    # ---- start -----------------------------------------------------------------------------

    async def boot(self, *, reactivate: bool = False) -> None:
        """Background start: spawn → initialize → session/new (or load) → active → queued input."""
        try:
            if reactivate:
                # stopped → starting under the same id; the previous stop stays in the event log.
                await db(self.manager.inputs.reset_dispatching, self.id)
                await self.transition(SessionState.STARTING, stop_reason="", stop_detail="", failure=None)
            await self._start_agent(reactivate=reactivate)
        except StartFailed as exc:
            await self._fail_start(exc.kind, exc.summary, exc.code)
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
        await self.transition(SessionState.ACTIVE, activated_at=folder.isoformat(folder.utcnow()))
        logger.info("session %s active (agent %s, pid %s)", self.id, self.meta["agent_name"],
                    self.agent.pid if self.agent else None)  # lifecycle lines: `session evidence` collects them
        self.active.set()
        with contextlib.suppress(Exception):
            await self.hook("session.post_resume" if reactivate else "session.post_create")
        try:
            await self.dispatch_next()
        except Exception:
            logger.exception("session %s: dispatching queued input failed", self.id)

    async def _start_agent(self, *, reactivate: bool) -> None:
        command, cwd = list(self.provider.command), self.cwd
        pre = await self.hook("agent.pre_start", command=command[0], args=command[1:], cwd=str(cwd),
                              provider=self.provider.name, model=self.meta.get("model") or "")
        if pre is not None:
            if not pre.ok:
                raise StartFailed(FailureKind.STARTUP_FAILURE, f"agent.pre_start: {pre.error}")
            patched_cwd = str(pre.payload.get("cwd") or cwd)
            if patched_cwd != str(cwd):
                try:
                    cwd = client_side.confine(patched_cwd, self.roots)  # resolved: `..` and symlinks cannot escape
                except client_side.OutsideWorkspace as exc:
                    raise StartFailed(FailureKind.STARTUP_FAILURE,
                                      f"agent.pre_start: cwd outside the workspace refused ({exc})") from exc
            command = [str(pre.payload.get("command") or command[0]), *[str(a) for a in pre.payload.get("args") or []]]
        agent = AgentProcess(command, cwd=cwd, env=self.provider.env,
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
        with contextlib.suppress(Exception):
            await self.hook("agent.spawned", pid=agent.pid, command=agent.command[0],
                            args=list(agent.command[1:]), cwd=str(agent.cwd), provider=self.provider.name)
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
        params: dict[str, Any] = {"cwd": str(self.cwd), "mcpServers": []}
        if self.roots[1:]:
            params["additionalDirectories"] = [str(r) for r in self.roots[1:]]
        if reactivate:
            fallback = await self._try_load_session(params)
            if fallback is None:
                return
        try:
            result = await self.agent.request("session/new", params, timeout=NEW_SESSION_TIMEOUT)
        except (TransportClosed, AgentRequestError, TimeoutError) as exc:
            raise StartFailed(FailureKind.STARTUP_FAILURE, self._with_exit(f"ACP session/new failed: {exc}")) from exc
        if not isinstance(result, dict) or not result.get("sessionId"):
            raise StartFailed(FailureKind.PROTOCOL_FAILURE, "ACP session/new returned no sessionId")
        self.meta["acp_session_id"] = str(result["sessionId"])
        await self._apply_options(result)
        if reactivate:
            await self._stage_projection(fallback)

    async def _apply_options(self, opened: dict[str, Any]) -> None:
        """Model, effort and speed through advertised config options, before any prompt (§3)."""
        from sessions.runtime.options import plan

        assert self.agent
        config_options = opened.get("configOptions") if isinstance(opened.get("configOptions"), list) else []
        steps = plan(config_options, model=self.meta.get("model") or "",
                     model_explicit=bool(self.meta.get("model_explicit")),
                     reasoning_effort=self.meta.get("reasoning_effort") or "", speed=self.meta.get("speed") or "normal")
        for what, config_id, value in steps.sets:
            try:
                await self.agent.request("session/set_config_option", {
                    "sessionId": self.meta["acp_session_id"], "configId": config_id, "value": value},
                    timeout=NEW_SESSION_TIMEOUT)
            except AgentRequestError as exc:
                steps.resolutions[what] = {"requested": value, "status": "rejected", "reason": str(exc)}
        self.meta["speed_resolution"] = steps.resolutions.get("speed")
        self.meta["option_resolutions"] = steps.resolutions
        for what, resolution in steps.resolutions.items():
            if resolution["status"] == "rejected":
                code = "speed_rejected" if what == "speed" else f"{what}_rejected"
                summary = f"{code}: provider rejected {what} {resolution['requested']!r} ({resolution['reason']})"
                raise StartFailed(FailureKind.STARTUP_FAILURE, summary, code=code)
            if resolution["status"] == "unsupported":
                self.record(EventType.SYSTEM, {"title": "runtime_option_unsupported", "text":
                            f"{what} {resolution['requested']!r} not applied: {resolution['reason']}",
                                               "raw": {"option": what, **resolution}}, turn_id="")

    async def _try_load_session(self, params: dict[str, Any]) -> str | None:
        """ACP session/load of the saved id; None on success, else the fallback reason (§14)."""
        assert self.agent
        saved = self.meta.get("acp_session_id") or ""
        if not (self.meta.get("acp_caps") or {}).get("supports_load_session") or not saved:
            return "load_session_unsupported"
        self._loading = True  # the agent may replay history as updates: we already hold it
        try:
            await self.agent.request("session/load", {**params, "sessionId": saved}, timeout=NEW_SESSION_TIMEOUT)
            return None
        except AgentRequestError:
            return "load_session_resource_missing"
        except (TransportClosed, TimeoutError) as exc:
            raise StartFailed(FailureKind.LOAD_SESSION_FAILURE,
                              self._with_exit(f"ACP session/load failed: {exc}")) from exc
        finally:
            self._loading = False

    async def _stage_projection(self, reason: str) -> None:
        from sessions.runtime.projection import build_projection

        # Reads and prunes up to thousands of rows: off the loop that every other session shares.
        text, count = await asyncio.to_thread(build_projection, folder.events_path(self.id))
        self.projection = text
        self.marker(MarkerKind.SESSION_RECOVERED, "Context rebuilt from log",
                    {"source": "events.db", "message_count": count, "fallback_reason": reason}, turn_id="")

    def _with_exit(self, message: str) -> str:
        if self.agent and self.agent.returncode is not None:
            message += f"; {lifecycle.describe_exit(self.agent.returncode)}"
        tail = self.agent.stderr.text().strip() if self.agent else ""
        if tail:
            message += f"; stderr: {tail[-500:]}"
        return message

    async def _fail_start(self, kind: FailureKind, summary: str, code: str | None = None) -> None:
        if self.stopping or self.stopped.is_set():
            return  # a stop raced the start; the stop path finishes the session
        reason = START_FAILURE_STOP_REASON.get(kind, StopReason.ERROR)
        if self.agent is not None:
            await self.agent.shutdown(grace=0.2)
        failure = await self._failure(kind, summary)
        if code:
            failure["code"] = code  # e.g. speed_rejected: which runtime option the provider refused
        self.record(EventType.ERROR, {"error": failure["summary"], "failure": failure,
                                      "text": self._stderr_excerpt()}, turn_id="")
        await self._finish(reason, summary, failure)

    # ---- prompts ---------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.turn is not None

    async def start_turn(self, text: str, *, source: str = "user", authored: str | None = None,
                         extra: dict[str, Any] | None = None) -> Turn:
        """Record user_message (committed) before the prompt reaches ACP, then run the turn."""
        async with self.prompt_lock:
            if self.turn is not None:
                from sessions.errors import Conflict

                raise Conflict("a prompt is already in progress", code="prompt_in_progress")
            outcome = await self.hook("input.pre_submit", message=text, context_blocks=[], attachments=[],
                                      input_class="user_message" if source == "user" else "synthetic_reentry")
            if outcome is not None:
                if not outcome.ok:
                    from sessions.errors import HookDenied

                    raise HookDenied(outcome.error, data={"hook": outcome.hook_name,
                                                          "stops_session": outcome.hook_required})
                patched = str(outcome.payload.get("message") or text)
                if patched != text:
                    authored, text = authored if authored is not None else text, patched
            turn = Turn(new_turn_id(), text, source, folder.isoformat(folder.utcnow()) or "")
            if self.projection is not None:
                # Context rebuilt from log: the agent receives the projection; the store keeps what was typed.
                turn.sent = f"{self.projection}\n\nUser request: {text}"
                self.projection = None
            self.turn = turn
            content: dict[str, Any] = {"text": text, "source": source, **(extra or {})}
            if authored is not None and authored != text:
                content["authored_text"] = authored
                turn.authored = authored
            if turn.sent:
                content["context_replay"] = True
            # A daemon-originated prompt (a heartbeat wake) is stored as such, never as something a user typed.
            kind = EventType.SYNTHETIC_REENTRY if source == "synthetic" else EventType.USER_MESSAGE
            self.record(kind, content, turn_id=turn.id)
            try:
                await self.recorder.flush()
            except StoreFailure as exc:
                # Nothing reached the agent: the prompt is refused whole (the session stops on its own).
                self.turn = None
                turn.ended.set()
                from sessions.errors import StorageError

                raise StorageError.from_failure(exc) from exc
            activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
            activity.update({"turn_id": turn.id, "turn_source": source, "turn_started_at": turn.started_at,
                             "current_tool": None, "tool_call_id": None, "last_progress_at": None})
            activity["prompt_active"] = True
            self.touch_activity("prompt_started")
            started = await self.hook("turn.start", turn_id=turn.id, input_class=source, user_message=text)
            if started is not None and not started.ok and started.hook_required:
                turn.terminal = True
                self.record(EventType.ERROR, {"error": started.error}, turn_id=turn.id)
                self.turn = None
                turn.ended.set()
                from sessions.errors import HookDenied

                raise HookDenied(started.error, data={"hook": started.hook_name, "stops_session": True})
            turn.task = spawn(self._run_turn(turn))
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = spawn(self._heartbeat_loop())
        return turn

    async def _run_turn(self, turn: Turn) -> None:
        assert self.agent
        try:
            result = await self.agent.request("session/prompt", {
                "sessionId": self.meta["acp_session_id"],
                "prompt": [{"type": "text", "text": turn.sent or turn.text}],
            })
            result = result if isinstance(result, dict) else {}
            stop = str(result.get("stopReason") or "end_turn")
            content: dict[str, Any] = {"stop_reason": stop, "prompt_stop_reason": stop}
            if isinstance(result.get("usage"), dict):
                content["usage"] = normalize_usage(result["usage"])
                self.recorder.merge_usage(turn.id, content["usage"])
            if stop == "end_turn" and turn.outputs == 0 and not turn.cancel_requested:
                # An agent whose model server is down ends the turn at once with nothing said; that is a
                # failure the user must see, not a quiet success.
                failure = await self._turn_failure(
                    FailureKind.PROMPT_FAILURE, "the agent ended the turn without any output (stop reason "
                    "end_turn); its model or model server may be unavailable")
                self.record(EventType.ERROR, {**content, "error": failure["summary"], "failure": failure},
                            turn_id=turn.id)
            else:
                self.record(EventType.DONE, content, turn_id=turn.id)
                self._clear_turn_failure()
            turn.terminal = True
            # A heartbeat wake is the daemon talking, not the user: it never names the session.
            if turn.reply and turn.source != "synthetic" and self._title_eligible():
                self.meta["auto_title"] = {"status": "pending"}
                spawn(self._auto_title(turn))
        except AgentRequestError as exc:
            kind = FailureKind.PROVIDER_AUTH_FAILURE if lifecycle.is_auth_error(exc.code, str(exc)) \
                else FailureKind.PROMPT_FAILURE
            failure = await self._turn_failure(kind, str(exc))
            self.record(EventType.ERROR, {"error": failure["summary"], "failure": failure}, turn_id=turn.id)
            turn.terminal = True
        except TransportClosed:
            # The exit watcher classifies the death; the stop path records this turn's error and marker,
            # so the turn must still be current when it looks (it cancels this task when done).
            await self.stopped.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("turn %s failed", turn.id)
            self.record(EventType.ERROR, {"error": redact_text(str(exc))}, turn_id=turn.id)
            turn.terminal = True
        finally:
            metrics.TURN_SECONDS.observe(time.monotonic() - turn.started_mono)
            self.permissions.cancel_all()
            with contextlib.suppress(StoreFailure):
                await self.recorder.flush()
            if self.turn is turn:
                self.turn = None
                activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
                activity.update({"prompt_active": False, "current_tool": None, "tool_call_id": None})
                self.meta["liveness"]["stall_state"] = ""
            turn.ended.set()
        with contextlib.suppress(Exception):
            await self.hook("turn.end", turn_id=turn.id, input_class=turn.source, user_message=turn.text)
        if self.state == SessionState.ACTIVE and not self.stopping and not self.handover:
            await self._steer_fallback()
            await self.persist()
            await self.dispatch_next()

    async def cancel_turn(self) -> bool:
        """ACP session/cancel for the running turn; the agent answers the prompt with `cancelled`."""
        turn = self.turn
        if turn is None or self.agent is None:
            return False
        turn.cancel_requested = True
        # ACP: the client answers every pending permission request of a cancelled turn with `cancelled`.
        self.permissions.cancel_all()
        await self.agent.notify("session/cancel", {"sessionId": self.meta.get("acp_session_id")})
        return True

    async def dispatch_next(self) -> None:
        """Run the oldest queued input (a staged first prompt or a queued prompt), if idle."""
        if self.busy or self.handover or self.state != SessionState.ACTIVE or self.stopping:
            return
        entry = await db(self.manager.inputs.claim_next, self.id)
        if entry is not None and (self.busy or self.handover):
            await db(self.manager.inputs.mark, entry.id, "queued")  # someone else took the turn meanwhile
            return
        if entry is None:
            return
        self.marker(MarkerKind.PROMPT_ACCEPTED, "Queued prompt handed to the agent.",
                    {"queue_entry_id": entry.id, "queue_generation": entry.generation, "source": entry.source})
        from sessions.errors import HookDenied

        try:
            await self.start_turn(entry.text, source=entry.source)
        except HookDenied as exc:
            await db(self.manager.inputs.mark, entry.id, "failed")
            self.marker(MarkerKind.PROMPT_DROPPED, f"Queued prompt refused by a hook: {exc.message}",
                        {"queue_entry_id": entry.id, "reason": "hook_denied"})
            with contextlib.suppress(StoreFailure):
                await self.recorder.flush()
            if not self.stopping:
                await self.dispatch_next()
            return
        except Exception:
            await db(self.manager.inputs.mark, entry.id, "failed")
            raise
        await db(self.manager.inputs.mark, entry.id, "sent")

    # ---- lifecycle hooks (hooks.md) ------------------------------------------------------------

    def _hook_payload(self, event: str, extra: dict[str, Any]) -> dict[str, Any]:
        return {
            "event": event, "session_id": self.id, "session_name": self.meta.get("name") or "",
            "session_type": self.meta.get("session_type") or "user", "agent_name": self.meta["agent_name"],
            "workspace_id": self.meta["workspace_id"], "workspace": str(self.cwd),
            "acp_session_id": self.meta.get("acp_session_id") or "", "state": self.state,
            "created_at": self.meta["created_at"], "updated_at": self.meta["updated_at"], **extra,
        }

    def _record_hook_run(self, row: dict[str, Any]) -> None:
        self.recorder.record_hook_run(row)

    async def hook(self, event: str, **extra: Any) -> Any:
        """Run the hooks of `event`; None when none is declared. A required gate denial stops the session."""
        runner = self.manager.hooks
        if runner is None or not runner.has_hooks(event):
            return None
        outcome = await runner.dispatch(event, self._hook_payload(event, extra), record_run=self._record_hook_run)
        if event in GATED_HOOK_EVENTS and (outcome.denied or outcome.required_failed) and outcome.hook_required:
            reason = outcome.deny_reason or outcome.error or HOOK_STOP_SUMMARY
            logger.info("session %s: required hook %s stopped it: %s", self.id, outcome.hook_name, reason)
            # Spawned, not awaited: the caller may hold the prompt lock that the stop path waits for.
            spawn(self.stop(StopReason.HOOK_STOPPED, reason,
                            failure=lifecycle.failure_object(FailureKind.PERMISSION_FAILURE, reason)))
        return outcome

    # ---- auto-title (roles.auto_title) -----------------------------------------------------------

    def _title_eligible(self) -> bool:
        return (self.config.auto_title_enabled and not self.meta.get("name") and not self.meta.get("auto_title")
                and (self.meta.get("session_type") or "user") == "user")

    async def _auto_title(self, turn: Turn) -> None:
        from sessions.runtime.title import TITLE_PASSES, generate_title

        provider = self.config.providers.get(self.config.auto_title_provider) or self.provider
        async with TITLE_PASSES:
            if self.stopped.is_set():
                return  # stopped while waiting for a slot
            title = await generate_title(provider, self.cwd, turn.text, turn.reply)
        if self.stopped.is_set():
            return  # the final meta is written; a late title must not reopen it
        if self.meta.get("name"):
            self.meta["auto_title"] = {"status": "skipped", "reason": "explicit name wins"}
            await self.persist()
            return
        if title is None:
            self.meta["auto_title"] = {"status": "failed"}
            await self.persist()
            return
        self.meta.update({"name": title, "name_source": "auto_title", "auto_title": {"status": "applied"}})
        self.record(EventType.SYSTEM, {"title": "auto_title", "text": title}, turn_id="")
        await self.persist()

    async def rename(self, name: str) -> None:
        """An explicit name always wins, including over a title pass still running."""
        self.meta.update({"name": name, "name_source": "user"})
        await self.persist()

    # ---- busy input (sessions reference §6) ---------------------------------------------------

    @property
    def generation(self) -> int:
        return int(self.meta.get("input_generation") or 0)

    async def _advance_generation(self) -> list[str]:
        """Bump the input generation; pending entries of older generations are dropped, visibly."""
        self.meta["input_generation"] = self.generation + 1
        dropped = await db(self.manager.inputs.drop_older, self.id, self.generation)
        for entry_id in dropped:
            self.marker(MarkerKind.PROMPT_DROPPED, "Stale queued input dropped by an interrupt.",
                        {"queue_entry_id": entry_id, "reason": "stale_generation",
                         "queue_generation": self.generation})
        if self.steer is not None:
            self.marker(MarkerKind.PROMPT_DROPPED, "Staged steer dropped by an interrupt.",
                        {"queue_entry_id": self.steer.entry_id, "reason": "stale_generation"})
            dropped.append(self.steer.entry_id)
            self.steer = None
        return dropped

    async def _cancel_and_wait(self, turn: Turn) -> bool:
        await self.cancel_turn()
        try:
            await asyncio.wait_for(asyncio.shield(turn.ended.wait()), self.config.supervision.timeout_cancel_grace)
            return True
        except TimeoutError:
            return False

    async def interrupt(self, *, replacement: str | None, expected_turn_id: str | None) -> dict[str, Any]:
        """Cancel the current turn (fenced by expected_turn_id); run `replacement` as a new turn, or keep
        the canceled text as salvage for one later steer (the dedicated interrupt)."""
        from sessions.errors import Conflict

        turn = self.turn
        if expected_turn_id and (turn is None or turn.id != expected_turn_id):
            raise Conflict("expected_turn_id does not match the running turn", code="turn_mismatch",
                           data={"expected_turn_id": expected_turn_id, "current_turn_id": turn.id if turn else None})
        dropped = await self._advance_generation()
        previous = turn.id if turn else None
        self.handover = replacement is not None
        try:
            if turn is not None:
                if replacement is None:
                    self.salvage = {"text": turn.authored or turn.text, "turn_id": turn.id}
                if not await self._cancel_and_wait(turn):
                    raise Conflict("the running turn did not end within timeout_cancel_grace",
                                   code="interrupt_timeout", data={"turn_id": turn.id})
            new = await self.start_turn(replacement) if replacement is not None else None
        finally:
            self.handover = False
        result: dict[str, Any] = {"status": "interrupted", "interrupted": turn is not None,
                                  "previous_turn_id": previous, "canceled_queued_entries": dropped,
                                  "queue_generation": self.generation}
        if new is not None:
            result.update({"status": "accepted", "mode": "interrupt", "new_turn_id": new.id, "turn_id": new.id})
        self.marker(MarkerKind.PROMPT_INTERRUPTED,
                    "Turn interrupted" + (" and replaced." if replacement is not None else "; text kept for a steer."),
                    {"generation": self.generation, "canceled_count": len(dropped), "previous_turn_id": previous,
                     "new_turn_id": result.get("new_turn_id")})
        await self.recorder.flush()
        await self.persist()
        return result

    async def stage_steer(self, text: str) -> dict[str, Any]:
        """Steer: after a dedicated interrupt, compose salvage + correction once as a new turn; while busy,
        deliver at the next tool-result boundary, else fall back to the queue when the turn ends."""
        if self.salvage is not None and self.turn is None:
            salvage, self.salvage = self.salvage, None
            composed = f"{salvage['text']}\n\nUser correction/guidance after interrupt: {text}"
            turn = await self.start_turn(composed, source="steer", authored=text)
            self.marker(MarkerKind.PROMPT_STEERED, "Steer composed with the interrupted prompt.",
                        {"generation": self.generation, "salvaged_turn_id": salvage["turn_id"], "new_turn_id": turn.id})
            return {"status": "accepted", "mode": "steer", "turn_id": turn.id, "new_turn_id": turn.id,
                    "queue_generation": self.generation}
        if self.turn is None:
            from sessions.errors import Conflict

            raise Conflict("no prompt in progress to steer", code="prompt_not_in_progress")
        entry, _ = await db(self.manager.inputs.enqueue, self.id, text, mode="steer", generation=self.generation)
        if self.steer is not None:
            await db(self.manager.inputs.mark, self.steer.entry_id, "canceled")
            self.marker(MarkerKind.PROMPT_DROPPED, "An older staged steer was replaced.",
                        {"queue_entry_id": self.steer.entry_id, "reason": "replaced"})
        self.steer = StagedSteer(entry.id, entry.text, entry.generation)
        self.marker(MarkerKind.PROMPT_STEERED, "Steer staged for the next tool result.",
                    {"queue_entry_id": entry.id, "queue_generation": entry.generation})
        await self.recorder.flush()
        return {"status": "staged", "mode": "steer", "staged": True, "queue_entry_id": entry.id,
                "queue_generation": entry.generation, "fallback_mode_if_no_tool_result": "queue"}

    async def _deliver_steer(self, turn: Turn) -> None:
        """At a tool-result boundary: end the running turn cooperatively and continue with the steer."""
        steer = self.steer
        if steer is None or self.turn is not turn:
            return
        self.handover = True
        try:
            if not await self._cancel_and_wait(turn):
                steer.delivering = False
                return
            if self.steer is not steer or self.stopping:
                return
            self.steer = None
            await db(self.manager.inputs.mark, steer.entry_id, "sent")
            new = await self.start_turn(steer.text, source="steer", extra={
                "action": "steered", "resource": "session_input_queue", "decision": str(steer.generation),
                "request_id": steer.entry_id})
        finally:
            self.handover = False
        self.marker(MarkerKind.PROMPT_STEERED, "Steer delivered at a tool-result boundary.",
                    {"queue_entry_id": steer.entry_id, "previous_turn_id": turn.id, "new_turn_id": new.id})

    async def _steer_fallback(self) -> None:
        steer = self.steer
        if steer is None or steer.delivering:
            return
        self.steer = None
        await db(self.manager.inputs.to_queue, steer.entry_id)
        self.marker(MarkerKind.PROMPT_STEERED, "No tool result before the turn ended; steer queued instead.",
                    {"queue_entry_id": steer.entry_id, "fallback_to_queue": True})

    # ---- supervision (sessions reference §7) ----------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        """Metadata-only heartbeats while a turn runs; never events. Waiting on a person counts as activity."""
        interval = max(0.2, self.config.supervision.activity_heartbeat_interval)
        while self.turn is not None and not self.stopping:
            await asyncio.sleep(interval)
            if self.turn is None or self.stopping:
                break
            if self.permissions.waiting:
                self.touch_activity("agent_waiting", "waiting for a permission decision")
            activity = self.meta.setdefault("liveness", {}).setdefault("activity", {})
            activity["idle_seconds"] = round(time.monotonic() - self.turn.last_activity_mono, 3)
            activity["elapsed_seconds"] = round(time.monotonic() - self.turn.started_mono, 3)
            try:
                await self.persist()
            except Exception:
                logger.exception("heartbeat write failed for %s", self.id)

    def idle_seconds(self) -> float:
        return time.monotonic() - self.turn.last_activity_mono if self.turn else 0.0

    async def supervise(self, action: str, turn_id: str | None) -> str:
        """A supervision decision proposed by the huey sweep, run on this loop by the manager (one at a time per
        session); verified here against live state first. The sweep does not wait for the outcome."""
        sup = self.config.supervision
        turn = self.turn
        if action == "wall_clock":
            await self.stop(StopReason.TIMEOUT, "session wall-clock limit (session.limits.timeout) reached",
                            failure=lifecycle.failure_object(FailureKind.TIMEOUT, "session wall-clock limit reached"))
            return "stopped"
        if turn is None or turn.id != turn_id or self.stopping:
            return "stale"
        idle = self.idle_seconds()
        now = time.monotonic()
        runtime = self._runtime_payload(turn)
        if action == "progress":
            if sup.progress_notify_interval <= 0 or now - turn.last_progress_mono < sup.progress_notify_interval * 0.9:
                return "skipped"
            turn.last_progress_mono = now
            minutes = int((now - turn.started_mono) // 60)
            tool = runtime.get("current_tool")
            text = f"Still working... ({minutes} min elapsed" + (f", running: {tool})" if tool else ")")
            self.record(EventType.RUNTIME_PROGRESS, {"text": text, "runtime": runtime})
            self.meta["liveness"]["activity"]["last_progress_at"] = folder.isoformat(folder.utcnow())
            return "recorded"
        if action == "warning":
            if turn.warned or sup.inactivity_warning_after <= 0 or idle < sup.inactivity_warning_after:
                return "skipped"
            turn.warned = True
            self.record(EventType.RUNTIME_WARNING,
                        {"text": f"Runtime activity is stale ({int(idle)} seconds idle).", "runtime": runtime})
            return "recorded"
        if action == "timeout":
            if turn.timed_out or sup.inactivity_timeout <= 0 or idle < sup.inactivity_timeout:
                return "skipped"
            turn.timed_out = True
            self.meta["liveness"].update({"stall_state": "stalled", "stall_reason": "activity_timeout"})
            self.marker(MarkerKind.PROMPT_TIMEOUT, f"Prompt idle for {int(idle)} seconds; canceling.",
                        {"idle_seconds": round(idle, 3), "turn_id": turn.id})
            # §7 order: stall, marker, this warning (events reference: "again on timeout"), cancel, grace, stop.
            self.record(EventType.RUNTIME_WARNING,
                        {"text": f"Runtime activity timed out ({int(idle)} seconds idle).", "runtime": runtime})
            with contextlib.suppress(StoreFailure):
                await self.recorder.flush()
            await self.persist()
            if not await self._cancel_and_wait(turn):
                await self.stop(StopReason.TIMEOUT, "activity_timeout",
                                failure=lifecycle.failure_object(
                                    FailureKind.TIMEOUT, f"prompt inactive for {int(idle)} s and did not stop "
                                    f"within timeout_cancel_grace"))
                return "stopped"
            return "canceled"
        return "unknown"

    def _runtime_payload(self, turn: Turn) -> dict[str, Any]:
        self._stamp_activity()
        activity = dict((self.meta.get("liveness") or {}).get("activity") or {})
        now = time.monotonic()
        activity.update({"turn_id": turn.id, "turn_source": turn.source, "turn_started_at": turn.started_at,
                         "idle_seconds": round(now - turn.last_activity_mono, 3),
                         "elapsed_seconds": round(now - turn.started_mono, 3),
                         "elapsed_ms": int((now - turn.started_mono) * 1000)})
        return activity

    # ---- stop ------------------------------------------------------------------------------

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
        reason, kind, detail = lifecycle.classify_unexpected_exit(code, turn_active)
        failure = await self._failure(kind, f"{detail}") if kind else None
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
        if self._heartbeat:
            self._heartbeat.cancel()
        if self.state != SessionState.STOPPED:
            await self.transition(SessionState.STOPPED, stop_reason=reason.value, stop_detail=detail,
                                  failure=failure)
        if self.manager.hooks is not None and self.manager.hooks.has_hooks("session.post_stop"):
            # The store is closed now; post_stop runs observe only and are not recorded per session.
            with contextlib.suppress(Exception):
                await self.manager.hooks.dispatch("session.post_stop", self._hook_payload("session.post_stop", {
                    "stop_reason": reason.value, "stop_detail": detail}), record_run=lambda row: None)
        self.stopped.set()
        self.active.clear()
        self.manager.forget(self.id)

    async def _turn_failure(self, kind: FailureKind, summary: str) -> dict[str, Any]:
        """A turn the agent ended with an error: the session stays active, but the failure is on the session
        (status, list, badge) until a later turn succeeds, not only in an `error` event."""
        failure = await self._failure(kind, summary)
        metrics.FAILURES.labels(kind=kind.value).inc()
        self.meta["failure"] = failure
        logger.warning("session %s: turn failed (%s): %s", self.id, kind.value, failure["summary"])
        return failure

    def _clear_turn_failure(self) -> None:
        if (self.meta.get("failure") or {}).get("kind") in TURN_FAILURE_KINDS:
            self.meta["failure"] = None

    def _stderr_excerpt(self) -> str:
        if not self.agent:
            return ""
        # The tail is the evidence: what the agent wrote just before it failed.
        return bound_tail(redact_text(self.agent.stderr.text()), STDERR_IN_EVENTS_BYTES)

    async def _failure(self, kind: FailureKind, summary: str) -> dict[str, Any]:
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
