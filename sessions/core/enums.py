"""Closed sets. A value outside these cannot be written to meta.json, the catalog or an event."""

from __future__ import annotations

from enum import StrEnum


class SessionState(StrEnum):
    STARTING = "starting"
    ACTIVE = "active"
    STOPPING = "stopping"
    STOPPED = "stopped"


LIVE_STATES = frozenset({SessionState.STARTING, SessionState.ACTIVE, SessionState.STOPPING})


class StopReason(StrEnum):
    COMPLETED = "completed"
    USER_CANCELED = "user_canceled"
    MAX_ITERATIONS = "max_iterations"
    LOOP_DETECTED = "loop_detected"
    BUDGET_EXCEEDED = "budget_exceeded"
    TIMEOUT = "timeout"
    ERROR = "error"
    AGENT_CRASHED = "agent_crashed"
    HOOK_STOPPED = "hook_stopped"
    SHUTDOWN = "shutdown"


class FailureKind(StrEnum):
    # Every failed start of the agent (launch, ACP handshake, session/new, options), as the seed names it; a
    # handshake that never completed is `failure.cause = "handshake"` (written as its own kind before issue 50).
    STARTUP_FAILURE = "startup_failure"
    LOAD_SESSION_FAILURE = "load_session_failure"
    PROTOCOL_FAILURE = "protocol_failure"
    PROMPT_FAILURE = "prompt_failure"
    CANCELLATION = "cancellation"
    PERMISSION_FAILURE = "permission_failure"
    PROCESS_EXIT = "process_exit"
    TRANSPORT_FAILURE = "transport_failure"
    TIMEOUT = "timeout"
    UNKNOWN_FAILURE = "unknown_failure"
    PROVIDER_AUTH_FAILURE = "provider_auth_failure"
    # Our extension to the reference's closed set: the session's event store stayed unwritable (disk full,
    # I/O error, read-only, locked past the write deadline), so the session was stopped rather than run on
    # without its record.
    STORAGE_FAILURE = "storage_failure"
    # Our extension too: the session's cost reached its budget (`max_cost_usd`); its stop reason is budget_exceeded.
    BUDGET_EXCEEDED = "budget_exceeded"


class SessionType(StrEnum):
    USER = "user"
    DREAM = "dream"
    SYSTEM = "system"
    COORDINATOR = "coordinator"
    SPAWNED = "spawned"


class Badge(StrEnum):
    RUNNING = "running"
    IDLE = "idle"
    UNHEALTHY = "unhealthy"
    HUNG = "hung"
    WAITING_FOR_AUTH = "waiting-for-auth"
    STOPPED = "stopped"
    FAILED = "failed"
    UNKNOWN = "unknown"


class EventType(StrEnum):
    USER_MESSAGE = "user_message"
    SYNTHETIC_REENTRY = "synthetic_reentry"
    AGENT_MESSAGE = "agent_message"
    THOUGHT = "thought"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    PLAN = "plan"
    PERMISSION = "permission"
    CLARIFY = "clarify"
    USAGE = "usage"
    RUNTIME_PROGRESS = "runtime_progress"
    RUNTIME_WARNING = "runtime_warning"
    SYSTEM = "system"
    AVAILABLE_COMMANDS_UPDATE = "available_commands_update"
    DONE = "done"
    ERROR = "error"
    SESSION_STOPPED = "session_stopped"
    TRANSCRIPT_MARKER = "transcript_marker.created"
    TRANSCRIPT_MARKER_REDACTED = "transcript_marker.redacted"
    COMPACTION_FIRED = "session.compaction_fired"
    # Worktree sessions (docs/reference/worktrees.md): the state a turn left, recorded as a commit under a ref.
    CHECKPOINT = "checkpoint"


class MarkerKind(StrEnum):
    PROMPT_CANCEL = "prompt_cancel"
    PROMPT_TIMEOUT = "prompt_timeout"
    PROMPT_INTERRUPTED = "prompt_interrupted"
    PROMPT_STEERED = "prompt_steered"
    PROMPT_QUEUED = "prompt_queued"
    PROMPT_ACCEPTED = "prompt_accepted"
    PROMPT_DROPPED = "prompt_dropped"
    SESSION_UNHEALTHY = "session_unhealthy"
    SESSION_RECOVERED = "session_recovered"
    PROVIDER_FAILURE = "provider_failure"
    MCP_AUTH_REQUIRED = "mcp_auth_required"
    FILE_MUTATION_UNVERIFIED = "file_mutation_unverified"
    # Extensions of ours (agent_state.py): the context passed 90% of its size; the cost reached the budget.
    CONTEXT_NEAR_LIMIT = "context_near_limit"
    BUDGET_EXCEEDED = "budget_exceeded"
    # A worktree session's files and conversation taken back to a checkpoint (its later turns are marked rewound).
    SESSION_REWOUND = "session_rewound"


# A failed start maps its failure kind onto a stop reason (docs/reference/sessions.md §11).
START_FAILURE_STOP_REASON = {
    FailureKind.CANCELLATION: StopReason.USER_CANCELED,
    FailureKind.TIMEOUT: StopReason.TIMEOUT,
    FailureKind.PROCESS_EXIT: StopReason.AGENT_CRASHED,
}
