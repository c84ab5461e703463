"""Providers without a restart (issue 48): `compozy daemon reload` (and SIGHUP) takes new `[providers.*]` and
`[agents.*]` while a session streams, its stream unbroken; a bad file is refused whole; a key set through the API
lands in secrets.toml (0600), reaches the next agent's environment, and appears in no API answer, log or evidence
bundle; `compozy provider test` on a missing binary says what is missing."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import signal
import stat
import sys
import tarfile
from pathlib import Path
from typing import Any

from compozy_base.config.agents import NPM_PACKAGES
from tests.conftest import (
    SCRIPTED,
    Daemon,
    daemon_config,
    module_daemon,
    of_type,
    said,
    toml_list,
    wait_for,
)

KEY = "sk-test-compozy-provider-key-0123456789abcdef"
VARIABLE = "SCRIPTED_SECRET_KEY"
CHUNKS = 40

EXTRA = f"""
[providers.nobinary]
command = ["no-such-agent-acp-binary"]

[providers.authy]
command = {toml_list([sys.executable, str(SCRIPTED), "--require-auth"])}
env = {{ SCRIPTED_API_KEY = "scripted-login-key-0123456789" }}
"""


daemon = module_daemon(EXTRA)


def _config_with(daemon: Daemon, extra: str) -> None:
    """config.toml as the daemon started on it, plus `extra`."""
    (daemon.home / "config.toml").write_text(daemon_config(daemon.home, EXTRA + extra))


ADDED = f"""
[providers.added]
command = {toml_list([sys.executable, str(SCRIPTED)])}

