"""The one service layer: the ninja API, SSE consumers, CLI (over HTTP) and manage.py all call this.

Sync functions touch only durable state (catalog, meta.json, events.db); async ones also talk to the live
SessionManager on the daemon's loop. One module per concern; this package is their one front door.
"""

from __future__ import annotations

from sessions.services.control import (
    delete_session_files,
    remove_session,
    rename_session,
    ring_catalog_threadsafe,
    set_mode,
    stop_session,
)
from sessions.services.create import REASONING_EFFORTS, SPEEDS, create_session, reap_candidates, spawn_child
from sessions.services.lookup import (
    SessionOwnedElsewhere,
    check_workspace_scope,
    get_session,
    pull_copy,
    read_session_meta,
    resolve_agent,
    scoped_meta,
)
from sessions.services.outcomes import TurnOutcome, turn_outcome, turn_text
from sessions.services.payloads import envelope, session_payload
from sessions.services.prompts import (
    answer_elicitation,
    cancel_queued,
    cancel_turn,
    decide_permission,
    interrupt_session,
    list_elicitations,
    list_permissions,
    pending_inputs,
    prompt_session,
    steer_session,
)
from sessions.services.reactivation import attach, detach, reactivate
from sessions.services.reads import events_page, history, hook_runs, list_events, list_sessions
from sessions.services.rewind import fork_session, rewind_session
from sessions.services.workspaces import add_workspace, list_workspaces, remove_workspace, workspace_info
from sessions.services.worktrees import (
    commit_session,
    list_checkpoints,
    list_worktrees,
    merge_session,
    prune_worktrees,
    session_changes,
)
from sessions.store.folder import load_meta

__all__ = [
    "REASONING_EFFORTS",
    "SPEEDS",
    "SessionOwnedElsewhere",
    "TurnOutcome",
    "add_workspace",
    "answer_elicitation",
    "attach",
    "cancel_queued",
    "cancel_turn",
    "check_workspace_scope",
    "commit_session",
    "create_session",
    "decide_permission",
    "delete_session_files",
    "detach",
    "envelope",
    "events_page",
    "fork_session",
    "get_session",
    "history",
    "hook_runs",
    "interrupt_session",
    "list_checkpoints",
    "list_elicitations",
    "list_events",
    "list_permissions",
    "list_sessions",
    "list_workspaces",
    "list_worktrees",
    "load_meta",
    "merge_session",
    "pending_inputs",
    "prompt_session",
    "prune_worktrees",
    "pull_copy",
    "reactivate",
    "read_session_meta",
    "reap_candidates",
    "remove_session",
    "remove_workspace",
    "rename_session",
    "resolve_agent",
    "rewind_session",
    "ring_catalog_threadsafe",
    "scoped_meta",
    "session_changes",
    "session_payload",
    "set_mode",
    "spawn_child",
    "steer_session",
    "stop_session",
    "turn_outcome",
    "turn_text",
    "workspace_info",
]
