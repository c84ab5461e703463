"""A `session resume` whose terminal closed releases its hold (issue 48): the default holder is the CLI process, and
a lease whose process is gone goes with it; `session_attach_locked` names the way out."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, Daemon, wait_for


def attach(daemon: Daemon, sid: str, holder: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    response = daemon.http.post(daemon.scoped(sid, "/attach"), json={"attached_to": holder, "ttl_seconds": 900})
    return response.status_code, response.json()


def test_a_resume_whose_terminal_closed_releases_its_hold(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "compozy.cli", "session", "resume", sid], cwd=str(ROOT),
                            env=daemon.env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    seen = b""

    def attached() -> bool:
        nonlocal seen
        # Read only what is there: a blocking read would hang past wait_for's timeout on a CLI that prints nothing.
        if select.select([master], [], [], 0.1)[0]:
            seen += os.read(master, 4096)
        return b"attached to" in seen

    try:
        wait_for(attached, timeout=30, what="the interactive resume")
        status, body = attach(daemon, sid, "someone-else")
        assert status == 409 and body["code"] == "session_attach_locked", body
        assert f"compozy session detach {sid} --holder cli:" in body["error"], body
    finally:
        os.close(master)  # the terminal closes: the CLI gets SIGHUP
    proc.wait(timeout=30)  # SIGHUP ended it (its `finally` detaches; the daemon frees a dead holder too)
    status, body = wait_for(lambda: (r := attach(daemon, sid, "someone-else"))[0] == 200 and r, timeout=15,
                            what="the lease of the closed terminal released")
    assert body["attach"]["attached_to"] == "someone-else"


def test_a_named_holder_keeps_its_lease_and_the_refusal_names_the_way_out(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    taken = daemon.cli_json("session", "resume", sid, "--holder", "ci-job-42")
    assert taken["attach"]["attached_to"] == "ci-job-42"
    status, body = attach(daemon, sid, "someone-else")
    assert status == 409 and body["code"] == "session_attach_locked"
    assert f"`compozy session detach {sid} --holder ci-job-42`" in body["error"], body["error"]
    refused = daemon.cli("session", "resume", sid, "--holder", "another")
    assert refused.returncode == 65 and "compozy session detach" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1
    # A script's own CLI holder (no --holder, no terminal): its process is gone once it printed the lease.
    daemon.cli_json("session", "detach", sid, "--holder", "ci-job-42")
    mine = daemon.cli_json("session", "resume", sid)["attach"]["attached_to"]
    assert mine.startswith("cli:") and mine.count(":") == 3, mine
    listed = daemon.cli_json("session", "list", "--resumable")["sessions"]
    assert sid in {s["id"] for s in listed}  # the list and the command agree: a gone holder holds nothing
    assert attach(daemon, sid, "someone-else")[0] == 200
