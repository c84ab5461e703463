"""The start path of a session (docs/reference/sessions.md §3): spawn the agent, ACP initialize, session/new or
session/load, model and options, then `active` and the queued input; a failed start is classified and kept."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from compozy_base.config import mcp_servers
from sessions.acp import auth, launch, sandbox, workspace_fs
from sessions.acp.driver import AgentNotFound, AgentProcess, AgentRequestError, TransportClosed
from sessions.core import lifecycle
from sessions.core.acp_shapes import ConfigOption
from sessions.core.enums import START_FAILURE_STOP_REASON, EventType, FailureKind, MarkerKind, SessionState, StopReason
from sessions.core.jsonobj import JsonObject
from sessions.core.offload import db, starting
from sessions.core.record import AcpCaps
from sessions.runtime import terminal_gateway
from sessions.runtime.confinement import confiner
from sessions.runtime.memory_tools import MemoryTools
from sessions.runtime.options import plan, reported_model, with_current
from sessions.runtime.permissions import permission_mode
from sessions.runtime.projection import session_projection
from sessions.store import folder

if TYPE_CHECKING:
    from sessions.runtime.host import SessionCore
    from sessions.runtime.stop_path import StopPath
    from sessions.runtime.turns import Turns

logger = logging.getLogger(__name__)

INITIALIZE_TIMEOUT = 30.0
NEW_SESSION_TIMEOUT = 60.0


# The finer cause of a `startup_failure` whose agent process started but never completed the ACP handshake
# (`initialize`, `authenticate`): the kind is the seed's ("a failed background start persists
# failure.kind=startup_failure"), the cause says which step of the start failed.
HANDSHAKE_CAUSE = "handshake"


class StartFailed(Exception):
    def __init__(self, kind: FailureKind, summary: str, code: str | None = None, cause: str | None = None) -> None:
        super().__init__(summary)
        self.kind = kind
        self.summary = summary
        self.code = code
        self.cause = cause


class StartPath:
    """A session's start: boot → agent → ACP session → options → active. Owns whether a session/load is replaying
    history (updates the session must not record twice)."""

    def __init__(self, session: SessionCore, turns: Turns, stop: StopPath, *, active: asyncio.Event,
                 on_update: Callable[[JsonObject], None],
                 on_request: Callable[[str, JsonObject], Awaitable[Any]],
                 on_opened: Callable[[JsonObject], None] = lambda result: None,
                 on_new: Callable[[], Awaitable[None]] | None = None) -> None:
        self._session = session
        self._on_opened = on_opened  # the opening answer's modes and config options, onto the record
        self._on_new = on_new  # after a session/new (not a resume or load): the mode the policy needs
        self._turns = turns
        self._stop = stop
        self._active = active
        self._on_update = on_update
        self._on_request = on_request
        self.loading = False
        self._auth_methods: list[auth.AuthMethod] = []
        self._mcp_servers: list[JsonObject] = []
        self._memory = MemoryTools(session)

    async def boot(self, *, reactivate: bool = False) -> None:
        """Background start: spawn → initialize → session/new (or load) → active → queued input."""
        session = self._session
        try:
            if reactivate:
                # stopped → starting under the same id; the previous stop stays in the event log.
                await db(session.manager.inputs.reset_dispatching, session.rec.id)
                await session.transition(SessionState.STARTING, stop=("", "", None))
            await self._start_agent(reactivate=reactivate)
            if not reactivate:
                self._turns.memory_block = await self._memory.take_snapshot()
        except StartFailed as exc:
            await self._fail_start(exc.kind, exc.summary, exc.code, exc.cause)
            return
        except asyncio.CancelledError:
            await self._fail_start(FailureKind.CANCELLATION, "start canceled")
            raise
        except Exception as exc:  # any other start error fails the start, visibly, and is logged with its cause
            logger.exception("session %s failed to start", session.rec.id)
            await self._fail_start(FailureKind.STARTUP_FAILURE, f"unexpected start error: {exc}")
            return
        if self._stop.stopping:
            return
        await session.transition(SessionState.ACTIVE, activated_at=folder.isoformat(folder.utcnow()))
        logger.info("session %s active (agent %s, pid %s)", session.rec.id, session.rec.agent_name,
                    session.agent.pid if session.agent else None)  # lifecycle lines: `session evidence` collects them
        self._active.set()
        await session.observe("session.post_resume" if reactivate else "session.post_create")
        try:
            await self._turns.dispatch_next()
        except Exception:  # the session is active either way; the queued input's failure is logged with its cause
            logger.exception("session %s: dispatching queued input failed", session.rec.id)

    async def _start_agent(self, *, reactivate: bool) -> None:
        session = self._session
        command, cwd = list(session.provider.command), Path(session.rec.cwd)
        pre = await session.hook("agent.pre_start", command=command[0], args=command[1:], cwd=str(cwd),
                              provider=session.provider.name, model=session.rec.model or "")
        if pre is not None:
            if not pre.ok:
                raise StartFailed(FailureKind.STARTUP_FAILURE, f"agent.pre_start: {pre.error}")
            patched_cwd = str(pre.payload.get("cwd") or cwd)
            if patched_cwd != str(cwd):
                try:
                    cwd = workspace_fs.confine(patched_cwd, session.roots).path  # `..` and symlinks cannot escape
                except workspace_fs.OutsideWorkspace as exc:
                    raise StartFailed(FailureKind.STARTUP_FAILURE,
                                      f"agent.pre_start: cwd outside the workspace refused ({exc})") from exc
            command = [str(pre.payload.get("command") or command[0]), *[str(a) for a in pre.payload.get("args") or []]]
        try:
            # A built-in provider's missing executable falls back to its pinned npm package via npx.
            provider = session.provider
            # Off the loop: the PATH lookup stats every directory on it.
            started = await starting(launch.resolve, command, provider=provider.name, env=provider.env,
                                     package=provider.npm if command[0] == provider.command[0] else None)
            agent = AgentProcess(started.argv, cwd=cwd, env=session.provider.env, on_update=self._on_update,
                                 on_request=self._on_request, others_waiting=session.recorder.others_waiting,
                                 on_violation=session.protocol_violation, owner=session.rec.id,
                                 kill_grace=session.config.timeouts.stop_kill_grace,
                                 closed_stdout_grace=session.config.timeouts.closed_stdout_grace,
                                 confine=confiner(session))
            session.agent = agent
            await agent.start()
        except (AgentNotFound, sandbox.SandboxUnavailable) as exc:
            raise StartFailed(FailureKind.STARTUP_FAILURE, str(exc)) from exc
        liveness = session.rec.liveness_to_write()
        liveness.subprocess_pid, liveness.subprocess_started_at = agent.pid, agent.started_at
        # A new agent process has asked nothing yet: requests a crashed run left in meta.json are not this run's.
        liveness.pending_permissions, liveness.permission_requests = 0, []
        liveness.elicitation_requests = []
        self._stop.watch_exit()
        await session.observe("agent.spawned", pid=agent.pid, command=agent.command[0],
                                    args=list(agent.command[1:]), cwd=str(agent.cwd),
                                    provider=session.provider.name)
        try:
            async with launch.install_progress(started, agent, lambda t, c: session.record(t, c, turn_id="")):
                init = await agent.initialize(started.initialize_timeout(INITIALIZE_TIMEOUT),
                                              terminal=terminal_gateway.offered(permission_mode(
                                                  session.rec.effective_permissions,
                                                  session.config.permissions_mode)))
        except (TransportClosed, AgentRequestError, TimeoutError) as exc:
            await asyncio.sleep(0.05)
            raise StartFailed(FailureKind.STARTUP_FAILURE, self._with_exit(f"ACP initialize failed: {exc}"),
                              cause=HANDSHAKE_CAUSE) from exc
        advertised = init.get("agentCapabilities")
        caps: JsonObject = advertised if isinstance(advertised, dict) else {}
        offers = caps.get("sessionCapabilities")
        lifecycle_caps: JsonObject = offers if isinstance(offers, dict) else {}
        self._auth_methods = auth.offered(init)
        session.rec.acp_caps = AcpCaps(supports_load_session=bool(caps.get("loadSession")),
                                       supports_resume="resume" in lifecycle_caps,
                                       supports_close="close" in lifecycle_caps,
                                       auth_methods=[m.id for m in self._auth_methods],
                                       agent_info=init.get("agentInfo"))
        self._mcp_servers = await self._mcp_servers_for(caps)
        await self._authenticate(agent)
        await self._open_acp_session(reactivate=reactivate)

    async def _mcp_servers_for(self, caps: JsonObject) -> list[JsonObject]:
        """The MCP servers this session's agent can use: its own (`[[agents.NAME.mcp_servers]]`), the central ones
        that name it and this workspace (`[[mcp.servers]]`; the agent's own win a shared name), and the session's
        memory server. One left out for its transport is said, not dropped silently."""
        session = self._session
        agent_config = session.config.agents.get(session.rec.agent_name)
        supported = caps.get("mcpCapabilities")
        own = agent_config.mcp_servers if agent_config else ()
        names = {s.name for s in own}
        central = tuple(c.server for c in session.config.mcp_servers
                        if c.applies(session.rec.agent_name, str(session.roots[0])) and c.server.name not in names)
        memory_server = await self._memory.open()
        servers = (*own, *central, *([memory_server] if memory_server else []))
        handed, skipped = mcp_servers.for_agent(servers, supported if isinstance(supported, dict) else {})
        if skipped:
            session.record(EventType.SYSTEM, {"title": "mcp_servers_skipped", "text": "not handed to the agent, "
                                              f"which does not support their transport: {', '.join(skipped)}",
                                              "raw": {"skipped": skipped}}, turn_id="")
        return handed

    async def _authenticate(self, agent: AgentProcess) -> None:
        """ACP `authenticate` with the method sessions/acp/auth.py chooses, when the agent offers any."""
        provider = self._session.provider
        method = auth.choose(self._auth_methods, provider.auth_method, agent.env)
        if method is None:
            return  # nothing to choose (or the agent is logged in already): session/new tells
        try:
            await agent.request("authenticate", {"methodId": method.id}, timeout=NEW_SESSION_TIMEOUT)
        except AgentRequestError as exc:
            raise StartFailed(FailureKind.PROVIDER_AUTH_FAILURE, self._auth_refusal(
                f"authenticate with {method.id!r} failed: {exc}")) from exc
        except (TransportClosed, TimeoutError) as exc:
            raise StartFailed(FailureKind.STARTUP_FAILURE,
                              self._with_exit(f"ACP authenticate failed: {exc}"), cause=HANDSHAKE_CAUSE) from exc
        if self._session.rec.acp_caps is not None:
            self._session.rec.acp_caps.authenticated_with = method.id

    def _auth_refusal(self, detail: str) -> str:
        argv0 = self._session.agent.command[0] if self._session.agent else ""
        provider = self._session.provider
        return auth.refusal(self._auth_methods, argv0, provider.auth_method, detail, provider=provider.name,
                            session_id=self._session.rec.id, key_env=provider.key_env)

    async def _open_acp_session(self, *, reactivate: bool, fresh: bool = False) -> None:
        """`fresh`: a rewind's new ACP session on a running agent; the caller stages the conversation itself."""
        session = self._session
        assert session.agent
        params: JsonObject = {"cwd": str(Path(session.rec.cwd)), "mcpServers": self._mcp_servers}
        if session.roots[1:]:
            params["additionalDirectories"] = [str(r) for r in session.roots[1:]]
        fallback: str | None = None
        if reactivate:
            fallback = await self._try_load_session(params)
            if fallback is None:
                return
        try:
            result = await session.agent.request("session/new", params, timeout=NEW_SESSION_TIMEOUT)
        except AgentRequestError as exc:
            if lifecycle.is_auth_error(exc.code, str(exc)):  # a provider login, not a broken agent: waiting-for-auth
                raise StartFailed(FailureKind.PROVIDER_AUTH_FAILURE, self._auth_refusal(str(exc))) from exc
            raise StartFailed(FailureKind.STARTUP_FAILURE, self._with_exit(f"ACP session/new failed: {exc}")) from exc
        except (TransportClosed, TimeoutError) as exc:
            raise StartFailed(FailureKind.STARTUP_FAILURE, self._with_exit(f"ACP session/new failed: {exc}")) from exc
        if not isinstance(result, dict) or not result.get("sessionId"):
            raise StartFailed(FailureKind.PROTOCOL_FAILURE, "ACP session/new returned no sessionId")
        session.rec.acp_session_id = str(result["sessionId"])
        self._on_opened(result)
        if self._on_new is not None:
            await self._on_new()
        await self._apply_options(result)
        if fallback is not None:  # a reactivation whose session/load fell back to session/new
            await self._stage_projection(fallback)
        elif session.rec.forked_from and not reactivate and not fresh:
            # A fork's first start: its first prompt carries the original's conversation up to the checkpoint.
            await self._stage_projection("forked")

    async def _apply_options(self, opened: JsonObject) -> None:
        """Model, effort and speed through advertised config options, before any prompt (§3)."""
        session = self._session
        assert session.agent
        offered = opened.get("configOptions")
        config_options: list[ConfigOption] = offered if isinstance(offered, list) else []
        models = opened.get("models")
        rec = session.rec
        steps = plan(config_options, model=rec.model or "", model_explicit=bool(rec.model_explicit),
                     reasoning_effort=rec.reasoning_effort or "", speed=rec.speed or "normal", models=models)
        sets = [*steps.sets, *([("model", "", steps.set_model)] if steps.set_model else [])]
        for what, config_id, value in sets:
            sid = session.rec.acp_session_id
            try:
                answer = await session.agent.request(
                    "session/set_config_option" if config_id else "session/set_model",
                    {"sessionId": sid, "configId": config_id, "value": value} if config_id
                    else {"sessionId": sid, "modelId": value}, timeout=NEW_SESSION_TIMEOUT)
            except AgentRequestError as exc:
                steps.resolutions[what] = {"requested": value, "status": "rejected", "reason": str(exc)}
                continue
            if isinstance(answer, dict) and isinstance(answer.get("configOptions"), list):
                config_options = answer["configOptions"]  # the agent's state after the change
            elif config_id:
                config_options = with_current(config_options, config_id, value)  # accepted, state not repeated
            elif isinstance(models, dict):
                models = {**models, "currentModelId": value}
        if sets:
            # The record's options follow what was applied (status, and the dashboard's switcher, read them), as
            # they follow a `config_option_update` the agent sends.
            self._on_opened({"configOptions": config_options})
        # The record keeps these blocks as the plain dicts they are (sessions/core/record.py `ReportedModel`).
        rec.agent_model = cast(JsonObject | None, reported_model(config_options, models))
        rec.speed_resolution = cast(JsonObject | None, steps.resolutions.get("speed"))
        rec.option_resolutions = steps.resolutions
        for what, resolution in steps.resolutions.items():
            if resolution["status"] == "rejected":
                code = "speed_rejected" if what == "speed" else f"{what}_rejected"
                summary = f"{code}: provider rejected {what} {resolution['requested']!r} ({resolution['reason']})"
                raise StartFailed(FailureKind.STARTUP_FAILURE, summary, code=code)
            if resolution["status"] == "unsupported":
                session.record(EventType.SYSTEM, {"title": "runtime_option_unsupported", "text":
                            f"{what} {resolution['requested']!r} not applied: {resolution['reason']}",
                                               "raw": {"option": what, **resolution}}, turn_id="")

    async def _try_load_session(self, params: JsonObject) -> str | None:
        """The saved ACP session reopened: session/resume when the agent offers it (no history replay; the v2
        draft drops load), else session/load. None on success, else the fallback reason (§14)."""
        session = self._session
        assert session.agent
        saved = session.rec.acp_session_id or ""
        caps = session.rec.acp_caps
        if saved and caps is not None and caps.supports_resume:
            try:
                opened = await session.agent.request("session/resume", {**params, "sessionId": saved},
                                                     timeout=NEW_SESSION_TIMEOUT)
                self._on_opened(opened if isinstance(opened, dict) else {})
                return None
            except AgentRequestError as exc:  # e.g. the agent forgot it: load may still know it, else new
                logger.info("session %s: session/resume refused (%s); trying session/load", session.rec.id, exc)
            except (TransportClosed, TimeoutError) as exc:
                raise StartFailed(FailureKind.LOAD_SESSION_FAILURE,
                                  self._with_exit(f"ACP session/resume failed: {exc}")) from exc
        if caps is None or not caps.supports_load_session or not saved:
            return "load_session_unsupported"
        self.loading = True  # the agent may replay history as updates: we already hold it
        try:
            opened = await session.agent.request("session/load", {**params, "sessionId": saved},
                                                 timeout=NEW_SESSION_TIMEOUT)
            self._on_opened(opened if isinstance(opened, dict) else {})
            return None
        except AgentRequestError:
            return "load_session_resource_missing"
        except (TransportClosed, TimeoutError) as exc:
            raise StartFailed(FailureKind.LOAD_SESSION_FAILURE,
                              self._with_exit(f"ACP session/load failed: {exc}")) from exc
        finally:
            self.loading = False

    async def reopen(self, projection: str | None) -> None:
        """A fresh ACP session on the running agent, the conversation given back as `projection` with the next
        prompt (a rewind, docs/reference/worktrees.md §Rewind): the agent forgets the turns that were taken back.
        Raises StartFailed when the agent refuses a new session."""
        await self._open_acp_session(reactivate=False, fresh=True)
        self._turns.projection = projection
        await self._session.persist()

    async def _stage_projection(self, reason: str) -> None:
        # Reads and prunes up to thousands of rows: off the loop that every other session shares.
        # A fork's own log starts empty: the original's conversation up to its checkpoint comes first.
        rec = self._session.rec
        text, count = await asyncio.to_thread(session_projection, rec.id, rec.forked_from, folder.sessions_dir())
        self._turns.projection = text
        if text is None:
            return  # no conversation to rebuild (a session that never started): nothing recovered, no marker
        self._session.marker(MarkerKind.SESSION_RECOVERED, "Context rebuilt from log",
                    {"source": "events.db", "message_count": count, "fallback_reason": reason}, turn_id="")

    def _with_exit(self, message: str) -> str:
        session = self._session
        if session.agent and session.agent.returncode is not None:
            message += f"; {lifecycle.describe_exit(session.agent.returncode)}"
        tail = session.agent.stderr.text().strip() if session.agent else ""
        if tail:
            message += f"; stderr: {tail[-500:]}"
        return message

    async def _fail_start(self, kind: FailureKind, summary: str, code: str | None = None,
                          cause: str | None = None) -> None:
        session = self._session
        if self._stop.stopping or session.stopped.is_set():
            return  # a stop raced the start; the stop path finishes the session
        reason = START_FAILURE_STOP_REASON.get(kind, StopReason.ERROR)
        if session.agent is not None:
            await session.agent.shutdown(grace=0.2)
        failure = await self._stop.failure(kind, summary)
        if code:
            failure["code"] = code  # e.g. speed_rejected: which runtime option the provider refused
        if cause:
            failure["cause"] = cause  # e.g. handshake: which step of the start failed
        session.record(EventType.ERROR, {"error": failure["summary"], "failure": failure,
                                      "text": self._stop.stderr_excerpt()}, turn_id="")
        await self._stop.finish(reason, summary, failure)
