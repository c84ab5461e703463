"""What a lifecycle hook is (docs/reference/hooks.md §2-§4): events, modes, sources, patch keys, matcher fields, and
the declaration itself with its validation. `compozy_base/config/loader.py` parses declarations into these; the runner
(`sessions/hooks/runner.py`) executes them. Nothing here runs a process."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from compozy_base.config.errors import ConfigError

# Default priority of a hook by where it was declared (docs/reference/hooks.md §2); sources also order hooks.
HOOK_SOURCE_PRIORITY = {"native": 1000, "config": 500, "extension": 300, "agent_definition": 100, "skill": 0}


@dataclass(frozen=True)
class HookDeclaration:
    """One `[[hooks.declarations]]` entry (or AGENT.md `hooks:` item); semantics in `sessions/hooks/runner.py`."""

    name: str
    event: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    mode: str = "async"
    required: bool = False
    timeout: float = 5.0
    priority: int = 500
    matcher: dict[str, Any] = field(default_factory=dict)
    source: str = "config"
    enabled: bool = True
    # {VAR: "env:NAME" | "vault:..."}, resolved right before each run so values never sit in config objects.
    secret_env: dict[str, str] = field(default_factory=dict)
    # AGENT.md hooks only run for their agent; workspace overlay/agent hooks only in their workspace.
    agent_scope: str = ""
    workspace_scope: str = ""
    # Workspace hooks run in the workspace root; None = the runner's cwd (the daemon's by default).
    cwd: Path | None = None



class HookEvent(StrEnum):
    SESSION_PRE_CREATE = "session.pre_create"
    SESSION_POST_CREATE = "session.post_create"
    SESSION_PRE_RESUME = "session.pre_resume"
    SESSION_POST_RESUME = "session.post_resume"
    SESSION_PRE_STOP = "session.pre_stop"
    SESSION_POST_STOP = "session.post_stop"
    SESSION_HEALTH_UPDATE_AFTER = "session.health.update.after"
    AGENT_PRE_START = "agent.pre_start"
    AGENT_SPAWNED = "agent.spawned"
    AGENT_CRASHED = "agent.crashed"
    AGENT_STOPPED = "agent.stopped"
    INPUT_PRE_SUBMIT = "input.pre_submit"
    PROMPT_POST_ASSEMBLE = "prompt.post_assemble"
    TURN_START = "turn.start"
    TURN_END = "turn.end"
    MESSAGE_START = "message.start"
    MESSAGE_DELTA = "message.delta"
    MESSAGE_END = "message.end"
    TOOL_PRE_CALL = "tool.pre_call"
    TOOL_POST_CALL = "tool.post_call"
    TOOL_POST_ERROR = "tool.post_error"
    PERMISSION_REQUEST = "permission.request"
    PERMISSION_RESOLVED = "permission.resolved"
    PERMISSION_DENIED = "permission.denied"


class HookMode(StrEnum):
    SYNC = "sync"
    ASYNC = "async"


class HookSource(StrEnum):
    """Declared in dispatch order (docs/reference/hooks.md §3)."""

    NATIVE = "native"
    CONFIG = "config"
    EXTENSION = "extension"
    AGENT_DEFINITION = "agent_definition"
    SKILL = "skill"


_E = HookEvent
ASYNC_ONLY_EVENTS = frozenset({_E.SESSION_HEALTH_UPDATE_AFTER, _E.MESSAGE_DELTA, _E.PERMISSION_RESOLVED,
                               _E.PERMISSION_DENIED})

_LABELS = frozenset({"labels"})
# Patch keys per event besides `deny`/`deny_reason` (§4). Empty = the event's patches are ignored: stdout
# must still be one JSON object, but its keys are not checked and it cannot deny.
PATCH_KEYS: dict[HookEvent, frozenset[str]] = {
    _E.SESSION_PRE_CREATE: frozenset({"session_name", "session_type", "agent_name", "workspace_id", "workspace"}),
    _E.SESSION_POST_CREATE: frozenset(),
    _E.SESSION_PRE_RESUME: frozenset({"session_name", "agent_name"}),
    _E.SESSION_POST_RESUME: frozenset(),
    _E.SESSION_PRE_STOP: frozenset({"session_name", "agent_name"}),
    _E.SESSION_POST_STOP: frozenset(),
    _E.SESSION_HEALTH_UPDATE_AFTER: frozenset(),
    _E.AGENT_PRE_START: frozenset({"command", "args", "cwd"}),
    _E.AGENT_SPAWNED: _LABELS,
    _E.AGENT_CRASHED: _LABELS,
    _E.AGENT_STOPPED: _LABELS,
    _E.INPUT_PRE_SUBMIT: frozenset({"message", "context_blocks"}),
    _E.PROMPT_POST_ASSEMBLE: frozenset({"prompt", "context_blocks"}),
    _E.TURN_START: _LABELS,
    _E.TURN_END: _LABELS,
    _E.MESSAGE_START: frozenset({"role", "delta_type", "text"}),
    _E.MESSAGE_DELTA: frozenset(),
    _E.MESSAGE_END: frozenset({"role", "delta_type", "text"}),
    _E.TOOL_PRE_CALL: frozenset({"tool_id", "read_only", "tool_input"}),
    _E.TOOL_POST_CALL: frozenset({"title", "tool_result", "error"}),
    _E.TOOL_POST_ERROR: frozenset({"title", "tool_result", "error"}),
    _E.PERMISSION_REQUEST: frozenset({"decision", "decision_class", "reason"}),
    _E.PERMISSION_RESOLVED: frozenset(),
    _E.PERMISSION_DENIED: frozenset(),
}
_DENY_KEYS = frozenset({"deny", "deny_reason"})

_SESSION_MATCH = frozenset({"agent_name", "workspace_id", "workspace_root", "session_type"})
_INPUT_MATCH = frozenset({"agent_name", "workspace_id", "workspace_root", "input_class"})
# Allowed matcher fields per event family (§2); the family is the event name's first segment.
MATCHER_FIELDS: dict[str, frozenset[str]] = {
    "session": _SESSION_MATCH,
    "input": _INPUT_MATCH,
    "prompt": _INPUT_MATCH,
    "turn": _INPUT_MATCH,
    "agent": frozenset({"agent_name", "workspace_id", "workspace_root"}),
    "tool": frozenset({"tool_name", "tool_namespace", "tool_read_only"}),
    "permission": frozenset({"tool_name", "decision_class"}),
    "message": frozenset({"message_role", "message_delta_type"}),
    "event": frozenset({"agent_name", "acp_event_type", "turn_id"}),
}
_SOURCE_ORDER = {source.value: index for index, source in enumerate(HookSource)}


def event_family(event: str) -> str:
    return event.split(".", 1)[0]


def validate_declarations(decls: Iterable[HookDeclaration]) -> None:
    """Reject declarations the reference calls invalid (§2); raises ConfigError naming the hook."""
    seen: set[str] = set()
    for decl in decls:
        where = f"hook {decl.name!r}"
        if not decl.name or not decl.event:
            raise ConfigError("every hook declaration needs a name and an event")
        if decl.name in seen:
            raise ConfigError(f"{where} is declared twice")
        seen.add(decl.name)
        event = _checked_event(decl, where)
        _check_matcher(decl, event, where)
        for var, ref in decl.secret_env.items():
            if not (ref.startswith("env:") and len(ref) > 4) and not (ref.startswith("vault:") and len(ref) > 6):
                raise ConfigError(f"{where}: secret_env.{var} must be \"env:NAME\" or \"vault:...\"")


def _checked_event(decl: HookDeclaration, where: str) -> HookEvent:
    """The declaration's event, once its source, mode, timeout and command fit it."""
    try:
        event = HookEvent(decl.event)
    except ValueError:
        raise ConfigError(f"{where}: unknown event {decl.event!r}") from None
    if decl.source not in _SOURCE_ORDER:
        raise ConfigError(f"{where}: unknown source {decl.source!r}")
    if decl.mode not in set(HookMode):
        raise ConfigError(f"{where}: mode must be sync or async")
    if decl.required and decl.mode != HookMode.SYNC:
        raise ConfigError(f"{where}: required hooks must be sync")
    if decl.mode == HookMode.SYNC and event in ASYNC_ONLY_EVENTS:
        raise ConfigError(f"{where}: event {event.value!r} is async-only; mode must be async")
    if decl.timeout < 0 or math.isnan(decl.timeout):
        raise ConfigError(f"{where}: timeout must not be negative")
    if not decl.command:
        raise ConfigError(f"{where} needs a command")
    return event


