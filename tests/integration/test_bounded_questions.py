"""Bounded questions, through the real daemon and the scripted agent (issue 44, "Bounded questions"): a question too
large, too many at once, or with a schema the form cannot honour is refused at `elicitation/create` with a JSON-RPC
error the agent sees; what waits stays out of meta.json's way, so the record stays small, and a session stays
readable and repairable after a kill -9 of its daemon."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, start_daemon, wait_for, wait_gone
from tests.conftest import said as conftest_said

pytestmark = pytest.mark.timeout(240)

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("questions-home"))
    yield d
    d.stop()


def pending(daemon: Daemon, sid: str) -> list[dict[str, Any]]:
    answer = daemon.http.get(daemon.scoped(sid, "/elicitations"))
    assert answer.status_code == 200, answer.text
    return list(answer.json()["elicitations"])


def said(daemon: Daemon, sid: str) -> str:
    return conftest_said(daemon.all_events(sid))


def asked(daemon: Daemon, sid: str, prompt: str) -> str:
    """Prompt the agent with an `askodd` script; once it heard back (or its question waits): what it said."""
    assert daemon.prompt(sid, prompt).status_code == 200
    wait_for(lambda: "ask " in said(daemon, sid) or pending(daemon, sid), timeout=60,
             what="the agent's question to be refused or listed")
    return said(daemon, sid)


@pytest.mark.parametrize("required", ["5", "[[1]]", '["nowhere"]', '"name"'])
def test_a_schema_the_form_cannot_honour_is_refused_when_asked(daemon: Daemon, workspace: Path,
                                                               required: str) -> None:
    # It was listed, and every accept answered 500 with a traceback (`5` is not iterable, `[1]` not hashable).
    sid = daemon.create(workspace)["id"]
    text = asked(daemon, sid, f"askodd required {required}")
    open_ones = pending(daemon, sid)
    if open_ones:  # what it did: answering it must at least never be a 500
        answer = daemon.http.post(daemon.scoped(sid, f"/elicitations/{open_ones[0]['id']}"),
                                  json={"action": "accept", "content": {"name": "x"}})
        assert answer.status_code < 500, answer.text
    assert not open_ones, open_ones
    assert "ask error: -32602" in text and "required" in text, text
    assert daemon.session(sid)["state"] == "active"


def test_too_many_open_questions_are_refused_and_meta_json_stays_small(daemon: Daemon, workspace: Path) -> None:
    # 300 open questions of 10 KB cost 646 MB of meta.json rewrites: every question rewrote all the others' text.
    sid = daemon.create(workspace)["id"]
    assert daemon.prompt(sid, "askodd many 60 10240").status_code == 200
    wait_for(lambda: "ask error" in said(daemon, sid), timeout=60, what="the questions past the limit refused")
    waiting = pending(daemon, sid)
    assert 0 < len(waiting) < 60, len(waiting)
    assert all(len(q["message"]) == 10240 for q in waiting)  # the whole question, where a person answers it
    # What meta.json keeps of each (the attention list's and the webhook's line), saved a moment after.
    shared = wait_for(lambda: (s := daemon.meta(sid)["liveness"]["elicitation_requests"]) and len(s) == len(
        waiting) and s, what="the open questions saved")
    assert all(len(q["message"]) <= 1024 for q in shared), shared[:1]
    meta = daemon.home / "sessions" / sid / "meta.json"
    assert meta.stat().st_size < 64 * 1024, meta.stat().st_size
    listed = daemon.http.get("/api/attention").json()
    assert listed, listed
    assert daemon.http.post(daemon.scoped(sid, "/prompt/cancel")).status_code == 200
    wait_for(lambda: not pending(daemon, sid), what="the questions to be cancelled with the turn")
    wait_for(lambda: not daemon.meta(sid)["liveness"]["elicitation_requests"], what="none saved as open")


def test_a_5_mib_question_is_refused_and_the_session_stays_readable_after_kill_9(tmp_path: Path,
                                                                                 workspace: Path) -> None:
    # The question went into meta.json, past its 4 MiB cap: the supervision sweep tracebacked every 5 s, and after a
    # kill -9 every read and `repair` of the session answered 409 session_meta_invalid for good.
    home = tmp_path / "home"
    first = start_daemon(home)
    try:
        sid = first.create(workspace)["id"]
        text = asked(first, sid, f"askodd big {5 * MIB}")
        agent_pid = first.meta(sid)["liveness"]["subprocess_pid"]
        wait_for(lambda: first.meta(sid)["updated_at"], what="the record written")
    finally:
        first.stop(signal.SIGKILL)
    assert wait_gone(agent_pid, 60), "the orphaned agent did not exit"
    second = start_daemon(home)
    try:
        session = second.session(sid)  # readable
        assert session["state"] == "stopped", session
        repaired = second.http.post(second.scoped(sid, "/repair"))
        assert repaired.status_code == 200, repaired.text
        assert (home / "sessions" / sid / "meta.json").stat().st_size < MIB
        assert "ask error: -32602" in text and "too long" in text, text[:300]
    finally:
        second.stop()


def test_a_meta_json_an_earlier_version_wrote_past_its_cap_is_readable_and_repairable(tmp_path: Path,
                                                                                      workspace: Path) -> None:
    # What the probe left behind: a record with a 5 MiB question in it, which every read and `repair` refused.
    home = tmp_path / "home"
    first = start_daemon(home)
    try:
        sid = first.create(workspace)["id"]
        first.run_turn(sid, "hello")
    finally:
        first.stop(signal.SIGKILL)
    path = home / "sessions" / sid / "meta.json"
    meta = json.loads(path.read_text())
    meta["liveness"]["elicitation_requests"] = [{"request_id": "elicit-1", "message": "x" * 5 * MIB}]
    path.write_text(json.dumps(meta, indent=2))
    second = start_daemon(home)
    try:
        session = second.session(sid)
        assert session["state"] == "stopped", session  # boot repair read it, and stopped what no daemon runs
        assert sid in [s["id"] for s in second.http.get("/api/sessions", params={"state": "stopped"}).json()[
            "sessions"]]
        repaired = second.http.post(second.scoped(sid, "/repair"))
        assert repaired.status_code == 200, repaired.text
        assert path.stat().st_size < 64 * 1024, path.stat().st_size
        assert second.meta(sid)["id"] == sid
    finally:
        second.stop()
