"""Never lose an event, never block the loop (issue: a full disk silently dropped a turn's tail; a locked
store stalled every session for 5 s). A real daemon, real agents, a real size-limited filesystem."""

from __future__ import annotations

import errno
import io
import itertools
import json
import re
import signal
import sqlite3
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NO_TITLE, ROOT, Daemon, chunk_count, pid_alive, start_daemon, wait_for
from tests.disk import fill, fill_up, free_bytes, tmpfs, unreadable_file
from tests.sse import Frame, watch_raw

TMPFS_BYTES = 8 * 1024 * 1024
# Left free when the big turn starts: more than a prompt needs up front (512 KiB), far less than the turn.
HEADROOM_BYTES = 2 * 1024 * 1024

# A store that stays unwritable stops its session after `[session.store] write_deadline` (5 s in production): the
# full-disk tests cross it in one second.
FAST_STORE_FAILURE = '[session.store]\nwrite_deadline = "1s"\n'



@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """COMPOZY_HOME whose sessions folder is an 8 MiB tmpfs (the catalog and logs stay on the real disk)."""
    home = tmp_path / "home"
    with tmpfs(home / "sessions", TMPFS_BYTES):
        yield home


def test_a_full_disk_loses_no_acknowledged_event_stops_the_session_refuses_new_work_and_recovers(
        small_disk: Path, workspace: Path) -> None:
    d = start_daemon(small_disk, extra_config=FAST_STORE_FAILURE)
    sessions = small_disk / "sessions"
    try:
        streaming = d.create(workspace)["id"]
        bystander = d.create(workspace)["id"]
        resting = d.create(workspace)["id"]  # cleanly stopped before the disk fills
        assert d.http.post(d.scoped(resting, "/stop")).status_code == 204
        assert d.run_turn(bystander, "echo ready")[-1]["type"] == "done"
        before_bystander = d.all_events(bystander)
        agent_pid = d.meta(streaming)["liveness"]["subprocess_pid"]

        filler = fill(sessions, HEADROOM_BYTES)
        start = max((e["sequence"] for e in d.all_events(streaming)), default=0)
        frames: list[Frame] = []
        connected = threading.Event()
        viewer = threading.Thread(target=watch_raw, args=(
            d, d.scoped(streaming, "/stream"), {"frames": "raw"}, start,
            lambda got: got[-1].event == "session_stopped", connected, frames), daemon=True)
        viewer.start()
        assert connected.wait(30)
        # ~5 MB of chunks into 2 MiB of free space.
        assert d.prompt(streaming, "stream 400000 12").status_code == 200

        stopped = d.wait_state(streaming, {"stopped"}, timeout=90)
        assert stopped["failure"]["kind"] == "storage_failure", stopped
        assert stopped["stop_reason"] == "error" and stopped["badge"] == "failed"
        assert "unwritable" in stopped["failure"]["summary"]
        assert wait_for(lambda: not pid_alive(agent_pid), 30, "the agent to be stopped")
        listed = {s["id"]: s for s in d.http.get("/api/sessions", params={"all": "true"}).json()["sessions"]}
        assert listed[streaming]["failure"]["kind"] == "storage_failure", "the catalog knows it too"
        assert "storage_failure" in d.log() or "unwritable" in d.log(), "and stderr (the daemon log) says so"
        viewer.join(30)

        # New work on a full disk: a clear 507, and nothing half-written.
        folders = sorted(p.name for p in sessions.iterdir())
        created = d.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace)})
        assert created.status_code == 507 and created.json()["code"] == "storage_full", created.text
        assert sorted(p.name for p in sessions.iterdir()) == folders
        refused = d.prompt(bystander, "echo are you there")
        assert refused.status_code == 507 and refused.json()["code"] == "storage_full", refused.text
        assert d.all_events(bystander) == before_bystander
        assert d.session(bystander)["state"] == "active"
        # A prompt to a stopped session is refused the same way, and leaves it stopped: it used to start its
        # agent and make it active before the space check.
        woken = d.prompt(resting, "echo wake up")
        assert woken.status_code == 507 and woken.json()["code"] == "storage_full", woken.text
        assert d.session(resting)["state"] == "stopped"

        # Space returns: no restart needed.
        filler.unlink()
        wait_for(lambda: (d.meta(streaming).get("failure") or {}).get("kind") == "storage_failure", 30,
                 "meta.json to be written once space returned")
        assert d.run_turn(bystander, "echo back again")[-1]["type"] == "done"
        assert d.create(workspace)["state"] == "active"

        # Every frame a viewer was shown is in the store, unchanged: acknowledged means kept.
        stored = {e["sequence"]: e for e in d.all_events(streaming)}
        shown = [f for f in frames if f.id]
        assert chunk_count(f.data["content"].get("text", "") for f in shown if f.event == "agent_message") > 0
        for frame in shown:
            row = stored.get(int(frame.id or 0))
            assert row is not None and row["id"] == frame.data["id"] and row["content"] == frame.data["content"]

        # The stopped session continues under the same id, its cut turn closed append-only first.
        turn = d.run_turn(streaming, "echo after the disk filled", timeout=60)
        assert turn[-1]["type"] == "done"
        assert d.session(streaming)["state"] == "active"
        types = [e["type"] for e in d.all_events(streaming)]
        assert types.count("user_message") == 2
    finally:
        d.stop()


