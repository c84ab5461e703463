"""What our ACP client answers to permission requests: decisions by policy (fs access: `workspace_fs`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Required, TypedDict

from compozy_base.config.modes import PermissionMode
from sessions.core.acp_shapes import PermissionOption, ToolCall

READ_KINDS = frozenset({"read", "search", "fetch", "think"})
ALLOW_KINDS = ("allow_once", "allow_always")
REJECT_KINDS = ("reject_once", "reject_always")


def _pick(options: Sequence[PermissionOption], kinds: tuple[str, ...]) -> str | None:
    for kind in kinds:
        for option in options:
            if option.get("kind") == kind and option.get("optionId"):
                return str(option["optionId"])
    return None


def policy_decision(mode: str, tool_call: ToolCall, options: Sequence[PermissionOption]) -> tuple[str, str | None]:
    """(decision, option id) for a permission request; decision is `approved`, `denied` or `cancelled`."""
    if mode == PermissionMode.APPROVE_ALL:
        allow = True
    elif mode == PermissionMode.APPROVE_READS:
        allow = str(tool_call.get("kind", "")) in READ_KINDS
    else:
        allow = False
    if allow:
        option = _pick(options, ALLOW_KINDS)
        if option:
            return "approved", option
    option = _pick(options, REJECT_KINDS)
    if option:
        return "denied", option
    return "cancelled", None


class Outcome(TypedDict, total=False):
    outcome: Required[str]  # selected or cancelled
    optionId: str


class PermissionResponse(TypedDict):
    """Our answer to `session/request_permission`."""

    outcome: Outcome


def permission_response(option_id: str | None) -> PermissionResponse:
    if option_id is None:
        return {"outcome": {"outcome": "cancelled"}}
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


def allow_option(options: Sequence[PermissionOption]) -> str | None:
    return _pick(options, ALLOW_KINDS)


def reject_option(options: Sequence[PermissionOption]) -> str | None:
    return _pick(options, REJECT_KINDS)
