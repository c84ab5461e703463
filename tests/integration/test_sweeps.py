"""Boot repair and the periodic sweeps with the real daemon (issue 10, items 3 and 4): one bad meta.json never
stops the repair of the others; repair work follows what needs repair, not history; `repair_sessions --all`
says what it repaired and what needs a person; supervision never waits on a stubborn session and keeps working
beside a second huey consumer on the same queue."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from sessions.store.events import EventLog
from sessions.store.ops import NewEvent
from tests.conftest import ROOT, Daemon, crash_mid_tool_call, markers, of_type, start_daemon, wait_for, wait_gone

START_TIMEOUT = 120.0  # a daemon start imports the whole stack; slow when the machine is busy
NO_TITLE = "[roles.auto_title]\nenabled = false\n"
# Every supervision time below is a few heartbeats long; margins allow for a loaded 2-core machine.
HEARTBEAT = 1.0
WARNING_AFTER = 3.0
PROGRESS_EVERY = 2.0
MARGIN = 3.0


def supervision(*, warning: float, timeout: float, grace: float, progress: float = 0.0) -> str:
    return (f'[session.supervision]\nactivity_heartbeat_interval = "{HEARTBEAT}s"\n'
            f'inactivity_warning_after = "{warning}s"\ninactivity_timeout = "{timeout}s"\n'
            f'timeout_cancel_grace = "{grace}s"\nprogress_notify_interval = "{progress}s"\n') + NO_TITLE


def manage(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPOZY_HOME": str(home)}
    env.pop("COMPOZY_URL", None)
    return subprocess.run([sys.executable, "manage.py", *args], env=env, cwd=str(ROOT), capture_output=True,
                          text=True, timeout=120)


def stamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def write_meta(home: Path, session_id: str, **fields: Any) -> Path:
    """A minimal session folder, as a crash or a person could leave it (no events.db)."""
    meta = {"id": session_id, "agent_name": "scripted", "provider": "scripted", "workspace_id": "ws_00000000000000aa",
            "workspace_path": "/tmp", "cwd": "/tmp", "state": "stopped", "stop_reason": "completed",
            "stop_detail": "", "failure": None, "acp_session_id": "", "liveness": {"activity": {}},
            "created_at": "2026-01-01T00:00:00.000000Z", "updated_at": "2026-01-01T00:00:00.000000Z", **fields}
    path = home / "sessions" / session_id / "meta.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta))
    return path


def boot_line(d: Daemon, nth: int = 1) -> str:
    """The boot repair's summary line of the `nth` daemon start in this home's test log."""
    lines = wait_for(lambda: len(found := re.findall(r"boot repair: scanned .*", d.log())) >= nth and found,
                     timeout=60, what="the boot repair summary")
    return str(lines[nth - 1])


# ---- boot repair ---------------------------------------------------------------------------------------

@pytest.mark.timeout(600)
def test_a_zombie_and_a_broken_meta_json_do_not_stop_the_boot_repair_of_a_crashed_session(
        tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    crashed = crash_mid_tool_call(home, workspace, timeout=START_TIMEOUT)
    assert json.loads((home / "sessions" / crashed / "meta.json").read_text())["state"] == "active"
    # Sorted before the crashed one, so a repair that stops at the first bad folder never reaches it.
    zombie, broken = "sess_0000000000000001", "sess_0000000000000002"
    write_meta(home, zombie, state="zombie")
    write_meta(home, broken).write_text('{"id": "sess_0000000000000002", "state": ')

    second = start_daemon(home, timeout=START_TIMEOUT)
    try:
        line = boot_line(second, nth=2)  # the first start's line is in the same log
        assert "repaired 1 stale state(s) and 1 transcript(s) (1 store(s) opened); 2 invalid meta.json" in line
        for bad in (zombie, broken):
            assert f"boot repair: session_meta_invalid {bad}" in second.log()
        session = second.session(crashed)
        assert (session["state"], session["stop_reason"], session["failure"]["kind"]) == (
            "stopped", "agent_crashed", "process_exit")
        assert [e["type"] for e in second.all_events(crashed)[-2:]] == ["tool_result", "error"]
        verdict = second.meta(crashed)["transcript_repair"]
        assert verdict["outcome"] == "repaired"
        # `session repair --dry-run` names what is wrong with the bad ones.
        for bad in (zombie, broken):
            shown = second.cli("session", "repair", bad, "--dry-run", "-o", "json")
            assert shown.returncode != 0
            assert json.loads(shown.stderr)["code"] == "session_meta_invalid"
        # And doctor says so, naming them, instead of "ok".
        [check] = second.cli_json("doctor", "--only", "session_metadata")["items"]
        assert check["severity"] == "warn" and sorted(check["evidence"]["invalid"]) == [zombie, broken], check
        # A listed session whose meta.json breaks later stays in the list, marked, from its catalog row.
        victim = second.create(workspace)["id"]
        second.cli_json("session", "stop", victim)
        meta_json = home / "sessions" / victim / "meta.json"
        kept = meta_json.read_text()
        meta_json.write_text("{")
        [row] = [s for s in second.http.get("/api/sessions", params={"all": "true"}).json()["sessions"]
                 if s["id"] == victim]
        assert row["meta_error"]["code"] == "session_meta_invalid" and row["attachable"] is False
        meta_json.write_text(kept)  # repaired by hand: a clean stopped session from here on
        # A truncated events.db read as a clean stopped session everywhere; doctor reads every folder now.
        files = {f: home / "sessions" / victim / f for f in ("events.db", "events.db-wal", "events.db-shm")}
        saved = {f: path.read_bytes() for f, path in files.items() if path.exists()}
        for path in files.values():
            path.unlink(missing_ok=True)
        files["events.db"].write_bytes(saved["events.db"][:100])
        [check] = second.cli_json("doctor", "--only", "session_metadata")["items"]
        assert check["evidence"]["damaged_stores"] == {victim: "truncated (100 bytes, shorter than its first page)"}
        assert sorted(check["evidence"]["invalid"]) == [zombie, broken] and check["severity"] == "warn"
        for f, data in saved.items():  # put back: a clean stopped session again
            files[f].write_bytes(data)
    finally:
        second.stop()

    # A later boot opens no events.db: the crashed session's verdict is recorded for its run.
    third = start_daemon(home, timeout=START_TIMEOUT)
    try:
        line = boot_line(third, nth=3)
        assert "repaired 0 stale state(s) and 0 transcript(s) (0 store(s) opened); 2 invalid meta.json" in line
        assert third.meta(crashed)["transcript_repair"] == verdict
    finally:
        third.stop()

    swept = manage(home, "repair_sessions", "--all", "--dry-run")
    assert swept.returncode == 1, swept.stdout + swept.stderr
    assert swept.stdout.splitlines()[-1] == (
        "4 session(s): 2 clean, 2 failed; 2 need(s) a person (dry run: nothing persisted)")
    assert f"{zombie}  failed" in swept.stdout and "(session_meta_invalid)" in swept.stdout
    assert f"need a person: {zombie} (session_meta_invalid), {broken} (session_meta_invalid)" in swept.stderr


def test_a_crashed_session_whose_meta_json_broke_reads_stopped_from_the_first_boot(tmp_path: Path,
                                                                                   workspace: Path) -> None:
    # Its catalog row said `active` until the dead run's lease expired (~15 s), and failover then logged a traceback.
    home = tmp_path / "home"
    first = start_daemon(home, timeout=START_TIMEOUT)
    try:
        sid = first.create(workspace)["id"]
        agent_pid = first.meta(sid)["liveness"]["subprocess_pid"]
    finally:
        first.stop(signal.SIGKILL)
    assert wait_gone(agent_pid, 60), "the orphaned agent did not exit"
    # `daemon status` says the daemon was killed, not only "stopped".
    killed = first.cli_json("daemon", "status")
    assert killed["status"] == "stopped" and "without a clean stop" in killed["note"], killed
    meta_json = home / "sessions" / sid / "meta.json"
    meta_json.write_text(meta_json.read_text().replace('"state": "active"', '"state": "zombie"'))
    second = start_daemon(home, timeout=START_TIMEOUT)
    try:
        [row] = [s for s in second.http.get("/api/sessions", params={"all": "true"}).json()["sessions"]
                 if s["id"] == sid]
        assert row["state"] == "stopped" and row["meta_error"]["code"] == "session_meta_invalid", row
        assert second.http.get("/api/status").json()["sessions"]["active"] == 0
    finally:
        second.stop()
    assert "Traceback" not in second.log()
    assert second.cli_json("daemon", "status") == {"status": "stopped"}  # a clean stop leaves no record


def test_a_crashed_sessions_store_locked_by_another_process_fails_its_boot_repair_in_one_warning_line(
        tmp_path: Path, workspace: Path) -> None:
    """A store held under BEGIN EXCLUSIVE elsewhere is a classified, expected condition (the run keeps no verdict and
    is judged again later): boot repair logged it as an ERROR with a traceback ending in `database is locked`."""
    home = tmp_path / "home"
    sid = crash_mid_tool_call(home, workspace, extra_config=NO_TITLE, timeout=START_TIMEOUT)
    holder = sqlite3.connect(str(home / "sessions" / sid / "events.db"), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        second = start_daemon(home, timeout=START_TIMEOUT)
        try:
            assert "1 failed" in boot_line(second, nth=2)
        finally:
            second.stop()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    log = second.log()
    assert f"boot repair of {sid} failed (locked; tried again later): database is locked" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_repair_sessions_all_says_what_it_repaired_and_what_needs_a_person(tmp_path: Path) -> None:
    home = tmp_path / "home"
    clean = ["sess_00000000000000a1", "sess_00000000000000a2", "sess_00000000000000a3"]
    write_meta(home, clean[0])
    write_meta(home, clean[1], stop_reason="user_canceled")
    write_meta(home, clean[2], stop_reason="agent_crashed",
               failure={"kind": "process_exit", "summary": "exit 9", "crash_bundle_path": None})

    healthy = manage(home, "repair_sessions", "--all")
    assert healthy.returncode == 0, healthy.stderr
    # Nothing to repair is clean whatever the stop reason: "use --force" is only for a repair that would append.
    assert healthy.stdout.splitlines() == ["3 session(s): 3 clean; nothing needs a person"]

    # A user's stop that cut a turn short: repairable with --force only, so the sweep skips it.
    cut = "sess_00000000000000a4"
    write_meta(home, cut, stop_reason="user_canceled")
    log = EventLog(home / "sessions" / cut / "events.db", "scripted")
    log.append([NewEvent("user_message", "turn_0000000000000001", {"text": "hang"})])
    log.close()
    crashed = "sess_00000000000000b1"
    write_meta(home, crashed, state="active", stop_reason="")
    repaired = manage(home, "repair_sessions", "--all")
    assert repaired.returncode == 0, repaired.stderr
    assert repaired.stdout.splitlines() == [
        f"[5/5] {crashed}  repaired  stale active became stopped; issues: no_repairable_turn",
        "5 session(s): 1 repaired, 3 clean, 1 skipped; nothing needs a person"]
    assert json.loads((home / "sessions" / crashed / "meta.json").read_text())["stop_reason"] == "agent_crashed"

    zombie = "sess_00000000000000c1"
    write_meta(home, zombie, state="zombie")
    needs = manage(home, "repair_sessions", "--all", "-o", "json")
    assert needs.returncode == 1
    report = json.loads(needs.stdout)
    assert report["summary"]["needs_person"] == 1 and report["summary"]["failed"] == 1
    [entry] = [e for e in report["sessions"] if e["needs_person"]]
    assert (entry["session_id"], entry["status"], entry["code"]) == (zombie, "failed", "session_meta_invalid")
    assert f"1 session(s) need a person: {zombie} (session_meta_invalid)" in needs.stderr


# ---- supervision ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A long cancel grace: a session deaf to cancel stays in it for 20 s."""
    d = start_daemon(tmp_path_factory.mktemp("patient-home"), timeout=START_TIMEOUT,
                     extra_config=supervision(warning=WARNING_AFTER, timeout=4.0, grace=20.0,
                                              progress=PROGRESS_EVERY))
    yield d
    d.stop()


