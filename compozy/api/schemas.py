"""The API's contract, requests: a ninja `Schema` for every request body and query (responses are in
`response_schemas.py`).

Requests are strict (unknown body fields refused, closed sets are enums, numbers bounded), so a bad input is
a 400 with a stable code before any service runs (`compozy.api.app` maps a validation error to the code of
the field that failed).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from compozy_base.config.modes import PermissionMode
from sessions.catalog.lineage import MAX_TTL_SECONDS
from sessions.core.enums import EventType, SessionState, SessionType
from sessions.live import transcript
from sessions.services import recap
from sessions.store.events import MAX_PAGE

# SQLite integers (sequences, offsets) are signed 64-bit: a larger cursor is a bad request, not an overflow.
MAX_SEQUENCE = 2**63 - 1
# PATH_MAX on Linux; a longer path cannot name a file, so it is refused before it reaches the filesystem.
MAX_PATH = 4096
# Free text in bodies (prompts are further bounded by `busy_input.max_text_bytes`).
MAX_TEXT = 1024 * 1024
MAX_NAME = 300
# Query strings and path segments share Twisted's 16 KiB request line (a longer one is dropped unanswered), so
# what goes in a URL is bounded well under it: an id or name 128, a workspace reference (it may be a path) 1024,
# a repeated parameter 16 values.
MAX_IDENT = 128
MAX_REF = 1024
MAX_QUERY_TEXT = 256
MAX_REPEAT = 16


def readable(value: str) -> str:
    """A string we can store and read back: UTF-8 encodable (no lone surrogates) and without NUL.

    A lone surrogate survives JSON decoding but not a UTF-8 write, and NUL ends a C string (paths, SQLite
    text in some tools); refusing both here means a write that cannot be read back is never attempted.
    """
    if "\x00" in value:
        raise PydanticCustomError("unreadable_text", "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError("unreadable_text", "must be valid Unicode (no lone surrogates)") from None
    return value


def whole_number(value: Any) -> Any:
    """JSON numbers only: `true` and `"60"` are refused (pydantic's lax int takes both), `60.0` is the integer
    JSON Schema's `integer` says it is; `60.5` is then refused by the int itself."""
    if isinstance(value, bool | str | bytes):
        raise PydanticCustomError("int_type", "must be a whole JSON number, not a boolean or a string")
    return value


# An integer field of a body: a whole JSON number, `60` or `60.0`.
WholeInt = Annotated[int, BeforeValidator(whole_number)]
Text = Annotated[str, Field(max_length=MAX_TEXT), AfterValidator(readable)]
Name = Annotated[str, Field(max_length=MAX_NAME), AfterValidator(readable)]
Ref = Annotated[str, Field(max_length=MAX_REF), AfterValidator(readable)]
Ident = Annotated[str, Field(max_length=MAX_IDENT), AfterValidator(readable)]
QueryText = Annotated[str, Field(max_length=MAX_QUERY_TEXT), AfterValidator(readable)]
PathText = Annotated[str, Field(max_length=MAX_PATH), AfterValidator(readable)]
Sequence = Annotated[int, Field(ge=0, le=MAX_SEQUENCE)]


def rfc3339(value: str) -> str:
    """RFC 3339 with an offset, normalised to the store's own UTC form so the text comparison is a time one."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise PydanticCustomError("invalid_since", "since must be an RFC 3339 timestamp") from None
    if moment.tzinfo is None:
        raise PydanticCustomError("invalid_since", "since needs a time zone (e.g. Z)")
    try:
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except OverflowError:  # 0001-01-01T00:00+14:00 is before year 1 in UTC
        raise PydanticCustomError("invalid_since", "since is out of range once converted to UTC") from None


def split_commas(values: Any) -> Any:
    """`type` may repeat and hold commas (`type=done,error&type=plan`); each value is then checked on its own."""
    if isinstance(values, list) and all(isinstance(v, str) for v in values):
        return [t for v in values for t in v.split(",") if t] or None
    return values


class StrictIn(Schema):
    model_config = ConfigDict(extra="forbid")


# ---- errors -------------------------------------------------------------------------------------

class DiagnosticOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    code: str
    severity: str
    message: str
    data_freshness: str | None = None
    evidence: dict[str, Any] | None = None


class ErrorOut(Schema):
    """Every 4xx/5xx answer: a message, a stable machine code and a diagnostic (docs/reference/surfaces.md §1)."""

    error: str
    code: str
    diagnostic: DiagnosticOut


# 429: max_concurrent_agents reached; 507: the disk is full (storage_full).
ERROR_STATUSES = frozenset({400, 401, 403, 404, 405, 409, 410, 413, 429, 500, 502, 503, 507})


def responses(ok: dict[int, Any]) -> dict[Any, Any]:
    """A route's declared responses: its successes plus the common error schema."""
    return {**ok, ERROR_STATUSES: ErrorOut}


# ---- sessions: requests -------------------------------------------------------------------------

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class CreateSessionIn(StrictIn):
    """docs/reference/sessions.md §3: exactly one of `workspace` and `workspace_path`."""

    agent_name: Ref | None = None
    name: Name | None = None
    workspace: Ref | None = None
    workspace_path: PathText | None = None
    provider: Ref | None = None
    model: Ref | None = None
    reasoning_effort: ReasoningEffort | None = None
    speed: Literal["normal", "fast"] | None = None
    prompt: Text | None = None
    # docs/reference/worktrees.md: `worktree` runs the agent in a git worktree of its own.
    isolation: Literal["none", "worktree"] | None = None


class RenameIn(StrictIn):
    name: Name


class UIPartIn(Schema):
    model_config = ConfigDict(extra="allow")
    type: Ref
    text: Text | None = None


class UIMessageIn(Schema):
    """An AI-SDK UI message; only the user's text parts are read."""

    model_config = ConfigDict(extra="allow")
    role: Ref
    content: Text | None = None
    parts: list[UIPartIn] | None = None


class PromptIn(Schema):
    """`{message, mode?, messageId?}` or the AI-SDK `{messages: [...]}` (other AI-SDK keys are ignored)."""

    message: Text | None = None
    mode: Literal["queue", "interrupt", "steer"] | None = None
    messageId: Ref | None = None  # the AI-SDK's own name
    expected_turn_id: Ref | None = None
    messages: list[UIMessageIn] | None = None

    def text(self) -> str | None:
        if self.message is not None or not self.messages:
            return self.message
        for item in reversed(self.messages):
            if item.role == "user":
                if item.content is not None:
                    return item.content
                return "".join(p.text or "" for p in item.parts or [] if p.type == "text")
        return None


class PromptQuery(Schema):
    """`?frames=raw`: the raw prompt stream for the CLI (docs/reference/events.md §6.2), the parameter the session
    stream
    takes for its raw frames; `?format=raw` is kept as its alias. The default is the AI SDK's UI message stream."""

    frames: Literal["ui", "raw"] | None = None
    format: Literal["ui", "raw"] | None = None

    @model_validator(mode="after")
    def _one_choice(self) -> PromptQuery:
        if self.frames and self.format and self.frames != self.format:
            raise PydanticCustomError("invalid_parameter", "frames and its alias format disagree")
        return self

    @property
    def raw(self) -> bool:
        return (self.frames or self.format) == "raw"


class SteerIn(StrictIn):
    text: Text


class ModeIn(StrictIn):
    mode: Ref


class InterruptIn(StrictIn):
    expected_turn_id: Ref | None = None


class StopIn(StrictIn):
    detail: Text | None = None


class PermissionDecisionIn(StrictIn):
    decision: Literal["approve", "deny"]
    option_id: Ref | None = None


class ElicitationAnswerIn(StrictIn):
    action: Literal["accept", "decline", "cancel"]
    # The form's values (accept only), checked against the requested schema's field types and required list.
    content: dict[str, Any] | None = None


class SpawnChildIn(StrictIn):
    role: Name
    ttl_seconds: Annotated[WholeInt, Field(ge=1, le=MAX_TTL_SECONDS)]
    agent_name: Ref | None = None
    prompt: Text | None = None
    permissions: PermissionMode | None = None
    name: Name | None = None


class AttachIn(StrictIn):
    attached_to: Ref | None = None
    ttl_seconds: Annotated[WholeInt, Field(ge=1, le=86400)] = 900


# ---- sessions: queries --------------------------------------------------------------------------

class ListSessionsQuery(Schema):
    workspace: Ref | None = None
    state: SessionState | None = None
    type: SessionType | None = None
    agent: Ident | None = None
    q: QueryText | None = None
    resumable: bool = False
    all: bool = False
    include_health: bool = False
    cursor: Annotated[str, Field(pattern=r"^[0-9]{1,18}$")] | None = None
    limit: Annotated[int, Field(ge=1, le=100)] = 50


class EventsQuery(Schema):
    """docs/reference/events.md §5; `Last-Event-ID` is the header form of `after_sequence`."""

    type: list[EventType] | None = Field(None, max_length=MAX_REPEAT)
    agent_name: Ident | None = None
    turn_id: Ident | None = None
    since: Ident | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] | None = None
    after_sequence: Sequence | None = None

    _types = field_validator("type", mode="before")(split_commas)
    _since = field_validator("since")(lambda value: None if value is None else rfc3339(value))


