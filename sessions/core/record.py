"""The session record: meta.json as a typed model (docs/reference/sessions.md §3), the file format unchanged.

Why pydantic: it is already here (django-ninja's schemas are pydantic models), it validates what it reads (a
meta.json may be hand-edited or half-restored), and `extra="allow"` keeps every key this version does not name
(a newer daemon's, an operator's note), so `SessionRecord.from_meta(m).to_meta() == m` for every file today's code
writes (tests/unit/test_session_record.py holds it to samples of them). A dataclass would validate nothing; msgspec
would be a new dependency for a file read a few times a second.

Readers take the typed view instead of chains of `(meta.get("liveness") or {}).get("activity") or {}`:
`SessionRecord.from_meta(meta).liveness.activity.turn_id`, or `activity_of(meta)` for the one block most read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Required, TypedDict, cast

from pydantic import BaseModel, ConfigDict

from sessions.core.enums import SessionState
from sessions.core.jsonobj import JsonObject


class _Part(BaseModel):
    # Keys we do not name are kept and written back; a missing block reads as its defaults.
    model_config = ConfigDict(extra="allow")


class Activity(_Part):
    """liveness.activity: what the current or last turn is doing, durable for supervision and health."""

    turn_id: str | None = None
    turn_source: str | None = None
    turn_started_at: str | None = None
    prompt_active: bool = False
    last_activity_at: str | None = None
    last_activity_kind: str | None = None
    last_activity_detail: str | None = None
    last_progress_at: str | None = None
    tools_in_flight: int = 0
    current_tool: str | None = None
    tool_call_id: str | None = None
    # Written by the turn heartbeats only (sessions/runtime/activity.py): absent until a turn outlived one.
    idle_seconds: float | int | None = None
    elapsed_seconds: float | int | None = None


class Liveness(_Part):
    activity: Activity = Activity()
    last_update_at: str | None = None
    stall_state: str = ""
    stall_reason: str | None = None
    pending_permissions: int | None = None
    # What each waiting request asks (attention list, webhooks): any node reads it from meta.json. Kept as the plain
    # dicts they were (a typed field would drop or refuse a hand-edited key); their shape is `PermissionRequestDoc`,
    # `ElicitationRequestDoc` and `LastTurnDoc` below.
    permission_requests: list[JsonObject] | None = None
    elicitation_requests: list[JsonObject] | None = None  # the agent's open questions (the same readers)
    last_turn: JsonObject | None = None  # the turn that ended last (the `turn_finished` webhook)
    subprocess_pid: int | None = None
    subprocess_started_at: str | None = None


class Failure(_Part):
    kind: str
    summary: str = ""
    crash_bundle_path: str | None = None

    @classmethod
    def of(cls, failure: FailureDoc | None) -> Failure | None:
        """The typed failure of a `lifecycle.failure_object`, None for none."""
        return None if failure is None else cls.model_validate(failure)


class AutoTitle(_Part):
    """auto_title: where the session's title pass stands (pending, applied, failed, skipped and why)."""

    status: str
    reason: str | None = None
    route: dict[str, str] | None = None  # the route that opened the title session: provider, model, reasoning_effort


class AcpCaps(_Part):
    """acp_caps: what the agent advertised at ACP initialize."""

    supports_load_session: bool = False
    supports_resume: bool = False
    supports_close: bool = False
    auth_methods: list[str] | None = None
    authenticated_with: str | None = None
    agent_info: Any = None


class Mode(_Part):
    """mode: the agent's session mode now and the ones it offers (ACP `modes`, or a config option of category
    `mode`)."""

    current: str = ""
    available: list[dict[str, str]] = []  # [{"id", "name"}]


class Cost(_Part):
    amount: float
    currency: str = "USD"


class Usage(_Part):
    """usage: the agent's context window and cumulative cost, from `usage_update` (and prompt responses)."""

    context_used: int | None = None
    context_size: int | None = None
    cost: Cost | None = None


class Lineage(_Part):
    parent_session_id: str
    root_session_id: str
    spawn_depth: int = 1
    spawn_role: str = ""
    ttl_seconds: int | None = None
    ttl_expires_at: str | None = None


