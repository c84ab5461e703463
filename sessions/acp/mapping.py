"""ACP `session/update` notifications → Compozy event rows (docs/reference/events.md §4).

Unknown variants are stored as `system` rows with the raw update, never dropped: agents ship new
update types before SDKs learn them, and operators need the evidence.

The update is the agent's JSON (`JsonObject`); what it maps to is a TypedDict (`MappedContent`, `ToolBlock`,
`ToolOutput`): this runs once per streamed chunk, and a dict built with typed keys costs what the dict did. One flat
TypedDict for every update kind's content, because the runtime reads it without asking the kind
(sessions/runtime/session.py `on_update`); the values taken from the update as they are stay `Any`.
"""

from __future__ import annotations

import math
from typing import Any, Required, TypedDict

from sessions.core import money
from sessions.core.enums import EventType
from sessions.core.jsonobj import JsonObject
from sessions.store.ops import UsageColumns


class ToolBlock(TypedDict, total=False):
    """One block of a tool call's ACP `content`, as stored: `text`, `diff`, `terminal` or (any other kind) `raw`."""

    type: Required[str]
    text: str
    raw: Any  # a block of a kind not mapped, as the agent sent it
    path: Any
    old_text: Any
    new_text: Any
    terminal_id: str


class PatchDoc(TypedDict):
    path: Any
    old_text: Any
    new_text: Any


class TerminalRef(TypedDict):
    terminal_id: str


class ToolOutput(TypedDict, total=False):
    """A settled tool call's result (`tool_result` of its row)."""

    structured_patch: list[PatchDoc]
    file_path: Any
    terminals: list[TerminalRef]
    content: str
    raw_output: Any  # the agent's rawOutput


class MappedContent(TypedDict, total=False):
    """The content of the row one update maps to; which keys it has follows the event type."""

    text: str  # agent_message, thought, user_message
    raw: Any  # an agent_message's non-text content; a system row's whole update
    source: str
    tool_call_id: str  # tool_call, tool_result, from here …
    tool_name: str
    title: str  # tool_call; also the `system` and available_commands rows' update kind
    tool_kind: Any
    status: Any
    tool_input: Any  # the agent's rawInput
    locations: Any
    tool_content: list[ToolBlock]
    tool_result: ToolOutput
    tool_error: Any  # … to here
    entries: Any  # plan: the agent's entries
    available_commands: Any
    usage: UsageColumns
    unknown_variant: bool


