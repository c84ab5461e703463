"""The API's contract, responses: the fields each operation's body declares (clients read them) and lets
the rest through; nested free-form parts (event `content`, recap markers, doctor items) stay plain objects.
Requests and queries are in `schemas.py`."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from ninja import Schema
from ninja.responses import NinjaJSONEncoder
from pydantic import BaseModel, ConfigDict, Field

from compozy_base import strict_json


def render(schema: type[BaseModel], data: Any, status: int = 200) -> HttpResponse:
    """`data` validated against its response schema and serialised, as ninja would, for a caller that does it in
    a worker thread: a 1,000-event page costs ~15 ms of pydantic, too long for the loop every stream shares."""
    body = schema.model_validate(data).model_dump(exclude_unset=True)
    return HttpResponse(strict_json.dumps(body, cls=NinjaJSONEncoder), status=status,
                        content_type="application/json")


class Open(BaseModel):
    """A response part whose known fields are declared; others pass through unchanged (a plain pydantic model:
    ninja's `Schema` reads its input by attribute and would drop the undeclared keys)."""

    model_config = ConfigDict(extra="allow")


class FailureOut(Open):
    kind: str
    summary: str | None = None
    crash_bundle_path: str | None = None
    cause: str | None = Field(default=None, description="the finer cause of the kind, when one is known "
                              "(`handshake`: a startup_failure whose agent never completed the ACP handshake)")


class OutcomeOut(Open):
    label: str = Field(description="how a stopped session ended: `completed`, `stopped by you`, `failed: KIND`…")
    tone: str = Field(description="`ok`, `neutral` or `failed`")


class QuietOut(Open):
    since: str = Field(description="when the agent's last output came (or the turn began)")
    seconds: float
    text: str = Field(description="`no output for 1m 20s`")
    attention: bool = Field(description="past `quiet_attention_after`: also an attention item of kind `quiet`")


class PreviewOut(Open):
    kind: str = Field(description="`tool` (the running turn's tool) or `message` (the start of the last reply)")
    text: str


class SessionOut(Open):
    """SessionPayload (docs/reference/surfaces.md §4.1)."""

    id: str
    name: str | None = None
    name_source: str | None = None
    agent_name: str
    provider: str | None = None
    model: str | None = None
    reasoning_effort: str | None = None
    speed: str | None = None
    speed_resolution: dict[str, Any] | None = None
    workspace_id: str
    workspace_path: str | None = None
    cwd: str | None = None
    type: str
    state: str
    badge: str
    attachable: bool
    prompt_state: str | None = None
    current_turn_id: str | None = None
    meta_error: dict[str, Any] | None = None  # meta.json unreadable: the row comes from the catalog
    pending_permissions: int = 0  # requests waiting for a person's decision (the list shows them at a glance)
    pending_elicitations: int = 0  # the agent's questions waiting on a person (`GET …/elicitations`)
    stop_reason: str | None = None
    stop_detail: str | None = None
    failure: FailureOut | None = None
    # What a person reads (sessions/core/display.py, issue 48).
    outcome: OutcomeOut | None = None
    quiet: QuietOut | None = None
    preview: PreviewOut | None = None
    acp_session_id: str | None = None
    acp_caps: dict[str, Any] | None = None
    mode: dict[str, Any] | None = None  # {"current", "available": [{"id", "name"}]}
    config_options: list[dict[str, Any]] | None = None
    available_commands: list[dict[str, Any]] | None = None  # [{"name", "description"}]
    usage: dict[str, Any] | None = None  # {"context_used", "context_size", "cost": {"amount", "currency"}}
    effective_permissions: str | None = None
    activity: dict[str, Any] | None = None
    last_activity_at: str | None = None
    lineage: dict[str, Any] | None = None
    # docs/reference/worktrees.md: `none` or `worktree`; the worktree (path, branch, base_commit, repo,
    # base_branch); a fork's origin (session_id, checkpoint).
    isolation: str = "none"
    worktree: dict[str, Any] | None = None
    forked_from: dict[str, Any] | None = None
    created_at: str
    updated_at: str


class SessionEnvelope(Schema):
    session: SessionOut


class PageOut(Schema):
    total: int
    limit: int
    has_more: bool
    next_cursor: str | None = None


class SessionListOut(Schema):
    sessions: list[SessionOut]
    page: PageOut


class EventOut(Open):
    """SessionEventPayload (docs/reference/events.md §3); `content` is the stored JSON object."""

    id: str
    session_id: str
    workspace_id: str | None = None
    sequence: int
    turn_id: str
    type: str
    agent_name: str
    content: dict[str, Any]
    timestamp: str
    archived: bool | None = None


class EventsPageOut(Schema):
    """What a `GET …/events` page is a page of: the newest `limit` matches (`order: newest`; `has_more`: older ones
    were left out) or the oldest after `after_sequence` (`order: after`; `has_more`: newer ones follow, from
    `next_after`)."""

    limit: int
    order: str
    has_more: bool
    first_sequence: int | None = None
    last_sequence: int | None = None
    next_after: int | None = None


class EventsOut(Schema):
    events: list[EventOut]
    page: EventsPageOut | None = None


class TurnOut(Schema):
    """One turn of `GET …/history`: its rows assembled into UI messages (the transcript's assembler), in order."""

    turn_id: str
    started_at: str | None = None
    start_sequence: int
    sequence: int
    event_count: int
    messages: list[dict[str, Any]]
    truncated: bool | None = None
    omitted_events: int | None = None
    rewound: bool | None = None  # a rewind took this turn back (docs/reference/worktrees.md): kept, marked


class HistoryOut(Schema):
    history: list[TurnOut]


class PromptResultOut(Open):
    """Prompt result (docs/reference/surfaces.md §4.3)."""

    status: str
    mode: str | None = None
    turn_id: str | None = None
    session_id: str | None = None
    queued: bool | None = None
    staged: bool | None = None
    interrupted: bool | None = None
    queue_entry_id: str | None = None
    queue_position: int | None = None
    queue_generation: int | None = None
    previous_turn_id: str | None = None
    new_turn_id: str | None = None
    fallback_mode_if_no_tool_result: str | None = None


class PromptOut(Schema):
    prompt: PromptResultOut


class QueueEntryOut(Open):
    queue_entry_id: str
    text: str
    mode: str
    status: str
    queue_position: int
    queue_generation: int
    source: str | None = None
    created_at: str | None = None


class QueueOut(Schema):
    queue: list[QueueEntryOut]
    queue_generation: int


class PermissionOut(Open):
    request_id: str
    turn_id: str | None = None
    tool_call_id: str | None = None
    title: str | None = None
    kind: str | None = None
    options: list[dict[str, Any]] = []
    created_at: str | None = None
    decision: str | None = None
    answered_by: str | None = Field(None, description="Who answered: a user's name, or `webhook-link`.")


class PermissionsOut(Schema):
    permissions: list[PermissionOut]


class PermissionDecisionOut(Schema):
    permission: PermissionOut


class ElicitationOut(Open):
    id: str
    message: str
    requested_schema: dict[str, Any]  # ACP form mode: a flat object of string/number/integer/boolean fields
    created_at: str | None = None
    turn_id: str | None = None
    action: str | None = None  # accept, decline or cancel (in an answer's response)


class ElicitationsOut(Schema):
    elicitations: list[ElicitationOut]


class ElicitationAnswerOut(Schema):
    elicitation: ElicitationOut


class AttachLeaseOut(Schema):
    session_id: str
    attached_to: str
    attached_at: str | None = None
    attach_expires_at: str | None = None


class AttachOut(Schema):
    session: SessionOut
    attach: AttachLeaseOut


class WorkspaceOut(Open):
    id: str
    name: str | None = None
    root_dir: str
    add_dirs: list[str] = []
    default_agent: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


class WorkspaceEnvelope(Schema):
    workspace: WorkspaceOut


class WorkspacesOut(Schema):
    workspaces: list[WorkspaceOut]


class WorkspaceInfoOut(Open):
    workspace: WorkspaceOut
    sessions: list[SessionOut]
    agents: list[dict[str, Any]]
    skills: list[Any]
    providers: list[dict[str, Any]]


class HookRunsOut(Schema):
    runs: list[dict[str, Any]]


class StatusOut(Open):
    """`compozy status` (docs/reference/surfaces.md §4.9)."""

    schema_version: int
    generated_at: str
    daemon: dict[str, Any]
    sessions: dict[str, Any]
    health: dict[str, Any]


class DoctorOut(Open):
    schema_version: int
    generated_at: str
    duration_ms: float | None = None
    status: str
    summary: dict[str, Any]
    items: list[dict[str, Any]]


class TranscriptPageOut(Open):
    """Backward transcript page (docs/reference/events.md §5)."""

    entries: list[dict[str, Any]]
    epoch: Any = None
    generation: Any = None
    max_sequence: int
    has_older: bool
    next_before_sequence: int | None = None
    limit: int


class RecapBodyOut(Open):
    """Recap (docs/reference/surfaces.md §4.7)."""

    session: dict[str, Any]
    active_run: dict[str, Any] | None = None
    recent_markers: list[dict[str, Any]]
    recent_messages: list[dict[str, Any]]
    snapshot: dict[str, Any]


class RecapOut(Schema):
    recap: RecapBodyOut


class RepairReportOut(Open):
    """Repair report (docs/reference/surfaces.md §4.6)."""

    session_id: str
    issues: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    persisted: bool


class RepairOut(Schema):
    repair: RepairReportOut


# ---- worktree sessions (docs/reference/worktrees.md) ---------------------------------------------------------------


class FileChangeOut(Open):
    path: str
    old_path: str | None = None  # a rename's source
    status: str = Field(description="added, modified, deleted or renamed")
    additions: int
    deletions: int
    binary: bool = False
    patch: str | None = Field(default=None, description="the file's unified diff; null when left out "
                              "(`patch_omitted`: binary, too_large or budget)")
    patch_bytes: int = 0
    patch_omitted: str | None = None


class ChangesOut(Open):
    base: str = Field(description="the commit compared from: the session's base, or the state the turn began from")
    head: str
    files: list[FileChangeOut]
    additions: int
    deletions: int
    patch_bytes: int = Field(description="every patch's size together, inlined or not")
    patch_limit: int
    truncated: bool = Field(description="some patch was left out for size (binary files do not count)")
    turn_id: str | None = None
    checkpoint: int | None = None


class CheckpointOut(Open):
    n: int
    turn_id: str
    event_seq: int
    commit: str
    ref: str
    reason: str = Field(description="turn, rewind (the state before a rewind) or final")
    created_at: str
    sequence: int | None = None
    rewound: bool = False


class CheckpointsOut(Schema):
    session_id: str
    checkpoints: list[CheckpointOut]
    final: str | None = None


class RewindOut(Schema):
    session: SessionOut
    checkpoint: int
    turn_id: str
    before: CheckpointOut = Field(description="the state before the rewind, itself a checkpoint: rewind to it "
                                  "to undo")
    rewound_turns: list[str]


class CommitOut(Schema):
    committed: bool
    commit: str | None = None
    branch: str
    message: str


class MergeOut(Schema):
    merged: bool
    up_to_date: bool
    target: str
    commit: str
    previous: str
    squash: bool
    files: list[str]
    uncommitted: bool = Field(description="the worktree holds changes not committed on its branch: not merged")


class WorktreeOut(Schema):
    session_id: str
    path: str
    branch: str
    repo: str
    state: str | None = None
    exists: bool
    size_bytes: int
    ahead: int
    behind: int
    dirty: bool


class WorktreesOut(Schema):
    worktrees: list[WorktreeOut]
    size_bytes: int
    max_disk: int


class PrunedOut(Schema):
    kind: str
    session_id: str
    name: str


class PruneOut(Schema):
    dry_run: bool
    pruned: list[PrunedOut]
