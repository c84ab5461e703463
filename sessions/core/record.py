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

from typing import Any

from pydantic import BaseModel, ConfigDict

from sessions.core.enums import SessionState


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
    # What each waiting request asks (attention list, webhooks): any node reads it from meta.json.
    permission_requests: list[dict[str, Any]] | None = None
    elicitation_requests: list[dict[str, Any]] | None = None  # the agent's open questions (the same readers)
    last_turn: dict[str, Any] | None = None  # the turn that ended last (the `turn_finished` webhook)
    subprocess_pid: int | None = None
    subprocess_started_at: str | None = None


class Failure(_Part):
    kind: str
    summary: str = ""
    crash_bundle_path: str | None = None

    @classmethod
    def of(cls, failure: dict[str, Any] | None) -> Failure | None:
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
    agent_model: dict[str, Any] | None = None
    speed_resolution: dict[str, Any] | None = None
    option_resolutions: dict[str, Any] | None = None
    supervision: dict[str, Any] | None = None
    # What the agent says of its session outside the transcript (sessions/runtime/agent_state.py).
    mode: Mode | None = None
    config_options: list[dict[str, Any]] | None = None  # select and boolean options, as the agent last sent them
    available_commands: list[dict[str, str]] | None = None  # [{"name", "description"}]
    usage: Usage | None = None
    budget_usd: float | None = None  # a task attempt's cap: what its task's budget left (else the config's)

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> SessionRecord:
        """The typed view of a meta.json document; a ValueError (pydantic's ValidationError) names what is wrong."""
        return cls.model_validate(meta)

    def to_meta(self) -> dict[str, Any]:
        """The document again: the keys it had, and only those, with the values JSON takes."""
        return self.model_dump(mode="json", exclude_unset=True)

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

    def supervision_to_write(self) -> dict[str, Any]:
        if self.supervision is None:
            self.supervision = {}
        return self.supervision


def activity_of(meta: dict[str, Any]) -> Activity:
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
