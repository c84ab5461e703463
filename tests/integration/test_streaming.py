"""SSE live tails against the real daemon (docs/reference/events.md §6): gap-free raw resume, transcript snapshots
and fenced deltas, terminal frames, the catalog stream, `session events --follow`, and the recap."""

from __future__ import annotations

import itertools
import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessions.live.transcript import TRANSCRIPT_GENERATION as GEN
from tests.conftest import ROOT, Daemon, chunk_count, of_type, start_daemon, wait_for
from tests.sse import Frame, RawStream, frames, open_stream, watch_raw


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stream-ws")
    (path / "README.md").write_text("streaming tests\n")
    return path


# ---- raw mode: a viewer cut off mid-turn resumes with no gap and no duplicate ----------------

def cut_and_resume(daemon: Daemon, path: str, start: int, cut_after: int, resume: str,
                   out: dict[str, Any]) -> None:
    """Read raw frames after `start`, hang up after `cut_after` agent chunks, reconnect, read to `done`."""
    received: list[Frame] = []
    with daemon.client() as client:
        with open_stream(client, path, {"frames": "raw"}, last_event_id=start) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for frame in frames(response):
                received.append(frame)
                if chunk_count(f.data["content"]["text"] for f in received if f.event == "agent_message") >= cut_after:
                    break
        out["cut_at"] = int(received[-1].id or 0)
        out["done_before_cut"] = any(f.event == "done" for f in received)
        params: dict[str, Any] = {"frames": "raw"}
        header = None
        if resume == "header":
            header = out["cut_at"]
        else:
            params["after_sequence"] = out["cut_at"]
        with open_stream(client, path, params, last_event_id=header) as response:
            assert response.status_code == 200
            for frame in frames(response):
                received.append(frame)
                if frame.event == "done":
                    break
    out["frames"] = received


def run_cut_turn(daemon: Daemon, sid: str, count: int, cut_after: int, resume: str) -> None:
    """Stream a `count`-chunk turn to a viewer that hangs up mid-turn and resumes; compare with the store."""
    path = daemon.scoped(sid, "/stream")
    before = daemon.events(sid, limit=1)
    start = before[-1]["sequence"] if before else 0
    assert daemon.prompt(sid, f"stream {count}").status_code == 200
    result: dict[str, Any] = {}
    cut_and_resume(daemon, path, start, cut_after, resume, result)

    stored = daemon.all_events(sid, after=start)
    done = next(e for e in stored if e["type"] == "done")
    expected = [e for e in stored if e["sequence"] <= done["sequence"]]
    assert chunk_count(e["content"]["text"] for e in expected if e["type"] == "agent_message") == count
    got = result["frames"]
    assert not result["done_before_cut"], "the viewer must be cut before the turn ended"
    assert start < result["cut_at"] < done["sequence"]
    assert [int(f.id or 0) for f in got] == [e["sequence"] for e in expected]  # in order, no gap, no duplicate
    assert [f.event for f in got] == [e["type"] for e in expected]
    assert [f.data["id"] for f in got] == [e["id"] for e in expected]
    assert all(f.data["session_id"] == sid and f.data["sequence"] == int(f.id or 0) for f in got)
    assert [f.data["content"] for f in got] == [e["content"] for e in expected]
    chunks = [f.data["content"]["text"] for f in got if f.event == "agent_message"]
    assert "".join(chunks) == "".join(f"c{i} " for i in range(count))


@pytest.fixture(scope="module")
def streamer(daemon: Daemon, ws: Path) -> Iterator[str]:
    sid = daemon.create(ws)["id"]
    yield sid
    daemon.http.post(daemon.scoped(sid, "/stop"))


def test_a_viewer_cut_off_mid_turn_resumes_by_last_event_id_with_exactly_the_missing_frames(
        daemon: Daemon, streamer: str) -> None:
    run_cut_turn(daemon, streamer, 50000, 5000, "header")


def test_a_viewer_cut_off_mid_turn_resumes_by_after_sequence_with_exactly_the_missing_frames(
        daemon: Daemon, streamer: str) -> None:
    run_cut_turn(daemon, streamer, 5000, 1000, "query")


