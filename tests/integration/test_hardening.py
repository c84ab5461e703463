"""Issue 33's known edges, against the real daemon and the scripted agent: one bad file harms only its owner (a
HEARTBEAT.md or meta.json nested thousands of levels deep), config.toml's typos are said, the daemon's own secrets
stay out of its agents' environments, a hard-linked file is refused, a file too large is the agent's invalid params,
login links are rate-limited, and a start that cannot reach its catalog says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import NO_TITLE, ROOT, Daemon, of_type, start_daemon, wait_for

CLUSTER_TOKEN = "cluster-" + "c" * 40
API_TOKEN = "api-token-" + "a" * 33
TYPO = '\n[session.supervision]\nquiet_afer = "1m"\n'


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("hardening-home")
    # The token is kept when it exists: the test knows it before the start, and exports it under another name
    # as a start script might.
    (home / "token").write_text(API_TOKEN + "\n")
    d = start_daemon(home, NO_TITLE + TYPO, env_extra={
        "COMPOZY_CLUSTER_TOKEN": CLUSTER_TOKEN, "COMPOZY_SECRET_KEY": "s" * 40, "MY_COMPOZY_TOKEN": API_TOKEN,
        "COMPOZY_TEST_PLAIN": "inherited"})
    yield d
    d.stop()


def said(daemon: Daemon, session_id: str, message: str) -> list[str]:
    return [e["content"]["text"] for e in of_type(daemon.run_turn(session_id, message), "agent_message")]


def test_agents_inherit_none_of_the_daemons_secrets(daemon: Daemon, workspace: Path) -> None:
    """The agent's real environment, read by the agent: the cluster token (every node accepts it), the secret key
    and the API token exported under any name are gone; the rest of the daemon's environment is not."""
    session = daemon.create(workspace)
    for name in ("COMPOZY_CLUSTER_TOKEN", "COMPOZY_SECRET_KEY", "MY_COMPOZY_TOKEN"):
        assert said(daemon, session["id"], f"env {name}") == ["<unset>"], name
    assert said(daemon, session["id"], "env COMPOZY_TEST_PLAIN") == ["inherited"]
    assert said(daemon, session["id"], "env COMPOZY_TEST_MARK") == ["from-provider"]  # the provider's own env
    assert said(daemon, session["id"], "env COMPOZY_HOME") == [str(daemon.home)]


def tool_error(daemon: Daemon, session_id: str, message: str) -> str:
    [result] = of_type(daemon.run_turn(session_id, message), "tool_result")
    assert result["content"]["status"] == "failed", result
    return str(result["content"]["tool_error"])


