"""The live seam: what the API, the services, health and tasks may call on a session this daemon runs.

`LiveSession` lists exactly what those callers use of a `SessionRuntime` (sessions/runtime/session.py). It is a
Protocol, on the lowest floor, because the registry that hands runtimes out (`sessions/catalog/ownership.py`) sits
below the runtime and must not import it (manage.py asks it without loading the ACP stack), while the callers sit
above: with a structural type both name the same thing, and mypy checks that `SessionRuntime` satisfies it wherever
a runtime is handed out as one (`SessionManager` as `ownership.LocalManager`, `services.lookup._runtime_for`). A
member added here that the runtime lacks fails the type check, not a request.

Members are read-only properties where the callers only read (a property accepts a plain attribute, a property or
a subclass's narrower type); the components' own faces (`Turn`, the boards, the recorder) are narrowed to the few
members read through the seam, so nothing here imports from above.

The results and views that leave through the API (`PromptResult`, `PermissionView`, `ElicitationView`) are
TypedDicts: they are built as dicts and go out as JSON, and a TypedDict types their keys at no runtime cost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Required, TypedDict

from accounts.actor import Actor
from sessions.core.acp_shapes import PermissionOption
from sessions.core.enums import MarkerKind, StopReason
from sessions.core.jsonobj import EventContent, JsonObject
from sessions.core.record import ActivityDoc, FailureDoc, SessionRecord


class PromptResult(TypedDict, total=False):
    """What a prompt, interrupt or steer answers (`{"prompt": …}`; docs/reference/surfaces.md §4.3): `status` is
    accepted, interrupted, staged, queued, canceled or idle; the other keys go with the status that has them."""

    status: Required[str]
    mode: str
    session_id: str
    turn_id: str
    new_turn_id: str
    previous_turn_id: str | None
    interrupted: bool
    canceled_queued_entries: list[str]
    queue_generation: int
    staged: bool
    queued: bool
    queue_entry_id: str
    queue_position: int
    fallback_mode_if_no_tool_result: str


class TurnExtra(TypedDict, total=False):
    """What a turn's `user_message` row carries beyond its text: a heartbeat wake's facts, or a delivered steer's."""

    synthetic: Mapping[str, object]  # health/wake.py `SyntheticWake`
    action: str
    resource: str
    decision: str
    request_id: str


class MarkerEvidence(TypedDict, total=False):
    """A transcript marker's evidence (its row's `raw.evidence`): the facts of its kind, named here."""

    refused: str  # a cost the budget could not count (sessions/core/money.py)
    reason: str
    source: str
    turn_id: str
    stop_reason: str
    queue_entry_id: str
    queue_position: int
    queue_generation: int
    queue_cap: int
    generation: int
    canceled_count: int
    previous_turn_id: str | None
    new_turn_id: str | None
    salvaged_turn_id: str
    fallback_to_queue: bool
    idle_seconds: float
    pgid: int | None
    message_count: int
    fallback_reason: str | None
    context_used: int
    context_size: int
    cost: float
    budget: float
    # session_rewound (sessions/services/rewind.py; read by sessions/core/markers.py `rewind_of`)
    checkpoint: int
    commit: str
    before_checkpoint: int
    rewound_turns: list[str]


class MarkerRaw(TypedDict, total=False):
    """A marker row's `raw` (sessions/runtime/session.py `marker`)."""

    kind: Required[str]
    occurred_at: Required[str | None]
    summary: Required[str]
    evidence: MarkerEvidence


class Salvage(TypedDict):
    """The prompt a dedicated interrupt cut, kept for one steer."""

    text: str
    turn_id: str


class OptionView(TypedDict):
    option_id: str | None
    kind: str | None
    label: str | None


class PermissionView(TypedDict):
    """A permission request waiting on a person, as the API lists it."""

    request_id: str
    turn_id: str
    tool_call_id: str | None
    title: str | None
    kind: str | None
    tool_input: Any  # the agent's rawInput: any JSON value
    options: list[OptionView]
    created_at: str


