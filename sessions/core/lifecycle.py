"""Pure lifecycle rules: stop classification, failure objects, badges. No I/O, easy to unit test."""

from __future__ import annotations

import signal
from pathlib import Path

from sessions.core.enums import Badge, FailureKind, SessionState, StopReason
from sessions.core.jsonobj import JsonObject
from sessions.core.record import FailureDoc, SessionRecord
from sessions.core.redact import bound_text, redact_text

SUMMARY_CAP_BYTES = 2048
ALLOWED_TRANSITIONS = {
    SessionState.STARTING: {SessionState.ACTIVE, SessionState.STOPPING, SessionState.STOPPED},
    SessionState.ACTIVE: {SessionState.STOPPING},
    SessionState.STOPPING: {SessionState.STOPPED},
    # Reactivation only, and only by the daemon (docs/reference/sessions.md §15).
    SessionState.STOPPED: {SessionState.STARTING},
}


class IllegalTransition(ValueError):
    pass


def check_transition(current: str, target: str) -> None:
    if SessionState(target) not in ALLOWED_TRANSITIONS[SessionState(current)]:
        raise IllegalTransition(f"session cannot go from {current} to {target}")


def failure_object(kind: FailureKind | str, summary: str, crash_bundle_path: str | None = None) -> FailureDoc:
    """The one failure shape used by status, list JSON, the SSE terminal frame and `compozy status`."""
    return {
        "kind": FailureKind(kind).value,
        "summary": bound_text(redact_text(summary or ""), SUMMARY_CAP_BYTES),
        "crash_bundle_path": crash_bundle_path,
    }


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "agent process state unknown"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"agent process killed by {name}"
    return f"agent process exited with code {returncode}"


def classify_unexpected_exit(returncode: int | None, turn_active: bool) -> tuple[StopReason, FailureKind | None, str]:
    """An agent exit we did not ask for (docs/reference/sessions.md §10): crash, unexpected clean exit, or
    completion."""
    if returncode == 0 and not turn_active:
        return StopReason.COMPLETED, None, "agent process exited"
    if returncode == 0:
        return StopReason.ERROR, FailureKind.PROCESS_EXIT, "process exited unexpectedly"
    return StopReason.AGENT_CRASHED, FailureKind.PROCESS_EXIT, describe_exit(returncode)


def user_stop_reason(detail: str) -> StopReason:
    """A user stop whose detail names a limit is classified by that limit."""
    lowered = (detail or "").lower()
    for reason in (StopReason.MAX_ITERATIONS, StopReason.LOOP_DETECTED, StopReason.BUDGET_EXCEEDED):
        if reason.value in lowered:
            return reason
    return StopReason.USER_CANCELED


def badge(state: str, failure: FailureDoc | None, stalled: bool = False, prompting: bool = False) -> Badge:
    """Daemon-computed so clients never re-derive it (docs/reference/sessions.md §1 precedence). A start the provider
    refused for authentication stops the session, but it waits on a person's login, not on a fix: `waiting-for-auth`
    (issue 29), and `session resume` after the login continues it."""
    if state == SessionState.STOPPED:
        if failure and failure.get("kind") == FailureKind.PROVIDER_AUTH_FAILURE:
            return Badge.WAITING_FOR_AUTH
        if failure and failure.get("kind") not in (None, FailureKind.CANCELLATION):
            return Badge.FAILED
        return Badge.STOPPED
    if failure and failure.get("kind") == FailureKind.PROVIDER_AUTH_FAILURE:
        return Badge.WAITING_FOR_AUTH
    if stalled:
        return Badge.HUNG
    if state in (SessionState.STARTING, SessionState.STOPPING) or prompting:
        return Badge.RUNNING
    if state == SessionState.ACTIVE:
        return Badge.IDLE
    return Badge.UNKNOWN


# ACP's auth_required error code (the SDK's RequestError.auth_required); adapters that predate it still say so.
ACP_AUTH_REQUIRED = -32000
_AUTH_WORDS = ("authentication required", "auth required", "not authenticated", "unauthorized", "api key",
               "login required", "please log in", "/login")


def is_auth_error(code: int, message: str) -> bool:
    """Whether an agent's prompt error means "the user must authenticate" (badge waiting-for-auth)."""
    text = message.lower()
    return (code == ACP_AUTH_REQUIRED and "auth" in text) or any(word in text for word in _AUTH_WORDS)


def hook_payload(rec: SessionRecord, event: str, extra: JsonObject) -> JsonObject:
    """What every lifecycle hook of a session is handed (docs/reference/hooks.md §3): the session as its record has it
    now."""
    return {
        "event": event, "session_id": rec.id, "session_name": rec.name or "",
        "session_type": rec.session_type or "user", "agent_name": rec.agent_name,
        "workspace_id": rec.workspace_id, "workspace": str(Path(rec.cwd)),
        "acp_session_id": rec.acp_session_id or "", "state": rec.state.value,
        "created_at": rec.created_at, "updated_at": rec.updated_at, **extra,
    }
