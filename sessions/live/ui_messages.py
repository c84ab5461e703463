"""The transcript's shapes: the AI SDK UI messages an entry holds, their parts and the data they carry.

They are TypedDicts (sessions/live/transcript.py says why: built as dicts row by row while a session streams, and
sent as JSON as they are), apart from the assembler that builds them, so a reader of a transcript (recap, history,
the API) imports what a message is without the rules that fold events into one.
"""

from __future__ import annotations

from typing import Any, Literal, Required, TypedDict

from sessions.core.jsonobj import JsonObject
from sessions.core.record import FailureDoc
from sessions.store.ops import UsageColumns

# Content keys copied into a data-compozy-event part (the rest, e.g. `raw`, stays in the event store).
EventDataKey = Literal["title", "text", "error", "failure", "stop_reason", "stop_detail", "request_id", "action",
                       "resource", "decision", "decision_source", "option_id", "tool_call_id", "runtime", "entries",
                       "actor"]
EVENT_DATA_KEYS: tuple[EventDataKey, ...] = (
    "title", "text", "error", "failure", "stop_reason", "stop_detail", "request_id", "action", "resource", "decision",
    "decision_source", "option_id", "tool_call_id", "runtime", "entries", "actor")
# Content keys a user message keeps in its metadata, and those `done` adds to the message it closes.
UserMetadataKey = Literal["source", "authored_text", "client_message_id", "synthetic", "action", "decision"]
USER_METADATA_KEYS: tuple[UserMetadataKey, ...] = ("source", "authored_text", "client_message_id", "synthetic",
                                                   "action", "decision")
DoneMetadataKey = Literal["stop_reason", "usage", "cost"]
DONE_METADATA_KEYS: tuple[DoneMetadataKey, ...] = ("stop_reason", "usage", "cost")


class MarkerData(TypedDict, total=False):
    """A transcript marker's own facts (`raw` of its row: sessions/runtime/session.py `marker`)."""

    kind: str
    occurred_at: str
    summary: str
    evidence: JsonObject  # what the marker's cause recorded: free-form per marker kind
    diagnostic: JsonObject


class TerminalData(TypedDict, total=False):
    """A `terminal_exited` row's terminal: its id, command, exit code and (bounded, redacted) output."""

    terminal_id: str
    command: str
    exit_code: int | None
    signal: str | None
    output: str
    truncated: bool


class OptionData(TypedDict):
    option_id: str | None
    kind: str | None
    label: str | None


class EventData(TypedDict, total=False):
    """A `data-compozy-event` (or `data-compozy-permission`) part's data: the row's place, and the content keys
    worth showing (`EVENT_DATA_KEYS`) as the stored content has them."""

    event_type: Required[str]
    sequence: Required[int]
    turn_id: Required[str]
    timestamp: Required[str]
    title: str
    text: str
    error: str
    failure: FailureDoc
    stop_reason: str
    stop_detail: str
    request_id: str
    action: str
    resource: str
    decision: str | None
    decision_source: str
    option_id: str
    tool_call_id: str
    runtime: Any  # a runtime event's facts, as recorded: free-form
    entries: list[JsonObject]  # a plan's entries, as the agent sent them
    actor: JsonObject  # who answered a permission or took control (accounts/actor.py `Actor.fields`)
    marker: MarkerData
    options: list[OptionData]  # a permission request's choices
    terminal: TerminalData
    session_id: str  # the prompt stream's permission part names its session (compozy/api/prompt_stream.py)
    workspace_id: str | None


class UIPart(TypedDict, total=False):
    """One part of a UI message (AI SDK `UIMessage` parts). `type` is `text`, `reasoning`, `dynamic-tool`,
    `data-compozy-event` or `data-compozy-permission`; the other keys go with the kinds that have them."""

    type: Required[str]
    text: str  # text, reasoning
    toolCallId: str  # dynamic-tool, from here …
    toolName: str
    title: str
    toolKind: str
    status: str
    state: str
    input: Any  # the agent's rawInput: any JSON value
    content: list[JsonObject]  # the call's ACP content blocks (text, diff, terminal)
    output: Any  # the tool's result as the agent sent it
    errorText: str
    terminals: dict[str, TerminalData]  # … to here
    id: str  # data-compozy-permission: the request id
    data: EventData  # data-compozy-event, data-compozy-permission


class MessageMetadata(TypedDict, total=False):
    turn_id: str
    agent_name: str
    created_at: str
    out_of_turn: bool
    event_type: str  # a system message's row type
    partial: bool  # the first message of a page that may miss its beginning
    # A user message's, from its row's content (`USER_METADATA_KEYS`):
    source: str
    authored_text: str
    client_message_id: str
    synthetic: JsonObject  # a synthetic wake's facts (health/wake.py)
    action: str
    decision: str
    synthetic_reentry: bool
    # An assistant message's, from `usage` and `done` rows (`DONE_METADATA_KEYS`):
    usage: UsageColumns
    stop_reason: str
    cost: Any  # the turn's cost as the `done` row carries it (sessions/runtime/agent_state.py `turn_cost`)


class UIMessage(TypedDict):
    id: str
    role: str  # user, assistant or system
    metadata: MessageMetadata
    parts: list[UIPart]


class TranscriptEntry(TypedDict):
    message: UIMessage
    start_sequence: int  # the first event folded into it
    sequence: int  # the last event that changed it


class TranscriptPage(TypedDict):
    """`GET …/transcript` response body."""

    entries: list[TranscriptEntry]
    epoch: int
    generation: int
    max_sequence: int
    has_older: bool
    next_before_sequence: int | None
    limit: int
