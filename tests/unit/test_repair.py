"""Transcript repair (docs/reference/sessions.md §13) over real events.db files in a temporary COMPOZY_HOME."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)  # run alone, this module must find the catalog tables too

from sessions.core.errors import Conflict, NotFound  # noqa: E402
from sessions.core.record import SessionRecord  # noqa: E402
from sessions.repair import boot as boot_repair  # noqa: E402
from sessions.repair import transcript as repair  # noqa: E402
from sessions.store import folder  # noqa: E402
from sessions.store.events import EventLog, max_sequence, read_events  # noqa: E402
from sessions.store.ids import new_session_id, new_workspace_id  # noqa: E402
from sessions.store.ops import NewEvent  # noqa: E402

TURN = "turn_00000000000000a1"
EARLIER = "turn_00000000000000a0"
CRASH_FAILURE = {"kind": "process_exit", "summary": "agent exited with signal 9", "crash_bundle_path": None}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def ev(type_: str, turn_id: str, **content: Any) -> NewEvent:
    return NewEvent(type_, turn_id, content)


def make_session(events: list[NewEvent], *, state: str = "stopped", stop_reason: str = "agent_crashed",
                 failure: dict[str, Any] | None = CRASH_FAILURE, **extra: Any) -> str:
    session_id = new_session_id()
    now = folder.isoformat(folder.utcnow())
    folder.write_meta(SessionRecord.from_meta({
        "id": session_id, "agent_name": "scripted", "provider": "scripted", "workspace_id": new_workspace_id(),
        "workspace_path": "/tmp", "cwd": "/tmp", "state": state, "stop_reason": stop_reason,
        "stop_detail": "agent exited with signal 9" if stop_reason else "", "failure": failure,
        "acp_session_id": "acp-1", "liveness": {"activity": {}}, "created_at": now, "updated_at": now, **extra,
    }))
    log = EventLog(folder.events_path(session_id), "scripted")
    log.append(events)
    log.close()
    return session_id


def interrupted_turn() -> list[NewEvent]:
    """A finished turn, then a turn whose daemon died: one tool call answered, two left dangling."""
    return [
        ev("user_message", EARLIER, text="hello"),
        ev("agent_message", EARLIER, text="hi"),
        ev("done", EARLIER, stop_reason="end_turn"),
        ev("user_message", TURN, text="run things"),
        ev("tool_call", TURN, tool_call_id="tc-ok", tool_name="Read a.txt", status="pending"),
        ev("tool_result", TURN, tool_call_id="tc-ok", tool_name="Read a.txt", status="completed"),
        ev("tool_call", TURN, tool_call_id="tc-hang", tool_name="Run a command", status="in_progress"),
        ev("tool_call", TURN, tool_call_id="tc-late", title="Write b.txt", status="pending"),
        ev("tool_call", TURN, tool_call_id="tc-late", title="Write b.txt", status="in_progress"),
    ]


def all_events(session_id: str) -> list[dict[str, Any]]:
    return read_events(folder.events_path(session_id), limit=10_000)


def codes(report: dict[str, Any]) -> list[str]:
    return [issue["code"] for issue in report["issues"]]


def store_bytes(session_id: str) -> bytes:
    return folder.events_path(session_id).read_bytes()


# ---- the repair ------------------------------------------------------------------------------

def test_interrupted_turn_gets_an_interrupted_result_per_dangling_tool_call_then_a_terminal_error() -> None:
    session_id = make_session(interrupted_turn())
    report = repair.repair_transcript(session_id, dry_run=False, force=False)

    assert report["persisted"] is True
    assert report["session_id"] == session_id
    assert [(a["code"], a.get("tool_call_id"), a.get("tool_name")) for a in report["actions"]] == [
        ("append_interrupted_tool_result", "tc-hang", "Run a command"),
        ("append_interrupted_tool_result", "tc-late", "Write b.txt"),
        ("append_terminal_error", None, None),
    ]
    assert all(a["persisted"] and a["turn_id"] == TURN for a in report["actions"])
    rows = all_events(session_id)
    assert [r["sequence"] for r in rows] == list(range(1, 13))
    appended = rows[9:]
    assert [a["event_id"] for a in report["actions"]] == [r["id"] for r in appended]
    assert [(r["type"], r["turn_id"]) for r in appended] == [("tool_result", TURN)] * 2 + [("error", TURN)]
    for row, call_id in zip(appended[:2], ("tc-hang", "tc-late"), strict=True):
        assert row["content"]["tool_call_id"] == call_id
        assert row["content"]["tool_error"] == "Tool call interrupted before a result was persisted."
        assert row["content"]["type"] == "tool_result"
    error = appended[2]["content"]
    assert error["error"] == "Session interrupted before a terminal prompt event was persisted."
    assert error["stop_reason"] == "agent_crashed"
    assert error["failure"]["kind"] == "process_exit"
    assert error["session_id"] == "acp-1"


def test_a_second_repair_appends_nothing_and_reports_the_terminal_event() -> None:
    session_id = make_session(interrupted_turn())
    first = repair.repair_transcript(session_id, dry_run=False, force=False)
    before = max_sequence(folder.events_path(session_id))

    second = repair.repair_transcript(session_id, dry_run=False, force=False)

    assert max_sequence(folder.events_path(session_id)) == before
    assert second["persisted"] is False and second["actions"] == []
    assert second["issues"] == [{"code": "terminal_event_already_exists", "severity": "info", "turn_id": TURN,
                                 "event_id": first["actions"][-1]["event_id"],
                                 "detail": "the last turn already has a terminal event"}]


def test_dry_run_reports_the_planned_actions_and_persists_nothing() -> None:
    session_id = make_session(interrupted_turn())
    stored = store_bytes(session_id)
    meta = folder.read_meta(session_id)

    report = repair.repair_transcript(session_id, dry_run=True, force=False)

    assert report["persisted"] is False
    assert [a["code"] for a in report["actions"]] == ["append_interrupted_tool_result"] * 2 + ["append_terminal_error"]
    assert all(a["persisted"] is False and "event_id" not in a for a in report["actions"])
    assert store_bytes(session_id) == stored
    assert folder.read_meta(session_id) == meta


def test_inspect_reads_without_writing() -> None:
    session_id = make_session(interrupted_turn())
    stored = store_bytes(session_id)

    found = repair.inspect_transcript(session_id)

    assert found.turn_id == TURN and found.terminal_event_id is None and found.repairable
    assert [c.tool_call_id for c in found.dangling] == ["tc-hang", "tc-late"]
    assert store_bytes(session_id) == stored


def test_repair_pages_through_a_store_larger_than_one_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repair, "SCAN_PAGE", 2)
    session_id = make_session(interrupted_turn())

    report = repair.repair_transcript(session_id, dry_run=False, force=False)

    assert [a.get("tool_call_id") for a in report["actions"]] == ["tc-hang", "tc-late", None]
    assert codes(repair.repair_transcript(session_id, dry_run=False, force=False)) == [
        "terminal_event_already_exists"]


def test_a_turn_with_done_is_terminal() -> None:
    session_id = make_session([ev("user_message", TURN, text="hi"), ev("tool_call", TURN, tool_call_id="tc"),
                               ev("done", TURN, stop_reason="end_turn")])
    report = repair.repair_transcript(session_id, dry_run=False, force=False)
    assert codes(report) == ["terminal_event_already_exists"]
    assert report["actions"] == [] and max_sequence(folder.events_path(session_id)) == 3


def test_session_stopped_after_the_interrupted_turn_does_not_hide_it() -> None:
    session_id = make_session([
        ev("user_message", TURN, text="go"), ev("tool_call", TURN, tool_call_id="tc-1", tool_name="Run"),
        ev("session_stopped", "", stop_reason="agent_crashed"),
    ])
    report = repair.repair_transcript(session_id, dry_run=False, force=False)
    assert [a["code"] for a in report["actions"]] == ["append_interrupted_tool_result", "append_terminal_error"]
    rows = all_events(session_id)
    # Append-only: the repair lands after session_stopped, nothing before it moves.
    assert [r["type"] for r in rows] == ["user_message", "tool_call", "session_stopped", "tool_result", "error"]


def test_session_level_events_only_have_no_repairable_turn() -> None:
    session_id = make_session([ev("transcript_marker.created", "", title="prompt_queued"),
                               ev("error", "", error="ACP session/new failed"),
                               ev("session_stopped", "", stop_reason="error")], stop_reason="error")
    report = repair.repair_transcript(session_id, dry_run=False, force=False)
    assert codes(report) == ["no_repairable_turn"] and report["actions"] == []


def test_a_session_without_events_db_has_no_repairable_turn() -> None:
    session_id = make_session([])
    folder.events_path(session_id).unlink()
    report = repair.repair_transcript(session_id, dry_run=False, force=False)
    assert codes(report) == ["no_repairable_turn"]
    assert not folder.events_path(session_id).exists()


def test_tool_call_without_an_id_is_a_warning_and_the_turn_still_gets_its_terminal_error() -> None:
    session_id = make_session([ev("user_message", TURN, text="go"), ev("tool_call", TURN, tool_name="Mystery")])
    report = repair.repair_transcript(session_id, dry_run=False, force=False)
    missing = [i for i in report["issues"] if i["code"] == "dangling_tool_call_missing_id"]
    assert len(missing) == 1 and missing[0]["severity"] == "warning" and missing[0]["turn_id"] == TURN
    assert missing[0]["event_id"] == all_events(session_id)[1]["id"]
    assert [a["code"] for a in report["actions"]] == ["append_terminal_error"]
    assert report["persisted"] is True


# ---- state and stop reason -------------------------------------------------------------------

@pytest.mark.parametrize("reason", ["completed", "user_canceled", "shutdown", "timeout", ""])
def test_other_stop_reasons_require_force(reason: str) -> None:
    session_id = make_session(interrupted_turn(), stop_reason=reason, failure=None)
    stored = store_bytes(session_id)

    refused = repair.repair_transcript(session_id, dry_run=False, force=False)

    assert "stop_reason_requires_force" in codes(refused)
    assert refused["actions"] == [] and refused["persisted"] is False
    assert store_bytes(session_id) == stored

    forced = repair.repair_transcript(session_id, dry_run=False, force=True)
    assert "stop_reason_requires_force" not in codes(forced)
    assert forced["persisted"] is True
    assert all_events(session_id)[-1]["content"]["stop_reason"] == (reason or None)


@pytest.mark.parametrize("reason", ["completed", "user_canceled", "shutdown"])
def test_a_cleanly_stopped_session_with_its_turns_closed_needs_nothing_not_even_force(reason: str) -> None:
    # A healthy session must not read "use --force": that invites a repair it does not need.
    closed = interrupted_turn()[:3]  # the finished turn only
    session_id = make_session(closed, stop_reason=reason, failure=None)
    report = repair.repair_transcript(session_id, dry_run=True, force=False)
    assert codes(report) == ["terminal_event_already_exists"] and report["actions"] == []
    assert {i["severity"] for i in report["issues"]} == {"info"}


def test_a_live_session_a_running_daemon_owns_is_refused(home: Path) -> None:
    session_id = make_session(interrupted_turn(), state="active", stop_reason="", failure=None)
    # Another live process (our parent) stands in for the running daemon.
    (home / "daemon.json").write_text(json.dumps({"pid": os.getppid(), "port": 1}))
    stored, meta = store_bytes(session_id), folder.read_meta(session_id)

    report = repair.repair_transcript(session_id, dry_run=False, force=True)

    assert report["issues"] == [{"code": "session_not_stopped", "severity": "error",
                                 "detail": "session is active and owned by the running daemon"}]
    assert report["actions"] == [] and report["persisted"] is False
    assert store_bytes(session_id) == stored and folder.read_meta(session_id) == meta


def test_a_stale_active_session_is_judged_by_its_stale_fix_and_a_dry_run_leaves_meta_alone() -> None:
    session_id = make_session(interrupted_turn(), state="active", stop_reason="", failure=None)

    planned = repair.repair_transcript(session_id, dry_run=True, force=False)

    assert [a["code"] for a in planned["actions"]][-1] == "append_terminal_error"
    assert folder.read_meta(session_id)["state"] == "active"

    done = repair.repair_transcript(session_id, dry_run=False, force=False)

    meta = folder.read_meta(session_id)
    assert (meta["state"], meta["stop_reason"], meta["failure"]["kind"], meta["stop_detail"]) == (
        "stopped", "agent_crashed", "process_exit", "daemon crashed while session active")
    assert done["persisted"] is True
    error = all_events(session_id)[-1]["content"]
    assert error["stop_reason"] == "agent_crashed" and error["failure"]["kind"] == "process_exit"


def test_an_unknown_session_is_not_found() -> None:
    with pytest.raises(NotFound):
        repair.repair_transcript(new_session_id(), dry_run=True, force=False)
    with pytest.raises(NotFound):
        repair.repair_transcript("../etc", dry_run=True, force=False)


# ---- damaged stores --------------------------------------------------------------------------

def _damage(session_id: str, *sql: str) -> None:
    conn = sqlite3.connect(folder.events_path(session_id))
    try:
        for statement in sql:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def test_a_sequence_gap_is_a_warning_and_the_repair_proceeds() -> None:
    session_id = make_session(interrupted_turn())
    _damage(session_id, "DELETE FROM events WHERE sequence IN (2, 3)")

    report = repair.repair_transcript(session_id, dry_run=False, force=False)

    gaps = [i for i in report["issues"] if i["code"] == "event_sequence_gap"]
    assert len(gaps) == 1 and gaps[0]["severity"] == "warning" and "2..3" in gaps[0]["detail"]
    assert report["persisted"] is True
    assert max_sequence(folder.events_path(session_id)) == 12  # appended after the max, gap left as it is


def test_invalid_json_blocks_the_repair() -> None:
    session_id = make_session(interrupted_turn())
    _damage(session_id, "UPDATE events SET content = '{not json' WHERE sequence = 2")
    stored = store_bytes(session_id)

    report = repair.repair_transcript(session_id, dry_run=False, force=False)

    bad = [i for i in report["issues"] if i["code"] == "invalid_event_json"]
    assert len(bad) == 1 and bad[0]["severity"] == "error" and bad[0]["turn_id"] == EARLIER
    assert report["actions"] == [] and report["persisted"] is False
    assert store_bytes(session_id) == stored


def test_a_content_type_that_differs_from_the_row_type_blocks_the_repair() -> None:
    session_id = make_session(interrupted_turn())
    _damage(session_id, "UPDATE events SET type = 'agent_message' WHERE sequence = 4")

    report = repair.repair_transcript(session_id, dry_run=False, force=False)

    mismatch = [i for i in report["issues"] if i["code"] == "event_type_mismatch"]
    assert len(mismatch) == 1 and mismatch[0]["severity"] == "error"
    assert "'user_message'" in mismatch[0]["detail"] and "'agent_message'" in mismatch[0]["detail"]
    assert report["actions"] == [] and max_sequence(folder.events_path(session_id)) == 9


def _foreign_store(session_id: str, sequences: list[int]) -> None:
    """The original layout (id primary key, sequence without a unique index), written by another tool."""
    path = folder.events_path(session_id)
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE events (id TEXT PRIMARY KEY, sequence INTEGER NOT NULL, turn_id TEXT NOT NULL,"
                     " type TEXT NOT NULL, agent_name TEXT NOT NULL, content TEXT NOT NULL,"
                     " archived INTEGER NOT NULL DEFAULT 0, timestamp TEXT NOT NULL,"
                     " transcript_entry_key TEXT NOT NULL DEFAULT '')")
        for n, seq in enumerate(sequences):
            type_ = "user_message" if n == 0 else "tool_call"
            content = json.dumps({"type": type_, "tool_call_id": f"tc-{n}"})
            conn.execute("INSERT INTO events(id, sequence, turn_id, type, agent_name, content, timestamp)"
                         " VALUES (?,?,?,?,?,?,?)", (f"ev-{n}", seq, TURN, type_, "scripted", content, "t"))
        conn.commit()
    finally:
        conn.close()


def test_duplicate_and_regressing_sequences_block_the_repair() -> None:
    session_id = make_session([])
    folder.events_path(session_id).unlink()
    _foreign_store(session_id, [1, 2, 3, 2, 4])
    stored = store_bytes(session_id)

    report = repair.repair_transcript(session_id, dry_run=False, force=False)

    by_code = {i["code"]: i for i in report["issues"]}
    assert by_code["event_sequence_regression"]["severity"] == "error"
    assert by_code["event_sequence_regression"]["event_id"] == "ev-3"
    assert by_code["event_sequence_duplicate"]["severity"] == "error"
    assert by_code["event_sequence_duplicate"]["detail"] == "sequence 2 stored 2 times"
    assert report["actions"] == [] and report["persisted"] is False
    assert store_bytes(session_id) == stored


def test_adjacent_duplicates_are_duplicates_not_regressions() -> None:
    session_id = make_session([])
    folder.events_path(session_id).unlink()
    _foreign_store(session_id, [1, 2, 2, 3])
    report = repair.repair_transcript(session_id, dry_run=True, force=False)
    assert "event_sequence_duplicate" in codes(report)
    assert "event_sequence_regression" not in codes(report)


def test_a_healthy_foreign_store_is_repaired_like_ours() -> None:
    session_id = make_session([])
    folder.events_path(session_id).unlink()
    _foreign_store(session_id, [1, 2, 3])
    report = repair.repair_transcript(session_id, dry_run=False, force=False)
    assert [a.get("tool_call_id") for a in report["actions"]] == ["tc-1", "tc-2", None]
    assert max_sequence(folder.events_path(session_id)) == 6


def test_the_issue_list_is_bounded_per_code() -> None:
    session_id = make_session([ev("user_message", TURN, text=str(n)) for n in range(30)])
    _damage(session_id, "UPDATE events SET content = 'x'")
    report = repair.repair_transcript(session_id, dry_run=True, force=False)
    bad = [i for i in report["issues"] if i["code"] == "invalid_event_json"]
    assert len(bad) == repair.ISSUES_PER_CODE + 1
    assert bad[-1]["detail"] == "10 more invalid_event_json issue(s) not listed"


# ---- boot ------------------------------------------------------------------------------------

def test_boot_repair_terminalizes_crashed_and_stale_sessions_and_leaves_the_rest() -> None:
    crashed = make_session(interrupted_turn())
    errored = make_session(interrupted_turn(), stop_reason="error")
    stale = make_session(interrupted_turn(), state="active", stop_reason="", failure=None)
    completed = make_session(interrupted_turn(), stop_reason="completed", failure=None)
    clean = make_session([ev("user_message", TURN, text="hi"), ev("done", TURN, stop_reason="end_turn")])
    untouched = {sid: store_bytes(sid) for sid in (completed, clean)}

    result = boot_repair.boot_repair_all()

    assert result == {"scanned": 5, "repaired": 1, "transcripts_checked": 4, "transcripts_repaired": 3,
                      "invalid": 0, "failed": 0, "git_ops_repaired": 0}
    for sid in (crashed, errored, stale):
        assert [r["type"] for r in all_events(sid)[-3:]] == ["tool_result", "tool_result", "error"]
        assert folder.read_meta(sid)[boot_repair.TRANSCRIPT_MARK]["outcome"] == "repaired"
    assert folder.read_meta(clean)[boot_repair.TRANSCRIPT_MARK]["outcome"] == "clean"
    assert boot_repair.TRANSCRIPT_MARK not in folder.read_meta(completed)  # a clean stop is never opened
    assert folder.read_meta(stale)["state"] == "stopped"
    assert {sid: store_bytes(sid) for sid in untouched} == untouched
    # A second boot opens no store: every crashed session's verdict is recorded for its run.
    assert boot_repair.boot_repair_all() == {"scanned": 5, "repaired": 0, "transcripts_checked": 0,
                                        "transcripts_repaired": 0, "invalid": 0, "failed": 0,
                                        "git_ops_repaired": 0}


def test_one_invalid_meta_json_does_not_stop_the_boot_repair_of_the_others(home: Path) -> None:
    zombie = make_session(interrupted_turn(), state="active", stop_reason="", failure=None)
    meta = json.loads((home / "sessions" / zombie / "meta.json").read_text())
    (home / "sessions" / zombie / "meta.json").write_text(json.dumps({**meta, "state": "zombie"}))
    broken = make_session([])
    (home / "sessions" / broken / "meta.json").write_text("{not json")
    stale = make_session(interrupted_turn(), state="active", stop_reason="", failure=None)

    result = boot_repair.boot_repair_all()

    assert (result["invalid"], result["repaired"], result["transcripts_repaired"], result["failed"]) == (2, 1, 1, 0)
    fixed = folder.read_meta(stale)
    assert (fixed["state"], fixed["stop_reason"], fixed["failure"]["kind"]) == ("stopped", "agent_crashed",
                                                                                "process_exit")
    for bad in (zombie, broken):
        with pytest.raises(Conflict) as caught:
            repair.repair_transcript(bad, dry_run=True, force=False)
        assert caught.value.code == repair.IssueCode.SESSION_META_INVALID


def test_a_reactivated_session_that_crashes_again_is_checked_again() -> None:
    crashed = make_session(interrupted_turn(), activated_at="2026-01-01T00:00:00.000000Z")
    assert boot_repair.boot_repair_all()["transcripts_checked"] == 1
    meta = folder.read_meta(crashed)
    # A later run (new activated_at) that crashed: its verdict for the earlier run does not cover it.
    folder.write_meta(SessionRecord.from_meta({**meta, "activated_at": "2026-02-01T00:00:00.000000Z"}))
    assert boot_repair.boot_repair_all()["transcripts_checked"] == 1
    assert boot_repair.boot_repair_all()["transcripts_checked"] == 0


def test_an_events_db_that_is_not_a_database_is_refused_with_a_stable_code() -> None:
    session_id = make_session([])
    path = folder.events_path(session_id)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(b"definitely not sqlite" * 100)
    with pytest.raises(Conflict) as caught:
        repair.repair_transcript(session_id, dry_run=False, force=False)
    assert caught.value.code == "event_store_unreadable"
    assert path.read_bytes() == b"definitely not sqlite" * 100