def test_a_store_locked_by_another_process_never_stalls_another_sessions_stream(
        daemon: Daemon, workspace: Path) -> None:
    locked = daemon.create(workspace)["id"]
    streaming = daemon.create(workspace)["id"]
    daemon.run_turn(locked, "echo warm")
    path = daemon.home / "sessions" / locked / "events.db"

    start = max((e["sequence"] for e in daemon.all_events(streaming)), default=0)
    frames: list[Frame] = []
    arrivals: list[float] = []
    connected = threading.Event()

    def until(got: list[Frame]) -> bool:
        arrivals.append(time.monotonic())
        return got[-1].event == "done"

    viewer = threading.Thread(target=watch_raw, args=(
        daemon, daemon.scoped(streaming, "/stream"), {"frames": "raw"}, start, until, connected, frames),
        daemon=True)
    viewer.start()
    assert connected.wait(30)

    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's write lock on the first session's store
    try:
        # The locked session tries to write (its user_message waits on the lock) ...
        blocked: dict[str, Any] = {}
        prompter = threading.Thread(target=lambda: blocked.update(r=daemon.prompt(locked, "echo behind a lock")))
        prompter.start()
        time.sleep(0.3)
        # ... while the other one streams 30 chunks, one every 50 ms.
        t0 = time.monotonic()
        assert daemon.prompt(streaming, "slow 30 0.05").status_code == 200
        viewer.join(30)
        elapsed = time.monotonic() - t0
    finally:
        time.sleep(max(0.0, 2.5 - (time.monotonic() - t0)))
        holder.execute("ROLLBACK")
        holder.close()
    prompter.join(30)

    assert frames and frames[-1].event == "done"
    assert chunk_count(f.data["content"]["text"] for f in frames if f.event == "agent_message") == 30
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert elapsed < 5.0 and max(gaps) < 1.0, f"the stream stalled behind another session's lock: {max(gaps):.2f}s"
    # Released within the write deadline: the locked session's prompt went through, nothing lost.
    assert blocked["r"].status_code == 200, blocked["r"].text
    turn = daemon.turn_events(locked, blocked["r"].json()["prompt"]["turn_id"])
    assert turn[0]["type"] == "user_message" and turn[-1]["type"] == "done"
    # The daemon's own measure of its shared loop over the window that held the lock.
    status = daemon.http.get("/api/status").json()
    lag = status["event_loop"]["lag"]["windows"][0]
    assert lag["samples"] > 50 and lag["max_ms"] < 500, lag
    # Two sessions are far below the load at which commits move to the store writer process.
    assert status["store_writer"]["mode"] == "thread" and status["store_writer"]["broken"] is None, status
    assert status["health"]["persistence"]["store_writer"] is None
    assert re.search(r"store writer +thread \([0-9.]+ batches/s\)", daemon.cli("status").stdout)