def _text_of(content: Any) -> tuple[str, Any]:
    """(text, raw-if-not-text) for an ACP content block."""
    if isinstance(content, dict):
        if content.get("type") == "text":
            return str(content.get("text", "")), None
        return "", content
    if isinstance(content, list):
        texts = [c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"]
        return "".join(texts), None if len(texts) == len(content) else content
    return "", content


def tool_content(update: JsonObject) -> list[ToolBlock]:
    """A tool call's ACP `content` as stored on its `tool_call` row: text, `diff` (path, old and new text; a new
    file has no old text) and `terminal` blocks (an id whose output comes later). Other block kinds are kept raw."""
    blocks: list[ToolBlock] = []
    contents = update.get("content")
    for block in contents if isinstance(contents, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "content":
            text, raw = _text_of(block.get("content"))
            blocks.append({"type": "text", "text": text} if raw is None else {"type": "raw", "raw": raw})
        elif kind == "diff":
            blocks.append({"type": "diff", "path": block.get("path"), "old_text": block.get("oldText"),
                           "new_text": block.get("newText")})
        elif kind == "terminal":
            blocks.append({"type": "terminal", "terminal_id": str(block.get("terminalId") or "")})
        else:
            blocks.append({"type": "raw", "raw": block})
    return blocks


def _tool_output(update: JsonObject) -> ToolOutput:
    result: ToolOutput = {}
    contents = update.get("content") or []
    texts = []
    for block in contents if isinstance(contents, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "content":
            text, _ = _text_of(block.get("content"))
            if text:
                texts.append(text)
        elif block.get("type") == "diff":
            result.setdefault("structured_patch", []).append(
                {"path": block.get("path"), "old_text": block.get("oldText"), "new_text": block.get("newText")}
            )
            result["file_path"] = block.get("path")
        elif block.get("type") == "terminal":
            result.setdefault("terminals", []).append({"terminal_id": str(block.get("terminalId") or "")})
    if texts:
        result["content"] = "\n".join(texts)
    if "rawOutput" in update:
        result["raw_output"] = update["rawOutput"]
    locations = update.get("locations")
    if isinstance(locations, list) and locations and isinstance(locations[0], dict):
        result.setdefault("file_path", locations[0].get("path"))
    return result


# The streamed text updates and the event types they store as (built once: this runs per chunk).
TEXT_CHUNKS = {"agent_message_chunk": EventType.AGENT_MESSAGE, "agent_thought_chunk": EventType.THOUGHT,
               "user_message_chunk": EventType.USER_MESSAGE}


def map_update(update: JsonObject, tool_titles: dict[str, str],
               tool_kinds: dict[str, str] | None = None) -> tuple[str, MappedContent] | None:
    """Returns (event type, content) for one update, or None for an empty chunk worth dropping. `tool_titles` and
    `tool_kinds` keep what each tool call said of itself: later updates (and permission requests) may omit it."""
    kind = str(update.get("sessionUpdate", ""))
    event_type = TEXT_CHUNKS.get(kind)
    if event_type is not None:
        return _text_chunk(kind, event_type, update)
    if kind in {"tool_call", "tool_call_update"}:
        return _tool_update(kind, update, tool_titles, tool_kinds)
    if kind == "plan":
        return EventType.PLAN, {"entries": update.get("entries", [])}
    if kind == "available_commands_update":
        return EventType.AVAILABLE_COMMANDS_UPDATE, {
            "title": kind, "available_commands": update.get("availableCommands", [])
        }
    if kind in {"current_mode_update", "config_option_update", "session_info_update"}:
        return EventType.SYSTEM, {"title": kind, "raw": update}
    if kind == "usage_update":
        return EventType.USAGE, {"usage": normalize_usage(update)}
    return EventType.SYSTEM, {"title": kind or "unknown_update", "raw": update, "unknown_variant": True}


def _text_chunk(kind: str, event_type: str, update: JsonObject) -> tuple[str, MappedContent] | None:
    text, raw = _text_of(update.get("content"))
    if not text and raw is None:
        return None
    content: MappedContent = {"text": text}
    if raw is not None:
        content["raw"] = raw
    if kind == "user_message_chunk":
        content["source"] = "agent"
    return event_type, content


def _tool_update(kind: str, update: JsonObject, tool_titles: dict[str, str],
                 tool_kinds: dict[str, str] | None) -> tuple[str, MappedContent]:
    """A `tool_call` or `tool_call_update`: the call (or its refinement) until an update settles it."""
    call_id = str(update.get("toolCallId", ""))
    title = update.get("title")
    if title:
        tool_titles[call_id] = str(title)
    if tool_kinds is not None and update.get("kind"):
        tool_kinds[call_id] = str(update["kind"])
    status = update.get("status")
    if kind == "tool_call_update" and status in {"completed", "failed"}:
        content: MappedContent = {
            "tool_call_id": call_id,
            "tool_name": tool_titles.get(call_id, ""),
            "status": status,
            "tool_result": _tool_output(update),
        }
        if status == "failed":
            content["tool_error"] = content["tool_result"].get("content") or "tool call failed"
        return EventType.TOOL_RESULT, content
    content = {
        "tool_call_id": call_id,
        "title": tool_titles.get(call_id, ""),
        "tool_name": tool_titles.get(call_id, ""),
        "tool_kind": update.get("kind", ""),
        "status": status or "",
    }
    if "rawInput" in update:
        content["tool_input"] = update["rawInput"]
    if update.get("locations"):
        content["locations"] = update["locations"]
    blocks = tool_content(update)
    if blocks:
        content["tool_content"] = blocks
    return EventType.TOOL_CALL, content


_USAGE_KEYS = {
    "inputTokens": "input_tokens", "outputTokens": "output_tokens", "totalTokens": "total_tokens",
    "thoughtTokens": "thought_tokens", "cachedReadTokens": "cache_read_tokens",
    "cachedWriteTokens": "cache_write_tokens", "used": "context_used", "size": "context_size",
}


def normalize_usage(raw: JsonObject) -> UsageColumns:
    """snake_case usage counts (the original leaked Go field names; we do not). Only finite numbers, and a cost
    only when a budget could count it (sessions/core/money.py): the row is read back by every history and recap."""
    usage: UsageColumns = {}
    for key, value in raw.items():
        if key in _USAGE_KEYS and isinstance(value, int | float) and (isinstance(value, int) or math.isfinite(value)):
            usage[_USAGE_KEYS[key]] = value
    cost, _ = money.cost(raw["cost"]) if raw.get("cost") is not None else (None, None)
    if cost is not None:
        usage["cost_amount"] = cost["amount"]
        usage["cost_currency"] = cost["currency"]
    return usage