def test_a_bad_resume_cursor_or_frames_value_is_a_400_with_a_stable_code(daemon: Daemon, streamer: str) -> None:
    path = daemon.scoped(streamer, "/stream")
    cases = [({"frames": "raw"}, "nope", "invalid_cursor"), ({"frames": "raw", "after_sequence": "-1"}, None,
                                                              "invalid_cursor"),
             ({"frames": "xml"}, None, "invalid_frames"), ({"before_sequence": "3"}, None, "invalid_parameter"),
             ({"type": "agent_message"}, None, "invalid_parameter"), ({"since": "5m"}, None, "invalid_parameter"),
             ({"limit": "1001"}, None, "invalid_limit"), ({"limit": "abc"}, None, "invalid_limit"),
             ({"format": "xml"}, None, "invalid_format"), ({"replay": "1"}, None, "invalid_parameter"),
             ({"frames": "raw", "after": "x"}, None, "invalid_cursor"), ({"epoch": "-2"}, None, "invalid_cursor"),
             ({"frames": "raw", "type": "nope"}, None, "invalid_type"),
             ({"frames": "raw", "since": "yesterday"}, None, "invalid_since"),
             ({"frames": "raw", "format": "transcript"}, None, "invalid_parameter")]
    for params, header, code in cases:
        headers = {"Last-Event-ID": header} if header else {}
        response = daemon.http.get(path, params=params, headers=headers)
        assert response.status_code == 400, (params, response.text)
        assert response.json()["code"] == code
    # A stream is only read: another method must not open one and look accepted.
    for method in ("POST", "DELETE"):
        for route in (path, "/api/sessions/catalog-stream"):
            response = daemon.http.request(method, route)
            assert response.status_code == 405, (method, route, response.text)
            assert response.json()["code"] == "method_not_allowed" and response.headers["allow"] == "GET"


