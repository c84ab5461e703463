"""SessionRuntime: one live session, its agent process, its turns and its stop path.

Everything here runs on the daemon's asyncio loop. This module keeps the session's record (`rec`: meta.json as a
`SessionRecord`), its recording and its hooks (`SessionCore`, host.py, is what the components see of it); each stage
of a session's life is a component beside it, owning its own state, built here with the session and the siblings it
uses:

- `start_path.py` (`StartPath`): spawn, ACP initialize, session/new or load, options, `active`
- `turns.py` (`Turns`): one prompt at a time, queued input, turn failures on the session
- `busy_input.py` (`BusyInput`, inside `Turns`): interrupt and steer, fenced by the input generation
- `permission_gate.py` (`PermissionGate`): the agent's fs and permission requests
- `activity.py` (`Activity`, `Supervisor`): activity, heartbeats, and the sweep's decisions carried out behind
  their fence
- `stop_path.py` (`StopPath`): the cooperative stop, classification, failure objects and crash bundles

The services, health and the manager call the session through the thin delegations below.

Events go through the session's `Recorder` (the write path, `sessions/store/writer/`: where each batch commits is
decided there, in `placement.py`); meta.json and the catalog row are rewritten on every lifecycle change, on the
runtime's DB thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from pathlib import Path
from typing import Any

from accounts.actor import Actor
from compozy_base import metrics
from compozy_base.config.agents import ProviderConfig
from compozy_base.config.loader import Config
from sessions.acp.driver import AgentProcess
from sessions.acp.mapping import MappedContent, map_update
from sessions.catalog import cluster
from sessions.catalog import index as catalog
from sessions.core import lifecycle
from sessions.core.enums import EventType, FailureKind, MarkerKind, SessionState, StopReason
from sessions.core.failures import StoreFailure
from sessions.core.jsonobj import EventContent, JsonObject
from sessions.core.live import MarkerEvidence, PromptResult, Salvage, TurnExtra
from sessions.core.markers import marker_content
from sessions.core.offload import db, spawn
from sessions.core.record import ActivityDoc, AutoTitle, Failure, FailureDoc, SessionRecord
from sessions.core.redact import redact_text
from sessions.live import doorbells
from sessions.live.feed import offer_rows
from sessions.runtime.activity import Activity, Supervisor
from sessions.runtime.agent_state import AgentState
from sessions.runtime.checkpointing import Checkpointer
from sessions.runtime.confinement import confiner
from sessions.runtime.elicitation_desk import METHOD as ELICITATION_METHOD
from sessions.runtime.elicitation_desk import ElicitationDesk
from sessions.runtime.elicitations import ElicitationBoard
from sessions.runtime.host import RuntimeHost
from sessions.runtime.permission_gate import PermissionGate
from sessions.runtime.permissions import PermissionBoard
from sessions.runtime.start_path import StartPath
from sessions.runtime.stop_path import StopPath
from sessions.runtime.title import TITLE_PASSES, generate_title, title_routes
from sessions.runtime.title import Route as TitleRoute
from sessions.runtime.turn import Turn
from sessions.runtime.turns import Turns
from sessions.store import folder, replica
from sessions.store.ops import HookRunRow
from sessions.store.rows import StoredEvent
from sessions.store.writer import LEASE_WAIT_SECONDS, Recorder

logger = logging.getLogger(__name__)

# Hook events whose required denial (or required failure) stops the session with hook_stopped (docs/reference/hooks.md
# §5).
GATED_HOOK_EVENTS = frozenset({"input.pre_submit", "prompt.post_assemble", "turn.start", "tool.pre_call",
                               "permission.request"})
HOOK_STOP_SUMMARY = "session stopped by hook policy"
# The rows whose update may change the record (agent_state.py): the mapping makes them system, usage and commands.
AGENT_STATE_ROWS = frozenset({EventType.SYSTEM, EventType.USAGE, EventType.AVAILABLE_COMMANDS_UPDATE})
# Protocol violations recorded one by one before only every power of ten is.
VIOLATIONS_RECORDED = 10
# Read once: on 3.11 a member read off its enum class costs ~55 ns more than a global, and `on_update` reads them
# for every streamed chunk.
_AGENT_MESSAGE, _THOUGHT = EventType.AGENT_MESSAGE, EventType.THOUGHT


class SessionRuntime:
    def __init__(self, manager: RuntimeHost, rec: SessionRecord, *, config: Config,
                 provider: ProviderConfig, roots: list[Path]) -> None:
        self.manager = manager
        self.rec = rec
        self.id: str = rec.id
        self.config = config
        self.provider = provider
        self.roots = roots
        self.cwd = Path(rec.cwd)
        self.recorder = Recorder(folder.events_path(self.id), rec.agent_name, self._on_commit,
                                 self._on_store_failure, redact=config.redact_enabled,
                                 write_deadline=config.timeouts.store_write_deadline)
        self.recorder.commit_seconds = metrics.STORE_COMMIT_SECONDS.observe
        if cluster.clustered() and os.environ.get("COMPOZY_SESSIONS_DIR"):
            # A shared store: a node cut off from the others must not write what a survivor may be writing.
            self.recorder.may_write = functools.partial(cluster.lease_confirmed, self.id)
        me = cluster.identity()
        if me is not None and replica.enabled():
            # Each own disk: every batch is also stored in the cluster's database, fenced by this run's lease.
            self.recorder.replica = replica.Link(self.id, replica.Lease(me.node_id, me.run),
                                                 folder.events_path(self.id))
        self.agent: AgentProcess | None = None
        self.tool_titles: dict[str, str] = {}
        self.tool_kinds: dict[str, str] = {}
        self.tool_inputs: dict[str, object] = {}  # each tool call's rawInput: free-form JSON, read by approvals
        self.stopped = asyncio.Event()
        self.active = asyncio.Event()
        self.violations = 0  # protocol violations by this session's agents
        self.boot_task: asyncio.Task[None] | None = None
        self.activity = Activity(rec)
        self.agent_state = AgentState(self)
        # The requests waiting on a person: opened by the gate, cancelled when a turn ends, read by supervision.
        permissions, elicitations = PermissionBoard(), ElicitationBoard()
        self.checkpointer = Checkpointer(self)
        self.turns = Turns(self, self.activity, permissions, heartbeat=lambda: self.supervisor.beat(),
                           after_reply=self._offer_title, cost=self.agent_state, elicitations=elicitations,
                           checkpoint=self.checkpointer.after_turn if rec.worktree else None)
        self.gate = PermissionGate(self, self.activity, self.turns, permissions,
                                   tool_titles=self.tool_titles, tool_kinds=self.tool_kinds,
                                   tool_inputs=self.tool_inputs)
        self.desk = ElicitationDesk(self, self.activity, self.turns, elicitations)
        self.stop_path = StopPath(self, self.turns, active=self.active, boot_task=lambda: self.boot_task,
                                  halt_heartbeat=lambda: self.supervisor.halt(), terminals=self.gate.terminals)
        self.supervisor = Supervisor(self, self.activity, self.turns, permissions, elicitations)
        self.start_path = StartPath(self, self.turns, self.stop_path, active=self.active, on_update=self.on_update,
                                    on_request=self.on_request, on_opened=self.agent_state.opened,
                                    on_new=lambda: self.agent_state.start_asking(self.gate.mode))

    # ---- state -----------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self.rec.state.value

    async def persist(self) -> None:
        """meta.json first (the per-session truth), then the catalog mirror, then the doorbell.

        Both writes run on the runtime's one DB thread: meta.json's two fsyncs on the event loop stalled
        every other session's stream (20-60 ms under load), and one FIFO thread still lands a session's
        snapshots in the order they were taken."""
        if not await self.lease_allows_write():
            return
        self.activity.stamp()
        self.rec.updated_at = folder.isoformat(folder.utcnow())
        snapshot = self.rec.model_copy(deep=True)
        # Superseded before this write is queued: the DB thread is FIFO, so an older unsaved snapshot the retry
        # loop already queued lands first, and none it picks up later can land after this one.
        self.manager.supersede_unsaved(self.id)
        try:
            await db(catalog.save_meta, snapshot)
        except Exception as exc:  # noqa: BLE001 - any write failure: kept unsaved, logged, retried
            # A lifecycle change must never be lost to a full disk or a locked catalog: reads serve the
            # snapshot until a retry lands it (manager.unsaved_meta), and the failure is in the log (a condition
            # of the machine: its message, no traceback).
            logger.error("session %s: writing its metadata failed (%s); retrying in the background", self.id, exc)
            self.manager.keep_unsaved(snapshot)
            return
        self.announce()

    async def lease_allows_write(self) -> bool:
        """Whether this node may write the session's meta.json now (a save, or the retry of one that failed). On a
        shared store the metadata waits, like the commits (`Recorder.may_write`), while this node's lease is
        unconfirmed: a node woken after a stall past its TTL must not write its stale `active` over the survivor's
        failover before its renewal learns it was fenced. False once fenced: the session is another node's."""
        may_write = self.recorder.may_write
        while not self.fenced and may_write is not None and not may_write():
            await asyncio.sleep(LEASE_WAIT_SECONDS)
        return not self.fenced

    def announce(self) -> None:
        """Ring the catalog doorbell for a change that is not saved metadata (a turn started, a permission
        request opened or closed): list viewers refetch, as after a save."""
        doorbells.ring_catalog("upserted", self.rec.workspace_id, self.id)

    async def transition(self, target: SessionState, *, stop: tuple[str, str, Failure | None] | None = None,
                         activated_at: str | None = None, stopped_at: str | None = None) -> None:
        """`target`, saved with what changes with it: the stop's (reason, detail, failure), set or cleared, and the
        times the session first became active and last stopped."""
        lifecycle.check_transition(self.state, target)
        self.rec.state = target
        if stop is not None:
            self.rec.stop_reason, self.rec.stop_detail, self.rec.failure = stop
        if activated_at is not None:
            self.rec.activated_at = activated_at
        if stopped_at is not None:
            self.rec.stopped_at = stopped_at
        await self.persist()

    # ---- the components' faces the services and the manager use ------------------------------

    async def boot(self, *, reactivate: bool = False) -> None:
        await self.start_path.boot(reactivate=reactivate)

    @property
    def stopping(self) -> bool:
        return self.stop_path.stopping

    @property
    def fenced(self) -> bool:
        return self.stop_path.fenced

    @fenced.setter
    def fenced(self, value: bool) -> None:
        self.stop_path.fenced = value

    async def stop(self, reason: StopReason, detail: str = "", *, failure: FailureDoc | None = None,
                   process_gone: bool = False) -> None:
        """The cooperative stop path (docs/reference/sessions.md §8). Concurrent callers share one stop."""
        await self.stop_path.stop(reason, detail, failure=failure, process_gone=process_gone)

    async def failure(self, kind: FailureKind, summary: str) -> FailureDoc:
        """The failure object, with a crash bundle for the kinds that get one."""
        return await self.stop_path.failure(kind, summary)

    @property
    def turn(self) -> Turn | None:
        return self.turns.turn

    @property
    def busy(self) -> bool:
        return self.turns.busy

    @property
    def handover(self) -> bool:
        return self.turns.handover

    @property
    def salvage(self) -> Salvage | None:
        return self.turns.input.salvage

    @property
    def prompt_lock(self) -> asyncio.Lock:
        return self.turns.prompt_lock

    async def start_turn(self, text: str, *, source: str = "user", authored: str | None = None,
                         extra: TurnExtra | None = None) -> Turn:
        return await self.turns.start_turn(text, source=source, authored=authored, extra=extra)

    async def dispatch_next(self) -> None:
        await self.turns.dispatch_next()

    @property
    def admission(self) -> asyncio.Lock:
        return self.turns.admission

    async def queue_waiting(self) -> bool:
        return await self.turns.queue_waiting()

    async def cancel_turn(self) -> bool:
        return await self.turns.cancel_turn()

    async def interrupt(self, *, replacement: str | None, expected_turn_id: str | None) -> PromptResult:
        return await self.turns.input.interrupt(replacement=replacement, expected_turn_id=expected_turn_id)

    async def stage_steer(self, text: str) -> PromptResult:
        return await self.turns.input.stage_steer(text)

    @property
    def permissions(self) -> PermissionBoard:
        """The requests waiting on a person (sessions/services/prompts.py lists and answers them)."""
        return self.gate.permissions

    @property
    def elicitations(self) -> ElicitationBoard:
        """The agent's questions waiting on a person (sessions/services/elicitations.py lists and answers them)."""
        return self.desk.board

    async def on_request(self, method: str, params: JsonObject) -> Any:
        if method == ELICITATION_METHOD:
            return await self.desk.ask(params)
        return await self.gate.on_request(method, params)

    def decide_permission(self, request_id: str, decision: str, option_id: str | None = None,
                          actor: Actor | None = None) -> bool:
        return self.gate.decide_permission(request_id, decision, option_id, actor)

    def touch_activity(self, kind: str, detail: str = "", tool: str | None = None) -> None:
        self.activity.touch(kind, detail, tool)

    def live_activity(self) -> ActivityDoc:
        """The activity as of now, for reads (sessions/services/payloads.py)."""
        return self.activity.live(self.turn)

    # ---- recording -------------------------------------------------------------------------

    def record(self, type_: str, content: EventContent, turn_id: str | None = None) -> None:
        tid = turn_id if turn_id is not None else (self.turn.id if self.turn else "")
        if self.rec.acp_session_id:
            content = {"session_id": self.rec.acp_session_id, **content}
        self.recorder.record(type_, tid, content)

    def marker(self, kind: MarkerKind, summary: str, evidence: MarkerEvidence | None = None,
               turn_id: str | None = None) -> None:
        self.record(EventType.TRANSCRIPT_MARKER,
                    marker_content(kind, summary, evidence, folder.isoformat(folder.utcnow())), turn_id)

    def _on_commit(self, stored: list[StoredEvent], rows: list[tuple[Any, ...]]) -> None:
        """After each commit: hand the rows to this process's live feed (no read-back), then ring the
        doorbell for other processes' feeds (a Redis layer; on the embedded layer every feed is here)."""
        metrics.EVENTS_APPENDED.inc(len(stored))
        offer_rows(self.id, rows)
        doorbells.ring_events_elsewhere(self.id, stored[-1]["sequence"])

    def _on_store_failure(self, failure: StoreFailure) -> None:
        """The store stayed unwritable: stop the session with a visible failure, never keep going as if
        its events were being kept."""
        summary = f"event store unwritable ({failure.reason}): {failure.detail}"
        logger.error("session %s: %s; stopping it", self.id, summary)
        spawn(self.stop(StopReason.ERROR, "event store unwritable",
                        failure=lifecycle.failure_object(FailureKind.STORAGE_FAILURE, redact_text(summary))))

    # ---- agent callbacks -------------------------------------------------------------------

    def _fold_agent_state(self, type_: str, update: JsonObject) -> None:
        """Modes, options, commands and titles onto the record and saved at once; usage is saved with the turn's
        end (it can come with every message), or by the budget's stop."""
        if self.agent_state.update(str(update.get("sessionUpdate", "")), update) and type_ != EventType.USAGE:
            self.announce()
            spawn(self.persist())

    def on_update(self, params: JsonObject) -> None:
        """Called synchronously by the driver's observer, in arrival order."""
        if self.start_path.loading:
            return  # session/load replays history we already hold; never record it twice
        update = params.get("update")
        if not isinstance(update, dict):
            self.protocol_violation("a session/update without an update object")
            return
        sid = params.get("sessionId")
        if sid and sid != self.rec.acp_session_id and self.state == SessionState.ACTIVE:
            # Another ACP session's update must not be stored as this one's (labelled with our id).
            self.protocol_violation(f"an update for another ACP session ({str(sid)[:80]!r}) was dropped")
            return
        mapped = map_update(update, self.tool_titles, self.tool_kinds)
        if mapped is None:
            return
        type_, content = mapped
        turn = self.turns.turn
        self.record(type_, content, turn.id if turn is not None else "")
        if turn is not None:
            turn.outputs += 1
        if type_ in (_AGENT_MESSAGE, _THOUGHT):
            # The hot path (a streamed text chunk): no tool, no hook, no usage; activity is only a time and a kind.
            if type_ == _AGENT_MESSAGE and turn is not None and len(turn.reply) < 600:
                turn.reply += content.get("text", "")
            self.activity.touch_chunk(str(update.get("sessionUpdate", type_)))
            return
        self._on_other_update(type_, content, update, turn)

    def _on_other_update(self, type_: str, content: MappedContent, update: JsonObject,
                         turn: Turn | None) -> None:
        """What an update that is not a streamed chunk means beyond its row: agent state, usage, a tool."""
        if type_ in AGENT_STATE_ROWS:
            self._fold_agent_state(type_, update)
        if type_ == EventType.USAGE and self.turn:
            self.recorder.merge_usage(self.turn.id, content.get("usage", {}))
        tool = content.get("tool_name") if type_ in (EventType.TOOL_CALL, EventType.TOOL_RESULT) else None
        if turn is not None and type_ in (EventType.TOOL_CALL, EventType.TOOL_RESULT):
            turn.track_tool(type_, content)
        self.activity.touch(str(update.get("sessionUpdate", type_)), tool=tool,
                            tool_call_id=content.get("tool_call_id"), tool_done=type_ == EventType.TOOL_RESULT)
        if type_ == EventType.TOOL_RESULT:
            self._after_tool_result(content)
        elif type_ == EventType.TOOL_CALL and "tool_input" in content:
            # What the call asks to run: a person's approval of it covers exactly that command (approvals.py),
            # and the permission request that follows may name only the call's id.
            self.tool_inputs[str(content["tool_call_id"])] = content["tool_input"]

    def _after_tool_result(self, content: MappedContent) -> None:
        """A tool's result: its post-call hook, and a staged steer may go now."""
        if self.manager.hooks is not None:
            event = "tool.post_error" if content.get("tool_error") else "tool.post_call"
            if self.manager.hooks.has_hooks(event):
                spawn(self.hook(event, tool_call_id=content.get("tool_call_id"), tool_id=content.get("tool_name"),
                                tool_name=content.get("tool_name"), title=content.get("tool_name"),
                                tool_result=content.get("tool_result"), error=content.get("tool_error")))
        self.turns.input.at_tool_result()

    def protocol_violation(self, what: str) -> None:
        """Something the agent sent that ACP does not allow: recorded on the session (the first few, then every
        power of ten), logged likewise. A garbage flood once wrote a traceback a line: 33 MB of log for 100k."""
        self.violations += 1
        count = self.violations
        if count <= VIOLATIONS_RECORDED or str(count).rstrip("0") == "1":
            more = f" ({count} so far)" if count > VIOLATIONS_RECORDED else ""
            self.record(EventType.SYSTEM, {"title": "protocol_violation", "text": f"{what}{more}"})
            logger.warning("session %s: agent protocol violation%s: %s", self.id, more, what)

    # ---- lifecycle hooks (hooks.md) ------------------------------------------------------------

    def _record_hook_run(self, row: HookRunRow) -> None:
        self.recorder.record_hook_run(row)

    async def observe(self, event: str, **extra: Any) -> None:
        """Run the observe-only hooks of `event`: a hook cannot stop what happens here, and a dispatch that broke
        is logged with its cause rather than raised into the session's own path."""
        try:
            await self.hook(event, **extra)
        except Exception:  # tolerated by design (docs/reference/hooks.md §5: observers never block): logged
            logger.exception("session %s: hook event %s failed", self.id, event)

    async def hook(self, event: str, **extra: Any) -> Any:
        """Run the hooks of `event`; None when none is declared. A required gate denial stops the session."""
        runner = self.manager.hooks
        if runner is None or not runner.has_hooks(event):
            return None
        outcome = await runner.dispatch(event, lifecycle.hook_payload(self.rec, event, extra),
                                        record_run=self._record_hook_run)
        if event in GATED_HOOK_EVENTS and (outcome.denied or outcome.required_failed) and outcome.hook_required:
            reason = outcome.deny_reason or outcome.error or HOOK_STOP_SUMMARY
            logger.info("session %s: required hook %s stopped it: %s", self.id, outcome.hook_name, reason)
            # Spawned, not awaited: the caller may hold the prompt lock that the stop path waits for.
            spawn(self.stop(StopReason.HOOK_STOPPED, reason,
                            failure=lifecycle.failure_object(FailureKind.PERMISSION_FAILURE, reason)))
        return outcome

    # ---- auto-title (roles.auto_title) -----------------------------------------------------------

    def _title_eligible(self) -> bool:
        return (self.config.auto_title.enabled and not self.rec.name and self.rec.auto_title is None
                and (self.rec.session_type or "user") == "user")

    def _offer_title(self, turn: Turn) -> None:
        if self._title_eligible():
            self.rec.auto_title = AutoTitle(status="pending")
            spawn(self._auto_title(turn))

    async def _auto_title(self, turn: Turn) -> None:
        routes = title_routes(self.config, agent=self.rec.agent_name, provider=self.provider.name,
                              model=self.rec.model or "", reasoning_effort=self.rec.reasoning_effort or "",
                              model_explicit=bool(self.rec.model_explicit))
        async with TITLE_PASSES:
            if self.stopped.is_set():
                return  # stopped while waiting for a slot
            outcome = await generate_title(routes, self.cwd, turn.text, turn.reply, on_fallback=self._title_fallback,
                                           confine=confiner(self))
        if self.stopped.is_set():
            return  # the final meta is written; a late title must not reopen it
        # Which route opened the title session (none: every route failed to), on the record whatever the outcome.
        route: JsonObject = {} if outcome.route is None else {"route": routes[outcome.route].public()}
        if self.rec.name:
            self.rec.auto_title = AutoTitle(status="skipped", reason="explicit name wins", **route)
            await self.persist()
            return
        title = outcome.title
        if title is None:
            why: JsonObject = {} if route else {"reason": "no route opened the title session"}
            self.rec.auto_title = AutoTitle(status="failed", **route, **why)
            await self.persist()
            return
        self.rec.name, self.rec.name_source = title, "auto_title"
        self.rec.auto_title = AutoTitle(status="applied", **route)
        self.record(EventType.SYSTEM, {"title": "auto_title", "text": title}, turn_id="")
        await self.persist()

    def _title_fallback(self, index: int, route: TitleRoute, reason: str) -> None:
        """`role.fallback.used`: the title pass tries its next route, the one before having failed to open the title
        session (config reference §6)."""
        logger.info("session %s: auto-title falls back to route %d (%s): %s", self.id, index, route.provider.name,
                    reason)
        self.record(EventType.SYSTEM, {
            "title": "role.fallback.used",
            "text": f"auto_title: route {index} ({route.provider.name}) tried; the one before failed: {reason}",
            "raw": {"role": "auto_title", "attempt": index, **route.public(), "reason": redact_text(reason)}},
            turn_id="")

    async def rename(self, name: str) -> None:
        """An explicit name always wins, including over a title pass still running."""
        self.rec.name, self.rec.name_source = name, "user"
        await self.persist()
