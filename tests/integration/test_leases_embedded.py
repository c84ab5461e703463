"""The embedded default keeps leases too, on its SQLite catalog, with one node and no server: a live session holds
one, a stopped one none, and a restart after a crash repairs at once (its own dead start's leases are dead)."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

from tests.conftest import start_daemon, wait_for, wait_gone


def test_the_embedded_daemon_leases_its_live_sessions_and_a_restart_does_not_wait_them_out(
        tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    daemon = start_daemon(home)
    try:
        sid = daemon.create(workspace)["id"]
        cluster = daemon.http.get("/api/status").json()["cluster"]
        assert cluster["node_id"] == f"{socket.gethostname()}:{home.resolve()}" and cluster["clustered"] is False
        assert [lease["session_id"] for lease in cluster["leases"]] == [sid]
        assert cluster["services"]["database"]["engine"] == "sqlite"
        assert cluster["services"]["redis"] == {"status": "not_used"}
        assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
        # Released on the runtime's DB thread right after its final metadata.
        wait_for(lambda: daemon.http.get("/api/status").json()["cluster"]["leases"] == [], timeout=10,
                 what="the lease released at stop")
        live = daemon.create(workspace)["id"]
        agent = daemon.meta(live)["liveness"]["subprocess_pid"]
    finally:
        daemon.stop(signal.SIGKILL)
    assert wait_gone(agent, 60)
    again = start_daemon(home)
    try:
        # The lease of the dead start is dead at once: repaired well before its 15 s TTL could run out.
        repaired = again.wait_state(live, {"stopped"}, timeout=8)
        assert repaired["stop_reason"] == "agent_crashed"
        assert again.run_turn(live, "stream 2")  # continued under the same id
    finally:
        again.stop()
