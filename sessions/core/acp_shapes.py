"""The few ACP (Agent Client Protocol) JSON shapes the daemon reads by key: a permission request's tool call and
options, and the config options an agent advertises.

TypedDicts, every key optional (`total=False`): they are the agent's JSON as it arrived, never validated into an
object (an agent may omit any key or send a value of another type, so reads stay `.get` with a default and an
`isinstance` where the value's type matters), and typing their keys costs nothing. A value the daemon only passes
on (a tool's rawInput) stays `Any`. What is not named here (a whole update, a JSON-RPC message) is `JsonObject`.
"""

from __future__ import annotations

from typing import Any, TypedDict

from sessions.core.jsonobj import JsonObject


class PermissionOption(TypedDict, total=False):
    """One option of `session/request_permission`."""

    optionId: str
    name: str
    kind: str  # allow_once, allow_always, reject_once or reject_always


class ToolCall(TypedDict, total=False):
    """A `toolCall` (a permission request's, or the update that announced it)."""

    toolCallId: str
    title: str
    kind: str  # read, edit, execute, search, fetch, think, ...
    status: str
    rawInput: Any
    rawOutput: Any
    content: list[JsonObject]
    locations: list[JsonObject]


class SelectValue(TypedDict, total=False):
    """A value of a select config option, or a group of them (`options`)."""

    value: Any
    name: str
    description: str
    options: list[SelectValue]


class ConfigOption(TypedDict, total=False):
    """A config option the agent advertises (`configOptions` of session/new, load and their updates)."""

    id: str
    name: str
    description: str
    category: str  # model, mode, thought_level, ...
    type: str  # select or boolean
    currentValue: Any
    options: list[SelectValue]
