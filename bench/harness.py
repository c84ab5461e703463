"""Starts the real daemon the way the test suite does (tests/conftest.py::start_daemon), plus bench helpers."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.profiling import Profiler
from sessions.store.folder import events_path
from tests.conftest import TITLES, Daemon, start_daemon, toml_list, wait_for

BENCH_DIR = Path(__file__).resolve().parent
TICKER = BENCH_DIR / "agents" / "ticker_agent.py"

# Set by `--profile`: measured phases are sampled with py-spy into this folder; summaries collect here.
PROFILE_DIR: Path | None = None
PROFILES: list[tuple[str, str]] = []


def bench_config() -> str:
    """Appended to the test suite's config (which already has the scripted agent as `scripted`). Auto-title on,
    as a user has it (the test config turns it off): the latency phase waits out each session's pass."""
    command = toml_list([sys.executable, str(TICKER)])
    # 20 ticker sessions, the turn beside them and their auto-title passes: above the default agent limit (20).
    return "\n".join(["[providers.ticker]", f"command = {command}", "", "[agents.ticker]",
                      'provider = "ticker"', "", "[limits]", "max_concurrent_agents = 64", ""]) + TITLES


@dataclass
class Memory:
    rss_kib: int
    hwm_kib: int

    @property
    def rss_mib(self) -> float:
        return self.rss_kib / 1024

    @property
    def hwm_mib(self) -> float:
        return self.hwm_kib / 1024


