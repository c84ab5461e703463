"""Claiming a periodic tick in the catalog (`sessions/catalog/claims.py`): a compare-and-set on `next_run_at`, so any
number of workers may race for the same tick and exactly one runs it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from datetime import timedelta

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from django.db import connection  # noqa: E402

from sessions.catalog.claims import claim_lease, claim_tick, claimer_id  # noqa: E402
from sessions.models import SweepClaim  # noqa: E402
from sessions.store import folder  # noqa: E402


@pytest.fixture(autouse=True)
def clean_claims() -> None:
    SweepClaim.objects.all().delete()


def test_a_tick_is_claimed_once_and_the_next_one_when_it_falls_due() -> None:
    now = folder.utcnow()
    assert claim_tick("supervision:a", 2.0, now=now, claimer="first")
    assert not claim_tick("supervision:a", 2.0, now=now, claimer="second")
    assert not claim_tick("supervision:a", 2.0, now=now + timedelta(seconds=1.9), claimer="second")
    assert claim_tick("supervision:a", 2.0, now=now + timedelta(seconds=2), claimer="second")
    row = SweepClaim.objects.get(name="supervision:a")
    assert (row.claimed_by, row.claims, row.next_run_at) == ("second", 2, now + timedelta(seconds=4))


def test_claims_of_different_names_do_not_interfere() -> None:
    now = folder.utcnow()
    assert claim_tick("supervision:a", 60.0, now=now)
    assert claim_tick("supervision:b", 60.0, now=now)
    assert claim_tick("tombstones:a", 60.0, now=now)


def test_a_claim_from_a_stale_read_changes_nothing() -> None:
    """The compare-and-set itself: a worker that read `next_run_at` before another claimed updates no row."""
    now = folder.utcnow()
    assert claim_tick("supervision:a", 1.0, now=now, claimer="winner")
    stale_read = now  # the value a slower worker read before the winner moved it
    changed = SweepClaim.objects.filter(name="supervision:a", next_run_at=stale_read).update(claimed_by="loser")
    assert changed == 0
    assert SweepClaim.objects.get(name="supervision:a").claimed_by == "winner"


def test_racing_workers_claim_each_tick_exactly_once() -> None:
    if connection.vendor == "sqlite" and connection.settings_dict["NAME"] == ":memory:":
        pytest.skip("threads need a shared catalog file")
    workers, ticks = 4, 25
    start = folder.utcnow()
    won: list[list[int]] = [[] for _ in range(workers)]
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def work(index: int) -> None:
        from django.db import connection as thread_connection

        try:
            for tick in range(ticks):
                barrier.wait(timeout=30)  # all workers go for the same tick at once
                if claim_tick("supervision:race", 1.0, now=start + timedelta(seconds=tick), claimer=f"w{index}"):
                    won[index].append(tick)
        except BaseException as exc:  # noqa: BLE001 - reported below: an assertion in a thread would be lost
            errors.append(exc)
            barrier.abort()
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    claimed = sorted(tick for ticks_won in won for tick in ticks_won)
    assert claimed == list(range(ticks)), won
    assert SweepClaim.objects.get(name="supervision:race").claims == ticks


def test_a_lease_held_by_a_process_of_this_host_that_is_gone_is_taken_over_at_once() -> None:
    # A daemon killed between its transcript claim and its verdict: the next daemon must not wait out the lease
    # (it used to be ten years: the cut turn stayed open for good).
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = "transcript:sess_x:run1"
    assert claim_tick(name, 3600.0, claimer=f"{socket.gethostname()}:{dead.pid}:MainThread")
    assert claim_lease(name, 60.0)
    assert SweepClaim.objects.get(name=name).claimed_by == claimer_id()


def test_a_lease_held_by_a_live_process_or_another_host_stands_until_it_ends() -> None:
    name = "transcript:sess_y:run1"
    assert claim_tick(name, 3600.0, claimer=f"{socket.gethostname()}:{os.getpid()}:MainThread")
    assert not claim_lease(name, 60.0)
    other = "transcript:sess_z:run1"
    assert claim_tick(other, 3600.0, claimer="another-host:1:MainThread")
    assert not claim_lease(other, 60.0)
    now = folder.utcnow()
    assert claim_tick("transcript:sess_w:run1", 60.0, now=now - timedelta(seconds=61), claimer="another-host:1:x")
    assert claim_lease("transcript:sess_w:run1", 60.0)  # the lease ended
