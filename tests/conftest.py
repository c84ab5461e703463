"""Shared test harness: a real daemon (daphne) on a free loopback port with a temporary COMPOZY_HOME,
configured with the scripted ACP test agent under several providers, auto-title off."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from compozy_base import process

ROOT = Path(__file__).resolve().parent.parent
# The scripted ACP agent every test provider runs: standard library only, so a spawn costs milliseconds.
SCRIPTED = ROOT / "tests" / "agents" / "scripted_agent.py"
# Its twin on the ACP SDK (same scenarios, same wire; about a second of CPU to start): for the tests whose
# subject is the SDK's own behaviour (`start_daemon(..., agent=SDK_AGENT)`).
SDK_AGENT = ROOT / "tests" / "agents" / "sdk_agent.py"
# Asks `POST …/prompt` for its JSON result rather than the stream a started turn answers by default.
JSON_ONLY = {"Accept": "application/json"}


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


# Agents unconfined (`[sandbox] mode = "off"`): for the tests of the weaker mode's process handling, which read an
# agent's own pids (`os.getpid()`, `echo $$`) on the host. In the sandbox's pid namespace those are the namespace's
# pids, and the sandbox ends an agent's processes with its own (tests/integration/test_sandbox.py tests that path).
def scripted_provider(name: str, home: Path, *args: str, env: dict[str, str] | None = None,
                      auth_method: str = "") -> str:
    """A `[providers.NAME]` running the scripted agent with `args` (and `env`, `auth_method` when given), its ACP
    calls logged to `home/calls-NAME.jsonl` (read by `agent_calls`), and an `[agents.NAME]` on it."""
    command = [sys.executable, str(SCRIPTED), "--call-log", str(home / f"calls-{name}.jsonl"), *args]
    lines = [f"[providers.{name}]", f"command = {json.dumps(command)}"]
    if env:
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }")
    if auth_method:
        lines.append(f'auth_method = "{auth_method}"')
    return "\n".join([*lines, "", f"[agents.{name}]", f'provider = "{name}"', "", ""])


UNCONFINED = '[sandbox]\nmode = "off"\n'

# The auto-title pass is a second agent run per session: off in the test config (`daemon_config`) unless `extra`
# has a `[roles.auto_title]` table of its own; the tests about titles turn it on with TITLES.
NO_TITLE = "[roles.auto_title]\nenabled = false\n"
TITLES = "[roles.auto_title]\nenabled = true\n"
# An agent deaf to SIGTERM (`wedge`) is killed a second after it, not five: the escalation is the same, and the stop
# tests cross it in 3 s instead of 7. A module that needs the production value sets its own `[session.stop]`.
FAST_STOP = '[session.stop]\nkill_grace = "1s"\n'


def daemon_config(home: Path, extra: str = "", agent: Path = SCRIPTED) -> str:
    """Providers for every scripted scenario family (each running `agent`); agents of the same names use them."""
    state_dir = home / "agent-state"
    prompt_log = home / "prompts.jsonl"
    command = [sys.executable, str(agent)]
    providers = {
        "scripted": [*command, "--prompt-log", str(prompt_log)],
        "scripted_load": [*command, "--load-session", "--state-dir", str(state_dir), "--prompt-log", str(prompt_log)],
        "stubborn": [*command, "--ignore-cancel"],
        "broken": [*command, "--broken-handshake"],
        "failnew": [*command, "--fail-new-session"],
        "dies": [*command, "--exit-on-start"],
        "noisy": [*command, "--stderr-at-start", "1100000"],
        "missing": ["/nonexistent/bin/agent-acp"],
    }
    lines = []
    for name, command in providers.items():
        lines += [f"[providers.{name}]", f"command = {toml_list(command)}",
                  'env = { COMPOZY_TEST_MARK = "from-provider" }',
                  "", f"[agents.{name}]", f'provider = "{name}"', ""]
    lines += ["[agents.reader]", 'provider = "scripted"', 'permissions = "approve-reads"', "",
              "[agents.denier]", 'provider = "scripted"', 'permissions = "deny-all"', ""]
    titles = "" if "[roles.auto_title]" in extra else NO_TITLE
    stop = "" if "[session.stop]" in extra else FAST_STOP
    # The scripted agents write their logs, flags and state into the test's home (prompts.jsonl, agent-state,
    # call logs), which the sandbox hides from agents: shown to them again here, so those tests read what the
    # agent wrote. The sandbox's own tests (tests/integration/test_sandbox.py) run with nothing shown.
    sandbox = "" if "[sandbox]" in extra else f"[sandbox]\nexpose = {toml_list([str(home.resolve())])}\n"
    return ("\n".join(lines) + "\n" + extra + ("\n" if extra and not extra.endswith("\n") else "") + titles
            + stop + sandbox)


@dataclass
class Daemon:
    home: Path
    proc: subprocess.Popen[bytes]
    port: int
    env: dict[str, str]
    log_path: Path
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = self.client(timeout=30.0)

    @property
    def headers(self) -> dict[str, str]:
        """Headers every HTTP client of the tests sends (the one place credentials come from)."""
        return self.auth

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        """The token the daemon created in its home at first start; every TCP request needs it."""
        return (self.home / "token").read_text().strip()

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **kwargs: Any) -> httpx.Client:
        """An httpx client on the daemon's TCP port that sends the token."""
        return httpx.Client(base_url=self.base_url, headers=self.auth, **kwargs)

    def login_url(self) -> str:
        """A one-time dashboard login link, minted over the socket by `compozy dashboard` as a user would."""
        return self.cli_json("dashboard", "--no-open")["url"]

    def cli(self, *args: str, timeout: float = 60.0, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "compozy.cli", *args], env=self.env, cwd=str(ROOT),
                              capture_output=True, text=True, timeout=timeout, input=input)

    def cli_json(self, *args: str, timeout: float = 60.0) -> Any:
        result = self.cli(*args, "-o", "json", timeout=timeout)
        assert result.returncode == 0, f"compozy {' '.join(args)} failed: {result.stderr or result.stdout}"
        return json.loads(result.stdout)

    def session(self, session_id: str) -> dict[str, Any]:
        response = self.http.get(f"/api/sessions/{session_id}")
        assert response.status_code == 200, response.text
        return response.json()["session"]

    def scoped(self, session_id: str, suffix: str = "") -> str:
        return f"/api/workspaces/{self.session(session_id)['workspace_id']}/sessions/{session_id}{suffix}"

    def wait_state(self, session_id: str, states: set[str], timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            s = self.session(session_id)
            if s["state"] in states:
                return s
            if time.monotonic() > deadline:
                raise AssertionError(f"session {session_id} stuck in {s['state']}, wanted {states}")
            time.sleep(0.05)

    def events(self, session_id: str, **query: Any) -> list[dict[str, Any]]:
        response = self.http.get(self.scoped(session_id, "/events"), params={"limit": 1000, **query})
        assert response.status_code == 200, response.text
        return response.json()["events"]

    def all_events(self, session_id: str, after: int = 0, **query: Any) -> list[dict[str, Any]]:
        """Every event after `after`, oldest first, paged by `after_sequence` (a plain read returns only the
        newest page)."""
        rows: list[dict[str, Any]] = []
        while True:
            after = rows[-1]["sequence"] if rows else after
            page = self.events(session_id, after_sequence=after, **query)
            if not page:
                return rows
            rows += page

    def turn_events(self, session_id: str, turn_id: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The events of one turn, once it ended (`done` or `error`) or the session stopped after it began (a stop
        earlier in the session's history, before a reactivation, ends nothing)."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.all_events(session_id)
            mine = [e for e in rows if e["turn_id"] == turn_id]
            began = mine[0]["sequence"] if mine else None
            if any(e["type"] in ("done", "error") for e in mine) or (began is not None and any(
                    e["type"] == "session_stopped" and e["sequence"] > began for e in rows)):
                return mine
            if time.monotonic() > deadline:
                raise AssertionError(f"turn {turn_id} of {session_id} did not end: {[e['type'] for e in mine]}")
            time.sleep(0.05)

    def run_turn(self, session_id: str, message: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Prompt an idle session and return the events of that turn once it ended."""
        response = self.prompt(session_id, message)
        assert response.status_code == 200, response.text
        return self.turn_events(session_id, response.json()["prompt"]["turn_id"], timeout)

    def meta(self, session_id: str) -> dict[str, Any]:
        """meta.json as the daemon last wrote it."""
        return json.loads((self.home / "sessions" / session_id / "meta.json").read_text())

    def wait_event(self, session_id: str, type_: str, timeout: float = 30.0, **match: Any) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events(session_id, type=type_):
                if all(event["content"].get(k) == v for k, v in match.items()):
                    return event
            if time.monotonic() > deadline:
                raise AssertionError(f"no {type_} event matching {match} in {session_id}")
            time.sleep(0.05)

    def create(self, workspace: Path, agent: str = "scripted", prompt: str | None = None,
               wait: bool = True, **extra: Any) -> dict[str, Any]:
        """A session created on this daemon: pinned here (`X-Compozy-Placement: here`), so a cluster test knows
        which node runs it; tests/integration/test_placement.py creates without the pin."""
        body: dict[str, Any] = {"agent_name": agent, "workspace_path": str(workspace), **extra}
        if prompt is not None:
            body["prompt"] = prompt
        response = self.http.post("/api/sessions", json=body, headers={"x-compozy-placement": "here"})
        assert response.status_code == 201, response.text
        session = response.json()["session"]
        if wait:
            session = self.wait_state(session["id"], {"active", "stopped"})
        return session

    def prompt(self, session_id: str, message: str, **extra: Any) -> httpx.Response:
        """The JSON prompt result (`{"prompt": {…}}`): a started turn otherwise answers with a stream."""
        return self.http.post(self.scoped(session_id, "/prompt"), json={"message": message, **extra},
                              headers=JSON_ONLY)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.http.close()
        return self.proc.returncode


def job_ticks(home: Path, job: str) -> tuple[int, float]:
    """How many ticks of the daemon's periodic `job` (`supervision`, `tasks`, `wake_cycle`, `health_sweep`, …) ran, and
    when the last one started (epoch seconds; 0.0: never), read from the catalog's claim rows
    (sessions/catalog/claims.py)."""
    import sqlite3
    from contextlib import closing
    from datetime import datetime

    with closing(sqlite3.connect(f"file:{home / 'catalog.sqlite3'}?mode=ro", uri=True, timeout=10)) as conn:
        row = conn.execute("SELECT claims, claimed_at FROM compozy_sessions_sweepclaim WHERE name LIKE ?",
                           (f"{job}:%",)).fetchone()
    if row is None or row[1] is None:
        return (int(row[0]) if row else 0), 0.0
    stamp = str(row[1]).replace(" ", "T")
    parsed = datetime.fromisoformat(stamp if ("+" in stamp[10:] or stamp.endswith("Z")) else stamp + "+00:00")
    return int(row[0]), parsed.timestamp()


def wait_job_ticks(home: Path, job: str, *, after: float | None = None, ticks: int = 2,
                   timeout: float = 60.0) -> None:
    """Wait until `ticks` more ticks of `job` ran, the last of them started after `after` (epoch seconds, default
    now): the condition a test that asserts that something did NOT happen waits on, instead of a sleep. A job that
    would have acted by `after` had its chance in the first of those ticks, and handed its action on before the
    next one began."""
    start, _ = job_ticks(home, job)
    after = time.time() if after is None else after

    def passed() -> bool:
        claims, last = job_ticks(home, job)
        return claims >= start + ticks and last > after

    wait_for(passed, timeout, f"{ticks} more ticks of the {job} job after {after:.1f}")


def pid_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie counts as gone (orphans reparent to a PID 1 that may never reap)."""
    return process.alive(pid)


def wait_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def listening_port(pid: int) -> int | None:
    """The TCP port process `pid` listens on, from /proc (its socket inodes matched in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                return int(fields[1].rsplit(":", 1)[1], 16)
    return None


def module_daemon(extra_config: str = "", timeout: float = 120.0, agent: Path = SCRIPTED) -> Any:
    """A module-scoped `daemon` fixture (`daemon = module_daemon(TITLES)`): one real daemon for every test of
    the module, started with `extra_config` appended to the test config."""

    @pytest.fixture(scope="module")
    def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
        d = start_daemon(tmp_path_factory.mktemp("home"), extra_config=extra_config, timeout=timeout, agent=agent)
        yield d
        d.stop()

    return daemon


def start_daemon(home: Path, extra_config: str = "", env_extra: dict[str, str] | None = None,
                 timeout: float = 60.0, port: int | None = None, agent: Path = SCRIPTED,
                 output: int | None = None, log_path: Path | None = None) -> Daemon:
    """Start a foreground daemon on `port` (default 0: any free port, race-free). The port is read from
    the daemon record, else from /proc: the launcher records `0` when given `--port 0`. A home without a
    config.toml gets `daemon_config(home, extra_config, agent)`. Its stdout and stderr go to `log_path` (default
    `home/daemon-test.log`, what `Daemon.log()` reads), or to `output` when given (e.g. `subprocess.DEVNULL`, as a
    terminal at a desk: `log_path` is then the file the daemon writes by itself)."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.toml"
    if not config.exists():
        config.write_text(daemon_config(home, extra_config, agent))
    env = {**os.environ, "COMPOZY_HOME": str(home), **(env_extra or {})}
    env.pop("COMPOZY_URL", None)
    log_path = log_path or home / "daemon-test.log"
    # The daemon writes to the file for its whole life.
    log = output if output is not None else open(log_path, "ab")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "compozy.cli", "daemon", "start", "--foreground",
                             "--port", str(port or 0)], env=env, cwd=str(ROOT), stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=True)

    def tail() -> str:
        return log_path.read_text(errors="replace")[-3000:] if log_path.exists() else "(no log)"

    record_path = home / "daemon.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if record_path.exists():
            try:
                record = json.loads(record_path.read_text())
            except json.JSONDecodeError:
                record = {}
            if record.get("pid") == proc.pid:
                actual = int(record.get("port") or 0) or listening_port(proc.pid)
                if actual:
                    return Daemon(home, proc, actual, env, log_path)
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited ({proc.returncode}): {tail()}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"daemon not ready in {timeout}s: {tail()}")


def crash_mid_tool_call(home: Path, workspace: Path, extra_config: str = "", timeout: float = 120.0) -> str:
    """A daemon of `home` killed (SIGKILL) while a session's turn waits in a tool call, its orphaned agent gone:
    the session is left `active` with an open turn, as a crash leaves it. Returns the session id."""
    first = start_daemon(home, extra_config=extra_config, timeout=timeout)
    try:
        session_id = first.create(workspace)["id"]
        assert first.prompt(session_id, "toolhang").status_code == 200
        first.wait_event(session_id, "tool_call")
        agent_pid = first.meta(session_id)["liveness"]["subprocess_pid"]
    finally:
        first.stop(signal.SIGKILL)
    assert wait_gone(agent_pid, 60), "the orphaned agent did not exit"
    return str(session_id)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("home"))
    yield d
    d.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "repo"
    ws.mkdir()
    (ws / "README.md").write_text("hello from the workspace\n")
    return ws


MARKER = "transcript_marker.created"


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


CHUNK = re.compile(r"c\d+ ")


def chunk_count(texts: Any) -> int:
    """How many of the scripted agent's numbered chunks (`c0 c1 …`, from `stream` and `slow`) the texts hold.
    The store merges adjacent chunks of one write batch into one row (docs/reference/events.md §2), so rows are not
    chunks: count what they say."""
    return sum(len(CHUNK.findall(t)) for t in texts)


def of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


def said(events: list[dict[str, Any]]) -> str:
    """What the agent said in `events` (a turn's, a session's): its messages' text, joined."""
    return "".join(e["content"].get("text", "") for e in of_type(events, "agent_message"))


def agent_calls(daemon: Daemon, name: str) -> list[dict[str, Any]]:
    """The ACP calls the daemon made to `scripted_provider(name, daemon.home, ...)`'s agents, oldest first."""
    path = daemon.home / f"calls-{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def markers(events: list[dict[str, Any]], title: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == MARKER and e["content"]["title"] == title]
