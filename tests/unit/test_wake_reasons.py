"""Every wake reason of the closed set, each reached through the real decision pipeline (`health.wake.wake`) on a
real catalog, real HEARTBEAT.md files and health rows derived by `health.services` from meta snapshots.

`session_prompt_active_race` and `wake_sent` need a live agent turn: they are pinned against the real daemon in
`tests/integration/test_health.py` and `test_health_hooks.py` (with `synthetic_prompt_failed`, from a hook that
refuses the prompt, and the race, from a hook that holds a starting turn)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from compozy_base.config import loader as config_module  # noqa: E402
from compozy_base.config.agents import AgentConfig  # noqa: E402
from compozy_base.config.heartbeat import HeartbeatConfig  # noqa: E402
from compozy_base.config.loader import Config  # noqa: E402
from health import services, wake  # noqa: E402
from health.derive import LiveFacts  # noqa: E402
from health.enums import WakeReason  # noqa: E402
from health.models import HeartbeatSnapshot, SessionHealth, WakeEvent, WakeState  # noqa: E402
from sessions.core.record import SessionRecord  # noqa: E402
from sessions.models import Session, Workspace  # noqa: E402
from sessions.store import folder  # noqa: E402
from sessions.store.folder import isoformat  # noqa: E402

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LIVE = LiveFacts(runtime=True, process_running=True)
POLICY = "---\nversion: 1\nsummary: look around\n---\nCheck the inbox.\n"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path))
    use_config(HeartbeatConfig())
    wipe()
    yield tmp_path
    wipe()  # the catalog is the test process's: test_catalog_rebuild's ids collided with the last test's rows
    config_module._cached = None


def wipe() -> None:
    for model in (WakeEvent, WakeState, HeartbeatSnapshot, SessionHealth, Session, Workspace):
        model.objects.all().delete()


def use_config(cfg: HeartbeatConfig) -> None:
    config_module._cached = Config(agents={"general": AgentConfig("general"), "other": AgentConfig("other")},
                                   heartbeat=cfg)


def policy_file(home: Path, text: str = POLICY, agent: str = "general") -> None:
    path = home / "agents" / agent / "HEARTBEAT.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def session(sid: str = "sess_00000000000000a1", *, state: str = "active", prompting: bool = False,
            stalled: bool = False, failure: dict[str, Any] | None = None, live: LiveFacts = LIVE,
            activity_at: datetime = NOW - timedelta(seconds=5)) -> str:
    ws, _ = Workspace.objects.get_or_create(id="ws_00000000000000a1", defaults={
        "name": "w", "root_dir": "/nonexistent-ws", "created_at": NOW, "updated_at": NOW})
    Session.objects.create(id=sid, workspace=ws, agent_name="general", state=state, created_at=NOW - timedelta(hours=1),
                           updated_at=NOW)
    meta = {"id": sid, "workspace_id": ws.id, "agent_name": "general", "state": state, "failure": failure,
            "created_at": isoformat(NOW - timedelta(hours=1)), "activated_at": isoformat(NOW - timedelta(hours=1)),
            "liveness": {"stall_state": "stalled" if stalled else "",
                         "activity": {"prompt_active": prompting, "last_activity_at": isoformat(activity_at)}}}
    assert services._upsert(SessionRecord.from_meta(meta), live, NOW) is not None
    return sid


def decide(sid: str, **kwargs: Any) -> tuple[str, str]:
    d = wake.wake("general", sid, now=kwargs.pop("now", NOW), **kwargs)
    return d["result"], d["reason"]


def test_session_not_found(home: Path) -> None:
    policy_file(home)
    assert decide("sess_00000000000000ff") == ("skipped", WakeReason.SESSION_NOT_FOUND)


def test_a_session_whose_health_row_is_not_stored_yet_is_found_and_judged_by_its_metadata(home: Path) -> None:
    """Issue 50, row 10: the health row follows each metadata save, after meta.json; a wake between the two (or after
    a health write that failed) answered `session_not_found` for a session every other surface showed."""
    policy_file(home)
    sid = session()
    rec = SessionRecord.from_meta({"id": sid, "workspace_id": "ws_00000000000000a1", "agent_name": "general",
                                   "state": "stopped", "stop_reason": "user_canceled",
                                   "created_at": isoformat(NOW - timedelta(hours=1)), "updated_at": isoformat(NOW)})
    folder.write_meta(rec)
    SessionHealth.objects.filter(session_id=sid).delete()
    assert decide(sid) == ("skipped", WakeReason.SESSION_UNHEALTHY)  # found: its metadata says stopped
    assert SessionHealth.objects.get(session_id=sid).state == "stopped"  # derived as a health read derives it
    listed = wake.session_decisions("general", session_id=sid, now=NOW)
    assert [(d["session_id"], d["state"]) for d in listed] == [(sid, "stopped")]


def test_session_unhealthy_for_a_stale_session(home: Path) -> None:
    policy_file(home)
    sid = session(activity_at=NOW - timedelta(minutes=10))  # idle beyond session_health_stale_after (2m)
    assert SessionHealth.objects.get(session_id=sid).health == "stale"
    assert decide(sid) == ("skipped", WakeReason.SESSION_UNHEALTHY)


def test_session_unhealthy_for_a_hung_session(home: Path) -> None:
    policy_file(home)
    sid = session(stalled=True)
    assert SessionHealth.objects.get(session_id=sid).health == "degraded"
    assert decide(sid) == ("skipped", WakeReason.SESSION_UNHEALTHY)


def test_session_not_attachable_when_the_agent_process_is_gone(home: Path) -> None:
    policy_file(home)
    sid = session(live=LiveFacts(runtime=True, process_running=False))
    row = SessionHealth.objects.get(session_id=sid)
    assert (row.state, row.health, row.attachable) == ("detached", "healthy", False)
    assert decide(sid) == ("skipped", WakeReason.SESSION_NOT_ATTACHABLE)


def test_session_prompt_active(home: Path) -> None:
    policy_file(home)
    sid = session(prompting=True)
    assert SessionHealth.objects.get(session_id=sid).state == "prompting"
    assert decide(sid) == ("skipped", WakeReason.SESSION_PROMPT_ACTIVE)


def test_cooldown_active_for_a_manual_wake_and_coalesced_for_the_scheduler(home: Path) -> None:
    policy_file(home)
    sid = session()
    WakeState.objects.create(session_id=sid, workspace_id="ws_00000000000000a1", agent_name="general",
                             last_wake_at=NOW - timedelta(seconds=10), next_allowed_at=NOW + timedelta(seconds=50),
                             updated_at=NOW)
    assert decide(sid) == ("rate_limited", WakeReason.COOLDOWN_ACTIVE)
    assert decide(sid, source=wake.WakeSource.SCHEDULER) == ("coalesced", WakeReason.WAKE_COALESCED)
    assert WakeState.objects.get(session_id=sid).coalesced_count == 1


def test_wake_coalesced_while_a_previous_wake_is_in_flight(home: Path) -> None:
    policy_file(home)
    sid = session()
    WakeState.objects.create(session_id=sid, workspace_id="ws_00000000000000a1", agent_name="general",
                             in_flight=True, updated_at=NOW)
    assert decide(sid) == ("coalesced", WakeReason.WAKE_COALESCED)


def test_quiet_window_across_midnight(home: Path) -> None:
    policy_file(home, "---\nversion: 1\npreferences:\n  quiet_windows:\n"
                      "    - {timezone: Europe/Berlin, start: '22:00', end: '07:00'}\n---\n")
    sid = session()
    night = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)  # 00:30 in Berlin
    session_row = SessionHealth.objects.get(session_id=sid)
    assert session_row.eligible_for_wake
    assert decide(sid, now=night) == ("skipped", WakeReason.QUIET_WINDOW)
    assert decide(sid, dry_run=True) == ("sent", WakeReason.WAKE_SENT)  # noon in Berlin: allowed


def test_heartbeat_disabled_by_config_and_by_the_file(home: Path) -> None:
    policy_file(home, "---\nversion: 1\nenabled: false\n---\n")
    sid = session()
    assert decide(sid) == ("skipped", WakeReason.HEARTBEAT_DISABLED)
    policy_file(home)
    use_config(HeartbeatConfig(enabled=False))
    assert decide(sid) == ("skipped", WakeReason.HEARTBEAT_DISABLED)


def test_heartbeat_invalid_pauses_wakes_until_the_file_is_fixed(home: Path) -> None:
    policy_file(home, "---\nversion: 1\nlease: 5m\n---\n")
    sid = session()
    assert decide(sid) == ("skipped", WakeReason.HEARTBEAT_INVALID)
    policy_file(home)
    assert decide(sid, dry_run=True) == ("sent", WakeReason.WAKE_SENT)


def test_heartbeat_no_policy_without_a_file(home: Path) -> None:
    sid = session()
    assert decide(sid) == ("skipped", WakeReason.HEARTBEAT_NO_POLICY)
    assert WakeEvent.objects.filter(session_id=sid, reason="heartbeat_no_policy").count() == 1


def test_heartbeat_rate_limited_after_max_wakes_per_cycle(home: Path) -> None:
    policy_file(home)
    use_config(HeartbeatConfig(max_wakes_per_cycle=2))
    sid = session()
    assert decide(sid, cycle=wake.Cycle(sent=1)) != ("rate_limited", WakeReason.HEARTBEAT_RATE_LIMITED)
    assert decide(sid, cycle=wake.Cycle(sent=2)) == ("rate_limited", WakeReason.HEARTBEAT_RATE_LIMITED)


def test_synthetic_prompt_failed_when_no_daemon_can_take_the_prompt(home: Path) -> None:
    """This process runs no SessionManager: the enqueue fails, the gate is released, the audit says why."""
    policy_file(home)
    sid = session()
    assert decide(sid) == ("failed", WakeReason.SYNTHETIC_PROMPT_FAILED)
    state = WakeState.objects.get(session_id=sid)
    assert (state.in_flight, state.last_reason, state.last_wake_at) == (False, "synthetic_prompt_failed", None)


def test_no_eligible_session_when_the_session_belongs_to_another_agent(home: Path) -> None:
    policy_file(home, agent="other")
    sid = session()
    assert wake.wake("other", sid, now=NOW)["reason"] == WakeReason.HEARTBEAT_NO_ELIGIBLE_SESSION


def test_every_decision_is_audited_with_a_closed_reason(home: Path) -> None:
    policy_file(home)
    sid = session()
    decide(sid)
    decide(sid)
    reasons = set(WakeEvent.objects.filter(session_id=sid).values_list("reason", flat=True))
    assert reasons <= {r.value for r in WakeReason} and reasons


def test_a_dry_run_writes_nothing(home: Path) -> None:
    policy_file(home)
    sid = session()
    d = wake.wake("general", sid, now=NOW, dry_run=True)
    assert (d["result"], d["wake_event_id"], d["synthetic_prompt_id"]) == ("sent", None, None)
    assert not WakeEvent.objects.exists() and not WakeState.objects.filter(last_result__gt="").exists()


def test_wakes_refuse_to_run_until_this_daemon_starts_health_was_recomputed(home: Path) -> None:
    """The order the seed asks for: after a restart, no wake consumer acts before the boot recompute finished."""
    import json

    from health.agents import manual_wake
    from sessions.core.errors import Unavailable

    policy_file(home)
    sid = session()
    run = isoformat(NOW)
    (home / "daemon.json").write_text(json.dumps({"started_at": run, "pid": 1}))
    with pytest.raises(Unavailable) as refused:
        manual_wake("general", sid)
    assert refused.value.code == "health_recomputing"
    assert not WakeEvent.objects.exists()
    WakeState.objects.create(session_id=sid, workspace_id="ws_00000000000000a1", agent_name="general",
                             in_flight=True, updated_at=NOW)  # a wake the dead daemon never finished
    folder.session_dir(sid).mkdir(parents=True)
    folder.write_meta(SessionRecord.from_meta({
        "id": sid, "workspace_id": "ws_00000000000000a1", "agent_name": "general", "state": "active",
        "cwd": "/nonexistent-ws", "created_at": isoformat(NOW), "updated_at": isoformat(NOW)}))
    counts = services.boot_recompute(run)
    assert counts["recomputed"] == 1 and services.recomputed_at(run) is not None
    assert not WakeState.objects.get(session_id=sid).in_flight
    # Recomputed from meta.json and this process's runtimes (none): `active` without an owner is not wakeable.
    row = SessionHealth.objects.get(session_id=sid)
    assert (row.state, row.health) == ("detached", "unknown")
    assert manual_wake("general", sid)["reason"] == WakeReason.SESSION_UNHEALTHY