def test_viewers_sharing_one_session_feed_each_get_every_frame_once_in_order(daemon: Daemon, ws: Path) -> None:
    """One session, five concurrent raw viewers served by the session's shared live feed: three live ones, one
    filtered to agent_message, and one that joins mid-turn from sequence 0, far behind the feed's ring, so it
    catches up from the store before it reads from the ring."""
    count = 3000
    sid = daemon.create(ws)["id"]
    path = daemon.scoped(sid, "/stream")
    before = daemon.events(sid, limit=1)
    start = before[-1]["sequence"] if before else 0

    def to_done(got: list[Frame]) -> bool:
        return got[-1].event == "done"

    def chunks(got: list[Frame]) -> bool:
        return chunk_count(f.data["content"]["text"] for f in got if f.event == "agent_message") >= count

    outs: list[list[Frame]] = [[] for _ in range(5)]
    ready = [threading.Event() for _ in range(5)]
    specs: list[tuple[dict[str, Any], int | None, Any]] = [
        ({"frames": "raw"}, start, to_done), ({"frames": "raw"}, start, to_done), ({"frames": "raw"}, start, to_done),
        ({"frames": "raw", "type": "agent_message"}, start, chunks),
        ({"frames": "raw", "after_sequence": 0}, None, to_done),
    ]
    threads = [threading.Thread(target=watch_raw, args=(daemon, path, params, header, until, ready[i],
                                                        outs[i]), daemon=True)
               for i, (params, header, until) in enumerate(specs)]
    for thread in threads[:4]:
        thread.start()
    assert all(r.wait(30) for r in ready[:4])
    assert daemon.prompt(sid, f"stream {count}").status_code == 200
    wait_for(lambda: chunk_count(f.data["content"]["text"] for f in outs[0] if f.event == "agent_message")
             >= count // 2, what="half the turn")
    threads[4].start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive(), "a viewer never reached the end of the turn"

    stored = daemon.all_events(sid)
    done = next(e for e in stored if e["type"] == "done" and e["sequence"] > start)
    expected = [e for e in stored if start < e["sequence"] <= done["sequence"]]
    for got in outs[:3]:
        assert [int(f.id or 0) for f in got] == [e["sequence"] for e in expected]  # in order, no gap, no duplicate
        assert [f.data for f in got] == [{"session_id": sid, "workspace_id": got[0].data["workspace_id"], **e}
                                         for e in expected]
    assert outs[0] == outs[1] == outs[2]
    agent = [e["sequence"] for e in expected if e["type"] == "agent_message"]
    assert chunk_count(e["content"]["text"] for e in expected if e["type"] == "agent_message") == count
    assert [int(f.id or 0) for f in outs[3]] == agent
    assert {f.event for f in outs[3]} == {"agent_message"}
    late = outs[4]
    assert [int(f.id or 0) for f in late] == [e["sequence"] for e in stored if e["sequence"] <= done["sequence"]]
    assert late[-len(outs[0]):] == outs[0], "the late joiner ends with exactly the live viewers' frames"


def test_doctor_counts_the_live_viewers_of_each_session(daemon: Daemon, ws: Path) -> None:
    sid = daemon.create(ws)["id"]
    path = daemon.scoped(sid, "/stream")

    def live_streams() -> dict[str, Any]:
        report = daemon.cli_json("doctor", "--only", "live_streams")
        return next(i for i in report["items"] if i["id"] == "live_streams")

    with (daemon.client() as one, daemon.client() as two,
          open_stream(one, path, {"frames": "raw"}) as first, open_stream(two, path) as second):
        assert first.status_code == second.status_code == 200
        streams = wait_for(lambda: (s := live_streams())["evidence"]["sessions"].get(sid) == 2 and s,
                           what="both viewers counted")
        assert streams["severity"] == "ok" and "viewer(s)" in streams["message"]
    wait_for(lambda: sid not in live_streams()["evidence"]["sessions"], what="the viewers gone")

    # A stream that ended (terminal frame) stops counting at once, even while its connection stays open.
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    with daemon.client() as client, open_stream(client, path, {"frames": "raw"}) as response:
        assert [f.event for f in frames(response)][-1] == "session_stopped"
        assert sid not in live_streams()["evidence"]["sessions"]


# ---- transcript mode ----------------------------------------------------------------------------

def upsert(cache: dict[str, dict[str, Any]], entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        cache[entry["message"]["id"]] = entry


def ordered(cache: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(cache.values(), key=lambda e: e["start_sequence"])


def assistant_text(entry: dict[str, Any]) -> str:
    return "".join(p["text"] for p in entry["message"]["parts"] if p["type"] == "text")


def turn_closed(cache: dict[str, dict[str, Any]], turn_id: str) -> bool:
    return any(e["message"]["role"] == "assistant" and e["message"]["metadata"].get("turn_id") == turn_id
               and "stop_reason" in e["message"]["metadata"] for e in cache.values())


def test_transcript_snapshot_and_fenced_deltas_rebuild_the_stored_transcript(daemon: Daemon, ws: Path) -> None:
    sid = daemon.create(ws)["id"]
    path = daemon.scoped(sid, "/stream")
    daemon.run_turn(sid, "think about it")

    with open_stream(daemon.http, path) as response:  # no frames parameter: transcript is the default
        first = next(frames(response))
    assert first.event == "transcript_snapshot"
    snap = first.data
    assert snap["reset"] is False and "reason" not in snap
    assert (snap["session_id"], snap["epoch"], snap["generation"]) == (sid, 1, GEN)
    assert int(first.id or 0) == snap["max_sequence"] == daemon.events(sid)[-1]["sequence"]
    roles = [e["message"]["role"] for e in snap["entries"]]
    assert roles[-2:] == ["user", "assistant"]
    assert [p["type"] for p in snap["entries"][-1]["message"]["parts"]] == ["reasoning", "text"]

    cache: dict[str, dict[str, Any]] = {}
    upsert(cache, snap["entries"])
    cursor = int(first.id or 0)
    fences = {"epoch": snap["epoch"], "generation": snap["generation"]}
    # A steady answer (600 chunks over about 3 s), so the first viewer can hang up in the middle of it: a burst of
    # 10k chunks could end before that viewer's first delta on a loaded machine.
    turn = daemon.prompt(sid, "slow 600 0.005").json()["prompt"]["turn_id"]
    # Fenced resume → deltas only; hang up while the answer is still streaming, resume again.
    for attempt in range(2):
        with open_stream(daemon.http, path, fences, last_event_id=cursor) as response:
            for frame in frames(response):
                assert frame.event == "transcript_delta", frame.event
                delta = frame.data
                assert (delta["epoch"], delta["generation"], delta["session_id"]) == (1, GEN, sid)
                assert int(frame.id or 0) == delta["cursor"] > cursor
                assert delta["max_sequence"] >= delta["cursor"]
                cursor = delta["cursor"]
                upsert(cache, delta["entries"])
                if attempt == 0 and any(len(assistant_text(e)) > 1000 for e in delta["entries"]
                                        if e["message"]["metadata"].get("turn_id") == turn):
                    break
                if turn_closed(cache, turn):
                    break
        if attempt == 0:
            assert not turn_closed(cache, turn), "the first viewer must hang up mid-answer"

    page = daemon.http.get(daemon.scoped(sid, "/transcript"), params={"limit": 1000})
    assert page.status_code == 200
    body = page.json()
    assert (body["epoch"], body["generation"], body["limit"], body["has_older"]) == (1, GEN, 1000, False)
    assert body["next_before_sequence"] is None
    assert ordered(cache) == body["entries"]
    final = [e for e in body["entries"] if e["message"]["metadata"].get("turn_id") == turn]
    others = [(e["sequence"], e["type"]) for e in daemon.all_events(sid) if e["type"] != "agent_message"]
    assert assistant_text(final[-1]) == "".join(f"c{i} " for i in range(600)), others
    assert final[-1]["message"]["metadata"]["stop_reason"] == "end_turn"

    # Backward pages walk the same entries.
    older = daemon.http.get(daemon.scoped(sid, "/transcript"), params={"limit": 2}).json()
    assert older["entries"] == body["entries"][-2:] and older["has_older"] is True
    rest = daemon.http.get(daemon.scoped(sid, "/transcript"),
                           params={"limit": 1000, "before_sequence": older["next_before_sequence"]}).json()
    assert rest["entries"] + older["entries"] == body["entries"]

    # Fence failures answer with a reset snapshot carrying the reason.
    resets = [({"epoch": 99, "generation": GEN}, cursor, "epoch_mismatch"),
              ({"epoch": 1, "generation": 99}, cursor, "generation_mismatch"),
              ({}, cursor, "fence_missing"),
              ({"epoch": 1, "generation": GEN}, cursor + 10_000, "sequence_reset")]
    for params, last_id, reason in resets:
        with open_stream(daemon.http, path, params, last_event_id=last_id) as response:
            frame = next(frames(response))
        assert frame.event == "transcript_snapshot"
        assert frame.data["reset"] is True and frame.data["reason"] == reason
        assert frame.data["entries"][-1] == body["entries"][-1]
        assert int(frame.id or 0) == frame.data["max_sequence"]
    daemon.http.post(daemon.scoped(sid, "/stop"))


def test_transcript_reads_are_scoped_to_the_workspace_and_validate_their_parameters(daemon: Daemon, streamer: str,
                                                                                     tmp_path: Path) -> None:
    sid = streamer
    registered = daemon.http.post("/api/workspaces", json={"root_dir": str(tmp_path)})
    assert registered.status_code == 201, registered.text
    other = registered.json()["workspace"]["id"]
    for suffix in ("/transcript", "/recap"):
        wrong = daemon.http.get(f"/api/workspaces/{other}/sessions/{sid}{suffix}")
        assert wrong.status_code == 404 and wrong.json()["code"] == "session_not_found"
    for suffix, params, code in [("/transcript", {"limit": 0}, "invalid_limit"),
                                 ("/transcript", {"limit": 1001}, "invalid_limit"),
                                 ("/transcript", {"before_sequence": "x"}, "invalid_cursor"),
                                 ("/recap", {"limit": 101}, "invalid_limit")]:
        response = daemon.http.get(daemon.scoped(sid, suffix), params=params)
        assert response.status_code == 400 and response.json()["code"] == code


# ---- terminal frames ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def crashed(daemon: Daemon, ws: Path) -> dict[str, Any]:
    session = daemon.create(ws)
    daemon.run_turn(session["id"], "hello there")
    assert daemon.prompt(session["id"], "crash").status_code == 200
    return daemon.wait_state(session["id"], {"stopped"})


def test_the_terminal_session_stopped_frame_carries_the_failure_in_both_modes(daemon: Daemon,
                                                                            crashed: dict[str, Any]) -> None:
    sid = crashed["id"]
    failure = crashed["failure"]
    assert crashed["stop_reason"] == "agent_crashed" and failure["kind"] == "process_exit"
    path = daemon.scoped(sid, "/stream")
    last = daemon.all_events(sid)[-1]
    assert last["type"] == "session_stopped"

    with open_stream(daemon.http, path, {"frames": "raw"}, last_event_id=0) as response:
        raw = list(frames(response))  # the stream closes itself after the terminal frame
    assert raw[-1].event == "session_stopped" and int(raw[-1].id or 0) == last["sequence"]
    assert raw[-1].data["failure"] == failure
    assert (raw[-1].data["stop_reason"], raw[-1].data["stop_detail"]) == ("agent_crashed", crashed["stop_detail"])

    with open_stream(daemon.http, path) as response:
        transcript = list(frames(response))
    assert [f.event for f in transcript] == ["transcript_snapshot", "session_stopped"]
    stop = transcript[-1]
    assert stop.id is None
    assert stop.data["failure"] == failure and stop.data["stop_reason"] == "agent_crashed"
    assert stop.data["stop_detail"] == crashed["stop_detail"] and stop.data["session_id"] == sid
    system = [e for e in transcript[0].data["entries"] if e["message"]["role"] == "system"]
    assert any(p["data"].get("failure") == failure for e in system for p in e["message"]["parts"])

    # Caught up on a stopped session: a synthetic terminal frame, from meta.json.
    for params in ({"frames": "raw"}, {"epoch": 1, "generation": GEN}):
        with open_stream(daemon.http, path, params, last_event_id=last["sequence"]) as response:
            tail = list(frames(response))
        assert [f.event for f in tail] == ["session_stopped"]
        assert tail[0].data["failure"] == failure and tail[0].data["stop_detail"] == crashed["stop_detail"]


# ---- catalog stream -------------------------------------------------------------------------

def test_the_catalog_stream_announces_a_created_session(daemon: Daemon, tmp_path: Path) -> None:
    with daemon.client() as client, open_stream(client, "/api/sessions/catalog-stream") as resp:
        lines = resp.iter_lines()
        assert next(lines) == ": connected"
        created = daemon.create(tmp_path, wait=False)
        seen = []
        for line in lines:
            if line.startswith("data:"):
                seen.append(json.loads(line[5:]))
                if seen[-1]["session_id"] == created["id"]:
                    break
    assert seen[-1] == {"kind": "upserted", "workspace_id": created["workspace_id"], "session_id": created["id"]}


def test_the_catalog_stream_announces_a_turn_while_it_runs(daemon: Daemon, tmp_path: Path) -> None:
    # Only saved metadata rang it, and a turn start saves none: the dashboard showed `running` 27 s late.
    sid = daemon.create(tmp_path)["id"]
    with daemon.client() as client, open_stream(client, "/api/sessions/catalog-stream") as resp:
        lines = resp.iter_lines()
        assert next(lines) == ": connected"
        assert daemon.prompt(sid, "slow 30 0.2").status_code == 200  # six seconds
        for line in lines:
            if line.startswith("data:") and json.loads(line[5:])["session_id"] == sid:
                break
        assert not of_type(daemon.all_events(sid), "done"), "announced only when the turn ended"
        assert daemon.session(sid)["prompt_state"] != "idle"


# ---- CLI follow -----------------------------------------------------------------------------

def test_session_events_follow_prints_rows_until_the_session_stops(daemon: Daemon, ws: Path) -> None:
    sid = daemon.create(ws)["id"]
    assert daemon.prompt(sid, "slow 20 0.1").status_code == 200
    proc = subprocess.Popen([sys.executable, "-m", "compozy.cli", "session", "events", sid, "--follow",
                             "-o", "jsonl", "--after", "0"], env=daemon.env, cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        daemon.wait_event(sid, "done")
        assert proc.poll() is None, "follow must keep going while the session lives"
        assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    stored = daemon.all_events(sid)
    assert [r["sequence"] for r in rows] == [e["sequence"] for e in stored]
    assert rows[-1]["type"] == "session_stopped" and rows[-1]["stop_reason"] == "user_canceled"
    assert chunk_count(r["content"]["text"] for r in rows if r["type"] == "agent_message") == 20


def test_a_daemon_killed_mid_turn_fails_the_cli_prompt_and_follow_reconnects_to_the_restart(
        tmp_path: Path, ws: Path) -> None:
    home = tmp_path / "home"
    daemon = start_daemon(home)
    procs: list[subprocess.Popen[str]] = []

    def cli(*args: str) -> subprocess.Popen[str]:
        procs.append(subprocess.Popen([sys.executable, "-m", "compozy.cli", *args], env=daemon.env,
                                      cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        return procs[-1]

    try:
        sid = daemon.create(ws)["id"]
        follower = cli("session", "events", sid, "--follow", "-o", "jsonl", "--after", "0")
        lines: list[str] = []

        def read_follower() -> None:
            assert follower.stdout is not None
            for line in follower.stdout:
                lines.append(line)

        reader = threading.Thread(target=read_follower, daemon=True)
        reader.start()
        prompter = cli("session", "prompt", sid, "slow 400 0.05", "-o", "json")
        wait_for(lambda: daemon.events(sid, type="agent_message"), timeout=30, what="the turn to stream")
        # Connected before the kill (it printed a row): a follow started against a dead daemon fails at once, rightly.
        wait_for(lambda: lines, timeout=30, what="the follower to print its first row")
        daemon.stop(signal.SIGKILL)
        # A prompt cut off by the daemon's death is not a finished reply: non-zero, one line that says why.
        _, err = prompter.communicate(timeout=30)
        assert prompter.returncode == 69, err
        # (daemon_unavailable when it died before the CLI had opened the stream)
        assert json.loads(err.strip().splitlines()[-1])["code"] in ("stream_ended", "daemon_unavailable"), err
        assert follower.poll() is None, "follow must wait for the daemon to come back"

        daemon = start_daemon(home)  # boot repair stops the crashed session and closes its turn
        follower.wait(timeout=60)
        reader.join(10)
        assert follower.stderr is not None
        err = follower.stderr.read()
        assert follower.returncode == 0, err
        out = "".join(lines)
        stored = [e["sequence"] for e in daemon.all_events(sid)]
    finally:
        daemon.stop()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    rows = [json.loads(line) for line in out.splitlines()]
    # Every stored row once, in order, across the reconnect: the cursor carried over.
    assert [r["sequence"] for r in rows if "sequence" in r] == stored
    assert rows[-1]["type"] == "session_stopped" and rows[-1]["stop_reason"] == "agent_crashed", rows[-1]


# ---- recap ----------------------------------------------------------------------------------

def test_recap_is_byte_identical_on_the_same_store(daemon: Daemon, crashed: dict[str, Any]) -> None:
    sid = crashed["id"]
    first = daemon.cli("session", "recap", sid, "-o", "json")
    second = daemon.cli("session", "recap", sid, "-o", "json")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    recap = json.loads(first.stdout)
    api = [daemon.http.get(daemon.scoped(sid, "/recap")) for _ in range(2)]
    assert api[0].status_code == 200 and api[0].content == api[1].content
    assert api[0].json()["recap"] == recap

    stored = daemon.all_events(sid)
    assert recap["session"]["id"] == sid and recap["session"]["failure"] == crashed["failure"]
    assert recap["active_run"] is None
    snap = recap["snapshot"]
    assert snap["event_cursor"] == snap["transcript_cursor"] == stored[-1]["sequence"]
    assert snap["generated_at"] == max(stored[-1]["timestamp"], daemon.meta(sid)["updated_at"])
    assert snap["consistency"] == "persisted_reads"
    assert [m["role"] for m in recap["recent_messages"]][:2] == ["user", "assistant"]
    assert recap["recent_messages"][-1]["parts"][0]["data"]["event_type"] == "session_stopped"
    marker_rows = [e for e in stored if e["type"].startswith("transcript_marker.")]
    assert [m["sequence"] for m in recap["recent_markers"]] == [e["sequence"] for e in marker_rows][-5:]
    assert recap["pending_inputs"] == []

    short = daemon.cli_json("session", "recap", sid, "--limit", "2")
    assert short["recent_messages"] == recap["recent_messages"][-2:]
    human = daemon.cli("session", "recap", sid)
    assert human.returncode == 0 and sid in human.stdout and "process_exit" in human.stdout


def test_recap_of_a_busy_session_shows_the_active_run_and_the_queue(daemon: Daemon, ws: Path) -> None:
    sid = daemon.create(ws)["id"]
    turn = daemon.prompt(sid, "silent 30").json()["prompt"]["turn_id"]
    queued = daemon.prompt(sid, "echo me later", mode="queue")
    assert queued.status_code == 202, queued.text
    recap = wait_for(lambda: (r := daemon.cli_json("session", "recap", sid))["pending_inputs"] and r,
                     what="the queued input in the recap")
    assert recap["active_run"]["turn_id"] == turn and recap["active_run"]["prompt"] == "silent 30"
    entry = recap["pending_inputs"][0]
    assert entry["queue_entry_id"] == queued.json()["prompt"]["queue_entry_id"] and entry["text"] == "echo me later"
    assert recap["recent_markers"][-1]["kind"] == "transcript_marker.prompt_queued"
    daemon.http.post(daemon.scoped(sid, "/stop"))


def test_a_viewer_that_stops_reading_gets_every_frame_once_it_reads_again(daemon: Daemon, ws: Path) -> None:
    """Frames go straight to the socket while it takes them whole (compozy/api/http_server.write_through); a
    viewer with a 4 KiB receive window that reads nothing during a long turn makes those sends partial, and the
    rest must wait in Twisted's queue, in order, until it reads again."""
    count = 800_000
    sid = daemon.create(ws)["id"]
    before = daemon.events(sid, limit=1)
    start = before[-1]["sequence"] if before else 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window stays small
    sock.connect(("127.0.0.1", daemon.port))
    try:
        headers = "".join(f"{k}: {v}\r\n" for k, v in daemon.headers.items())
        sock.sendall((f"GET {daemon.scoped(sid, '/stream')}?frames=raw HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\n"
                      f"{headers}Accept: text/event-stream\r\nLast-Event-ID: {start}\r\n\r\n").encode())
        assert daemon.prompt(sid, f"stream {count}").status_code == 200
        wait_for(lambda: any(e["type"] == "done" for e in daemon.events(sid, limit=5)), timeout=120,
                 what="the turn's end in the store while the viewer reads nothing")
        sock.settimeout(60)
        stream = RawStream(sock)
        assert stream.head().startswith(b"HTTP/1.1 200")
        body = stream.read_until(b"event: done\n")
    finally:
        sock.close()
    blocks = [b for b in body.decode().split("\n\n") if b.startswith("id: ")]
    ids = [int(b.split("\n", 1)[0][4:]) for b in blocks]
    assert ids == list(range(start + 1, start + 1 + len(ids))), "in order, no gap, no duplicate"
    texts = [json.loads(b.split("data: ", 1)[1])["content"]["text"] for b in blocks if "event: agent_message" in b]
    assert "".join(texts) == "".join(f"c{i} " for i in range(count))


def test_format_raw_is_an_alias_of_frames_raw_on_the_session_stream(daemon: Daemon, streamer: str) -> None:
    """The prompt stream's older name for raw frames opens the same raw frames here (one name, one alias)."""
    turn = daemon.run_turn(streamer, "echo alias")
    with daemon.http.stream("GET", daemon.scoped(streamer, "/stream"),
                            params={"format": "raw", "after_sequence": str(turn[0]["sequence"] - 1)}) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        head = [line for line in itertools.takewhile(lambda line: not line.startswith("data: "), lines) if line]
    assert head[-2:] == [f"id: {turn[0]['sequence']}", "event: user_message"], head