class SessionRecord(_Part):
    id: str
    workspace_id: str
    agent_name: str
    state: SessionState
    provider: str = ""
    session_type: str = "user"
    name: str = ""
    cwd: str = ""
    workspace_path: str = ""
    created_at: str | None = None
    updated_at: str | None = None
    activated_at: str | None = None
    stopped_at: str | None = None  # the last stop's time (written since the attention outbox keys a failure by it)
    stop_reason: str = ""
    stop_detail: str = ""
    failure: Failure | None = None
    acp_session_id: str = ""
    input_generation: int = 0
    model: str = ""
    model_explicit: bool = False
    reasoning_effort: str = ""
    speed: str = ""
    effective_permissions: str = ""
    liveness: Liveness = Liveness()
    lineage: Lineage | None = None
    task_id: str | None = None
    run_id: str | None = None
    # Written by the runtime as a session starts and runs (absent before: a session that never started has none).
    name_source: str | None = None
    auto_title: AutoTitle | None = None
    acp_caps: AcpCaps | None = None
    # Plain dicts in the model, as written (`ReportedModel`, `Resolution` below name their keys).
    agent_model: JsonObject | None = None
    speed_resolution: JsonObject | None = None
    option_resolutions: JsonObject | None = None
    supervision: JsonObject | None = None  # the supervision decisions' evidence: free-form per action
    # What the agent says of its session outside the transcript (sessions/runtime/agent_state.py).
    mode: Mode | None = None
    config_options: list[JsonObject] | None = None  # select and boolean options, as the agent last sent them
    available_commands: list[dict[str, str]] | None = None  # [{"name", "description"}]
    usage: Usage | None = None
    budget_usd: float | None = None  # a task attempt's cap: what its task's budget left (else the config's)
    # Worktree sessions (docs/reference/worktrees.md): `none` or `worktree`; the worktree's block (`WorktreeDoc`);
    # a fork's origin (`ForkedFromDoc`). Plain dicts, as written.
    isolation: str | None = None
    worktree: JsonObject | None = None
    forked_from: JsonObject | None = None

    @classmethod
    def from_meta(cls, meta: SessionMeta) -> SessionRecord:
        """The typed view of a meta.json document; a ValueError (pydantic's ValidationError) names what is wrong."""
        return cls.model_validate(meta)

    def to_meta(self) -> SessionMeta:
        """The document again: the keys it had, and only those, with the values JSON takes."""
        return cast(SessionMeta, self.model_dump(mode="json", exclude_unset=True))

    # A block read through `record.liveness` that is absent reads as its defaults and stays absent from the file.
    # Writing into it goes through these, which make it present (as `meta.setdefault("liveness", {})` did), so
    # `to_meta` writes the block with what was set in it and nothing else.

    def liveness_to_write(self) -> Liveness:
        self.liveness = self.liveness
        return self.liveness

    def activity_to_write(self) -> Activity:
        liveness = self.liveness_to_write()
        liveness.activity = liveness.activity
        return liveness.activity

    def supervision_to_write(self) -> JsonObject:
        if self.supervision is None:
            self.supervision = {}
        return self.supervision


def activity_of(meta: SessionMeta) -> Activity:
    """liveness.activity of a meta.json document, typed; defaults where it has none (a session never prompted).
    Tolerant like the chains it replaces: a block of the wrong shape reads as absent."""
    liveness = meta.get("liveness")
    block = liveness.get("activity") if isinstance(liveness, dict) else None
    if not isinstance(block, dict):
        return Activity()
    try:
        return Activity.model_validate(block)
    except ValueError:
        return Activity()


# ---- the document as a dict ---------------------------------------------------------------------------------------
# The readers that take meta.json as the dict it was read as (a listing, the API payload, repair, health) type it
# with these TypedDicts, the model's fields as keys: a TypedDict costs nothing at run time and validates nothing, so
# a read answers for a hand-edited file exactly as before (the model would refuse a field of the wrong type), and
# mypy still checks every key read or written. A key the model keeps under `extra="allow"` and no code names is not
# listed; one code names is listed here too.


class FailureDoc(TypedDict, total=False):
    """`failure` (`lifecycle.failure_object`): the one failure shape of status, lists, SSE and the CLI. No key is
    required: readers take the block of a file as it was written (`.get`), and `failure_object` writes them all."""

    kind: str
    summary: str
    crash_bundle_path: str | None
    code: str  # which runtime option the provider refused (a start failure)
    cause: str  # the finer cause under a seed kind (a startup_failure's "handshake")


class ActivityDoc(TypedDict, total=False):
    """liveness.activity (`Activity`); a live runtime's copy adds `elapsed_ms` (sessions/runtime/activity.py)."""

    turn_id: str | None
    turn_source: str | None
    turn_started_at: str | None
    prompt_active: bool
    last_activity_at: str | None
    last_activity_kind: str | None
    last_activity_detail: str | None
    last_progress_at: str | None
    tools_in_flight: int
    current_tool: str | None
    tool_call_id: str | None
    idle_seconds: float | int | None
    elapsed_seconds: float | int | None
    elapsed_ms: int


class PermissionRequestDoc(TypedDict, total=False):
    """One entry of liveness.permission_requests (sessions/runtime/permission_gate.py)."""

    request_id: str
    title: str | None
    kind: str | None
    turn_id: str
    created_at: str


class ElicitationRequestDoc(TypedDict, total=False):
    """One entry of liveness.elicitation_requests (sessions/runtime/elicitation_desk.py)."""

    request_id: str
    message: str
    turn_id: str
    created_at: str


