"""Reactivation and resume against the real daemon (docs/reference/sessions.md §14-15): a stopped session comes back
under the same id, with the log replayed to an agent that cannot `session/load` and no replay to one that
can; a first prompt staged by a failed start runs once; a session whose workspace is gone is refused; and
`session resume` takes a holder lease that excludes others."""

from __future__ import annotations

import json
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SCRIPTED, Daemon, markers, of_type, start_daemon, wait_for

NO_TITLE = '[roles.auto_title]\nenabled = false\n'
START_TIMEOUT = 120.0
FLAKY_OK = "flaky-ok"


def flaky_provider(home: Path) -> str:
    """An agent whose session/new fails until the flag file exists: a failed start that a later
    reactivation can recover from, within one daemon."""
    flag, log = home / FLAKY_OK, home / "prompts.jsonl"
    script = (f'if [ -e "{flag}" ]; then exec "{sys.executable}" "{SCRIPTED}" --prompt-log "{log}"; '
              f'else exec "{sys.executable}" "{SCRIPTED}" --fail-new-session; fi')
    return (f'[providers.flaky]\ncommand = ["/bin/sh", "-c", {json.dumps(script)}]\n\n'
            '[agents.flaky]\nprovider = "flaky"\n')


def replay_aware_provider(home: Path) -> str:
    """The scripted agent without session/load that runs the command after a context replay, so the first
    prompt after recovery can be a long turn."""
    command = [sys.executable, str(SCRIPTED), "--prompt-log", str(home / "prompts.jsonl"), "--dispatch-after-replay"]
    return (f'[providers.replayaware]\ncommand = {json.dumps(command)}\n\n'
            '[agents.replayaware]\nprovider = "replayaware"\n')


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("home")
    d = start_daemon(home, extra_config=NO_TITLE + flaky_provider(home) + replay_aware_provider(home),
                     timeout=START_TIMEOUT)
    yield d
    d.stop()


def prompts_received(d: Daemon, acp_session_id: str) -> list[str]:
    """What the scripted agent was sent for one ACP session (its `--prompt-log`)."""
    path = d.home / "prompts.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r["text"] for r in rows if r["session_id"] == acp_session_id]


def stop(d: Daemon, sid: str) -> None:
    assert d.http.post(d.scoped(sid, "/stop")).status_code == 204
    assert d.session(sid)["state"] == "stopped"


class StateWatch:
    """Records every state a session shows while a request runs (polling the detail read)."""

    def __init__(self, d: Daemon, sid: str) -> None:
        self.d, self.url, self.sid = d, f"/api/sessions/{sid}", sid
        self.states: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.d.client(timeout=30.0) as client:
            while True:
                last = self._done.is_set()  # one more read after the request returned
                state = client.get(self.url).json()["session"]["state"]
                if not self.states or self.states[-1] != state:
                    self.states.append(state)
                if last:
                    return
                self._done.wait(0.02)  # until the request returns, a read every 20 ms records each state shown

    def __enter__(self) -> StateWatch:
        self._thread.start()
        wait_for(lambda: self.states, what="the first state read")
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(30)


