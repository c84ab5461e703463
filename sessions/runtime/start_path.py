"""The start path of a session (sessions reference §3): spawn the agent, ACP initialize, session/new or
session/load, model and options, then `active` and the queued input; a failed start is classified and kept."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from sessions.acp import launch, workspace_fs
from sessions.acp.driver import AgentNotFound, AgentProcess, AgentRequestError, TransportClosed
from sessions.enums import START_FAILURE_STOP_REASON, EventType, FailureKind, MarkerKind, SessionState, StopReason
from sessions.runtime import lifecycle
from sessions.runtime.tasks import db, spawn
from sessions.store import folder

logger = logging.getLogger(__name__)

INITIALIZE_TIMEOUT = 30.0
NEW_SESSION_TIMEOUT = 60.0


class StartFailed(Exception):
    def __init__(self, kind: FailureKind, summary: str, code: str | None = None) -> None:
        super().__init__(summary)
        self.kind = kind
        self.summary = summary
        self.code = code


class StartPathMixin:
    """SessionRuntime's start: boot → agent → ACP session → options → active."""

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
                    cwd = workspace_fs.confine(patched_cwd, self.roots).path  # `..` and symlinks cannot escape
                except workspace_fs.OutsideWorkspace as exc:
                    raise StartFailed(FailureKind.STARTUP_FAILURE,
                                      f"agent.pre_start: cwd outside the workspace refused ({exc})") from exc
            command = [str(pre.payload.get("command") or command[0]), *[str(a) for a in pre.payload.get("args") or []]]
        try:
            # A built-in provider's missing executable falls back to its pinned npm package via npx.
            started = launch.resolve(command, provider=self.provider.name, env=self.provider.env,
                                     package=self.provider.npm if command[0] == self.provider.command[0] else None)
            agent = AgentProcess(started.argv, cwd=cwd, env=self.provider.env, on_update=self.on_update,
                                 on_request=self.on_request, others_waiting=self.recorder.others_waiting,
                                 on_violation=self.protocol_violation, owner=self.meta["id"],
                                 kill_grace=self.config.timeouts.stop_kill_grace,
                                 closed_stdout_grace=self.config.timeouts.closed_stdout_grace)
            self.agent = agent
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
            async with launch.install_progress(started, agent, lambda t, c: self.record(t, c, turn_id="")):
                init = await agent.initialize(started.initialize_timeout(INITIALIZE_TIMEOUT))
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
        from sessions.runtime.options import plan, reported_model

        assert self.agent
        config_options = opened.get("configOptions") if isinstance(opened.get("configOptions"), list) else []
        models = opened.get("models")
        steps = plan(config_options, model=self.meta.get("model") or "",
                     model_explicit=bool(self.meta.get("model_explicit")),
                     reasoning_effort=self.meta.get("reasoning_effort") or "", speed=self.meta.get("speed") or "normal",
                     models=models)
        sets = [*steps.sets, *([("model", "", steps.set_model)] if steps.set_model else [])]
        for what, config_id, value in sets:
            sid = self.meta["acp_session_id"]
            try:
                answer = await self.agent.request(
                    "session/set_config_option" if config_id else "session/set_model",
                    {"sessionId": sid, "configId": config_id, "value": value} if config_id
                    else {"sessionId": sid, "modelId": value}, timeout=NEW_SESSION_TIMEOUT)
            except AgentRequestError as exc:
                steps.resolutions[what] = {"requested": value, "status": "rejected", "reason": str(exc)}
                continue
            if isinstance(answer, dict) and isinstance(answer.get("configOptions"), list):
                config_options = answer["configOptions"]  # the agent's state after the change
            elif not config_id and isinstance(models, dict):
                models = {**models, "currentModelId": value}
        self.meta["agent_model"] = reported_model(config_options, models)
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
        self.turns.projection = text
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
        failure = await self.failure(kind, summary)
        if code:
            failure["code"] = code  # e.g. speed_rejected: which runtime option the provider refused
        self.record(EventType.ERROR, {"error": failure["summary"], "failure": failure,
                                      "text": self._stderr_excerpt()}, turn_id="")
        await self._finish(reason, summary, failure)
