"""Session ownership leases (`sessions/catalog/cluster.py`) on the embedded catalog: taken with a compare-and-set,
renewed by the holder, dead once expired or once their node restarted, claimed once by a survivor."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from django.db import connection  # noqa: E402

from sessions.catalog import cluster  # noqa: E402
from sessions.models import Session, SessionLease, Workspace  # noqa: E402
from sessions.store import folder  # noqa: E402

A = cluster.Identity("node-a", "2026-11-30T09:00:00Z", "http://127.0.0.1:1", 15.0)
A_RESTARTED = cluster.Identity("node-a", "2026-11-30T09:05:00Z", "http://127.0.0.1:1", 15.0)
B = cluster.Identity("node-b", "2026-11-30T09:00:01Z", "http://127.0.0.1:2", 15.0)


def session(session_id: str) -> str:
    now = folder.utcnow()
    ws, _ = Workspace.objects.get_or_create(id="ws_0000000000000001", defaults={
        "name": "leases", "root_dir": "/tmp/leases", "created_at": now, "updated_at": now})
    Session.objects.create(id=session_id, workspace=ws, agent_name="scripted", state="active", created_at=now,
                           updated_at=now)
    return session_id


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    SessionLease.objects.all().delete()
    Session.objects.all().delete()
    yield
    cluster.set_identity(None)


def test_the_first_node_takes_the_lease_and_the_second_is_told_who_holds_it() -> None:
    sid = session("sess_00000000000000a1")
    assert cluster.take(sid, A) is None
    holder = cluster.take(sid, B)
    assert holder is not None and holder.node_id == "node-a" and holder.address == "http://127.0.0.1:1"
    assert SessionLease.objects.get(session_id=sid).node_id == "node-a"


def test_an_expired_lease_moves_to_the_next_taker_and_its_old_holder_learns_it_lost_it() -> None:
    sid = session("sess_00000000000000a2")
    then = folder.utcnow()
    assert cluster.take(sid, A, now=then) is None
    later = then + timedelta(seconds=16)
    assert cluster.take(sid, B, now=later) is None
    assert cluster.renew([sid], A, now=later) == {sid}
    assert cluster.renew([sid], B, now=later) == set()


def test_renewal_keeps_a_lease_alive_past_its_first_expiry() -> None:
    sid = session("sess_00000000000000a3")
    then = folder.utcnow()
    cluster.take(sid, A, now=then)
    assert cluster.renew([sid], A, now=then + timedelta(seconds=10)) == set()
    holder = cluster.take(sid, B, now=then + timedelta(seconds=20))
    assert holder is not None and holder.node_id == "node-a"


def test_a_restarted_node_does_not_wait_out_its_predecessors_leases() -> None:
    sid = session("sess_00000000000000a4")
    cluster.take(sid, A)
    cluster.set_identity(A_RESTARTED)
    assert cluster.holder_elsewhere(sid) is None
    assert [row.session_id for row in cluster.expired()] == [sid]
    assert cluster.take(sid, A_RESTARTED) is None


def test_a_lease_of_another_live_node_makes_the_session_live_here() -> None:
    sid = session("sess_00000000000000a5")
    cluster.take(sid, B)
    cluster.set_identity(A)
    holder = cluster.holder_elsewhere(sid)
    assert holder is not None and holder.node_id == "node-b"
    cluster.release(sid, A)  # not ours: nothing happens
    assert SessionLease.objects.filter(session_id=sid).exists()
    cluster.release(sid, B)
    assert cluster.holder_elsewhere(sid) is None


def test_an_expired_lease_is_claimed_by_exactly_one_survivor() -> None:
    sid = session("sess_00000000000000a6")
    cluster.take(sid, A, now=folder.utcnow() - timedelta(seconds=60))
    rows = cluster.expired()
    assert [r.session_id for r in rows] == [sid]
    assert cluster.claim_expired(rows[0]) is True
    assert cluster.claim_expired(rows[0]) is False


@pytest.mark.skipif(connection.vendor != "sqlite", reason="threads share one SQLite catalog here")
def test_threads_racing_for_one_lease_leave_one_holder() -> None:
    sids = [session(f"sess_00000000000001{i:02x}") for i in range(20)]
    nodes = [cluster.Identity(f"node-{n}", "run", "", 15.0) for n in range(4)]
    wins: dict[str, list[str]] = {sid: [] for sid in sids}
    barrier = threading.Barrier(len(nodes))

    def race(me: cluster.Identity) -> None:
        barrier.wait()
        for sid in sids:
            if cluster.take(sid, me) is None:
                wins[sid].append(me.node_id)
        connection.close()

    threads = [threading.Thread(target=race, args=(me,)) for me in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(w) == 1 for w in wins.values()), wins
    assert {sid: SessionLease.objects.get(session_id=sid).node_id for sid in sids} == {
        sid: w[0] for sid, w in wins.items()}


def test_failover_leaves_a_fence_the_cut_off_run_never_takes_back_but_any_node_may_take() -> None:
    # Failover deleted the lease: the cut-off node's next renewal found no holder, took it back ("ours again") and
    # wrote on over the survivor's repair.
    sid = session("sess_00000000000000a7")
    then = folder.utcnow() - timedelta(seconds=60)
    cluster.take(sid, A, now=then)
    [row] = cluster.expired()
    assert cluster.claim_expired(row) is True
    assert cluster.expired() == []  # failed over once, not again at every sweep
    assert not cluster.leased(sid) and cluster.holder_elsewhere(sid) is None
    assert cluster.renew([sid], A) == {sid}
    fenced = cluster.take(sid, A)
    assert fenced is not None and fenced.fenced, fenced
    assert not cluster.holds(sid, A)
    assert cluster.leases() == [] and all(n["leases"] == 0 for n in cluster.nodes())
    # A reactivation, on any other node or on A's next daemon start, takes it as usual.
    assert cluster.take(sid, A_RESTARTED) is None
    assert cluster.holds(sid, A_RESTARTED) and cluster.leased(sid)


def test_fences_are_dropped_after_a_day() -> None:
    sid = session("sess_00000000000000a8")
    cluster.take(sid, A, now=folder.utcnow() - timedelta(seconds=60))
    [row] = cluster.expired()
    cluster.claim_expired(row)
    assert cluster.drop_old_fences() == 0
    assert cluster.drop_old_fences(folder.utcnow() + cluster.FENCE_KEEP + timedelta(seconds=1)) == 1
    assert not SessionLease.objects.filter(session_id=sid).exists()


def test_a_node_whose_renewals_stopped_answering_stops_confirming_its_leases(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sid = session("sess_00000000000000a9")
    cluster.set_identity(A)
    cluster.take(sid, A)
    cluster.renew([sid], A)
    assert cluster.lease_confirmed(sid)
    clock = cluster.time.monotonic()
    monkeypatch.setattr(cluster.time, "monotonic", lambda: clock + A.lease_ttl * cluster.CONFIRMED_SHARE + 0.1)
    assert not cluster.lease_confirmed(sid)
    assert cluster.renew([sid], A) == set()
    assert cluster.lease_confirmed(sid)
    # A lease found lost stays unconfirmed, whatever else renews, until this run takes it again.
    SessionLease.objects.filter(session_id=sid).delete()
    assert cluster.renew([sid], A) == {sid}
    assert not cluster.lease_confirmed(sid)
    assert cluster.take(sid, A) is None and cluster.lease_confirmed(sid)


def test_a_take_that_completes_while_a_renewal_reads_is_not_undone_by_that_renewal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A create's take raced the lease keeper: the renewal read no row (so "lost"), the take then wrote the lease
    and cleared the verdict, and the renewal's late verdict left the new session unconfirmed for good; every commit
    of it waited (a prompt timed out after 30 s under CI load). The renewal is made to read before the take here."""
    sid = session("sess_00000000000000b1")
    cluster.set_identity(A)
    real_values_list = cluster.SessionLease.objects.none().values_list

    def racing_read(self: object, *fields: str, **kwargs: object) -> object:
        rows = list(real_values_list.__func__(self, *fields, **kwargs))  # type: ignore[attr-defined]
        if sid not in rows:
            assert cluster.take(sid, A) is None  # the create's take lands right after the renewal's read
        return rows

    monkeypatch.setattr(type(cluster.SessionLease.objects.none()), "values_list", racing_read)
    assert cluster.renew([sid], A) == {sid}, "the renewal did read no lease"
    monkeypatch.undo()
    assert cluster.lease_confirmed(sid), "a take newer than the renewal's read must stand"
    # A verdict from a renewal that began after the take still counts.
    SessionLease.objects.filter(session_id=sid).delete()
    assert cluster.renew([sid], A) == {sid}
    assert not cluster.lease_confirmed(sid)


def test_leases_on_sqlite_run_on_the_machines_real_clock_not_the_skewed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test hook skews the node's own clock (what it stamps); the database's clock is the machine's (SQLite) or
    # PostgreSQL's now(): a node a minute fast takes, renews and judges leases as the others do.
    from sessions.store import timestamps

    monkeypatch.setattr(timestamps, "CLOCK_OFFSET", 60.0)
    monkeypatch.setattr(timestamps, "_OFFSET_NS", 60 * 10**9)
    skewed = folder.utcnow()
    database = cluster.db_now()
    assert 59 < (skewed - database).total_seconds() < 61