def test_a_storage_failure_stays_the_cause_when_the_daemon_dies_before_space_returns(
        small_disk: Path, workspace: Path) -> None:
    d = start_daemon(small_disk, extra_config=FAST_STORE_FAILURE)
    sessions = small_disk / "sessions"
    try:
        sid = d.create(workspace)["id"]
        filler = fill(sessions, HEADROOM_BYTES)
        assert d.prompt(sid, "stream 400000 12").status_code == 200
        assert d.wait_state(sid, {"stopped"}, timeout=90)["failure"]["kind"] == "storage_failure"
        # The full disk took meta.json's stop too: only the catalog (on another disk) holds it now.
        assert d.meta(sid)["state"] != "stopped"
        d.stop(signal.SIGKILL)
        filler.unlink()

        d = start_daemon(small_disk, extra_config=FAST_STORE_FAILURE)
        # Boot repair must not call this "daemon crashed while session active": the daemon recorded the cause.
        stopped = wait_for(lambda: (s := d.session(sid))["state"] == "stopped" and s, 30, "the session to read")
        assert stopped["stop_reason"] == "error" and stopped["failure"]["kind"] == "storage_failure", stopped
        meta = wait_for(lambda: (m := d.meta(sid))["state"] == "stopped" and m, 30, "meta.json to be repaired")
        assert meta["failure"]["kind"] == "storage_failure", meta
        # The cut turn is closed append-only (by boot repair, which may finish after the read above), same cause.
        errors = wait_for(lambda: [e for e in d.all_events(sid) if e["type"] == "error"], 30, "the cut turn's error")
        assert errors[-1]["content"]["failure"]["kind"] == "storage_failure", errors
    finally:
        d.stop()


def test_an_events_db_deleted_under_a_live_session_stops_it_as_a_storage_failure_and_nothing_hangs(
        daemon: Daemon, workspace: Path) -> None:
    """The writer's open connection went on writing into the unlinked inode: every later event lost, the session
    active and healthy, doctor content, and the next prompt's CLI waiting for ever on rows nobody could read."""
    sid = daemon.create(workspace)["id"]
    folder = daemon.home / "sessions" / sid
    first = subprocess.Popen([sys.executable, "-m", "compozy.cli", "session", "prompt", sid, "slow 60 0.1"],
                             env=daemon.env, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: chunk_count(e["content"].get("text", "") for e in daemon.events(sid, type="agent_message")),
                 30, "the turn to stream")
        for path in folder.glob("events.db*"):
            path.unlink()
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 70 and "storage_failure" in err, (first.returncode, err)
    stopped = daemon.wait_state(sid, {"stopped"}, timeout=30)
    assert stopped["failure"]["kind"] == "storage_failure" and "store_displaced" in stopped["failure"]["summary"]
    assert not (folder / "events.db").exists(), "nothing pretends to be recorded"
    [check] = daemon.cli_json("doctor", "--only", "session_metadata")["items"]
    assert check["severity"] == "warn" and check["evidence"]["damaged_stores"].get(sid) == "missing", check
    # The next prompt answers: it continues the session in a new store rather than waiting on the lost one.
    again = daemon.cli("session", "prompt", sid, "echo second", timeout=60)
    assert again.returncode == 0 and "second" in again.stdout, again.stderr


def test_a_stopped_sessions_store_stays_readable_on_a_full_disk_and_an_unreadable_one_says_so(
        small_disk: Path, workspace: Path, tmp_path: Path) -> None:
    """Opening a WAL store creates its -shm file, which a full disk refuses: every read of a stopped session answered
    `storage is not writable` (503) and evidence collected no events, though every row was in the main file."""
    d = start_daemon(small_disk, extra_config=NO_TITLE)
    sessions = small_disk / "sessions"
    try:
        sid = d.create(workspace)["id"]
        assert d.run_turn(sid, "echo kept on a full disk")[-1]["type"] == "done"
        walled = d.create(workspace)["id"]
        for session in (sid, walled):
            assert d.http.post(d.scoped(session, "/stop")).status_code == 204
            d.wait_state(session, {"stopped"})
        stored = [e["id"] for e in d.all_events(sid)]
        # The other store's newest row lives in its -wal alone: an immutable read would skip it, so none is tried.
        store = sessions / walled / "events.db"
        writer = sqlite3.connect(str(store), isolation_level=None)
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("INSERT INTO events(id, turn_id, type, agent_name, content, timestamp) VALUES"
                       " ('evt_only_in_the_wal', '-', 'system', 'scripted', '{}', '2026-01-01T00:00:00Z')")
        wal = store.with_name("events.db-wal").read_bytes()
        writer.close()  # checkpoints and removes the -wal and -shm; put the -wal back as a crash would leave it
        store.with_name("events.db-wal").write_bytes(wal)
        fill_up(sessions)
        assert free_bytes(sessions) < 64 * 1024

        listed = d.cli("session", "events", sid, "-o", "json")
        assert listed.returncode == 0, listed.stderr
        assert [e["id"] for e in json.loads(listed.stdout)["events"]] == stored
        history = d.cli("session", "history", sid, "-o", "json")
        assert history.returncode == 0, history.stderr
        assert sum(t["event_count"] for t in json.loads(history.stdout)) == len(stored)
        out = tmp_path / "evidence"
        out.mkdir()
        evidence = d.cli("session", "evidence", sid, "--out", str(out), timeout=120)
        assert evidence.returncode == 0, evidence.stderr
        with tarfile.open(next(out.iterdir())) as archive:
            member = next(m for m in archive.getmembers() if m.name.endswith("events.jsonl"))
            lines = (archive.extractfile(member) or io.BytesIO()).read().splitlines()
        assert len(lines) == len(stored)

        refused = d.cli("session", "events", walled)
        assert refused.returncode == 69, refused.stderr
        assert "could not be read" in refused.stderr and "not writable" not in refused.stderr, refused.stderr
    finally:
        d.stop()


