"""A node woken after a stall past its lease TTL must not write its stale metadata over a survivor's failover
(cluster rule 4): on a shared store a runtime's meta.json writes wait, as its commits do, until a renewal either
confirms the lease or fences the session. CI once caught the heartbeat doing it: the woken node's first heartbeat
rewrote `active` over the failover's `stopped`, before its lease keeper learned it had been fenced.

In-process (tests/inproc.py): a real SessionRuntime over the real store, no agent; the lease verdict is the
recorder's `may_write`, as `SessionRuntime.__init__` wires it to `cluster.lease_confirmed` on a shared store."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.inproc import InProcessApp, inproc_app


@pytest.fixture()
def app(tmp_path: Path) -> Iterator[InProcessApp]:
    with inproc_app(tmp_path / "home") as running:
        yield running


class Lease:
    """The lease verdict the runtime reads, set by the test; counts the reads so a test can wait for them."""

    def __init__(self) -> None:
        self.confirmed = False
        self.reads = 0
        self._lock = threading.Lock()

    def __call__(self) -> bool:
        with self._lock:
            self.reads += 1
        return self.confirmed


def live_runtime(app: InProcessApp, workspace: Path, lease: Lease) -> Any:
    """A runtime of a session whose meta.json reads `stopped` (a survivor's failover), holding the woken node's
    stale `active` record."""
    from sessions.core.record import SessionRecord
    from sessions.runtime.session import SessionRuntime
    from sessions.store import folder

    session_id = app.stopped_session(workspace)["id"]
    rec = SessionRecord.from_meta({**folder.load_meta(session_id), "state": "active", "stop_reason": "",
                                   "stop_detail": "", "failure": None})
    config = app.manager.config
    runtime = SessionRuntime(app.manager, rec, config=config, provider=config.providers["scripted"],
                             roots=[workspace])
    runtime.recorder.may_write = lease
    return runtime


def meta_state(session_id: str) -> str:
    from sessions.store import folder

    return str(json.loads((folder.session_dir(session_id) / folder.META_FILE).read_text())["state"])


def test_metadata_waits_while_the_lease_is_unconfirmed_and_is_dropped_once_fenced(
        app: InProcessApp, tmp_path: Path) -> None:
    lease = Lease()
    runtime = live_runtime(app, tmp_path, lease)
    write = asyncio.run_coroutine_threadsafe(runtime.persist(), app.loop)
    wait_for(lambda: lease.reads >= 3, timeout=10, what="the write asking for the lease")
    assert not write.done() and meta_state(runtime.id) == "stopped"
    runtime.fenced = True  # the renewal found the lease failed over (SessionManager.hand_off_fence)
    write.result(timeout=10)
    assert meta_state(runtime.id) == "stopped", "a fenced node wrote its stale metadata"


def test_metadata_is_written_once_a_renewal_confirms_the_lease(app: InProcessApp, tmp_path: Path) -> None:
    lease = Lease()
    runtime = live_runtime(app, tmp_path, lease)
    write = asyncio.run_coroutine_threadsafe(runtime.persist(), app.loop)
    wait_for(lambda: lease.reads >= 3, timeout=10, what="the write asking for the lease")
    assert meta_state(runtime.id) == "stopped"
    lease.confirmed = True
    write.result(timeout=10)
    assert meta_state(runtime.id) == "active"


def test_a_snapshot_kept_unsaved_is_not_retried_once_fenced(app: InProcessApp, tmp_path: Path) -> None:
    lease = Lease()
    runtime = live_runtime(app, tmp_path, lease)
    app.manager.runtimes[runtime.id] = runtime
    try:
        snapshot = runtime.rec.model_copy(deep=True)
        app.loop.call_soon_threadsafe(app.manager.keep_unsaved, snapshot)
        wait_for(lambda: lease.reads >= 2, timeout=20, what="the retry asking for the lease")
        assert meta_state(runtime.id) == "stopped"
        runtime.fenced = True
        wait_for(lambda: runtime.id not in app.manager.unsaved_meta, timeout=20, what="the snapshot dropped")
        assert meta_state(runtime.id) == "stopped"
    finally:
        app.loop.call_soon_threadsafe(app.manager.runtimes.pop, runtime.id, None)