[agents.added]
provider = "added"
"""


def test_daemon_reload_adds_a_provider_while_a_session_streams_and_the_stream_is_unbroken(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    pid = daemon.meta(sid)["liveness"]["subprocess_pid"]
    start = max([e["sequence"] for e in daemon.events(sid, limit=1)], default=0)
    with daemon.client(timeout=30) as client, client.stream(
            "GET", daemon.scoped(sid, "/stream"), params={"frames": "raw", "after_sequence": str(start)}) as stream:
        lines = stream.iter_lines()
        assert daemon.prompt(sid, f"slow {CHUNKS} 0.05").status_code == 200
        seen: list[str] = []
        reloaded: dict[str, Any] = {}
        for line in lines:
            seen.append(line)
            if line == "event: agent_message" and not reloaded:
                _config_with(daemon, ADDED)
                reloaded = daemon.cli_json("daemon", "reload")
            if line == "event: done":
                seen.append(next(lines))
                break
    assert "provider:added" in reloaded["reload"]["added"] and "agent:added" in reloaded["reload"]["added"], reloaded
    ids = [int(line[4:]) for line in seen if line.startswith("id: ")]
    assert ids == list(range(start + 1, start + 1 + len(ids))), "in order, no gap, no duplicate"
    texts = [json.loads(line[6:])["content"]["text"] for line, kind in zip(seen[1:], seen, strict=False)
             if kind == "event: agent_message" and line.startswith("data: ")]
    assert "".join(texts) == "".join(f"c{i} " for i in range(CHUNKS))
    session = daemon.session(sid)
    assert session["state"] == "active" and not session.get("failure"), session
    assert pid and daemon.meta(sid)["liveness"]["subprocess_pid"] == pid  # the same agent process
    # The new agent starts sessions at once; the CLI lists it.
    added = daemon.create(workspace, agent="added")
    assert added["state"] == "active", added
    assert "c0 c1" in said(daemon.run_turn(added["id"], "slow 2 0"))
    info = daemon.cli_json("workspace", "info", added["workspace_id"])
    available = {p["name"]: p["available"] for p in info["providers"]}
    assert available["added"] and not available["nobinary"], available
    if shutil.which("npx") and not shutil.which("claude-agent-acp"):
        assert available["claude"], available  # run through npx: available, not "Available: no"
    agents = {a["name"]: a for a in daemon.cli_json("agent", "list")["agents"]}
    assert agents["added"]["provider"] == "added" and agents["added"]["provider_found"] == "path", agents


def test_a_bad_file_is_refused_whole_with_its_one_line_error_and_the_daemon_keeps_its_providers(
        daemon: Daemon) -> None:
    before = {p["name"] for p in daemon.cli_json("provider", "list")["providers"]}
    _config_with(daemon, '[providers.half]\ncommand = ["x"]\n\n[agents.bad]\nprovider = "nowhere"\n')
    try:
        refused = daemon.cli("daemon", "reload")
        assert refused.returncode == 78, refused
        assert refused.stderr.count("\n") == 1 and "agents.bad.provider: no provider named 'nowhere'" in \
            refused.stderr, refused.stderr
        assert {p["name"] for p in daemon.cli_json("provider", "list")["providers"]} == before
        assert "config reload refused" in daemon.log()
    finally:
        _config_with(daemon, ADDED)
        daemon.cli_json("daemon", "reload")


def test_sighup_reloads_the_providers(daemon: Daemon) -> None:
    _config_with(daemon, ADDED + '\n[providers.hup]\ncommand = ["hup-agent"]\n')
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "hup" in {p["name"] for p in daemon.cli_json("provider", "list")["providers"]},
             timeout=20, what="the provider SIGHUP reloaded")
    assert daemon.proc.poll() is None


def test_provider_test_on_a_missing_binary_says_what_is_missing(daemon: Daemon) -> None:
    bare = daemon.cli("provider", "test", "nobinary")
    assert bare.returncode == 1, bare
    assert "'no-such-agent-acp-binary' is not on PATH" in bare.stderr and bare.stderr.count("\n") == 1, bare.stderr
    shown = daemon.cli_json("provider", "show", "nobinary")["provider"]
    assert shown["found"] == "missing" and "no-such-agent-acp-binary" in shown["missing"][0], shown
    path = daemon.cli("provider", "test", "missing", "-o", "json")
    assert path.returncode == 1
    assert "/nonexistent/bin/agent-acp does not exist" in json.loads(path.stdout)["error"], path.stdout
    ok = daemon.cli_json("provider", "test", "scripted")
    assert ok["ok"] and ok["version"] == "1.0" and ok["agent_name"] == "scripted-agent", ok
    unknown = daemon.cli("provider", "show", "nope")
    assert unknown.returncode == 69 and "provider_not_found" in unknown.stderr, unknown


def test_provider_test_and_login_run_a_missing_executable_through_npx_as_a_session_start_does(
        daemon: Daemon, tmp_path: Path) -> None:
    """No network: the provider's PATH holds only a fake `npx` that records its argv and execs the scripted agent."""
    log = tmp_path / "npx-argv.jsonl"
    npx = tmp_path / "npx"
    npx.write_text(f"""#!{sys.executable}
import json, os, sys
with open({str(log)!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
os.execv(sys.executable, [sys.executable, {str(SCRIPTED)!r}, "--require-auth"])
""")
    npx.chmod(0o755)
    _config_with(daemon, ADDED + f'\n[providers.gemini]\nenv = {{ PATH = "{tmp_path}", '
                                 f'SCRIPTED_API_KEY = "scripted-login-key-0123456789" }}\n')
    try:
        daemon.cli_json("daemon", "reload")
        shown = daemon.cli_json("provider", "show", "gemini")["provider"]
        assert shown["found"] == "npx" and shown["path"] == str(npx), shown
        tested = daemon.cli_json("provider", "test", "gemini")
        assert tested["ok"] and tested["agent_name"] == "scripted-agent", tested
        assert daemon.cli_json("provider", "login", "gemini", "--method", "env-key")["ok"]
        spec = NPM_PACKAGES["gemini"].spec
        assert [json.loads(line) for line in log.read_text().splitlines()] == [["-y", spec, "--acp"]] * 2
    finally:
        _config_with(daemon, ADDED)
        daemon.cli_json("daemon", "reload")


def test_provider_login_calls_authenticate_with_an_offered_method(daemon: Daemon) -> None:
    tested = daemon.cli_json("provider", "test", "authy")
    assert [m["id"] for m in tested["auth_methods"]] == ["api-key", "env-key", "login"], tested
    assert "SCRIPTED_API_KEY" in tested["auth_methods"][1]["how"]
    assert daemon.cli_json("provider", "login", "authy", "--method", "env-key")["ok"]
    terminal = daemon.cli("provider", "login", "authy", "--method", "login")
    assert terminal.returncode == 1 and "login" in terminal.stderr and "terminal" in terminal.stderr, terminal
    absent = daemon.cli("provider", "login", "authy", "--method", "nope")
    assert absent.returncode == 1 and "api-key, env-key, login" in absent.stderr, absent