class ElicitationView(TypedDict):
    """An agent's question waiting on a person, as the API lists it."""

    id: str
    message: str
    requested_schema: JsonObject  # the agent's JSON schema of the form
    created_at: str
    turn_id: str


class LiveTurn(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def reply(self) -> str: ...  # the start of the agent's reply so far (the sessions list's preview)

    @property
    def ended(self) -> asyncio.Event: ...


class PendingPermissionRequest(Protocol):
    @property
    def answer(self) -> asyncio.Future[Any]: ...

    @property
    def options(self) -> Sequence[PermissionOption]: ...

    def public(self) -> PermissionView: ...


class PendingElicitationRequest(Protocol):
    @property
    def answer(self) -> asyncio.Future[Any]: ...

    @property
    def requested_schema(self) -> JsonObject: ...

    def public(self) -> ElicitationView: ...


@dataclass(frozen=True)
class AnsweredPermission:
    """A permission request a person answered: the first answer wins, later ones learn who gave it."""

    decision: str
    actor: Actor | None


class LivePermissions(Protocol):
    @property
    def pending(self) -> Mapping[str, PendingPermissionRequest]: ...

    @property
    def answered(self) -> Mapping[str, AnsweredPermission]: ...

    @property
    def waiting_count(self) -> int: ...


class LiveElicitations(Protocol):
    @property
    def pending(self) -> Mapping[str, PendingElicitationRequest]: ...

    @property
    def waiting_count(self) -> int: ...

    def waiting_items(self) -> Sequence[PendingElicitationRequest]: ...

    def resolve(self, request_id: str, action: str, content: JsonObject | None,
                actor: Actor | None = ...) -> bool: ...


class LiveAgent(Protocol):
    @property
    def pid(self) -> int | None: ...

    @property
    def returncode(self) -> int | None: ...


class LiveRecorder(Protocol):
    async def flush(self) -> None: ...


class LiveAgentState(Protocol):
    async def set_mode(self, mode_id: str) -> None: ...


class LiveSession(Protocol):
    """A session this daemon runs, as the API, the services, health and tasks see it."""

    @property
    def id(self) -> str: ...

    @property
    def rec(self) -> SessionRecord: ...  # meta.json as the runtime holds it now

    @property
    def state(self) -> str: ...

    @property
    def active(self) -> asyncio.Event: ...

    @property
    def stopped(self) -> asyncio.Event: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def busy(self) -> bool: ...

    @property
    def handover(self) -> bool: ...

    @property
    def turn(self) -> LiveTurn | None: ...

    @property
    def salvage(self) -> Salvage | None: ...

    @property
    def agent(self) -> LiveAgent | None: ...

    @property
    def permissions(self) -> LivePermissions: ...

    @property
    def elicitations(self) -> LiveElicitations: ...

    @property
    def recorder(self) -> LiveRecorder: ...

    @property
    def agent_state(self) -> LiveAgentState: ...

    async def start_turn(self, text: str, *, source: str = ..., authored: str | None = ...,
                         extra: TurnExtra | None = ...) -> LiveTurn: ...

    async def dispatch_next(self) -> None: ...

    async def cancel_turn(self) -> bool: ...

    async def interrupt(self, *, replacement: str | None, expected_turn_id: str | None) -> PromptResult: ...

    async def stage_steer(self, text: str) -> PromptResult: ...

    def decide_permission(self, request_id: str, decision: str, option_id: str | None = ...,
                          actor: Actor | None = ...) -> bool: ...

    def marker(self, kind: MarkerKind, summary: str, evidence: MarkerEvidence | None = ...,
               turn_id: str | None = ...) -> None: ...

    def record(self, type_: str, content: EventContent, turn_id: str | None = ...) -> None: ...

    @property
    def admission(self) -> asyncio.Lock: ...

    async def queue_waiting(self) -> bool: ...

    def live_activity(self) -> ActivityDoc: ...

    async def rename(self, name: str) -> None: ...

    async def stop(self, reason: StopReason, detail: str = ..., *, failure: FailureDoc | None = ...,
                   process_gone: bool = ...) -> None: ...

    async def hook(self, event: str, **extra: Any) -> object: ...