def warning_delay(d: Daemon, session_id: str, turn_id: str) -> float:
    """Seconds from the turn's user_message to its first runtime_warning, by the store's own timestamps."""
    warning = d.wait_event(session_id, "runtime_warning", timeout=60)
    [asked] = [e for e in of_type(d.all_events(session_id), "user_message") if e["turn_id"] == turn_id]
    assert warning["turn_id"] == turn_id
    assert warning["content"]["text"].startswith("Runtime activity is stale")
    return stamp(warning) - stamp(asked)


def test_a_session_deaf_to_cancel_does_not_delay_another_sessions_warning(patient: Daemon, workspace: Path) -> None:
    d = patient
    stubborn = d.create(workspace, agent="stubborn")["id"]
    assert d.prompt(stubborn, "hang").status_code == 200
    # The stubborn session times out and sits in its 20 s cancel grace from here on.
    wait_for(lambda: markers(d.all_events(stubborn), "prompt_timeout"), timeout=60, what="the stubborn timeout")
    texts = [w["content"]["text"] for w in of_type(d.all_events(stubborn), "runtime_warning")]
    assert [t.split(" (")[0] for t in texts] == ["Runtime activity is stale", "Runtime activity timed out"], texts

    other = d.create(workspace)["id"]
    response = d.prompt(other, "hang")
    assert response.status_code == 200
    delay = warning_delay(d, other, response.json()["prompt"]["turn_id"])
    assert WARNING_AFTER <= delay <= WARNING_AFTER + HEARTBEAT + MARGIN, delay
    # It came while the stubborn session was still waiting out its grace: nothing waited on it.
    assert d.session(stubborn)["state"] == "active"
    assert not of_type(d.all_events(stubborn), "session_stopped")


