"""Run ownership in the catalog (`tasks/leases.py`) and the recovery rules (`recovery.py`), on a real
SQLite catalog: ClaimNextRun gives each run to exactly one of many racing workers (threads and processes),
HeartbeatRunLease renews only the holder's lease, a lapsed lease is recovered once, and recovery requeues one
linked attempt within `max_attempts` or leaves the task needing attention."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from sessions.models import Workspace  # noqa: E402
from sessions.store import folder  # noqa: E402
from tasks import services  # noqa: E402
from tasks.enums import RunOutcome, RunStatus, TaskAction, TaskReason, TaskStatus  # noqa: E402
from tasks.leases import claim_next_run, expired_runs, heartbeat_run_lease  # noqa: E402
from tasks.models import Task, TaskEvent, TaskRun  # noqa: E402
from tasks.recovery import recover  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def clear_tasks() -> None:
    TaskEvent.objects.all().delete()
    TaskRun.objects.all().delete()
    Task.objects.all().delete()


@pytest.fixture(autouse=True)
def clean() -> Iterator[Workspace]:
    clear_tasks()
    root = tempfile.mkdtemp(prefix="compozy-task-ws-")
    now = folder.utcnow()
    yield Workspace.objects.create(id=f"ws_{os.urandom(8).hex()}", name=root, root_dir=root, created_at=now,
                                   updated_at=now)
    # Tasks hold their workspace (a protected key): leave the shared test catalog as other modules expect it.
    clear_tasks()


def make_tasks(ws: Workspace, count: int, max_attempts: int = 2) -> list[str]:
    return [services.create_task({"prompt": f"do {i}", "workspace": ws.id, "max_attempts": max_attempts})["task"]["id"]
            for i in range(count)]


def shared_catalog() -> None:
    if connection.vendor == "sqlite" and connection.settings_dict["NAME"] == ":memory:":
        pytest.skip("racing workers need a shared catalog file")


def test_claim_next_run_takes_the_oldest_queued_run_and_marks_its_task_running(clean: Workspace) -> None:
    first, second = make_tasks(clean, 2)
    run = claim_next_run("daemon-a", 30.0)
    assert run is not None and run.task_id == first and run.status == RunStatus.RUNNING
    assert run.lease_owner == "daemon-a" and run.lease_expires_at > folder.utcnow()
    assert Task.objects.get(id=first).status == TaskStatus.RUNNING
    assert claim_next_run("daemon-b", 30.0).task_id == second
    assert claim_next_run("daemon-c", 30.0) is None


def test_a_canceled_task_is_never_claimed(clean: Workspace) -> None:
    (task_id,) = make_tasks(clean, 1)
    services.cancel_task_record(task_id)
    assert claim_next_run("daemon-a", 30.0) is None
    assert TaskRun.objects.get(task_id=task_id).outcome == RunOutcome.CANCELED


def test_racing_worker_threads_claim_each_run_exactly_once(clean: Workspace) -> None:
    shared_catalog()
    runs = 30
    make_tasks(clean, runs)
    workers = 6
    claimed: list[list[str]] = [[] for _ in range(workers)]
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def work(index: int) -> None:
        from django.db import connection as thread_connection

        try:
            barrier.wait(timeout=30)
            while (run := claim_next_run(f"worker-{index}", 30.0)) is not None:
                claimed[index].append(run.id)
        except BaseException as exc:  # noqa: BLE001 - reported below: an assertion in a thread would be lost
            errors.append(exc)
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    every = [run_id for ids in claimed for run_id in ids]
    assert len(every) == runs and len(set(every)) == runs, Counter(every).most_common(3)
    owners = dict(TaskRun.objects.values_list("id", "lease_owner"))
    for index, ids in enumerate(claimed):
        assert all(owners[run_id] == f"worker-{index}" for run_id in ids)  # the winner is who the row names


CLAIMER = """
import json, os, sys, time
os.environ["DJANGO_SETTINGS_MODULE"] = "compozy_site.settings"
import django
django.setup()
from tasks.leases import claim_next_run
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
won = []
while (run := claim_next_run(sys.argv[1], 30.0)) is not None:
    won.append(run.id)
