"""`compozy session evidence ID` and `GET …/evidence` against the real daemon: one redacted tar.gz (mode 0600)
with status, doctor, the session, its events, history, recap, crash bundles and its daemon-log lines."""

from __future__ import annotations

import io
import json
import stat
import tarfile
from pathlib import Path

from tests.conftest import Daemon
from tests.disk import fill_up, tmpfs
from tests.integration.test_secrets import PLANTED, SECRET_PARTS

MEMBERS = {"manifest.json", "status.json", "doctor.json", "session.json", "events.jsonl", "history.json",
           "recap.json", "daemon-log.txt"}


def members(archive: tarfile.TarFile, sid: str) -> dict[str, bytes]:
    out = {}
    for member in archive.getmembers():
        assert member.name.startswith(f"evidence-{sid}/") and member.mode == 0o600
        handle = archive.extractfile(member)
        assert handle is not None
        out[member.name.split("/", 1)[1]] = handle.read()
    return out


def test_the_evidence_of_a_crashed_session_is_one_redacted_archive(daemon: Daemon, workspace: Path,
                                                                   tmp_path: Path) -> None:
    sid = daemon.create(workspace)["id"]
    daemon.run_turn(sid, "tool read README.md")
    assert daemon.prompt(sid, "leak " + " ".join(PLANTED.values())).status_code == 200
    stopped = daemon.wait_state(sid, {"stopped"})
    assert stopped["failure"]["kind"] == "process_exit"

    result = daemon.cli("session", "evidence", sid, "--out", str(tmp_path), "-o", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    path = Path(summary["path"])
    assert path.parent == tmp_path and path.name.startswith(f"compozy-evidence-{sid}-")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert summary["bytes"] == path.stat().st_size

    with tarfile.open(path, "r:gz") as archive:
        files = members(archive, sid)
    bundle = Path(stopped["failure"]["crash_bundle_path"]).name
    assert set(files) == MEMBERS | {f"crash-bundles/{bundle}"}
    manifest = json.loads(files["manifest.json"])
    assert manifest == summary["manifest"] and manifest["errors"] == {} and manifest["redacted"] is True

    events = [json.loads(line) for line in files["events.jsonl"].splitlines()]
    assert [e["sequence"] for e in events] == [e["sequence"] for e in daemon.all_events(sid)]
    assert manifest["counts"]["events"] == len(events)
    assert json.loads(files["session.json"])["session"]["failure"] == stopped["failure"]
    assert json.loads(files["status.json"])["daemon"]["status"] == "running"
    assert json.loads(files["doctor.json"])["items"]
    assert [t["turn_id"] for t in json.loads(files["history.json"])["history"]][:1] == [events[0]["turn_id"]]
    assert json.loads(files["recap.json"])["recap"]["session"]["id"] == sid
    log = files["daemon-log.txt"].decode()
    assert f"session {sid} active" in log and f"session {sid} stopped: agent_crashed (process_exit)" in log
    assert all(sid in line for line in log.splitlines() if line[:4].isdigit())

    everything = b"".join(files.values()).decode("utf-8", "replace")
    for secret in SECRET_PARTS:
        assert secret not in everything, f"the archive leaks {secret[:12]}…"

    again = daemon.cli("session", "evidence", sid, "--out", str(path))
    assert again.returncode == 65 and "already exists" in again.stderr  # never overwrites
    nowhere = daemon.cli("session", "evidence", sid, "--out", str(tmp_path / "missing" / "x.tar.gz"), "-o", "json")
    assert nowhere.returncode == 65 and json.loads(nowhere.stderr)["code"] == "file_not_writable", nowhere.stderr
    assert not (tmp_path / "missing").exists()
    # Into a directory, twice within the second its default name carries: the second gets -2, never an error.
    (tmp_path / "dir").mkdir()
    twice = [daemon.cli("session", "evidence", sid, "--out", str(tmp_path / "dir"), "-o", "json") for _ in range(2)]
    paths = [json.loads(result.stdout)["path"] for result in twice if result.returncode == 0]
    assert len(set(paths)) == 2, [result.stderr for result in twice]


def test_the_evidence_route_answers_a_gzip_download(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    response = daemon.http.get(daemon.scoped(sid, "/evidence"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/gzip"
    assert f'filename="compozy-evidence-{sid}-' in response.headers["content-disposition"]
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as archive:
        assert set(members(archive, sid)) == MEMBERS  # no crash bundle for a healthy session

    missing = daemon.http.get(daemon.scoped(sid, "").replace(sid, "sess_0000000000000000") + "/evidence")
    assert missing.status_code == 404
    assert daemon.cli("session", "evidence", "sess_0000000000000000").returncode == 69


def test_a_session_whose_meta_json_is_broken_still_gives_evidence(daemon: Daemon, workspace: Path) -> None:
    # The case evidence is for: it answered 409 session_meta_invalid and wrote nothing.
    session = daemon.create(workspace)
    sid = session["id"]
    route = daemon.scoped(sid, "/evidence")
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    meta_json = daemon.home / "sessions" / sid / "meta.json"
    meta_json.write_text('{"id": "' + sid + '", "state": "zombie", "token": "' + PLANTED["api key"] + '"}')
    response = daemon.http.get(route)
    assert response.status_code == 200, response.text
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as archive:
        got = members(archive, sid)
    assert {"manifest.json", "meta.json.broken", "events.jsonl", "doctor.json"} <= set(got)
    manifest = json.loads(got["manifest.json"])
    assert "session_meta_invalid" in manifest["errors"]["session.json"]
    assert manifest["counts"]["events"] > 0 and manifest["workspace_id"] == session["workspace_id"]
    assert b'"state": "zombie"' in got["meta.json.broken"]
    for part in SECRET_PARTS:
        assert part.encode() not in got["meta.json.broken"]

    # The CLI finds it from its catalog row (its own lookup of the session answers 409 too) and says what is missing.
    shown = daemon.cli("session", "evidence", sid, "--out", str(workspace))
    assert shown.returncode == 0, shown.stderr
    assert "session, " not in shown.stdout and "not collected: session.json: session_meta_invalid" in shown.stdout


def test_a_full_destination_exits_69_worth_retrying_and_leaves_no_half_archive(
        daemon: Daemon, workspace: Path, tmp_path: Path) -> None:
    """A full disk under --out exited 65 `file_not_writable`, which README keeps for a bad request: space returning
    makes the same command work, so it is 69 (worth retrying later)."""
    sid = daemon.create(workspace)["id"]
    assert daemon.run_turn(sid, "echo into a full disk")[-1]["type"] == "done"
    with tmpfs(tmp_path / "full", 256 * 1024) as full:
        fillers = fill_up(full)
        result = daemon.cli("session", "evidence", sid, "--out", str(full), "-o", "json")
        assert result.returncode == 69, (result.returncode, result.stderr)
        assert json.loads(result.stderr)["code"] == "storage_full", result.stderr
        assert sorted(full.iterdir()) == sorted(fillers), "no half archive left behind"
        for filler in fillers:
            filler.unlink()
        again = daemon.cli("session", "evidence", sid, "--out", str(full), "-o", "json")
        assert again.returncode == 0, again.stderr