def error_code(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = dict(response.json())
    assert set(body) >= {"error", "code", "diagnostic"}, body
    return body


def cli_error_code(result: Any) -> str:
    assert result.returncode == 65, (result.stdout, result.stderr)
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    return str(json.loads(line)["code"])


# ---- reactivation ---------------------------------------------------------------------------------

def test_a_prompt_to_a_stopped_session_reactivates_it_and_replays_the_log_without_session_load(
        daemon: Daemon, workspace: Path) -> None:
    created = daemon.create(workspace, agent="scripted")
    sid = created["id"]
    assert created["acp_caps"]["supports_load_session"] is False
    daemon.run_turn(sid, "remember the word pineapple")
    stop(daemon, sid)
    before = daemon.session(sid)["acp_session_id"]

    with StateWatch(daemon, sid) as watch:
        response = daemon.prompt(sid, "what was the word?")
        assert response.status_code == 200, response.text
    assert watch.states[:3] == ["stopped", "starting", "active"]
    turn_id = response.json()["prompt"]["turn_id"]
    turn = daemon.turn_events(sid, turn_id)
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"
    session = daemon.session(sid)
    assert session["id"] == sid and session["state"] == "active"
    assert session["stop_reason"] is None and session["failure"] is None
    after = session["acp_session_id"]
    assert after and after != before  # a fresh ACP session under the same Compozy id

    events = daemon.all_events(sid)
    [recovered] = markers(events, "session_recovered")
    assert recovered["content"]["text"] == "Context rebuilt from log"
    proof = recovered["content"]["raw"]["evidence"]
    assert proof["fallback_reason"] == "load_session_unsupported" and proof["source"] == "events.db"
    assert proof["message_count"] >= 2
    [user] = of_type(turn, "user_message")
    assert user["content"]["text"] == "what was the word?"  # the store keeps what was typed
    assert recovered["sequence"] < user["sequence"]
    sent = prompts_received(daemon, after)
    assert len(sent) == 1
    assert "<compozy_context_replay>" in sent[0] and "remember the word pineapple" in sent[0]
    assert sent[0].endswith("what was the word?")

    # The projection rides on one prompt only.
    daemon.run_turn(sid, "and one more")
    assert prompts_received(daemon, after)[1:] == ["and one more"]
    assert len(markers(daemon.all_events(sid), "session_recovered")) == 1


def test_an_agent_that_loads_its_session_is_reactivated_without_a_replay(daemon: Daemon, workspace: Path) -> None:
    created = daemon.create(workspace, agent="scripted_load")
    sid = created["id"]
    assert created["acp_caps"]["supports_load_session"] is True
    daemon.run_turn(sid, "remember mango")
    stop(daemon, sid)
    before = daemon.session(sid)["acp_session_id"]

    with StateWatch(daemon, sid) as watch:
        response = daemon.prompt(sid, "still there?")
        assert response.status_code == 200, response.text
    assert watch.states[:3] == ["stopped", "starting", "active"]
    daemon.turn_events(sid, response.json()["prompt"]["turn_id"])
    assert daemon.session(sid)["acp_session_id"] == before  # session/load kept the ACP session
    assert markers(daemon.all_events(sid), "session_recovered") == []
    assert prompts_received(daemon, before) == ["remember mango", "still there?"]


def test_a_steer_after_interrupting_the_first_turn_after_recovery_composes_only_what_was_typed(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="replayaware")["id"]
    daemon.run_turn(sid, "remember kiwi")
    stop(daemon, sid)
    response = daemon.prompt(sid, "slow 40 0.1")  # reactivates; this turn carries the projection
    assert response.status_code == 200, response.text
    running = response.json()["prompt"]["turn_id"]
    wait_for(lambda: [e for e in daemon.all_events(sid, turn_id=running) if e["type"] == "agent_message"],
             what="the recovered turn to run")
    assert daemon.http.post(daemon.scoped(sid, "/interrupt"), json={}).status_code == 200

    steer = daemon.http.post(daemon.scoped(sid, "/steer"), json={"text": "fix it"})
    assert steer.status_code == 200, steer.text
    composed_turn = steer.json()["prompt"]["turn_id"]
    [user] = [e for e in daemon.all_events(sid, turn_id=composed_turn) if e["type"] == "user_message"]
    assert user["content"]["text"] == "slow 40 0.1\n\nUser correction/guidance after interrupt: fix it"


def test_a_saved_acp_session_the_agent_no_longer_knows_falls_back_to_the_replay(daemon: Daemon,
                                                                                workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted_load")["id"]
    daemon.run_turn(sid, "remember plum")
    stop(daemon, sid)
    before = daemon.session(sid)["acp_session_id"]
    (daemon.home / "agent-state" / before).unlink()  # the agent forgets the session across its restart

    response = daemon.prompt(sid, "which fruit?")
    assert response.status_code == 200, response.text
    daemon.turn_events(sid, response.json()["prompt"]["turn_id"])
    after = daemon.session(sid)["acp_session_id"]
    assert after != before
    [recovered] = markers(daemon.all_events(sid), "session_recovered")
    assert recovered["content"]["raw"]["evidence"]["fallback_reason"] == "load_session_resource_missing"
    [sent] = prompts_received(daemon, after)
    assert "<compozy_context_replay>" in sent and "remember plum" in sent and sent.endswith("which fruit?")


def test_a_first_prompt_staged_by_a_failed_start_runs_once_after_reactivation(daemon: Daemon,
                                                                             workspace: Path) -> None:
    flag = daemon.home / FLAKY_OK
    flag.unlink(missing_ok=True)
    failed = daemon.create(workspace, agent="flaky", prompt="staged first prompt")
    sid = failed["id"]
    assert failed["state"] == "stopped" and failed["failure"]["kind"] == "startup_failure"
    staged = daemon.http.get(daemon.scoped(sid, "/prompt/queue")).json()["queue"]
    assert [(e["text"], e["mode"], e["status"]) for e in staged] == [("staged first prompt", "startup", "queued")]
    assert of_type(daemon.all_events(sid), "user_message") == []

    flag.touch()
    try:
        response = daemon.http.post(daemon.scoped(sid, "/reactivate"))
        assert response.status_code == 200, response.text
        assert response.json()["session"]["state"] == "active"
        wait_for(lambda: of_type(daemon.all_events(sid), "done"), what="the staged prompt's turn")
        assert daemon.http.get(daemon.scoped(sid, "/prompt/queue")).json()["queue"] == []
        # It never started: nothing to recover, so the prompt goes as it was typed (issue 50, row 7).
        events = daemon.all_events(sid)
        assert markers(events, "session_recovered") == []
        assert "context_replay" not in of_type(events, "user_message")[0]["content"]
        assert prompts_received(daemon, daemon.session(sid)["acp_session_id"]) == ["staged first prompt"]

        # Another stop and reactivation must not run it again: the next prompt is the only new turn.
        stop(daemon, sid)
        response = daemon.prompt(sid, "ping")
        assert response.status_code == 200, response.text
        daemon.turn_events(sid, response.json()["prompt"]["turn_id"])
        users = of_type(daemon.all_events(sid), "user_message")
        assert [u["content"]["text"] for u in users] == ["staged first prompt", "ping"]
    finally:
        flag.unlink(missing_ok=True)


def test_resume_of_a_session_that_never_started_sends_its_first_prompt_as_it_is(daemon: Daemon,
                                                                               workspace: Path) -> None:
    """The audit's command: `session resume` of a session whose start failed, with a staged first prompt."""
    flag = daemon.home / FLAKY_OK
    flag.unlink(missing_ok=True)
    failed = daemon.create(workspace, agent="flaky", prompt="echo first words")
    sid = failed["id"]
    assert failed["state"] == "stopped" and failed["failure"]["kind"] == "startup_failure"
    flag.touch()
    try:
        resumed = daemon.cli_json("session", "resume", sid, "--holder", "audit")
        assert resumed["session"]["state"] == "active"
        [done] = wait_for(lambda: of_type(daemon.all_events(sid), "done"), what="the staged prompt's turn")
        events = daemon.all_events(sid)
        assert markers(events, "session_recovered") == []
        [user] = of_type(events, "user_message")
        assert user["content"]["text"] == "echo first words" and "context_replay" not in user["content"]
        [sent] = prompts_received(daemon, daemon.session(sid)["acp_session_id"])
        assert sent == "echo first words"  # no "This conversation was restored…", no startup error as context
        reply = "".join(e["content"]["text"] for e in of_type(events, "agent_message")
                        if e["turn_id"] == done["turn_id"])
        assert reply == "echo: echo first words"
    finally:
        flag.unlink(missing_ok=True)


def test_a_reactivation_whose_agent_fails_to_start_answers_409_and_the_session_stays_stopped(
        daemon: Daemon, workspace: Path) -> None:
    flag = daemon.home / FLAKY_OK
    flag.touch()
    try:
        sid = daemon.create(workspace, agent="flaky")["id"]
        daemon.run_turn(sid, "hello")
        stop(daemon, sid)
        flag.unlink()
        body = error_code(daemon.prompt(sid, "lost in the restart"), 409)
        assert body["code"] == "session_reactivation_failed"
        assert "recap" in body["error"] and "repair" in body["error"]
        failed = daemon.session(sid)
        assert failed["state"] == "stopped" and failed["failure"]["kind"] == "startup_failure"
        assert daemon.http.get(daemon.scoped(sid, "/prompt/queue")).json()["queue"] == []

        flag.touch()
        response = daemon.prompt(sid, "second try")
        assert response.status_code == 200, response.text
        daemon.turn_events(sid, response.json()["prompt"]["turn_id"])
        users = of_type(daemon.all_events(sid), "user_message")
        assert [u["content"]["text"] for u in users] == ["hello", "second try"]
        recovered = daemon.session(sid)
        assert recovered["state"] == "active" and recovered["failure"] is None
    finally:
        flag.unlink(missing_ok=True)


def test_a_session_whose_workspace_root_is_gone_refuses_reactivation(daemon: Daemon, tmp_path: Path) -> None:
    doomed = tmp_path / "doomed"
    doomed.mkdir()
    sid = daemon.create(doomed, agent="scripted")["id"]
    stop(daemon, sid)
    shutil.rmtree(doomed)

    for response in (daemon.http.post(daemon.scoped(sid, "/reactivate")), daemon.prompt(sid, "hello?")):
        body = error_code(response, 409)
        assert body["code"] == "workspace_root_missing"
        # Commands to run as they are: the id filled in, not a literal `ID`.
        for hint in (f"compozy session recap {sid}", "history", f"compozy session repair {sid} --dry-run"):
            assert hint in body["error"]
    assert cli_error_code(daemon.cli("session", "resume", sid, "-o", "json")) == "workspace_root_missing"
    attach = daemon.http.post(daemon.scoped(sid, "/attach"), json={"attached_to": "http:me", "ttl_seconds": 60})
    assert error_code(attach, 409)["code"] == "session_not_attachable"  # attach never reactivates
    session = daemon.session(sid)
    assert session["state"] == "stopped" and session["stop_reason"] == "user_canceled"


# ---- resume (attach) ------------------------------------------------------------------------------

def resumable_ids(d: Daemon, workspace: Path) -> list[str]:
    listing = d.cli_json("session", "list", "--resumable", "--workspace", str(workspace))
    return [s["id"] for s in listing["sessions"]]


def test_resume_takes_the_lease_and_a_second_holder_is_refused(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    other = daemon.create(workspace, agent="scripted")["id"]
    assert set(resumable_ids(daemon, workspace)) == {sid, other}

    # A named holder: a bare `session resume -o json` holds the lease as its own process, gone once it printed it
    # (tests/integration/test_resume_holder.py).
    result = daemon.cli_json("session", "resume", sid, "--holder", "script-1")
    holder = result["attach"]["attached_to"]
    assert holder == "script-1"
    assert result["attach"]["session_id"] == sid and result["attach"]["attach_expires_at"]
    assert cli_error_code(daemon.cli("session", "resume", sid, "-o", "json")) == "session_attach_locked"
    taken = daemon.http.post(daemon.scoped(sid, "/attach"), json={"attached_to": "http:someone", "ttl_seconds": 60})
    assert error_code(taken, 409)["code"] == "session_attach_locked"
    assert resumable_ids(daemon, workspace) == [other]
    too_long = daemon.http.post(daemon.scoped(other, "/attach"), json={"attached_to": "http:me", "ttl_seconds": 86401})
    assert error_code(too_long, 400)["code"] == "invalid_ttl"

    released = daemon.http.delete(daemon.scoped(sid, "/attach"), params={"attached_to": holder})
    assert released.status_code == 200, released.text
    assert set(resumable_ids(daemon, workspace)) == {sid, other}


def test_resume_latest_picks_the_most_recently_active_resumable_session(daemon: Daemon, workspace: Path) -> None:
    older = daemon.create(workspace, agent="scripted")["id"]
    newer = daemon.create(workspace, agent="scripted")["id"]
    daemon.run_turn(older, "first")
    daemon.run_turn(newer, "second")

    # A named holder keeps its lease after the command exits (the default holder is the CLI process itself).
    picked = daemon.cli_json("session", "resume", "--latest", "--workspace", str(workspace), "--holder", "script-a")
    assert picked["attach"]["session_id"] == newer
    # The newer one is leased now, so it is no longer resumable; --latest moves on to the other.
    picked = daemon.cli_json("session", "resume", "--latest", "--workspace", str(workspace), "--holder", "script-a")
    assert picked["attach"]["session_id"] == older
    nothing = daemon.cli("session", "resume", "--latest", "--workspace", str(workspace), "-o", "json")
    assert nothing.returncode != 0 and json.loads(nothing.stderr)["code"] == "no_resumable_session"


def test_resume_on_a_stopped_session_reactivates_it_first(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    daemon.run_turn(sid, "before the stop")
    stop(daemon, sid)
    assert resumable_ids(daemon, workspace) == [sid]  # what resume takes: it reactivates it

    result = daemon.cli_json("session", "resume", sid, "--holder", "script-b")
    assert result["attach"]["session_id"] == sid and result["attach"]["attached_to"] == "script-b"
    session = daemon.session(sid)
    assert session["state"] == "active" and session["id"] == sid
    assert resumable_ids(daemon, workspace) == []  # active, but leased
    turn = daemon.run_turn(sid, "after the resume")
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"


def test_the_resumable_list_is_what_session_resume_takes(daemon: Daemon, tmp_path: Path) -> None:
    """Issue 50, row 8: `session list --resumable` omitted the stopped sessions `session resume` reactivates."""
    kept, doomed_root = tmp_path / "kept", tmp_path / "doomed"
    kept.mkdir()
    doomed_root.mkdir()
    live = daemon.create(kept, agent="scripted")["id"]
    stopped = daemon.create(kept, agent="scripted")["id"]
    stop(daemon, stopped)
    leased = daemon.create(kept, agent="scripted")["id"]
    daemon.cli_json("session", "resume", leased, "--holder", "someone-else")
    doomed = daemon.create(doomed_root, agent="scripted")["id"]
    stop(daemon, doomed)
    shutil.rmtree(doomed_root)

    listing = daemon.cli_json("session", "list", "--resumable", "--limit", "100")["sessions"]
    mine = {s["id"]: s["state"] for s in listing if s["id"] in {live, stopped, leased, doomed}}
    assert mine == {live: "active", stopped: "stopped"}
    for sid in mine:  # each one listed, resume takes
        assert daemon.cli_json("session", "resume", sid, "--holder", "me")["attach"]["session_id"] == sid
    # Each one left out, resume refuses, saying why.
    assert cli_error_code(daemon.cli("session", "resume", leased, "-o", "json")) == "session_attach_locked"
    assert cli_error_code(daemon.cli("session", "resume", doomed, "-o", "json")) == "workspace_root_missing"


def test_prompts_racing_to_a_stopped_session_all_land_on_one_reactivation(daemon: Daemon, workspace: Path) -> None:
    # The losers of the race found the winner's runtime launched but still reading `stopped`: 400
    # session_not_active in about one round of two, though a prompt to a stopped session continues it.
    sid = daemon.create(workspace, agent="scripted")["id"]

    def user_messages() -> int:
        return len(of_type(daemon.all_events(sid), "user_message"))

    for round_ in range(4):
        stop(daemon, sid)
        answers: list[Any] = [None] * 3

        def send(index: int, round_: int = round_, answers: list[Any] = answers) -> None:
            answers[index] = daemon.prompt(sid, f"round {round_} prompt {index}")

        threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert all(a is not None and a.status_code in (200, 202) for a in answers), [a and a.text for a in answers]
        wait_for(lambda round_=round_: user_messages() == 3 * (round_ + 1), timeout=60,
                 what=f"the three prompts of round {round_} to run")
        daemon.wait_state(sid, {"active"})


def test_a_stop_ends_the_lease_and_a_named_holder_detaches_from_the_cli(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    first = daemon.cli_json("session", "resume", sid)  # a script's lease, held after the CLI process exits
    assert first["attach"]["attached_to"].startswith("cli:")
    stop(daemon, sid)
    # The runtime that lease was on is gone: the next resume reactivates and attaches, never "locked".
    again = daemon.cli_json("session", "resume", sid, "--holder", "ci-job-42")
    assert again["attach"]["attached_to"] == "ci-job-42"
    assert daemon.session(sid)["state"] == "active"
    assert resumable_ids(daemon, workspace) == []

    assert daemon.cli_json("session", "detach", sid, "--holder", "ci-job-42")["session"]["id"] == sid
    assert resumable_ids(daemon, workspace) == [sid]
