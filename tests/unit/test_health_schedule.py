"""The health rules that run on a clock, each given its `now`, on a real catalog and real HEARTBEAT.md files:
when the wake scheduler considers a session (`health.wake.run_cycle`: the interval runs from the last wake, the last
activity or the creation, whichever is latest; the policy's own interval or the config default), and how often a
health transition may fire its hook (`session_health_hook_min_interval`, decided in `health.services._upsert`). The
daemon tests keep the wiring: a scheduler wake after a restart (tests/integration/test_health.py) and a hook that
really runs (test_health_hooks.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from compozy_base.config import loader as config_module  # noqa: E402
from compozy_base.config.agents import AgentConfig  # noqa: E402
from compozy_base.config.heartbeat import HeartbeatConfig  # noqa: E402
from compozy_base.config.loader import Config  # noqa: E402
from health import services, wake  # noqa: E402
from health.derive import LiveFacts  # noqa: E402
from health.models import HeartbeatSnapshot, SessionHealth, WakeEvent, WakeState  # noqa: E402
from sessions.core.record import SessionRecord  # noqa: E402
from sessions.models import Session, Workspace  # noqa: E402
from sessions.store.folder import isoformat  # noqa: E402

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LIVE = LiveFacts(runtime=True, process_running=True)
DEFAULT = 1800.0
HOOK_EVERY = 60.0
POLICY = "---\nversion: 1\nsummary: look around\n---\nCheck the inbox.\n"
TEN_MINUTES = "---\nversion: 1\nsummary: look around\npreferences:\n  min_interval: 10m\n---\nCheck the inbox.\n"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path))
    use_config(HeartbeatConfig(default_interval=DEFAULT, min_interval=300, session_health_hook_min_interval=HOOK_EVERY))
    wipe()
    yield tmp_path
    wipe()  # the catalog is the test process's: other modules count its rows
    config_module._cached = None


def wipe() -> None:
    for model in (WakeEvent, WakeState, HeartbeatSnapshot, SessionHealth, Session, Workspace):
        model.objects.all().delete()


def use_config(cfg: HeartbeatConfig) -> None:
    config_module._cached = Config(agents={"general": AgentConfig("general")}, heartbeat=cfg)


def policy_file(home: Path, text: str = POLICY) -> None:
    path = home / "agents" / "general" / "HEARTBEAT.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def meta(sid: str, *, state: str = "active", prompting: bool = False, activity_at: datetime) -> SessionRecord:
    return SessionRecord.from_meta({
            "id": sid, "workspace_id": "ws_00000000000000a1", "agent_name": "general", "state": state,
            "failure": None, "created_at": isoformat(NOW - timedelta(hours=3)),
            "activated_at": isoformat(NOW - timedelta(hours=3)),
            "liveness": {"activity": {"prompt_active": prompting, "last_activity_at": isoformat(activity_at)}}})


def session(sid: str = "sess_00000000000000a1", *, created: datetime = NOW - timedelta(hours=3),
            activity_at: datetime | None = None, state: str = "active") -> str:
    ws, _ = Workspace.objects.get_or_create(id="ws_00000000000000a1", defaults={
        "name": "w", "root_dir": "/nonexistent-ws", "created_at": NOW, "updated_at": NOW})
    Session.objects.create(id=sid, workspace=ws, agent_name="general", state=state, created_at=created,
                           updated_at=created)
    # A health row written when the activity happened, as the runtime's save_meta writes it.
    at = activity_at or created
    assert services._upsert(meta(sid, state=state, activity_at=at), LIVE if state == "active" else LiveFacts(),
                            at) is not None
    return sid


def considered(now: datetime) -> int:
    return wake.run_cycle(now=now)["considered"]


def test_the_interval_runs_from_the_last_activity(home: Path) -> None:
    policy_file(home)
    session(activity_at=NOW - timedelta(hours=1))
    due = NOW - timedelta(hours=1) + timedelta(seconds=DEFAULT)
    assert considered(due - timedelta(seconds=1)) == 0
    assert considered(due) == 1


def test_a_new_session_is_not_woken_the_moment_it_starts(home: Path) -> None:
    policy_file(home)
    created = NOW - timedelta(seconds=5)
    session(created=created)
    assert considered(NOW) == 0
    assert considered(created + timedelta(seconds=DEFAULT)) == 1


def test_a_wake_restarts_the_interval(home: Path) -> None:
    policy_file(home)
    sid = session(activity_at=NOW - timedelta(hours=2))
    WakeState.objects.create(session_id=sid, workspace_id="ws_00000000000000a1", agent_name="general",
                             last_wake_at=NOW - timedelta(minutes=10), updated_at=NOW)
    assert considered(NOW) == 0
    assert considered(NOW - timedelta(minutes=10) + timedelta(seconds=DEFAULT)) == 1


def test_the_policys_own_interval_replaces_the_default(home: Path) -> None:
    policy_file(home, TEN_MINUTES)
    session(activity_at=NOW - timedelta(minutes=10))
    assert considered(NOW - timedelta(seconds=1)) == 0
    assert considered(NOW) == 1


def test_without_a_policy_or_with_heartbeats_off_nothing_is_considered(home: Path) -> None:
    session(activity_at=NOW - timedelta(days=1))
    assert considered(NOW) == 0  # no HEARTBEAT.md: the agent's wake policy is off
    policy_file(home)
    assert considered(NOW) == 1
    use_config(HeartbeatConfig(enabled=False))
    assert wake.run_cycle(now=NOW) == {"considered": 0, "sent": 0}


def test_a_stopped_session_is_never_considered(home: Path) -> None:
    policy_file(home)
    session(activity_at=NOW - timedelta(days=1), state="stopped")
    assert considered(NOW) == 0


def test_audit_rows_past_their_retention_are_dropped_by_the_cycle(home: Path) -> None:
    for n, expires in enumerate((NOW - timedelta(seconds=1), NOW + timedelta(seconds=1))):
        WakeEvent.objects.create(id=f"wke_{n:016x}", session_id="sess_00000000000000a1", workspace_id="ws_1",
                                 agent_name="general", source="manual", result="skipped",
                                 reason="heartbeat_no_policy", created_at=NOW - timedelta(days=7), expires_at=expires)
    wake.run_cycle(now=NOW)
    assert list(WakeEvent.objects.values_list("id", flat=True)) == [f"wke_{1:016x}"]


def test_a_transition_fires_the_hook_at_most_once_per_interval() -> None:
    sid = session(created=NOW)  # the first row is a transition: fired at NOW
    fired = lambda: SessionHealth.objects.get(session_id=sid).hook_fired_at  # noqa: E731

    def write(at: datetime, prompting: bool) -> None:
        assert services._upsert(meta(sid, prompting=prompting, activity_at=at), LIVE, at) is not None

    assert fired() == NOW
    write(NOW + timedelta(seconds=10), prompting=True)  # idle → prompting, 10 s later: not yet
    assert fired() == NOW
    assert SessionHealth.objects.get(session_id=sid).state == "prompting"
    write(NOW + timedelta(seconds=30), prompting=True)  # no transition
    assert fired() == NOW
    due = NOW + timedelta(seconds=HOOK_EVERY)
    write(due, prompting=False)  # prompting → idle, a whole interval after the last firing
    assert fired() == due
    write(due + timedelta(seconds=HOOK_EVERY * 5), prompting=False)  # no transition, however late
    assert fired() == due