class StreamQuery(BaseModel):
    """GET …/stream (docs/reference/events.md §6.1), validated by the stream consumer (compozy/api/sse.py), outside
    ninja (a
    plain model: ninja's Schema hands validators its own wrapper, not the query):
    `frames` (its alias `format`, the prompt stream's older name), `GET …/events`' filters for raw frames, and the
    resume cursor (`Last-Event-ID`, else `after_sequence` or `after`) with a transcript resume's fences."""

    frames: Literal["raw", "transcript"] | None = None
    format: Literal["raw", "transcript"] | None = None
    type: list[EventType] | None = Field(None, max_length=MAX_REPEAT)
    agent_name: Ident | None = None
    turn_id: Ident | None = None
    since: Ident | None = None
    limit: Annotated[int, Field(ge=1, le=transcript.MAX_LIMIT)] | None = None
    last_event_id: Sequence | None = None  # the header
    after_sequence: Sequence | None = None
    after: Sequence | None = None
    epoch: Sequence | None = None
    generation: Sequence | None = None
    # Never taken here: named so that asking for them is refused, not ignored.
    replay: str | None = None
    before_sequence: str | None = None

    _types = field_validator("type", mode="before")(split_commas)
    _since = field_validator("since")(lambda value: None if value is None else rfc3339(value))

    @model_validator(mode="before")
    @classmethod
    def _supported(cls, data: Any) -> Any:
        """Before the fields: a parameter this stream does not take is refused as such, whatever its value."""
        if not isinstance(data, dict):
            return data
        frames, alias = data.get("frames"), data.get("format")
        if frames and alias and frames != alias:
            raise PydanticCustomError("invalid_parameter", "frames and its alias format disagree")
        raw = (frames or alias) == "raw"
        for name in ("replay", "before_sequence", *(() if raw else TRANSCRIPT_ONLY_RAW)):
            if name in data:
                hint = "" if name in ("replay", "before_sequence") else " in transcript mode; use frames=raw"
                raise PydanticCustomError("invalid_parameter", "{name} is not supported on this stream{hint}",
                                          {"name": name, "hint": hint})
        return data

    @property
    def mode(self) -> str:
        return self.frames or self.format or "transcript"

    @property
    def cursor(self) -> int | None:
        for value in (self.last_event_id, self.after_sequence, self.after):
            if value is not None:
                return value
        return None


