"""Bad input end to end: the guard's refusal in the common error shape, and the CLI printing one line on stderr (JSON
with `-o json`) and exiting with the sysexits code for that status (docs/reference/surfaces.md §1), against the real
daemon.
The HTTP error bodies themselves are tested in-process in tests/unit/test_api_errors.py."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Daemon, module_daemon

# The production escalation (cancel 1 s, EOF 1 s, SIGTERM 5 s): the stopping-window test needs its width.
daemon = module_daemon('[session.stop]\nkill_grace = "5s"\n')

UNKNOWN_SESSION = "sess_0123456789abcdef"


def test_cross_origin_post_is_forbidden(daemon: Daemon, workspace: Path) -> None:
    response = daemon.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace)},
                                headers={"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert response.json()["code"] == "origin_forbidden"
    # Same-origin writes still work (the page the daemon serves may POST).
    same = daemon.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": "relative"},
                            headers={"Origin": daemon.base_url})
    assert same.status_code == 400 and same.json()["code"] == "workspace_path_not_absolute"


def test_cross_origin_error_has_the_common_error_shape(daemon: Daemon, workspace: Path) -> None:
    response = daemon.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace)},
                                headers={"Origin": "http://evil.example"})
    assert response.json()["diagnostic"]["code"] == "origin_forbidden"


# ---- the CLI -----------------------------------------------------------------------------------

CLI_CASES: list[Any] = [
    pytest.param(["session", "new", "--agent", "no-such-agent", "--cwd", "$WS"], 69, "agent_not_found",
                 id="unknown-agent"),
    pytest.param(["session", "new", "--agent", "scripted", "--cwd", "relative/dir"], 65,
                 "workspace_path_not_absolute", id="relative-cwd"),
    pytest.param(["session", "new", "--agent", "scripted", "--cwd", "$WS", "--workspace", "x"], 65,
                 "workspace_conflict", id="cwd-and-workspace"),
    pytest.param(["session", "new", "--agent", "scripted", "--cwd", "/nonexistent/compozy/ws"], 69,
                 "workspace_root_missing", id="missing-cwd"),
    pytest.param(["session", "status", UNKNOWN_SESSION], 69, "session_not_found", id="unknown-session"),
    pytest.param(["session", "events", UNKNOWN_SESSION], 69, "session_not_found", id="events-of-unknown-session"),
    pytest.param(["session", "stop", UNKNOWN_SESSION], 69, "session_not_found", id="stop-unknown-session"),
    # Ids are one path segment whatever they hold: a space crashed the HTTP client, `?` cut the id short.
    pytest.param(["session", "status", "a b"], 69, "session_not_found", id="id-with-a-space"),
    pytest.param(["session", "status", "ü"], 69, "session_not_found", id="non-ascii-id"),
    pytest.param(["task", "show", "a b"], 69, "task_not_found", id="task-id-with-a-space"),
]


def assert_one_line_error(result: subprocess.CompletedProcess[str], exit_code: int, code: str) -> None:
    assert result.returncode == exit_code, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and code in lines[0]


def assert_one_json_error(result: subprocess.CompletedProcess[str], exit_code: int, code: str) -> None:
    assert result.returncode == exit_code, result.stderr
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert json.loads(line)["code"] == code


@pytest.mark.parametrize(("args", "exit_code", "code"), CLI_CASES)
def test_cli_errors_are_one_line_and_a_nonzero_exit(daemon: Daemon, workspace: Path, args: list[str], exit_code: int,
                                                    code: str) -> None:
    argv = [str(workspace) if a == "$WS" else a for a in args]
    assert_one_line_error(daemon.cli(*argv), exit_code, code)
    assert_one_json_error(daemon.cli(*argv, "-o", "json"), exit_code, code)


def test_a_question_mark_in_an_id_stays_in_the_id(daemon: Daemon) -> None:
    # Unquoted, `x?y` reached the daemon as session `x` with a query string: the answer named the wrong session.
    result = daemon.cli("session", "status", "x?y", "-o", "json")
    assert result.returncode == 69, result.stderr
    assert json.loads(result.stderr)["diagnostic"]["evidence"] == {"session_id": "x?y"}


def test_prompt_to_a_session_that_is_not_active_is_refused(daemon: Daemon, workspace: Path) -> None:
    """A `stopping` session refuses prompts. The wedged agent ignores cancel, EOF and SIGTERM, so its stop
    runs the whole escalation (about 7 s): a wide, deterministic window in `stopping`."""
    session = daemon.create(workspace)
    assert daemon.prompt(session["id"], "wedge").status_code == 200
    daemon.wait_event(session["id"], "agent_message", text="wedged")
    with ThreadPoolExecutor(1) as pool:
        stop = pool.submit(daemon.http.post, daemon.scoped(session["id"], "/stop"), timeout=60)
        daemon.wait_state(session["id"], {"stopping"})
        response = daemon.prompt(session["id"], "hello")
        human = daemon.cli("session", "prompt", session["id"], "hello")
        as_json = daemon.cli("session", "prompt", session["id"], "hello", "-o", "json")
        still_stopping = daemon.session(session["id"])["state"] == "stopping"
        assert stop.result().status_code == 204
    assert still_stopping, "the stop finished before the refusals were checked"
    assert response.status_code == 400
    assert response.json()["code"] == "session_not_active"
    assert response.json()["diagnostic"]["evidence"]["state"] == "stopping"
    assert_one_line_error(human, 65, "session_not_active")
    assert_one_json_error(as_json, 65, "session_not_active")


def test_cli_reports_an_unreachable_daemon_in_one_line(daemon: Daemon, tmp_path: Path) -> None:
    env = {**daemon.env, "COMPOZY_HOME": str(tmp_path / "no-daemon-here")}
    result = subprocess.run([sys.executable, "-m", "compozy.cli", "status", "-o", "json"], env=env,
                            cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert result.returncode == 69
    [line] = result.stderr.strip().splitlines()
    assert json.loads(line)["code"] == "daemon_unavailable"