def test_a_working_turn_gets_runtime_progress_on_time_and_no_warning(patient: Daemon, workspace: Path) -> None:
    d = patient
    sid = d.create(workspace)["id"]
    turn = d.run_turn(sid, "slow 14 0.5", timeout=90)  # ~6.5 s of steady updates

    [asked] = of_type(turn, "user_message")
    progress = of_type(turn, "runtime_progress")
    assert len(progress) >= 2, [e["content"]["text"] for e in turn]
    assert all(p["content"]["text"].startswith("Still working... (0 min elapsed") for p in progress)
    times = [stamp(asked)] + [stamp(p) for p in progress]
    gaps = [later - earlier for earlier, later in pairwise(times)]
    assert all(PROGRESS_EVERY * 0.9 <= gap <= PROGRESS_EVERY + HEARTBEAT + MARGIN for gap in gaps), gaps
    assert of_type(turn, "runtime_warning") == []
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"


@pytest.mark.timeout(600)
def test_supervision_keeps_working_beside_a_second_huey_consumer(tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    d = start_daemon(home, timeout=START_TIMEOUT,
                     extra_config=supervision(warning=WARNING_AFTER, timeout=5.0, grace=2.0))
    env = {**os.environ, "COMPOZY_HOME": str(home)}
    env.pop("COMPOZY_URL", None)
    log = open(home / "second-consumer.log", "wb")  # noqa: SIM115 - the consumer writes to it for its whole life
    # A second consumer on the daemon's own queue file, as `manage.py run_huey` would run beside it.
    second = subprocess.Popen([sys.executable, "manage.py", "run_huey", "--workers", "1", "--worker-type", "thread"],
                              env=env, cwd=str(ROOT), stdout=log, stderr=log, start_new_session=True)
    try:
        dropped = "reached a huey consumer outside the daemon"
        wait_for(lambda: dropped in (home / "second-consumer.log").read_text(errors="replace"), timeout=90,
                 what="the second consumer taking one of the daemon's messages")
        sid = d.create(workspace)["id"]
        response = d.prompt(sid, "hang")
        assert response.status_code == 200
        turn_id = response.json()["prompt"]["turn_id"]
        delay = warning_delay(d, sid, turn_id)
        assert WARNING_AFTER <= delay <= WARNING_AFTER + HEARTBEAT + MARGIN, delay
        turn = d.turn_events(sid, turn_id, timeout=60)
        assert len(markers(turn, "prompt_timeout")) == 1
        assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "cancelled"
        assert second.poll() is None, "the second consumer died"
        # Every tick was claimed by the daemon's own consumer; the second one never claimed (so never
        # swallowed) a tick it could not run.
        with sqlite3.connect(home / "catalog.sqlite3") as catalog:
            rows = catalog.execute("SELECT name, claimed_by, claims FROM compozy_sessions_sweepclaim").fetchall()
        claims = {name.split(":")[0]: (by, count) for name, by, count in rows}
        assert claims["supervision"][0].startswith(f"{socket.gethostname()}:{d.proc.pid}:")
        assert claims["supervision"][1] > 0
        assert claims["boot_repair"] == (claims["boot_repair"][0], 1)
        # Both processes registered the jobs before their first message.
        consumer_log = (home / "second-consumer.log").read_text(errors="replace")
        assert "not found in TaskRegistry" not in d.log() + consumer_log
    finally:
        second.send_signal(signal.SIGINT)
        try:
            second.wait(15)
        except subprocess.TimeoutExpired:
            second.kill()
            second.wait(5)
        log.close()
        d.stop()
