"""The permission gate: what the agent asks of its client (fs reads and writes, permission requests) is
answered here, inside the workspace, by policy, by hooks, or by a person."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any, TypedDict, cast

from accounts.actor import Actor
from sessions.acp import client_side, workspace_fs
from sessions.core.acp_shapes import PermissionOption, ToolCall
from sessions.core.enums import EventType
from sessions.core.jsonobj import JsonObject
from sessions.core.offload import spawn
from sessions.core.visible import visible
from sessions.runtime.approvals import Approvals
from sessions.runtime.permissions import PermissionBoard, option_for, permission_mode
from sessions.runtime.terminal_gateway import TerminalGateway

if TYPE_CHECKING:
    from sessions.runtime.activity import Activity
    from sessions.runtime.host import SessionCore
    from sessions.runtime.turns import Turns

logger = logging.getLogger(__name__)


class PermissionFacts(TypedDict):
    """What a permission row, its hooks and its observers are told of the request (the keys every one carries)."""

    request_id: str
    action: str
    resource: str
    title: Any  # the tool call's own title, as the agent sent it
    tool_call_id: str


class PermissionGate:
    """The answers to the agent's requests. Opens the requests that wait on a person on the board it is handed (the
    turns cancel them when a turn ends, supervision counts them as activity)."""

    def __init__(self, session: SessionCore, activity: Activity, turns: Turns, permissions: PermissionBoard, *,
                 tool_titles: dict[str, str], tool_kinds: dict[str, str], tool_inputs: dict[str, object]) -> None:
        self._session = session
        self._activity = activity
        self._turns = turns
        # Filled by the session's update mapping (sessions.acp.mapping), read here: a request naming only a tool
        # call's id is judged by that call's kind and title.
        self._tool_titles = tool_titles
        self._tool_kinds = tool_kinds
        self._tool_inputs = tool_inputs
        self.permissions = permissions
        self.approvals = Approvals()  # what a person's approvals of execute tool calls let run (approvals.py)
        self.terminals = TerminalGateway(session, self)

    async def on_request(self, method: str, params: JsonObject) -> Any:
        from acp.exceptions import RequestError

        if method == "session/request_permission":
            return await self._answer_permission(params)
        if method in ("fs/read_text_file", "fs/write_text_file"):
            return await self._serve_fs(method, params)
        if method.startswith("terminal/"):
            return await self.terminals.serve(method, params)
        raise RequestError.method_not_found(method)

    @property
    def mode(self) -> str:
        """The permission policy in force: the session's own (a child's may be narrower), else the agent's."""
        return permission_mode(self._session.rec.effective_permissions, self._session.config.permissions_mode)

    async def approve_execute(self, tool_call_id: str, argv: list[str]) -> bool:
        """Whether a command the agent runs through a client terminal may run: by policy, else by a person
        (approve-reads), through the same path as the agent's own permission requests (hooks, events, the board).
        A person is not asked twice for the command they just approved (this turn's execute tool call naming
        exactly it) or chose to allow always; any other command is asked about, shown exactly as it runs."""
        if self.mode == "approve-all":
            return True
        if self.mode != "approve-reads":
            return False
        turn_id = self._turns.turn.id if self._turns.turn else ""
        command = " ".join(argv)
        covered = self.approvals.covers(turn_id, argv)
        if covered is not None:
            self._session.record(EventType.PERMISSION, {
                "request_id": tool_call_id, "action": "terminal/create", "resource": visible(command),
                "title": visible(f"Run: {command}"), "tool_call_id": tool_call_id, "decision": "approved",
                "decision_source": f"person:{'allow_always' if covered == 'always' else 'allow_once'}"},
                turn_id=turn_id)
            return True
        answer = await self._answer_permission({
            "toolCall": {"toolCallId": tool_call_id, "title": f"Run: {command}", "kind": "execute",
                         "rawInput": {"command": argv}},
            "options": [{"optionId": "allow", "name": "Run", "kind": "allow_once"},
                        {"optionId": "allow_always", "name": "Always run this command", "kind": "allow_always"},
                        {"optionId": "reject", "name": "Do not run", "kind": "reject_once"}]})
        # A person's answer was recorded as an approval of this command (once, or always: `_answer_permission`);
        # a once is spent by this very run.
        chosen = answer.get("outcome", {}).get("optionId")
        if chosen == "allow":
            self.approvals.covers(turn_id, argv)
        return chosen in ("allow", "allow_always")

    async def _serve_fs(self, method: str, params: JsonObject) -> JsonObject:
        """A read or write inside the workspace roots, on the agents' own fs pool; a refused path is recorded."""
        from acp.exceptions import RequestError

        path = str(params.get("path", ""))
        loop = asyncio.get_running_loop()
        bad = workspace_fs.bad_params(method, params)
        if bad:
            self._session.protocol_violation(f"{method} with {bad}")
            raise RequestError.invalid_params({"path": path, "reason": bad})
        try:
            target = workspace_fs.confine(path, self._session.roots)
            self._activity.touch("fs", f"{method} {target.path}")
            hard_links = self._session.config.allow_hard_links
            if method == "fs/read_text_file":
                text = await loop.run_in_executor(workspace_fs.FS_POOL, functools.partial(
                    workspace_fs.read_text, target, params.get("line"), params.get("limit"), hard_links=hard_links))
                return {"content": text}
            await loop.run_in_executor(workspace_fs.FS_POOL, functools.partial(
                workspace_fs.write_text, target, params["content"], hard_links=hard_links))
            return {}
        except workspace_fs.OutsideWorkspace as exc:
            self._session.record(EventType.PERMISSION, {
                "action": method, "resource": path, "decision": "denied", "title": exc.title, "error": str(exc),
            })
            raise RequestError.invalid_params({"path": path, "reason": str(exc)}) from exc
        except (OSError, ValueError) as exc:
            raise workspace_fs.fs_error(path, exc) from exc

    async def _answer_permission(self, params: JsonObject) -> client_side.PermissionResponse:
        """Policy first; `approve-reads` leaves anything but reads to a person (API/CLI/dashboard)."""
        sent_call = params.get("toolCall")
        # The agent's JSON taken as ACP's shapes (sessions/core/acp_shapes.py): read by key, never trusted further.
        sent = cast(ToolCall, sent_call if isinstance(sent_call, dict) else {})
        raw_options = params.get("options")
        options = cast(list[PermissionOption],
                       [o for o in raw_options if isinstance(o, dict)] if isinstance(raw_options, list) else [])
        mode = self.mode
        call_id = str(sent.get("toolCallId", ""))
        # The request's toolCall is an update (ACP): a field it omits is the tool call's own, sent before it. A
        # request naming only the id was listed with no kind or title, and judged as an unknown kind.
        known = {"title": self._tool_titles.get(call_id), "kind": self._tool_kinds.get(call_id),
                 "rawInput": self._tool_inputs.get(call_id)}
        tool_call = cast(ToolCall, {**{k: v for k, v in known.items() if v},
                                    **{k: v for k, v in sent.items() if v not in (None, "")}})
        # What a person reads is what runs: control and bidi characters shown as escapes (core/visible.py).
        title = tool_call.get("title")
        base: PermissionFacts = {
            "request_id": call_id, "action": str(tool_call.get("kind") or "tool"),
            "resource": visible(self._tool_titles.get(call_id) or str(title or "")),
            "title": visible(title) if isinstance(title, str) else title, "tool_call_id": call_id,
        }
        turn = self._turns.turn
        turn_id = turn.id if turn else ""
        gate = await self._permission_hooks(tool_call, options, base, mode)
        decided_by: Actor | None = None
        if gate is not None:
            decision, option_id, source = gate
        elif mode == "approve-reads" and str(tool_call.get("kind", "")) not in client_side.READ_KINDS:
            if turn is not None and turn.cancel_requested:
                decision, option_id, source = "cancelled", None, "turn_cancelled"
            else:
                pending = self.permissions.open(call_id or f"perm-{len(self.permissions.pending)}", turn_id,
                                                tool_call, options)
                self._session.record(EventType.PERMISSION, {
                    **base, "request_id": pending.request_id, "decision": "pending", "decision_source": "person",
                    "raw": {"toolCall": sent, "options": options}})
                await self._session.recorder.flush()
                self._activity.touch("agent_waiting", "waiting for a permission decision")
                self._share_waiting()
                try:
                    person, chosen = await pending.answer
                    decided_by = pending.decided_by
                finally:
                    self.permissions.close(pending.request_id)
                    self._share_waiting()
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
        self._session.record(EventType.PERMISSION, {**base, "decision": decision, "decision_source": source,
                                           "option_id": option_id, "raw": {"toolCall": sent, "options": options},
                                           **({"actor": decided_by.fields()} if decided_by else {})},
                    turn_id=turn_id)
        self._activity.touch("permission", decision)
        if decision == "approved" and source == "person" and tool_call.get("kind") == "execute":
            # Its command (and only it) may come through a client terminal next without asking again.
            always = any(o.get("optionId") == option_id and o.get("kind") == "allow_always" for o in options)
            self.approvals.approved(turn_id, tool_call, always=always)
        await self._session.observe("permission.denied" if decision != "approved" else "permission.resolved", **{
            **base, "decision": decision, "decision_class": decision, "tool_name": base["resource"],
            "tool_call": tool_call})
        return client_side.permission_response(option_id)

    async def _permission_hooks(self, tool_call: ToolCall, options: list[PermissionOption],
                                base: PermissionFacts, mode: str) -> tuple[str, str | None, str] | None:
        """tool.pre_call (the gate) and permission.request run before our client answers the agent, so a
        hook can deny; a permission.request patch may also decide for a person. None = no hook decided."""
        kind = str(tool_call.get("kind") or "")
        read_only = kind in client_side.READ_KINDS
        pre = await self._session.hook("tool.pre_call", tool_call_id=base["tool_call_id"], tool_id=base["resource"],
                              tool_name=base["resource"], read_only=read_only, tool_input=tool_call.get("rawInput"))
        if pre is not None and not pre.ok:
            return "denied", client_side.reject_option(options), f"hook:{pre.hook_name or 'tool.pre_call'}"
        policy, _ = client_side.policy_decision(mode, tool_call, options)
        if mode == "approve-reads" and not read_only:
            policy = "pending"
        request = await self._session.hook("permission.request", **{
            **base, "decision": policy, "decision_class": policy, "tool_name": base["resource"],
            "tool_input": tool_call.get("rawInput"), "tool_call": tool_call, "options": options})
        if request is None:
            return None
        if not request.ok:
            return "denied", client_side.reject_option(options), f"hook:{request.hook_name or 'permission.request'}"
        patched = str(request.payload.get("decision") or policy)
        if patched != policy and patched in ("approved", "denied"):
            chosen = client_side.allow_option(options) if patched == "approved" else client_side.reject_option(options)
            return patched if chosen else "cancelled", chosen, "hook:permission.request"
        return None

    def _share_waiting(self) -> None:
        """The dashboard's "needs approval" comes from the catalog stream, rung now; the count goes to meta.json
        too (not awaited), where another node of a cluster reads it (it has no runtime to ask)."""
        liveness = self._session.rec.liveness_to_write()
        liveness.pending_permissions = self.permissions.waiting_count
        # What each request asks, for the attention list and the `permission_requested` webhook (both read
        # meta.json, on any node of a cluster), and it is what a person sees before deciding.
        liveness.permission_requests = [
            {"request_id": p.request_id, "title": p.tool_call.get("title"), "kind": p.tool_call.get("kind"),
             "turn_id": p.turn_id, "created_at": p.created_at}
            for p in list(self.permissions.pending.values()) if not p.answer.done()]
        self._session.announce()
        spawn(self._session.persist())

    def decide_permission(self, request_id: str, decision: str, option_id: str | None = None,
                          actor: Actor | None = None) -> bool:
        return self.permissions.resolve(request_id, decision, option_id, actor)