def proc_memory(pid: int) -> Memory:
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return Memory(fields["VmRSS"], fields["VmHWM"])


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0, own processes); False when not permitted."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class BenchDaemon:
    """The real daemon in its own COMPOZY_HOME, with the bench agents configured."""

    def __init__(self, home: Path, extra: str | None = None) -> None:
        """`extra`: the config added to the test suite's instead of `bench_config()`."""
        self.home = home
        self.workspace = home.parent / f"{home.name}-workspace"
        self.workspace.mkdir(parents=True, exist_ok=True)
        (self.workspace / "README.md").write_text("bench workspace\n")
        self.d: Daemon = start_daemon(home, extra_config=bench_config() if extra is None else extra)

    # ---- plumbing --------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.d.proc.pid

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return self.d.port

    def memory(self) -> Memory:
        return proc_memory(self.pid)

    def stop(self) -> None:
        self.d.stop()

    @contextlib.contextmanager
    def profiling(self, label: str) -> Iterator[None]:
        """Sample the daemon with py-spy for the duration of the block (only under `--profile`)."""
        if PROFILE_DIR is None:
            yield
            return
        profiler = Profiler(self.pid, PROFILE_DIR / f"profile-{label}.txt")
        profiler.start()
        try:
            yield
        finally:
            PROFILES.append((label, profiler.stop() or "no profile"))

    def log_tail(self, chars: int = 3000) -> str:
        return self.d.log()[-chars:]

    # ---- sessions --------------------------------------------------------------------------

    def create(self, agent: str, *, wait: bool = True, timeout: float = 60.0) -> dict[str, Any]:
        response = self.d.http.post("/api/sessions", json={"agent_name": agent,
                                                           "workspace_path": str(self.workspace)})
        if response.status_code != 201:
            raise RuntimeError(f"create session failed: {response.status_code} {response.text}")
        session = response.json()["session"]
        if wait:
            session = self.wait_state(session["id"], {"active"}, timeout)
        return session

    def wait_state(self, session_id: str, states: set[str], timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            session = self.d.session(session_id)
            if session["state"] in states:
                return session
            if session["state"] == "stopped" and "stopped" not in states:
                raise RuntimeError(f"session {session_id} stopped: {json.dumps(session)[:1000]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"session {session_id} stuck in {session['state']}, wanted {states}")
            time.sleep(0.05)

    def scoped(self, session: dict[str, Any], suffix: str = "") -> str:
        return f"/api/workspaces/{session['workspace_id']}/sessions/{session['id']}{suffix}"

    def prompt(self, session: dict[str, Any], message: str) -> dict[str, Any]:
        # The JSON prompt result: a started turn otherwise answers with its stream (docs/reference/events.md §6.2).
        response = self.d.http.post(self.scoped(session, "/prompt"), json={"message": message},
                                    headers={"Accept": "application/json"})
        if response.status_code not in (200, 202):
            raise RuntimeError(f"prompt failed: {response.status_code} {response.text}")
        return response.json()

    def stop_session(self, session: dict[str, Any]) -> None:
        response = self.d.http.post(self.scoped(session, "/stop"))
        if response.status_code != 204:
            raise RuntimeError(f"stop failed: {response.status_code} {response.text}")
        self.wait_state(session["id"], {"stopped"})

    def newest_sequence(self, session: dict[str, Any]) -> int:
        response = self.d.http.get(self.scoped(session, "/events"), params={"limit": 1})
        response.raise_for_status()
        events = response.json()["events"]
        return int(events[-1]["sequence"]) if events else 0

    def wait_done(self, session: dict[str, Any], turn_id: str, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            response = self.d.http.get(self.scoped(session, "/events"),
                                       params={"type": "done", "turn_id": turn_id, "limit": 1})
            response.raise_for_status()
            events = response.json()["events"]
            if events:
                return events[-1]
            if time.monotonic() > deadline:
                raise RuntimeError(f"turn {turn_id} of {session['id']} not done in {timeout}s")
            time.sleep(0.05)

    def agent_pid(self, session: dict[str, Any]) -> int | None:
        """The agent subprocess of a live session, from its meta.json liveness block."""
        pid = (self.d.meta(session["id"]).get("liveness") or {}).get("subprocess_pid")
        return int(pid) if pid else None

    def wait_title_settled(self, session: dict[str, Any], timeout: float = 120.0) -> None:
        """The first turn of an unnamed session starts a one-off auto-title agent; wait until it is done,
        so its process start-up is not measured as streaming latency. meta.json records the pass only at
        turn end, after `done`, so "no record yet" is not "done": wait for a name or a final status."""
        def settled() -> bool:
            meta = self.d.meta(session["id"])
            return bool(meta.get("name")) or (meta.get("auto_title") or {}).get("status") in ("failed", "skipped")

        wait_for(settled, timeout, what=f"the auto-title pass of {session['id']}")

    def events_db(self, session: dict[str, Any]) -> Path:
        return events_path(session["id"], self.home)

    def stream_path(self, session: dict[str, Any]) -> str:
        # Always raw frames: the benchmark pins the raw contract (transcript frames may not exist yet).
        return self.scoped(session, "/stream") + "?frames=raw"


def environment_note() -> str:
    cpus = os.cpu_count() or 0
    return (f"{cpus} CPU(s) shared by the daemon, the agent subprocesses and the bench clients; "
            "client CPU time competes with the daemon, so figures are a lower bound on the daemon alone.")


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process (its own threads, not children) from /proc/<pid>/stat; 0 if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text() if pid > 0 else ""
    except OSError:
        stat = ""
    if not stat:
        return 0.0, 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def daemon_cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of the daemon and of its store writer process: the SQLite half of its commits runs
    there (sessions/store/writer/process.py), and it is the daemon's cost as much as the loop's own."""
    user, system = cpu_times(pid)
    for child in store_writer_pids(pid):
        u, s = cpu_times(child)
        user, system = user + u, system + s
    return user, system


def store_writer_pids(pid: int) -> list[int]:
    """The daemon's store writer process(es), found among its children by their command line."""
    found = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                for child in (task / "children").read_text().split():
                    cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                    if b"sessions.store.writer.process" in cmdline:
                        found.append(int(child))
    return found


def daemon_cpu_seconds(pid: int) -> float:
    return sum(daemon_cpu_times(pid))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (its own threads, not children); 0 if gone."""
    return sum(cpu_times(pid))


def cpu_probe(seconds: float = 0.5) -> float:
    """Share of one core a busy thread actually gets right now (1.0 on an idle box); shows contention
    from other work on the machine, which would otherwise silently inflate latencies."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    x = 0
    while time.perf_counter() - wall0 < seconds:
        x += 1
    return (time.thread_time() - cpu0) / (time.perf_counter() - wall0)


def load_average() -> float:
    return os.getloadavg()[0]