def test_a_stream_that_cannot_read_its_store_ends_with_a_coded_frame_exit_69_and_one_log_line(
        small_disk: Path, workspace: Path) -> None:
    """A follow whose store read failed (a full disk refusing the -shm) got `{"error": "stream failed"}` with no code,
    exited 1 (documented nowhere), and the daemon logged a traceback for a condition of the machine."""
    d = start_daemon(small_disk, extra_config=NO_TITLE)
    try:
        sid = d.create(workspace)["id"]
        assert d.run_turn(sid, "echo before the disk filled")[-1]["type"] == "done"
        assert d.http.post(d.scoped(sid, "/stop")).status_code == 204
        d.wait_state(sid, {"stopped"})
        fill_up(small_disk / "sessions")
        human = d.cli("session", "events", sid, "--follow", timeout=30)
        assert human.returncode == 69, (human.returncode, human.stderr)
        assert "could not be read" in human.stderr and "(storage_unavailable)" in human.stderr, human.stderr
        scripted = d.cli("session", "events", sid, "--follow", "-o", "json", timeout=30)
        assert scripted.returncode == 69
        error = json.loads(scripted.stderr)
        assert error["code"] == "storage_unavailable" and error["diagnostic"]["evidence"]["reason"], error
        log = d.log()
        assert log.count("a session stream ended: the session's event store could not be read") == 2, log[-3000:]
        assert "SSE stream failed" not in log and "Traceback" not in log, log[-3000:]
    finally:
        d.stop()


def test_a_meta_json_that_reads_eio_is_listed_from_its_catalog_row_and_the_list_still_answers(
        daemon: Daemon, workspace: Path, tmp_path: Path) -> None:
    """One meta.json read failing with EIO (a failing disk) failed `session list --all` as a whole: 503 `storage is
    not writable (io_error)`, exit 69. The session is shown from its catalog row with `meta_error`, as a broken one."""
    victim = daemon.create(workspace)["id"]
    bystander = daemon.create(workspace)["id"]
    for sid in (victim, bystander):
        assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
        daemon.wait_state(sid, {"stopped"})
    with unreadable_file(daemon.home / "sessions" / victim, "meta.json", tmp_path / "eio.img") as meta_json:
        with pytest.raises(OSError) as unreadable:
            meta_json.read_bytes()
        assert unreadable.value.errno == errno.EIO
        listed = daemon.cli("session", "list", "--all", "-o", "json")
        assert listed.returncode == 0, listed.stderr
        rows = {s["id"]: s for s in json.loads(listed.stdout)["sessions"]}
        assert rows[bystander]["state"] == "stopped" and "meta_error" not in rows[bystander]
        assert rows[victim]["state"] == "stopped" and rows[victim]["attachable"] is False, rows[victim]
        assert rows[victim]["meta_error"]["code"] == "session_meta_invalid", rows[victim]
        assert "unreadable" in rows[victim]["meta_error"]["message"], rows[victim]
    assert daemon.session(victim)["state"] == "stopped"  # the file back as it was