class LastTurnDoc(TypedDict, total=False):
    """liveness.last_turn (sessions/runtime/turns.py)."""

    turn_id: str
    source: str
    ended_at: str | None
    outcome: str
    reply_preview: str  # the start of the agent's reply, one line (sessions/core/display.py preview_text)


class LivenessDoc(TypedDict, total=False):
    activity: ActivityDoc
    last_update_at: str | None
    stall_state: str
    stall_reason: str | None
    pending_permissions: int | None
    permission_requests: list[PermissionRequestDoc] | None
    elicitation_requests: list[ElicitationRequestDoc] | None
    last_turn: LastTurnDoc | None
    subprocess_pid: int | None
    subprocess_started_at: str | None


class LineageDoc(TypedDict, total=False):
    parent_session_id: str
    root_session_id: str
    spawn_depth: int
    spawn_role: str
    ttl_seconds: int | None
    ttl_expires_at: str | None


class AutoTitleDoc(TypedDict, total=False):
    status: str
    reason: str | None


class ReportedModel(TypedDict):
    """agent_model: the model the agent says it runs (sessions/runtime/options.py `reported_model`)."""

    id: str
    name: str
    source: str  # config_option or models


class Resolution(TypedDict, total=False):
    """What became of a requested runtime option (speed_resolution, option_resolutions[what])."""

    requested: Required[str]
    status: Required[str]  # applied, rejected or unsupported
    reason: str


class OptionValueDoc(TypedDict):
    value: str
    name: str


class ConfigOptionDoc(TypedDict, total=False):
    """One of config_options: an agent's select or boolean option in the record's compact shape
    (sessions/runtime/agent_state.py `_options`)."""

    id: str
    name: str
    type: str  # select or boolean
    current: Any  # the agent's currentValue
    category: str
    options: list[OptionValueDoc]


class ModeDoc(TypedDict, total=False):
    current: str
    available: list[dict[str, str]]  # [{"id", "name"}]


class CostDoc(TypedDict, total=False):
    amount: float
    currency: str


class UsageDoc(TypedDict, total=False):
    context_used: int | None
    context_size: int | None
    cost: CostDoc | None


class TranscriptMarkDoc(TypedDict):
    run: str  # the run judged: its `activated_at`, else `created_at`
    outcome: str  # repaired, clean or blocked
    checked_at: str | None


class AcpCapsDoc(TypedDict, total=False):
    """acp_caps (`AcpCaps`): what the agent advertised at initialize."""

    supports_load_session: bool
    supports_resume: bool
    supports_close: bool
    auth_methods: list[str] | None
    authenticated_with: str | None
    agent_info: Any  # the agent's own agentInfo


class SupervisionDoc(TypedDict, total=False):
    """supervision: what the supervisor's decisions left as evidence."""

    silence_stop: Mapping[str, object]  # the silence stop's process-group check (runtime/supervision.py)


class WorktreeDoc(TypedDict, total=False):
    """worktree: a worktree session's own checkout (sessions/worktree/trees.py)."""

    path: str
    branch: str
    base_commit: str
    repo: str
    base_branch: str  # the branch checked out in the workspace when the session began: `merge`'s default target
    changed_files: int  # files differing from base_commit at the last checkpoint (the session list's count)


class ForkedFromDoc(TypedDict):
    session_id: str
    checkpoint: int


class SessionMeta(TypedDict, total=False):
    """meta.json as a dict (`SessionRecord` is its model): `id`, `workspace_id`, `agent_name` and `state` are
    always there (`folder.read_meta` checks them); every other block may be absent."""

    id: Required[str]
    workspace_id: Required[str]
    agent_name: Required[str]
    state: Required[str]
    provider: str
    session_type: str
    name: str
    cwd: str
    workspace_path: str
    created_at: str | None
    updated_at: str | None
    activated_at: str | None
    stopped_at: str | None
    stop_reason: str
    stop_detail: str
    failure: FailureDoc | None
    acp_session_id: str
    input_generation: int
    model: str
    model_explicit: bool
    reasoning_effort: str
    speed: str
    effective_permissions: str
    liveness: LivenessDoc
    lineage: LineageDoc | None
    task_id: str | None
    run_id: str | None
    name_source: str | None
    auto_title: AutoTitleDoc | None
    acp_caps: AcpCapsDoc | None
    agent_model: ReportedModel | None
    speed_resolution: Resolution | None
    option_resolutions: dict[str, Resolution] | None
    supervision: SupervisionDoc | None
    mode: ModeDoc | None
    config_options: list[ConfigOptionDoc] | None
    available_commands: list[dict[str, str]] | None  # [{"name", "description"}]
    usage: UsageDoc | None
    budget_usd: float | None
    transcript_repair: TranscriptMarkDoc  # boot repair's verdict on the last run's transcript (sessions/repair/boot.py)
    isolation: str
    worktree: WorktreeDoc | None
    forked_from: ForkedFromDoc | None
    transcript_epoch: int  # conversation resets (sessions/live/transcript.py); no code writes it yet