def _evidence_text(daemon: Daemon, sid: str) -> tuple[str, dict[str, Any]]:
    response = daemon.http.get(daemon.scoped(sid, "/evidence"))
    assert response.status_code == 200, response.text[:300]
    texts, manifest = [], {}
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member)
            if handle is not None:
                text = handle.read().decode("utf-8", "replace")
                texts.append(text)
                if member.name.endswith("manifest.json"):
                    manifest = json.loads(text)
    return "\n".join(texts), manifest


def test_a_key_set_through_the_api_reaches_the_agent_and_appears_in_no_answer_log_or_bundle(
        daemon: Daemon, workspace: Path) -> None:
    before = daemon.create(workspace)["id"]  # live before the key is set: it keeps the env it started with
    answer = daemon.http.put("/api/providers/scripted/key", json={"variable": VARIABLE, "value": KEY})
    assert answer.status_code == 200, answer.text
    assert KEY not in answer.text and answer.json()["provider"]["secret_env"] == [VARIABLE], answer.text
    secrets = daemon.home / "secrets.toml"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600 and KEY in secrets.read_text()
    assert KEY not in (daemon.home / "config.toml").read_text()

    sid = daemon.create(workspace)["id"]
    hashed = said(daemon.run_turn(sid, f"envhash {VARIABLE}"))
    assert hashed == hashlib.sha256(KEY.encode()).hexdigest(), hashed
    echoed = said(daemon.run_turn(sid, f"env {VARIABLE}"))
    assert KEY not in echoed and "REDACTED" in echoed, echoed
    untouched = of_type(daemon.run_turn(before, f"envhash {VARIABLE}"), "agent_message")
    assert "".join(e["content"].get("text", "") for e in untouched) == "<unset>"

    answers = [daemon.http.get(path).text for path in (
        "/api/providers", "/api/providers/scripted", "/api/agents", "/api/status", "/api/doctor",
        daemon.scoped(sid), daemon.scoped(sid, "/events"), daemon.scoped(sid, "/transcript"),
        daemon.scoped(sid, "/history"), "/api/sessions")]
    answers.append(daemon.http.post("/api/daemon/reload").text)
    answers.append(daemon.http.post("/api/providers/scripted/test").text)
    assert all(KEY not in text for text in answers)
    assert all(KEY not in daemon.cli("provider", *args).stdout for args in (("list",), ("show", "scripted")))
    bundle, manifest = _evidence_text(daemon, sid)
    assert KEY not in bundle and manifest, manifest
    logs = [daemon.log(), *(p.read_text(errors="replace") for p in (daemon.home / "logs").glob("daemon.log*"))]
    assert all(KEY not in text for text in logs)
    assert "config reloaded" in daemon.log()

    removed = daemon.http.put("/api/providers/scripted/key", json={"variable": VARIABLE, "value": ""})
    assert removed.status_code == 200 and removed.json()["provider"]["secret_env"] == [], removed.text
    assert KEY not in secrets.read_text()


def test_a_key_for_an_unknown_provider_or_a_bad_variable_is_refused(daemon: Daemon) -> None:
    unknown = daemon.http.put("/api/providers/nope/key", json={"value": KEY})
    assert unknown.status_code == 404 and unknown.json()["code"] == "provider_not_found", unknown.text
    bad = daemon.http.put("/api/providers/scripted/key", json={"variable": "NOT A NAME", "value": KEY})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_secret", bad.text
    assert KEY not in bad.text
    nameless = daemon.http.put("/api/providers/scripted/key", json={"value": KEY})
    assert nameless.status_code == 400 and nameless.json()["code"] == "key_variable_required", nameless.text


def test_session_new_exits_non_zero_when_its_first_prompt_is_refused_for_want_of_a_login(
        daemon: Daemon, workspace: Path) -> None:
    refused = daemon.cli("session", "new", "--agent", "scripted", "--cwd", str(workspace), "--prompt", "autherr")
    assert refused.returncode == 70, (refused.stdout, refused.stderr)
    assert "its first prompt failed" in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
    assert "`compozy session resume sess_" in refused.stderr, refused.stderr
    fine = daemon.cli("session", "new", "--agent", "scripted", "--cwd", str(workspace), "--prompt", "slow 3 0.1",
                      "-o", "json")
    assert fine.returncode == 0, fine.stderr
    assert json.loads(fine.stdout)["state"] == "active"