def _check_matcher(decl: HookDeclaration, event: HookEvent, where: str) -> None:
    """Matcher fields of the event's family only, each of its type, and an agent match that fits the scope."""
    allowed = MATCHER_FIELDS[event_family(event)]
    for key, value in decl.matcher.items():
        if key not in allowed:
            raise ConfigError(
                f"{where}: matcher field {key!r} does not apply to {event_family(event)} events"
                f" (allowed: {', '.join(sorted(allowed))})"
            )
        if key == "tool_read_only":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: matcher.tool_read_only must be true or false")
        elif not isinstance(value, str):
            raise ConfigError(f"{where}: matcher.{key} must be a string")
    agent_match = decl.matcher.get("agent_name", "")
    if decl.agent_scope and agent_match not in ("", "*", decl.agent_scope):
        raise ConfigError(f"{where}: matcher.agent_name {agent_match!r} differs from its agent"
                          f" {decl.agent_scope!r}")


def merge_declarations(base: Iterable[HookDeclaration], overlay: Iterable[HookDeclaration]) -> tuple[
        HookDeclaration, ...]:
    """Workspace overlay on top of global hooks: a same-`name` overlay entry replaces the base one whole."""
    merged = {decl.name: decl for decl in base}
    for decl in overlay:
        merged.pop(decl.name, None)
        merged[decl.name] = decl
    return tuple(merged.values())


