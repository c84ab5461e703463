"""The derivation rules of docs/reference/health.md §2, one meta snapshot at a time (pure functions, no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from health.derive import LiveFacts, derive
from sessions.core.record import SessionRecord

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
UP = LiveFacts(runtime=True, process_running=True)


def meta(state: str = "active", *, prompting: bool = False, stalled: bool = False, failure: Any = None,
         idle_for: float = 5.0) -> SessionRecord:
    return SessionRecord.from_meta({
        "id": "sess_0000000000000001", "workspace_id": "ws_0000000000000001", "agent_name": "general",
        "state": state, "failure": failure, "created_at": "2026-11-30T10:00:00Z",
        "liveness": {"stall_state": "stalled" if stalled else "",
                     "activity": {"prompt_active": prompting,
                                  "last_activity_at": (NOW - timedelta(seconds=idle_for)).isoformat()}}})


@pytest.mark.parametrize(("m", "live", "expected"), [
    (meta(), UP, ("idle", "healthy", True, True, "")),
    (meta(prompting=True), UP, ("prompting", "healthy", True, False, "session_prompt_active")),
    (meta(stalled=True), UP, ("detached", "degraded", False, False, "session_unhealthy")),
    (meta("stopped"), LiveFacts(), ("stopped", "dead", False, False, "session_unhealthy")),
    (meta("starting"), UP, ("detached", "unknown", False, False, "session_unhealthy")),
    (meta("stopping"), LiveFacts(runtime=True, process_running=True, stopping=True),
     ("detached", "unknown", False, False, "session_unhealthy")),
    (meta(), LiveFacts(), ("detached", "unknown", False, False, "session_unhealthy")),  # no runtime owns it
    (meta(), LiveFacts(runtime=True), ("detached", "healthy", False, False, "session_not_attachable")),
    (meta(failure={"kind": "provider_auth_failure", "summary": "login"}), UP,
     ("detached", "healthy", False, False, "session_not_attachable")),
    (meta(failure={"kind": "prompt_failure", "summary": "empty"}), UP, ("idle", "healthy", True, True, "")),
    (meta(idle_for=600), UP, ("idle", "stale", True, False, "session_unhealthy")),
    (meta(idle_for=600, prompting=True), UP, ("prompting", "healthy", True, False, "session_prompt_active")),
])
def test_state_health_attachability_and_eligibility(m: SessionRecord, live: LiveFacts,
                                                    expected: tuple[Any, ...]) -> None:
    d = derive(m, live, presence=None, now=NOW, stale_after=120)
    assert (d["state"], d["health"], d["attachable"], d["eligible_for_wake"], d["ineligibility_reason"]) == expected


def test_a_recent_presence_touch_holds_staleness_off_but_activity_is_what_recovers() -> None:
    m = meta(idle_for=600)
    assert derive(m, UP, presence=NOW - timedelta(seconds=30), now=NOW, stale_after=120)["health"] == "healthy"
    assert derive(m, UP, presence=NOW - timedelta(seconds=300), now=NOW, stale_after=120)["health"] == "stale"


def test_the_last_error_is_redacted_and_bounded() -> None:
    secret = "sk-ant-api03-" + "A" * 40
    d = derive(meta("stopped", failure={"kind": "process_exit", "summary": f"died with key {secret} " + "x" * 5000}),
               LiveFacts(), presence=None, now=NOW, stale_after=120)
    assert secret not in d["last_error"] and d["last_error"].startswith("process_exit: died")
    assert len(d["last_error"].encode()) <= 2048
