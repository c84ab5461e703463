"""Secrets an agent leaks into stderr never reach the crash bundle, the failure summary, the event
store or the daemon log (issue 4 acceptance)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Daemon

PLANTED = {
    "api key": "sk-proj-Zq8r4Xy7Lm2Nk9Pw3Vb6Tc1Hd5Gf0Js",
    "bearer header": "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.Qw3rTy7uIo9pAs2dFg",
    "url password": "https://deploy:hunter2-Secret@git.example.com/org/repo.git",
}
SECRET_PARTS = [
    "sk-proj-Zq8r4Xy7Lm2Nk9Pw3Vb6Tc1Hd5Gf0Js",
    "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.Qw3rTy7uIo9pAs2dFg",
    "hunter2-Secret",
]


def test_a_crash_bundle_with_planted_secrets_contains_none_of_them(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    leak = "leak " + " ".join(PLANTED.values())
    assert daemon.prompt(sid, leak).status_code == 200
    stopped = daemon.wait_state(sid, {"stopped"}, timeout=60)
    failure = stopped["failure"]
    assert (stopped["stop_reason"], failure["kind"]) == ("agent_crashed", "process_exit")

    bundle = Path(failure["crash_bundle_path"])
    text = bundle.read_text()
    body = json.loads(text)
    assert body["schema"] == "compozy.session_crash_bundle.v1"
    assert "fatal:" in body["stderr"], "the bundle keeps the stderr evidence, redacted"
    assert oct(bundle.stat().st_mode & 0o777) == "0o600"
    assert oct(bundle.parent.stat().st_mode & 0o777) == "0o700"

    # The raw store bytes, WAL included (rows not yet checkpointed live there), and what the API reads back.
    db = daemon.home / "sessions" / sid / "events.db"
    stored = b"".join(p.read_bytes() for p in (db, db.with_name("events.db-wal")) if p.exists())
    stored += json.dumps(daemon.all_events(sid)).encode()
    status = daemon.cli("session", "status", sid, "-o", "json").stdout
    for secret in SECRET_PARTS:
        assert secret not in text, f"crash bundle leaks {secret[:12]}…"
        assert secret not in json.dumps(failure)
        assert secret.encode() not in stored.replace(b"\x00", b"")
        assert secret not in status
        assert secret not in daemon.log()


def test_the_daemons_own_token_pasted_into_a_prompt_is_not_stored(daemon: Daemon, workspace: Path) -> None:
    # It has no provider prefix to recognise it by: the daemon registers it as a secret at start.
    sid = daemon.create(workspace)["id"]
    turn = daemon.run_turn(sid, f"echo the token is {daemon.token} and glpat-abcdefghij1234567890")
    assert turn[-1]["type"] == "done"
    db = daemon.home / "sessions" / sid / "events.db"
    stored = b"".join(p.read_bytes() for p in (db, db.with_name("events.db-wal")) if p.exists())
    for secret in (daemon.token, "glpat-abcdefghij1234567890"):
        assert secret.encode() not in stored
        assert secret not in json.dumps(daemon.all_events(sid))
