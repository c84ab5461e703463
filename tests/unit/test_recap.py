"""The recap (docs/reference/sessions.md §15, docs/reference/surfaces.md §4.7) over real events.db files, meta.json
and catalog rows."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from sessions.catalog import index as catalog  # noqa: E402
from sessions.core.errors import InvalidRequest  # noqa: E402
from sessions.core.record import SessionRecord  # noqa: E402
from sessions.models import InputEntry  # noqa: E402
from sessions.services import recap  # noqa: E402
from sessions.store import folder  # noqa: E402
from sessions.store.events import EventLog, read_events  # noqa: E402
from sessions.store.ids import new_queue_entry_id, new_session_id  # noqa: E402
from sessions.store.ops import NewEvent  # noqa: E402

T1, T2 = "turn_00000000000000b1", "turn_00000000000000b2"
SECRET = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def ev(type_: str, turn_id: str = T1, **content: Any) -> NewEvent:
    return NewEvent(type_, turn_id, content)


def marker(kind: str, turn_id: str = T1) -> NewEvent:
    raw = {"kind": f"transcript_marker.{kind}", "occurred_at": "2025-01-01T00:00:00.000000Z", "summary": kind}
    return ev("transcript_marker.created", turn_id, title=kind, text=kind, raw=raw)


def make_session(tmp_path: Path, events: list[NewEvent], **extra: Any) -> str:
    root = tmp_path / f"ws-{len(list(tmp_path.iterdir()))}"
    root.mkdir()
    ws = catalog.register_workspace(str(root))
    session_id = new_session_id()
    meta = {
        "id": session_id, "agent_name": "scripted", "provider": "scripted", "workspace_id": ws.id,
        "workspace_path": str(root), "cwd": str(root), "state": "stopped", "stop_reason": "agent_crashed",
        "stop_detail": "agent exited with signal 9", "input_generation": 3,
        "failure": {"kind": "process_exit", "summary": "agent exited with signal 9", "crash_bundle_path": None},
        "acp_session_id": "acp-1", "liveness": {"activity": {}}, "created_at": "2025-01-01T00:00:00.000000Z",
        "updated_at": "2025-01-01T00:00:01.000000Z", **extra,
    }
    folder.write_meta(SessionRecord.from_meta(meta))
    catalog.upsert_session_row(SessionRecord.from_meta(meta))
    log = EventLog(folder.events_path(session_id), "scripted")
    log.append(events)
    log.close()
    return session_id


def conversation() -> list[NewEvent]:
    return [
        ev("user_message", T1, text="hello"), ev("agent_message", T1, text="hi " * 5000),
        ev("done", T1, stop_reason="end_turn"), marker("session_unhealthy", T1), marker("session_recovered", T1),
        ev("user_message", T2, text="again"), marker("prompt_timeout", T2), ev("agent_message", T2, text="ok"),
        marker("provider_failure", T2),
        ev("error", T2, error="agent exited", failure={"kind": "process_exit", "summary": "agent exited"}),
        ev("session_stopped", "", stop_reason="agent_crashed", stop_detail="agent exited with signal 9"),
    ]


def queue(session_id: str, text: str, status: str, minutes: int) -> InputEntry:
    when = folder.parse_time("2025-01-01T00:00:00.000000Z") + timedelta(minutes=minutes)  # type: ignore[operator]
    return InputEntry.objects.create(id=new_queue_entry_id(), session_id=session_id, text=text, status=status,
                                     generation=3, created_at=when, updated_at=when)


def test_the_same_store_gives_byte_identical_recaps(tmp_path: Path) -> None:
    sid = make_session(tmp_path, conversation())
    first = json.dumps(recap.build_recap(sid), ensure_ascii=False)
    second = json.dumps(recap.build_recap(sid), ensure_ascii=False)
    assert first == second
    snap = json.loads(first)["snapshot"]
    last = read_events(folder.events_path(sid), limit=1, newest=True)[0]
    assert snap["generated_at"] == max(last["timestamp"], "2025-01-01T00:00:01.000000Z")
    assert snap["event_cursor"] == snap["transcript_cursor"] == last["sequence"] == 11
    assert (snap["queue_generation"], snap["consistency"]) == (3, "persisted_reads")


def test_recent_messages_are_the_newest_transcript_messages_with_bounded_text(tmp_path: Path) -> None:
    sid = make_session(tmp_path, conversation())
    full = recap.build_recap(sid)
    # markers while nothing is open stand alone; inside an answer they are parts of it
    assert [m["role"] for m in full["recent_messages"]] == ["user", "assistant", "system", "system", "user",
                                                            "system", "assistant", "system", "system"]
    long_text = full["recent_messages"][1]["parts"][0]["text"]
    assert len(long_text.encode()) <= recap.TEXT_BYTES and long_text.endswith("...[truncated]")
    assert recap.build_recap(sid, limit=2)["recent_messages"] == full["recent_messages"][-2:]


def test_markers_are_recent_and_pending_until_recovered(tmp_path: Path) -> None:
    sid = make_session(tmp_path, conversation())
    result = recap.build_recap(sid)
    kinds = [m["kind"].removeprefix("transcript_marker.") for m in result["recent_markers"]]
    assert kinds == ["session_unhealthy", "session_recovered", "prompt_timeout", "provider_failure"]
    pending = [m["kind"].removeprefix("transcript_marker.") for m in result["pending_markers"]]
    assert pending == ["prompt_timeout", "provider_failure"]  # the unhealthy one was recovered
    assert result["pending_markers"][0]["summary"] == "prompt_timeout"


def test_pending_markers_keep_at_most_five_and_recovery_clears_only_recoverable_kinds() -> None:
    def m(kind: str) -> dict[str, Any]:
        return {"kind": f"transcript_marker.{kind}"}

    markers = [m("mcp_auth_required"), m("prompt_timeout"), m("session_unhealthy"), m("session_recovered"),
               m("prompt_queued")] + [m("provider_failure")] * 6
    pending = recap.pending_markers(markers)
    assert [x["kind"] for x in pending] == ["transcript_marker.provider_failure"] * 5
    assert [x["kind"] for x in recap.pending_markers(markers[:5])] == ["transcript_marker.mcp_auth_required"]


def test_pending_inputs_are_the_queued_entries_in_order_and_redacted(tmp_path: Path) -> None:
    sid = make_session(tmp_path, conversation())
    later = queue(sid, "second", "queued", 2)
    first = queue(sid, f"use key {SECRET} please", "queued", 1)
    queue(sid, "already sent", "sent", 0)
    queue(sid, "canceled", "canceled", 3)
    inputs = recap.build_recap(sid)["pending_inputs"]
    assert [(i["queue_entry_id"], i["queue_position"]) for i in inputs] == [(first.id, 1), (later.id, 2)]
    assert SECRET not in json.dumps(inputs) and "[REDACTED]" in inputs[0]["text"]


def test_a_long_session_is_recapped_from_the_tail_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recap, "SCAN_EVENTS", 50)
    chunks = [ev("agent_message", T1, text=f"c{i} ") for i in range(500)]
    sid = make_session(tmp_path, [ev("user_message", T1, text="stream"), *chunks])
    messages = recap.build_recap(sid)["recent_messages"]
    assert len(messages) == 1
    assert messages[0]["metadata"]["partial"] is True
    # the newest 50 rows (sequences 452..501) hold chunks 450..499
    assert messages[0]["parts"][0]["text"] == "".join(f"c{i} " for i in range(450, 500))


def test_an_open_turn_is_the_active_run(tmp_path: Path) -> None:
    sid = make_session(tmp_path, [ev("user_message", T1, text="hi"), ev("done", T1, stop_reason="end_turn"),
                                  ev("user_message", T2, text="long job"), ev("agent_message", T2, text="working"),
                                  ev("user_message", T2, text="steer", action="steered")])
    path = folder.events_path(sid)
    meta = json.loads((folder.session_dir(sid) / "meta.json").read_text())
    run = recap._active_run(path, {**meta, "state": "active"})
    assert run is not None
    assert (run["turn_id"], run["prompt"], run["started_sequence"], run["last_event_sequence"]) == (
        T2, "long job", 3, 5)
    assert recap._active_run(path, meta) is None  # a stopped session has no active run


@pytest.mark.parametrize("limit", [0, 101])
def test_the_limit_is_validated(tmp_path: Path, limit: int) -> None:
    sid = make_session(tmp_path, conversation())
    with pytest.raises(InvalidRequest) as info:
        recap.build_recap(sid, limit=limit)
    assert info.value.code == "invalid_limit"
