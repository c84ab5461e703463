"""Who owns a session (sessions/catalog/ownership.py), the one answer the router, the lookups, repair and the jobs ask:
this process, this home's daemon (asked from outside it), another node, or nobody; and within one request the
lease is read once. On the embedded catalog, with a real SessionManager and, for a running daemon, a real process
named in daemon.json."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from compozy_base.config.loader import load_config  # noqa: E402
from sessions.catalog import cluster, ownership  # noqa: E402
from sessions.catalog.ownership import Where  # noqa: E402
from sessions.models import Node, Session, SessionLease, Workspace  # noqa: E402
from sessions.runtime.manager import SessionManager  # noqa: E402
from sessions.store import folder  # noqa: E402

ME = cluster.Identity("node-me", "2026-12-02T09:00:00Z", "http://127.0.0.1:1", 15.0)
OTHER = cluster.Identity("node-other", "2026-12-02T09:00:01Z", "http://127.0.0.1:2", 15.0)
SID = "sess_00000000000000c1"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path))
    now = folder.utcnow()
    ws, _ = Workspace.objects.get_or_create(id="ws_00000000000000c1", defaults={
        "name": "ownership", "root_dir": str(tmp_path), "created_at": now, "updated_at": now})
    Session.objects.create(id=SID, workspace=ws, agent_name="scripted", state="active", created_at=now,
                           updated_at=now)
    yield tmp_path
    ownership.set_local_manager(None)
    cluster.set_identity(None)
    SessionLease.objects.all().delete()
    Session.objects.filter(id=SID).delete()
    Node.objects.filter(id__in=[ME.node_id, OTHER.node_id]).delete()


def test_nobody_owns_a_session_no_one_runs_and_no_one_leases() -> None:
    assert ownership.owner(SID).where is Where.NOBODY
    assert not ownership.owner(SID).anyone


def test_the_local_manager_running_or_starting_it_makes_it_ours() -> None:
    manager = SessionManager(load_config())
    ownership.set_local_manager(manager)
    manager.reserved.add(SID)  # being created: admitted, its runtime not registered yet
    assert ownership.owner(SID).where is Where.HERE
    assert ownership.runs_here(SID)
    manager.reserved.discard(SID)
    assert ownership.owner(SID).where is Where.NOBODY


def test_another_nodes_unexpired_lease_names_that_node_and_its_address() -> None:
    ownership.set_local_manager(SessionManager(load_config()))
    cluster.set_identity(ME)
    assert cluster.take(SID, OTHER) is None
    found = ownership.owner(SID)
    assert found.where is Where.ELSEWHERE
    assert found.holder is not None and (found.holder.node_id, found.holder.address) == (OTHER.node_id,
                                                                                         OTHER.address)


def test_outside_the_daemon_a_running_daemon_of_this_home_may_own_it(home: Path) -> None:
    daemon = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        (home / "daemon.json").write_text(json.dumps({"pid": daemon.pid, "started_at": "2026-12-02T09:00:00Z"}))
        assert ownership.owner(SID).where is Where.THIS_HOME
    finally:
        daemon.kill()
        daemon.wait()
    assert ownership.owner(SID).where is Where.NOBODY  # its process is gone: nobody


def test_one_request_reads_the_lease_once() -> None:
    ownership.set_local_manager(SessionManager(load_config()))
    cluster.set_identity(ME)
    assert cluster.take(SID, OTHER) is None
    with ownership.one_lease_read(), CaptureQueriesContext(connection) as queries:
        first = ownership.owner(SID)
        again = ownership.owner(SID)
        held = ownership.holder_elsewhere(SID)
    lease_reads = [q for q in queries.captured_queries if "sessionlease" in q["sql"].lower()]
    assert len(lease_reads) == 1, lease_reads
    assert first == again and held == first.holder
    with CaptureQueriesContext(connection) as outside:  # outside a request every question reads it afresh
        ownership.owner(SID)
        ownership.owner(SID)
    assert len([q for q in outside.captured_queries if "sessionlease" in q["sql"].lower()]) == 2


def test_a_read_of_a_folder_on_this_node_is_answered_here_even_while_another_node_runs_it(home: Path) -> None:
    ownership.set_local_manager(SessionManager(load_config()))
    cluster.set_identity(ME)
    assert cluster.take(SID, OTHER) is None
    (home / "sessions" / SID).mkdir(parents=True)
    assert ownership.route_target(SID, read=True) is None
    target = ownership.route_target(SID, read=False)  # work on its runtime goes to the node that runs it
    assert target is not None and target.node_id == OTHER.node_id
