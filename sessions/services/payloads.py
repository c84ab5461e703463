"""Session payloads (docs/reference/surfaces.md §4.1): meta.json plus live runtime facts, as every surface shows
them.

The payload and the event envelope are TypedDicts, read from meta.json's own TypedDict (`SessionMeta`): they are
built as dicts for every listed session and go out as JSON, so their keys are typed at no cost per read, and a
hand-edited meta.json is shown as before (nothing is validated on the way)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from typing_extensions import ReadOnly

from compozy_base.config.loader import get_config
from sessions.catalog import ownership
from sessions.core import display, lifecycle
from sessions.core.display import OutcomeDoc, PreviewDoc, QuietDoc
from sessions.core.enums import FailureKind, SessionState
from sessions.core.live import LiveSession
from sessions.core.record import (
    AcpCapsDoc,
    ActivityDoc,
    ConfigOptionDoc,
    FailureDoc,
    ForkedFromDoc,
    LineageDoc,
    ModeDoc,
    ReportedModel,
    Resolution,
    SessionMeta,
    UsageDoc,
    WorktreeDoc,
)
from sessions.store import folder
from sessions.store.rows import EventRow


class SessionPayload(TypedDict):
    """SessionPayload (docs/reference/surfaces.md §4.1)."""

    id: str
    name: str | None
    name_source: str | None
    agent_name: str
    provider: str
    model: str | None
    agent_model: ReportedModel | None
    model_resolution: Resolution | None
    reasoning_effort: str | None
    speed: str
    speed_resolution: Resolution | None
    workspace_id: str
    workspace_path: str | None
    cwd: str | None
    type: str
    state: str
    badge: str
    attachable: bool
    prompt_state: str
    current_turn_id: str | None
    pending_permissions: int
    pending_elicitations: int
    stop_reason: str | None
    stop_detail: str | None
    failure: FailureDoc | None
    # What a person reads (sessions/core/display.py): how a stopped session ended, and a running turn's silence.
    outcome: OutcomeDoc | None
    quiet: QuietDoc | None
    preview: PreviewDoc | None  # the list's line: the running tool, else the last reply's start
    acp_session_id: str | None
    acp_caps: AcpCapsDoc | None
    mode: ModeDoc | None
    config_options: list[ConfigOptionDoc] | None
    available_commands: list[dict[str, str]] | None
    usage: UsageDoc | None
    effective_permissions: str | None
    activity: ActivityDoc | None
    last_activity_at: str | None
    lineage: LineageDoc | None
    isolation: str  # none or worktree (docs/reference/worktrees.md)
    worktree: WorktreeDoc | None
    forked_from: ForkedFromDoc | None
    task_id: str | None
    run_id: str | None
    created_at: str | None
    activated_at: str | None
    updated_at: str | None
    meta_error: NotRequired[MetaError]  # a listed session whose meta.json is unreadable (from its catalog row)
    # `?include_health=true`: the health DTO (health/services.py `row_dict`), which this layer does not shape.
    health: NotRequired[Mapping[str, object] | None]


class MetaError(TypedDict):
    code: str
    message: str


class SessionIds(TypedDict):
    """The two ids an event envelope carries: a session's meta.json has them, and so has the stub a stream that
    starts with its turn builds (compozy/api/prompt_stream.py)."""

    id: ReadOnly[str]
    workspace_id: ReadOnly[str | None]


class SessionEvent(EventRow):
    """SessionEventPayload: the stored row plus the Compozy session and workspace ids."""

    session_id: str
    workspace_id: str | None


def session_payload(meta: SessionMeta) -> SessionPayload:
    """SessionPayload (docs/reference/surfaces.md §4.1), computed from meta.json plus live runtime facts."""
    runtime = _live_runtime(meta["id"])
    liveness = meta.get("liveness") or {}
    activity_meta = liveness.get("activity") or {}
    # Without a runtime here, an active session is run by another node (or by none, until read repair stops it):
    # its meta.json says what that runtime last wrote (a turn's start, a permission waiting on a person).
    remote = runtime is None and meta["state"] == SessionState.ACTIVE
    prompting = bool(runtime.busy) if runtime else remote and bool(activity_meta.get("prompt_active"))
    stalled = liveness.get("stall_state") == "stalled"
    badge = lifecycle.badge(meta["state"], meta.get("failure"), stalled=stalled, prompting=prompting)
    activity = _activity(meta, runtime)
    pending_permissions = runtime.permissions.waiting_count if runtime \
        else int(liveness.get("pending_permissions") or 0) if prompting else 0
    pending_elicitations = runtime.elicitations.waiting_count if runtime \
        else len(liveness.get("elicitation_requests") or []) if prompting else 0
    payload: SessionPayload = {
        "id": meta["id"],
        "name": meta.get("name") or None,
        "name_source": meta.get("name_source") or ("user" if meta.get("name") else None),
        "agent_name": meta["agent_name"],
        "provider": meta.get("provider") or "",
        "model": meta.get("model") or None,
        # What the agent reports it runs, and whether the configured model was applied, not offered or refused.
        "agent_model": meta.get("agent_model"),
        "model_resolution": (meta.get("option_resolutions") or {}).get("model"),
        "reasoning_effort": meta.get("reasoning_effort") or None,
        "speed": meta.get("speed") or "normal",
        "speed_resolution": meta.get("speed_resolution"),
        "workspace_id": meta["workspace_id"],
        "workspace_path": meta.get("workspace_path"),
        "cwd": meta.get("cwd"),
        "type": meta.get("session_type") or "user",
        "state": meta["state"],
        "badge": badge.value,
        # A failed turn leaves the session able to take the next prompt; any other failure does not.
        "attachable": meta["state"] == SessionState.ACTIVE and badge.value in ("idle", "running")
        and (meta.get("failure") or {}).get("kind") in (None, FailureKind.PROMPT_FAILURE) and not stalled,
        "prompt_state": "prompting" if prompting else ("idle" if meta["state"] == SessionState.ACTIVE else "none"),
        "current_turn_id": (runtime.turn.id if runtime.turn else None) if runtime
        else (activity_meta.get("turn_id") if prompting else None),
        "pending_permissions": pending_permissions,
        # The agent's open questions (a form for a person): the session page refetches them when this changes.
        "pending_elicitations": pending_elicitations,
        "stop_reason": meta.get("stop_reason") or None,
        "stop_detail": meta.get("stop_detail") or None,
        "failure": meta.get("failure"),
        "outcome": display.outcome(meta["state"], meta.get("stop_reason"), (meta.get("failure") or {}).get("kind")),
        "quiet": _quiet(prompting, pending_permissions + pending_elicitations > 0, activity),
        "preview": display.preview(
            prompting=prompting, current_tool=activity.get("current_tool"),
            live_reply=runtime.turn.reply if runtime is not None and runtime.turn is not None else "",
            last_reply=str((liveness.get("last_turn") or {}).get("reply_preview") or "")),
        "acp_session_id": meta.get("acp_session_id") or None,
        "acp_caps": meta.get("acp_caps"),
        # What the agent says of the session (sessions/runtime/agent_state.py); None until it says it.
        "mode": meta.get("mode"),
        "config_options": meta.get("config_options"),
        "available_commands": meta.get("available_commands"),
        "usage": meta.get("usage"),
        "effective_permissions": meta.get("effective_permissions"),
        "activity": activity or None,
        "last_activity_at": activity.get("last_activity_at"),
        "lineage": meta.get("lineage"),
        "isolation": meta.get("isolation") or "none",
        "worktree": meta.get("worktree"),
        "forked_from": meta.get("forked_from"),
        "task_id": meta.get("task_id"),  # correlation keys of a task run's session (tasks)
        "run_id": meta.get("run_id"),
        "created_at": meta["created_at"],
        "activated_at": meta.get("activated_at"),  # first reached `active`: `session new` tells start from turn
        "updated_at": meta["updated_at"],
    }
    return payload


def _quiet(prompting: bool, waiting: bool, activity: ActivityDoc) -> QuietDoc | None:
    """The quiet-turn notice as of now, with the configured bounds."""
    if not prompting:
        return None
    sup = get_config().supervision
    return display.quiet(prompting=prompting, waiting_on_person=waiting,
                         last_output=folder.parse_time(activity.get("last_activity_at")),
                         turn_started=folder.parse_time(activity.get("turn_started_at")), now=folder.utcnow(),
                         notice_after=sup.quiet_notice_after, attention_after=sup.quiet_attention_after)


def _activity(meta: SessionMeta, runtime: LiveSession | None) -> ActivityDoc:
    """A live runtime's activity is newer than meta.json's (written once a heartbeat): the running turn, its idle
    time, the last chunk. Read from another thread, so a dict resized mid-copy falls back to the stored one."""
    if runtime is not None and runtime.rec.state == meta.get("state"):
        try:
            return runtime.live_activity()
        except RuntimeError:
            pass
    return ((meta.get("liveness") or {}).get("activity") or {}).copy()


def _live_runtime(session_id: str) -> LiveSession | None:
    manager = ownership.local_manager()
    return manager.get(session_id) if manager is not None else None


def envelope(meta: SessionIds, row: EventRow) -> SessionEvent:
    """SessionEventPayload: the stored row plus the Compozy session and workspace ids."""
    return {"session_id": meta["id"], "workspace_id": meta["workspace_id"], **row}
