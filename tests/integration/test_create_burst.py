"""Issue 33 point 4: a burst of creates. 200 `POST /api/sessions` sent at once each get an HTTP answer, 201 or 429
`agent_limit_reached` past `[limits] max_concurrent_agents`, never a reset; the loop stays free meanwhile.

How long `GET /api/status` took during the burst and the loop lag are measured and printed (`-s` shows them),
never asserted: the machine is shared. `bench/create_burst.py` runs the same burst on its own and says what the
figures were before and after agent start-up left the loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Daemon, start_daemon, wait_for

BURST = 200
LIMIT = 20


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("burst-home"), f"[limits]\nmax_concurrent_agents = {LIMIT}\n")
    yield d
    d.stop()


class Burst:
    """`count` creates released together (one connection each), and `GET /api/status` timed meanwhile."""

    def __init__(self, daemon: Daemon, workspace: Path, count: int) -> None:
        self.daemon = daemon
        self.workspace = workspace
        self.count = count
        self.answers: list[httpx.Response | BaseException] = []
        self.status_seconds: list[float] = []
        self.lag: dict[str, object] = {}
        self._lock = threading.Lock()
        self._gate = threading.Barrier(count + 1)
        self._done = threading.Event()

    def _create(self) -> None:
        body = {"agent_name": "scripted", "workspace_path": str(self.workspace)}
        with self.daemon.client(timeout=120.0) as client:
            self._gate.wait()
            try:
                answer: httpx.Response | BaseException = client.post("/api/sessions", json=body)
            except Exception as exc:  # noqa: BLE001 - a reset is what the test looks for: kept and reported
                answer = exc
        with self._lock:
            self.answers.append(answer)

    def _poll_status(self) -> None:
        with self.daemon.client(timeout=120.0) as client:
            self._gate.wait()
            while not self._done.is_set():
                started = time.monotonic()
                response = client.get("/api/status")
                self.status_seconds.append(time.monotonic() - started)
                if response.status_code == 200:
                    self.lag = response.json()["event_loop"]["lag"]

    def run(self) -> None:
        threads = [threading.Thread(target=self._create) for _ in range(self.count)]
        poller = threading.Thread(target=self._poll_status)
        for thread in threads:
            thread.start()
        poller.start()
        for thread in threads:
            thread.join(180)
        self._poller = poller

    def finish(self) -> None:
        """Stop timing status calls (after the admitted sessions started: their start-up is part of the burst)."""
        self._done.set()
        self._poller.join(180)

    def report(self) -> str:
        status = sorted(self.status_seconds)
        windows = self.lag.get("windows") or [{}]
        window = windows[0] if isinstance(windows, list) else {}
        return (f"status calls during the burst: {len(status)}, max {status[-1]:.3f}s, "
                f"median {status[len(status) // 2]:.3f}s; loop lag (10 s window) p99 {window.get('p99_ms')} ms, "
                f"max {window.get('max_ms')} ms, worst since start {self.lag.get('worst_since_start_ms')} ms"
                if status else "no status call finished")


def test_a_burst_of_creates_gets_201_or_429_and_never_a_reset(daemon: Daemon, workspace: Path) -> None:
    burst = Burst(daemon, workspace, BURST)
    burst.run()
    try:
        check_answers(burst)
        created = [a.json()["session"]["id"] for a in burst.answers
                   if isinstance(a, httpx.Response) and a.status_code == 201]
        # Every admitted session starts.
        for session_id in created:
            daemon.wait_state(session_id, {"active"}, timeout=120)
    finally:
        burst.finish()
        print(f"\n{BURST} creates, limit {LIMIT}: {burst.report()}")  # noqa: T201 - the figures, shown with -s
    # The burst leaves nothing behind: each session is stopped and its agent gone.
    for session_id in created:
        assert daemon.http.post(daemon.scoped(session_id, "/stop")).status_code == 204
    for session_id in created:
        daemon.wait_state(session_id, {"stopped"}, timeout=60)
    wait_for(lambda: daemon.cli_json("status")["sessions"]["active"] == 0, 30, "no session left active")


def check_answers(burst: Burst) -> None:
    failures = [a for a in burst.answers if isinstance(a, BaseException)]
    assert not failures, f"{len(failures)} creates got no HTTP answer: {failures[:3]!r}"
    assert len(burst.answers) == BURST
    codes: dict[int, int] = {}
    for answer in burst.answers:
        assert isinstance(answer, httpx.Response)
        codes[answer.status_code] = codes.get(answer.status_code, 0) + 1
        if answer.status_code == 429:
            assert answer.json()["code"] == "agent_limit_reached", answer.text
        else:
            assert answer.status_code == 201, answer.text
    assert 1 <= codes.get(201, 0) <= LIMIT, codes