print(json.dumps(won))
"""


def test_two_consumer_processes_on_one_catalog_never_run_a_task_twice(clean: Workspace) -> None:
    """Two processes (as two huey consumers would be) race ClaimNextRun on the same catalog file."""
    shared_catalog()
    runs = 24
    make_tasks(clean, runs)
    home = Path(settings.DATABASES["default"]["NAME"]).parent
    env = {**os.environ, "COMPOZY_HOME": str(home), "PYTHONPATH": str(ROOT)}
    import time

    start = str(time.time() + 3.0)  # both begin at the same instant, after their imports
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, f"consumer-{i}", start], env=env, cwd=str(ROOT),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    every = results[0] + results[1]
    assert sorted(every) == sorted(TaskRun.objects.values_list("id", flat=True))
    assert len(set(every)) == len(every) == runs


def test_only_the_holder_renews_a_lease_and_a_lapsed_one_is_recovered_once(clean: Workspace) -> None:
    make_tasks(clean, 1)
    run = claim_next_run("daemon-a", 5.0)
    assert heartbeat_run_lease(run.id, "daemon-a", 5.0)
    assert not heartbeat_run_lease(run.id, "daemon-b", 5.0)
    later = folder.utcnow() + timedelta(seconds=10)
    won = expired_runs(now=later)
    assert [r.id for r in won] == [run.id]
    assert expired_runs(now=later) == []  # a second worker finds nothing to recover
    assert not heartbeat_run_lease(run.id, "daemon-a", 5.0)  # the old holder learns it lost the run
    assert TaskRun.objects.get(id=run.id).outcome == RunOutcome.LEASE_EXPIRED


def finished(run: TaskRun, outcome: RunOutcome) -> TaskRun:
    TaskRun.objects.filter(id=run.id).update(status=RunStatus.FINISHED, outcome=outcome)
    return TaskRun.objects.get(id=run.id)


def test_a_verified_stop_requeues_one_linked_attempt_then_the_task_needs_attention(clean: Workspace) -> None:
    (task_id,) = make_tasks(clean, 1, max_attempts=2)
    first = finished(claim_next_run("daemon-a", 30.0), RunOutcome.SILENT_STOPPED)
    assert recover(first, TaskReason.SUPERVISED_SILENCE, {"verified": True}) == TaskAction.REQUEUE
    task = Task.objects.get(id=task_id)
    assert (task.status, task.requeued) == (TaskStatus.QUEUED, 1)
    second = TaskRun.objects.get(task_id=task_id, attempt=2)
    assert second.recovers_id == first.id and second.status == RunStatus.QUEUED
    row = TaskEvent.objects.get(task_id=task_id, kind="task.run_recovered")
    assert (row.reason, row.action, row.run_id) == ("supervised_silence", "requeue", first.id)
    second = finished(claim_next_run("daemon-a", 30.0), RunOutcome.SILENT_STOPPED)
    assert recover(second, TaskReason.SUPERVISED_SILENCE, {"verified": True}) == TaskAction.ESCALATE
    task = Task.objects.get(id=task_id)
    assert (task.status, task.reason, task.requeued) == (TaskStatus.NEEDS_ATTENTION,
                                                         "supervised_silence_exhausted", 1)


def test_lease_recoveries_count_against_the_same_budget(clean: Workspace) -> None:
    (task_id,) = make_tasks(clean, 1, max_attempts=2)
    first = finished(claim_next_run("daemon-a", 30.0), RunOutcome.LEASE_EXPIRED)
    assert recover(first, TaskReason.LEASE_EXPIRED, {"verified": True}) == TaskAction.REQUEUE
    second = finished(claim_next_run("daemon-b", 30.0), RunOutcome.SILENT_STOPPED)
    assert recover(second, TaskReason.SUPERVISED_SILENCE, {"verified": True}) == TaskAction.ESCALATE
    assert Task.objects.get(id=task_id).reason == "supervised_silence_exhausted"


def test_max_attempts_one_never_retries(clean: Workspace) -> None:
    (task_id,) = make_tasks(clean, 1, max_attempts=1)
    run = finished(claim_next_run("daemon-a", 30.0), RunOutcome.SILENT_STOPPED)
    assert recover(run, TaskReason.SUPERVISED_SILENCE, {"verified": True}) == TaskAction.ESCALATE
    assert TaskRun.objects.filter(task_id=task_id).count() == 1


def test_a_canceled_task_never_retries_and_an_unverified_stop_is_not_repeated(clean: Workspace) -> None:
    canceled, unverified = make_tasks(clean, 2)
    run = claim_next_run("daemon-a", 30.0)
    services.cancel_task_record(canceled)
    assert recover(TaskRun.objects.get(id=run.id), TaskReason.SUPERVISED_SILENCE,
                   {"verified": True}) == TaskAction.NONE
    assert TaskRun.objects.filter(task_id=canceled).count() == 1
    run = finished(claim_next_run("daemon-a", 30.0), RunOutcome.SILENT_STOPPED)
    assert recover(run, TaskReason.SUPERVISED_SILENCE, {"verified": False, "survivors": [123]}) == TaskAction.ESCALATE
    assert Task.objects.get(id=unverified).reason == "stop_unverified"


def test_a_person_retry_starts_a_fresh_budget(clean: Workspace) -> None:
    (task_id,) = make_tasks(clean, 1, max_attempts=1)
    run = finished(claim_next_run("daemon-a", 30.0), RunOutcome.SILENT_STOPPED)
    recover(run, TaskReason.SUPERVISED_SILENCE, {"verified": True})
    record = services.retry_task(task_id)["task"]
    assert record["status"] == "queued" and record["attempts"] == 2
    run = finished(claim_next_run("daemon-a", 30.0), RunOutcome.SILENT_STOPPED)
    assert run.attempt == 2
    assert recover(run, TaskReason.SUPERVISED_SILENCE, {"verified": True}) == TaskAction.ESCALATE