def test_a_hard_linked_file_is_refused_for_reads_and_writes(daemon: Daemon, workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("outside the workspace\n")
    os.link(secret, workspace / "inner.txt")
    session = daemon.create(workspace)

    read = tool_error(daemon, session["id"], "tool read inner.txt")
    assert read.startswith("-32602") and "2 hard links" in read and "allow_hard_links" in read, read
    write = tool_error(daemon, session["id"], "tool write inner.txt pwned")
    assert write.startswith("-32602") and "hard links" in write, write
    assert secret.read_text() == "outside the workspace\n"
    assert "outside the workspace\n" not in json.dumps(daemon.all_events(session["id"]))
    denials = [e["content"] for e in of_type(daemon.all_events(session["id"]), "permission")
               if e["content"].get("action", "").startswith("fs/")]
    assert [d["title"] for d in denials] == ["file with more than one hard link"] * 2
    # A file with one link is served as before.
    assert said(daemon, session["id"], "tool read README.md") == ["tool allow"]


def test_a_file_too_large_is_the_agents_invalid_params(daemon: Daemon, workspace: Path) -> None:
    with open(workspace / "big.bin", "wb") as big:
        big.truncate(11 * 1024 * 1024)  # sparse: nothing is written
    session = daemon.create(workspace)
    error = tool_error(daemon, session["id"], "tool read big.bin")
    assert error.startswith("-32602") and "too large" in error, error


def deep_yaml(levels: int) -> str:
    return "---\nversion: 1\nsummary: " + "[" * levels + "]" * levels + "\n---\nCheck the inbox.\n"


def test_a_deeply_nested_heartbeat_md_is_that_agents_invalid_policy_only(daemon: Daemon, workspace: Path) -> None:
    """10,000 levels of YAML raised RecursionError: inspect and wake dry runs answered 500, the wake job failed
    every cycle for every session, the dashboard's policy panel failed."""
    path = daemon.home / "agents" / "reader" / "HEARTBEAT.md"
    path.parent.mkdir(parents=True)
    path.write_text(deep_yaml(10_000))
    reader = daemon.create(workspace, agent="reader")
    other = daemon.create(workspace, agent="scripted")

    status = daemon.http.get("/api/agents/reader/heartbeat/status")
    assert status.status_code == 200, status.text
    body = status.json()
    assert body["validation_status"] == "invalid" and body["source_path"] == str(path)
    [diagnostic] = body["diagnostics"]
    assert diagnostic["code"] == "heartbeat_malformed_frontmatter" and "nested deeper than 32" in diagnostic["message"]
    for session in (reader, other):
        inspect = daemon.http.get(daemon.scoped(session["id"], "/inspect"))
        assert inspect.status_code == 200, inspect.text
        wake = daemon.http.post(f"/api/agents/{session['agent_name']}/heartbeat/wake",
                                json={"session_id": session["id"], "dry_run": True})
        assert wake.status_code == 200, wake.text
    assert daemon.http.get("/api/heartbeat/agents").status_code == 200
    assert daemon.http.get(f"/sessions/{reader['id']}").status_code == 200
    doctor = {i["id"]: i for i in daemon.cli_json("doctor")["items"]}
    assert str(path) in doctor["heartbeat_policies"]["message"]
    assert all(i["title"] != "Check failed" for i in doctor.values()), doctor


def test_a_deeply_nested_or_huge_meta_json_is_that_sessions_session_meta_invalid(daemon: Daemon,
                                                                                  workspace: Path) -> None:
    """100,000 levels made `GET /api/sessions`, `session list` and the dashboard answer 500, and doctor said
    "RecursionError" without naming the file."""
    deep, huge, fine = (daemon.create(workspace)["id"] for _ in range(3))
    for session_id in (deep, huge):
        assert daemon.http.post(daemon.scoped(session_id, "/stop")).status_code == 204
        daemon.wait_state(session_id, {"stopped"})
    deep_meta = daemon.home / "sessions" / deep / "meta.json"
    deep_meta.write_text('{"id": "' + deep + '", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    huge_meta = daemon.home / "sessions" / huge / "meta.json"
    huge_meta.write_text('{"pad": "' + "x" * (5 * 1024 * 1024) + '"}')

    listed = daemon.http.get("/api/sessions", params={"all": "true", "limit": 100})
    assert listed.status_code == 200, listed.text[:300]
    rows = {s["id"]: s for s in listed.json()["sessions"]}
    assert rows[deep]["meta_error"]["code"] == "session_meta_invalid"
    assert "nested deeper than 32 levels" in rows[deep]["meta_error"]["message"]
    assert "larger than 4 MiB" in rows[huge]["meta_error"]["message"]
    assert "meta_error" not in rows[fine] and rows[fine]["state"] == "active"
    shown = daemon.cli("session", "list", "--all")
    assert shown.returncode == 0 and deep in shown.stdout, shown.stderr
    status = daemon.http.get(f"/api/sessions/{deep}")
    assert status.status_code == 409 and status.json()["code"] == "session_meta_invalid", status.text[:300]
    assert daemon.http.get("/").status_code == 200
    doctor = {i["id"]: i for i in daemon.cli_json("doctor")["items"]}
    item = doctor["session_metadata"]
    # The first broken folder by id is named, with why.
    named = f"{deep_meta}: nested deeper than 32 levels" if deep < huge else f"{huge_meta}: larger than 4 MiB"
    assert item["severity"] == "warn" and named in item["message"], item
    assert {deep, huge} <= set(item["evidence"]["invalid"]), item
    assert all(i["title"] != "Check failed" for i in doctor.values()), doctor


def test_unknown_config_keys_are_warned_at_start_and_listed_by_doctor(daemon: Daemon) -> None:
    line = "unknown key session.supervision.quiet_afer (ignored; did you mean session.supervision.quiet_after?)"
    assert f"config.toml: {line}" in daemon.log()
    record = json.loads((daemon.home / "daemon.json").read_text())
    assert record["config_warnings"] == [line]
    [item] = daemon.cli_json("doctor", "--only", "config")["items"]
    assert item["severity"] == "warn" and line in item["message"], item
    assert item["evidence"]["unknown_keys"] == [{"key": "session.supervision.quiet_afer", "table": False,
                                                "suggestion": "session.supervision.quiet_after"}]


def test_login_links_are_rate_limited(daemon: Daemon) -> None:
    """2,260 guesses a second got a login page each; now a burst, then 2 a second."""
    with httpx.Client(base_url=daemon.base_url, timeout=30) as browser:  # no token: a browser with a link
        answers = [browser.get("/login", params={"ticket": f"guess-{i}"}) for i in range(40)]
        limited = [a for a in answers if a.status_code == 429]
        assert limited, [a.status_code for a in answers]
        assert all(a.status_code == 401 for a in answers[:20])  # the burst: old links clicked again still pass
        assert "login_rate_limited" in limited[0].text and int(limited[0].headers["retry-after"]) >= 1
        assert "login: invalid login links arrive faster than 2 a second" in daemon.log()
        # A real link a moment later signs the browser in.
        url = daemon.login_url()
        ticket = url.split("ticket=", 1)[1]
        signed = wait_for(lambda: (r := browser.get("/login", params={"ticket": ticket}, follow_redirects=False))
                          .status_code == 302 and r, timeout=10, what="the login link to pass after the pause")
        assert "compozy_auth=" in signed.headers["set-cookie"]


def start(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "COMPOZY_HOME": str(home), **(env or {})}
    for name in ("COMPOZY_URL", "COMPOZY_HTTP_PORT", "DATABASE_URL", "REDIS_URL"):
        if name not in (env or {}):
            environ.pop(name, None)
    return subprocess.run([sys.executable, "-m", "compozy.cli", "daemon", "start", "--port", "0", *args],
                          env=environ, cwd=str(ROOT), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("text", "key"), [
    ('[http]\nport = "abc"\n', "http.port: must be an integer in 0..65535"),
    ("[http]\nport = 2123.5\n", "http.port: must be an integer in 0..65535"),
    ("[providers.x]\ncommand = \"x\"\nargs = " + "[" * 5000 + "]" * 5000 + "\n",
     "providers.x.args: nested deeper than 32 levels"),
    ('[defaults]\nagent = "genral"\n', "defaults.agent: no agent named 'genral'"),
    ('[defaults]\nprovider = "nope"\n', "defaults.provider: no provider named 'nope'"),
])
def test_a_config_the_daemon_refuses_exits_78_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    (tmp_path / "config.toml").write_text(text)
    result = start(tmp_path, "--foreground")
    assert result.returncode == 78, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert f"error: invalid config: {key}" in result.stderr, result.stderr[-2000:]


def test_a_start_against_an_unreachable_database_url_names_it(tmp_path: Path) -> None:
    """It said only "daemon exited during start: code 1"."""
    started = time.monotonic()
    result = start(tmp_path, env={"DATABASE_URL": "postgresql://compozy:hunter2-password@127.0.0.1:1/compozy"})
    assert result.returncode == 69, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "the catalog database at DATABASE_URL (postgresql://compozy@127.0.0.1:1/compozy) does not answer" in line
    assert "code 1" not in line and "hunter2" not in line
    assert "hunter2" not in (tmp_path / "logs" / "daemon.log").read_text()
    assert time.monotonic() - started < 60
    malformed = start(tmp_path, env={"DATABASE_URL": "notadb://x"})
    assert malformed.returncode == 78 and "DATABASE_URL is not a database URL" in malformed.stderr, malformed.stderr
