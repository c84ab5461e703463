"""The stale-state mapping (docs/reference/sessions.md §13, `sessions/stale_repair.stale_fix`) branch by branch, with
its
clock as a parameter: a live state no daemon owns becomes `stopped` with the rule's reason, failure kind and detail;
an agent that outlived its daemon (a real process, matched by pid and start time) is named in the detail, and is
stalled once its last activity is STALL_AGE old; a stop the catalog recorded first stands. The daemon-level wiring
(boot repair and read repair after a SIGKILL) is tests/integration/test_repair.py's."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from compozy_base.process import started_at as process_started_at  # noqa: E402
from sessions.catalog import index as catalog  # noqa: E402
from sessions.core.record import SessionRecord  # noqa: E402
from sessions.models import Session  # noqa: E402
from sessions.repair.stale import STALL_AGE, stale_fix  # noqa: E402
from sessions.store.folder import isoformat  # noqa: E402
from sessions.store.ids import new_session_id, new_workspace_id  # noqa: E402

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CRASH = {"kind": "process_exit", "summary": "agent exited with signal 9", "crash_bundle_path": None}
STORAGE = {"kind": "storage_failure", "summary": "events.db: disk full", "crash_bundle_path": None}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def agent() -> Iterator[dict[str, Any]]:
    """A real process standing in for an agent its daemon left running: the liveness meta.json records."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        started = process_started_at(proc.pid)
        assert started is not None
        yield {"subprocess_pid": proc.pid, "subprocess_started_at": isoformat(datetime.fromtimestamp(started, UTC))}
    finally:
        proc.kill()
        proc.wait(10)


def meta(state: str, *, idle: timedelta | None = None, liveness: dict[str, Any] | None = None,
         **fields: Any) -> dict[str, Any]:
    activity = {} if idle is None else {"last_activity_at": isoformat(NOW - idle)}
    return {
        "id": new_session_id(), "agent_name": "scripted", "provider": "scripted", "workspace_id": new_workspace_id(),
        "state": state, "stop_reason": "", "stop_detail": "", "failure": None, "acp_session_id": "acp-1",
        "liveness": {"activity": activity, **(liveness or {})}, "created_at": isoformat(NOW - timedelta(hours=1)),
        "updated_at": isoformat(NOW - timedelta(minutes=5)), **fields,
    }


def outcome(fixed: dict[str, Any] | None) -> tuple[str, str, str, str]:
    assert fixed is not None
    return fixed["state"], fixed["stop_reason"], fixed["failure"]["kind"], fixed["stop_detail"]


def test_a_stopped_session_is_left_alone() -> None:
    assert stale_fix(meta("stopped", stop_reason="completed"), now=NOW) is None


@pytest.mark.parametrize(("state", "expected"), [
    ("active", ("stopped", "agent_crashed", "process_exit", "daemon crashed while session active")),
    ("stopping", ("stopped", "agent_crashed", "process_exit", "stop did not complete")),
    ("starting", ("stopped", "error", "startup_failure", "start did not complete")),
])
def test_each_live_state_maps_to_its_stop_reason_failure_kind_and_detail(state: str,
                                                                         expected: tuple[str, ...]) -> None:
    fixed = stale_fix(meta(state), now=NOW)
    assert outcome(fixed) == expected
    assert fixed is not None and fixed["failure"]["summary"] == expected[3]
    assert fixed["updated_at"] == isoformat(NOW)  # the repair is dated by the clock it was given
    # Only a start that never completed forgets its ACP session: there is none to load.
    assert fixed["acp_session_id"] == ("" if state == "starting" else "acp-1")


def test_values_already_recorded_are_kept_and_only_blanks_filled() -> None:
    fixed = stale_fix(meta("active", stop_reason="max_iterations", stop_detail="limit hit", failure=CRASH), now=NOW)
    assert outcome(fixed) == ("stopped", "max_iterations", "process_exit", "limit hit")
    assert fixed is not None and fixed["failure"] == CRASH


