"""Hook patches (docs/reference/hooks.md §4): what a hook may print back, decoded strictly, and the guards that
refuse a patch (a hook may not approve what policy pins, nor change what it does not own)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from compozy_base.config.hook_spec import _DENY_KEYS, PATCH_KEYS, HookEvent
from sessions.core.jsonobj import JsonObject

_ALLOW_DECISIONS = frozenset({"approved", "approve", "allow", "allowed", "allow_once", "allow_always"})
_DENY_DECISIONS = frozenset({"denied", "deny", "blocked", "block", "rejected", "reject", "reject_once",
                             "reject_always", "cancelled"})
_PINNED_SESSION_TYPES = frozenset({"coordinator", "spawned"})


class PatchError(ValueError):
    """The hook's stdout is not a valid patch for the event (outcome `failed`)."""


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_context_blocks(value: Any) -> bool:
    if not isinstance(value, list):
        return False
    for block in value:
        if not isinstance(block, dict) or set(block) - {"kind", "text", "metadata"}:
            return False
        if not isinstance(block.get("kind", ""), str) or not isinstance(block.get("text", ""), str):
            return False
        if not isinstance(block.get("metadata", {}), dict):
            return False
    return True


def _any_json(_: Any) -> bool:
    return True


_PATCH_TYPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "args": ("a list of strings", _is_str_list),
    "context_blocks": ("a list of {kind, text, metadata} objects", _is_context_blocks),
    "labels": ("an object of strings", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values())),
    "read_only": ("a boolean", lambda v: isinstance(v, bool)),
    "tool_input": ("any JSON value", _any_json),
    "tool_result": ("any JSON value", _any_json),
    "deny": ("a boolean", lambda v: isinstance(v, bool)),
}
_STRING_TYPE: tuple[str, Callable[[Any], bool]] = ("a string", lambda v: isinstance(v, str))


def _reject_constant(name: str) -> Any:
    raise PatchError(f"hook patch: invalid JSON value {name}")


def decode_patch(event: HookEvent, text: str) -> JsonObject:
    """Strict decoding: one JSON object, only the event's keys, typed values. Empty output = empty patch."""
    text = text.strip()
    if not text:
        return {}
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    try:
        value, end = decoder.raw_decode(text)
    except json.JSONDecodeError as exc:
        raise PatchError(f"hook patch: invalid JSON: {exc}") from None
    if text[end:].strip():
        raise PatchError("hook patch: unexpected data after the JSON object")
    if not isinstance(value, dict):
        raise PatchError("hook patch must be a JSON object")
    allowed = PATCH_KEYS[event]
    if not allowed:
        return value  # patches of this event are ignored
    for key, item in value.items():
        if key not in allowed and key not in _DENY_KEYS:
            raise PatchError(f"hook patch: unknown key {key!r} for event {event.value!r}")
        label, check = _PATCH_TYPES.get(key, _STRING_TYPE)
        if not check(item):
            raise PatchError(f"hook patch: {key!r} must be {label}")
    if "workspace_id" in value and "workspace" in value:
        raise PatchError("hook patch: set only one of 'workspace_id' and 'workspace'")
    return value


def _is_allow(value: Any) -> bool:
    return isinstance(value, str) and value.lower() in _ALLOW_DECISIONS


def _is_deny(value: Any) -> bool:
    return isinstance(value, str) and value.lower() in _DENY_DECISIONS


def guard_patch(event: HookEvent, payload: Mapping[str, Any], patch: Mapping[str, Any]) -> str:
    """Why a well-formed patch must not be applied (outcome `rejected`), or "" when it may."""
    if event == HookEvent.PERMISSION_REQUEST:
        for key in ("decision", "decision_class"):
            if key in patch and _is_deny(payload.get(key)) and _is_allow(patch[key]):
                return f"hook patch may not turn {key} {payload.get(key)!r} into {patch[key]!r}"
    if event == HookEvent.SESSION_PRE_CREATE and "session_type" in patch:
        old, new = payload.get("session_type"), patch["session_type"]
        if old != new and (old in _PINNED_SESSION_TYPES or new in _PINNED_SESSION_TYPES):
            return f"hook patch may not change session_type {old!r} to {new!r}"
    return ""