TRANSCRIPT_ONLY_RAW = ("type", "agent_name", "turn_id", "since")  # raw-mode filters a transcript stream refuses


class HistoryQuery(Schema):
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] | None = None
    last: Annotated[int, Field(ge=1, le=MAX_PAGE)] | None = None
    after_sequence: Sequence | None = None


class TranscriptQuery(Schema):
    limit: Annotated[int, Field(ge=1, le=transcript.MAX_LIMIT)] | None = None
    before_sequence: Annotated[int, Field(ge=1, le=MAX_SEQUENCE)] | None = None


class RecapQuery(Schema):
    limit: Annotated[int, Field(ge=1, le=recap.MAX_LIMIT)] | None = None


class RepairQuery(Schema):
    dry_run: bool = False
    force: bool = False


class RemoveQuery(Schema):
    force: bool = False  # a worktree session with unsaved work: removed anyway, its state kept as a final ref


class DetachQuery(Schema):
    attached_to: QueryText = ""


class HookRunsQuery(Schema):
    session: Ident
    event: Ident | None = None
    outcome: Ident | None = None
    last: Annotated[int, Field(ge=1, le=MAX_PAGE)] | None = None


class WorkspaceIn(StrictIn):
    root_dir: PathText
    name: Name | None = None
    add_dirs: list[PathText] | None = None
    default_agent: Ref | None = None
    sandbox_ref: Ref | None = Field(None, description="Not supported yet: a non-empty value answers 400 "
                                                     "sandbox_unsupported.")


class ResolveWorkspaceIn(StrictIn):
    path: PathText


class DoctorQuery(Schema):
    only: list[Ident] | None = Field(None, max_length=MAX_REPEAT)
    exclude: list[Ident] | None = Field(None, max_length=MAX_REPEAT)
    quiet: bool = False


# ---- worktree sessions (docs/reference/worktrees.md) ---------------------------------------------------------------

Checkpoint = Annotated[int, Field(ge=1, le=MAX_SEQUENCE)]


class ChangesQuery(Schema):
    turn: Ident | None = None  # one turn's changes (between the state it began from and its checkpoint)


class CheckpointIn(StrictIn):
    checkpoint: Checkpoint


class ForkIn(StrictIn):
    checkpoint: Checkpoint | None = None  # default: the newest


class CommitIn(StrictIn):
    message: Text | None = None  # default: the session's title


class MergeIn(StrictIn):
    into: Ref | None = None  # default: the branch checked out when the session began
    squash: bool = False


class PruneIn(StrictIn):
    dry_run: bool = False