def test_an_agent_that_outlived_its_daemon_is_named_and_is_stalled_from_stall_age(agent: dict[str, Any]) -> None:
    recent = stale_fix(meta("active", idle=STALL_AGE - timedelta(seconds=1), liveness=agent), now=NOW)
    assert outcome(recent)[3] == "daemon exited while session subprocess remained alive"
    assert recent is not None and "stall_state" not in recent["liveness"]
    for idle in (STALL_AGE, STALL_AGE + timedelta(hours=1), None):  # no recorded activity: nothing vouches for it
        stalled = stale_fix(meta("active", idle=idle, liveness=agent), now=NOW)
        assert outcome(stalled) == ("stopped", "agent_crashed", "process_exit",
                                    "daemon exited while stalled session subprocess remained alive"), idle
        assert stalled is not None and stalled["liveness"]["stall_state"] == "stalled"
    # The same meta.json judged an hour earlier: its activity was recent then.
    earlier = stale_fix(meta("active", idle=STALL_AGE, liveness=agent), now=NOW - timedelta(hours=1))
    assert outcome(earlier)[3] == "daemon exited while session subprocess remained alive"


def test_a_stopping_session_whose_agent_survived_is_named_too(agent: dict[str, Any]) -> None:
    fixed = stale_fix(meta("stopping", idle=timedelta(seconds=5), liveness=agent), now=NOW)
    assert outcome(fixed) == ("stopped", "agent_crashed", "process_exit",
                              "daemon exited while session subprocess remained alive")


def test_a_start_that_did_not_complete_is_a_startup_failure_even_with_its_agent_alive(agent: dict[str, Any]) -> None:
    fixed = stale_fix(meta("starting", idle=STALL_AGE * 2, liveness=agent), now=NOW)
    assert outcome(fixed) == ("stopped", "error", "startup_failure", "start did not complete")
    assert fixed is not None and "stall_state" not in fixed["liveness"]


def test_a_reused_pid_or_a_dead_agent_is_not_a_survivor(agent: dict[str, Any]) -> None:
    other_start = isoformat(datetime.fromisoformat(agent["subprocess_started_at"]) - timedelta(hours=1))
    reused = stale_fix(meta("active", idle=timedelta(seconds=5), liveness={**agent,
                                                                          "subprocess_started_at": other_start}),
                       now=NOW)
    assert outcome(reused)[3] == "daemon crashed while session active"
    gone = subprocess.Popen(["true"])
    gone.wait(10)
    dead = stale_fix(meta("active", liveness={"subprocess_pid": gone.pid,
                                              "subprocess_started_at": agent["subprocess_started_at"]}), now=NOW)
    assert outcome(dead)[3] == "daemon crashed while session active"


@pytest.fixture
def row(tmp_path: Path) -> Iterator[Callable[..., None]]:
    """A catalog row for a meta.json, with `fields` changed as the daemon would have written them; removed after."""
    root = tmp_path / "ws"
    root.mkdir()
    ws = catalog.register_workspace(str(root))

    def write(m: dict[str, Any], **fields: Any) -> None:
        catalog.upsert_session_row(SessionRecord.from_meta(
            {**m, "workspace_id": ws.id, "workspace_path": str(root), "cwd": str(root)}))
        Session.objects.filter(id=m["id"]).update(**fields)

    yield write
    Session.objects.filter(workspace_id=ws.id).delete()  # the catalog is the test process's
    ws.delete()


def test_a_stop_the_catalog_recorded_after_meta_json_is_the_cause(row: Callable[..., None]) -> None:
    """A full sessions disk: the daemon wrote its stop to the catalog row and could not write meta.json."""
    m = meta("active")
    row(m, state="stopped", stop_reason="error", stop_detail="events.db: disk full", failure=STORAGE,
         updated_at=NOW - timedelta(minutes=1))
    assert outcome(stale_fix(m, now=NOW)) == ("stopped", "error", "storage_failure", "events.db: disk full")


def test_a_catalog_stop_older_than_meta_json_is_not_the_cause(row: Callable[..., None]) -> None:
    m = meta("active")
    row(m, state="stopped", stop_reason="error", stop_detail="events.db: disk full", failure=STORAGE,
         updated_at=NOW - timedelta(hours=2))
    assert outcome(stale_fix(m, now=NOW)) == ("stopped", "agent_crashed", "process_exit",
                                              "daemon crashed while session active")
