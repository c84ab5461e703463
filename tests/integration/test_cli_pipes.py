"""The CLI as a person and a shell use it, against the real daemon and the scripted agent: stored text cannot
drive the terminal, a reader that closes the pipe (`| head -1`) ends any command quietly with 0, Ctrl-C on a
streaming prompt says the turn goes on and how to follow or stop it, a turn waiting for a person's
approval says how to give it, and a listing read line by line holds every match, not its first page."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import NO_TITLE, ROOT, Daemon, module_daemon

START_TIMEOUT = 120.0
# Long enough for a loaded machine to start the CLI and stream a turn; a hang fails well before pytest's own.
CLI_TIMEOUT = 30.0
# The scripted agent echoes this back: an OSC window title ended by BEL, a colour, a tab and a newline.
HOSTILE = "echo \x1b]0;PWNED\x07\x1b[31mred\tand a tab\nline two"
# Through `head -1`: the CLI's exit status, not head's, and the CLI's stderr (head writes none).
THROUGH_HEAD = 'set +o pipefail; "$@" | head -1; exit "${PIPESTATUS[0]}"'


daemon = module_daemon(NO_TITLE, timeout=START_TIMEOUT)


def compozy(*args: str) -> list[str]:
    return [sys.executable, "-m", "compozy.cli", *args]


def assert_no_escapes(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text, repr(text)


def through_head(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    """`compozy ARGS | head -1` in bash; the whole pipeline is killed if the CLI does not end."""
    proc = subprocess.Popen(["bash", "-c", THROUGH_HEAD, "bash", *compozy(*args)], env=d.env, cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"`compozy {' '.join(args)} | head -1` still ran after {CLI_TIMEOUT}s") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@contextmanager
def running(d: Daemon, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """The CLI with unbuffered pipes, SIGINT handled as in a terminal (a background job may have it ignored)."""
    proc = subprocess.Popen(compozy(*args), env=d.env, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            bufsize=0, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=CLI_TIMEOUT)


def read_until(proc: subprocess.Popen[bytes], pattern: bytes, timeout: float = CLI_TIMEOUT) -> bytes:
    """What the CLI printed on stdout up to the first match of `pattern` (a regex)."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while not re.search(pattern, seen):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {pattern!r} on stdout within {timeout}s: {seen!r}")
        if select.select([proc.stdout], [], [], left)[0]:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"stdout closed before {pattern!r}: {seen!r}")
            seen += chunk
    return seen


def test_a_streamed_prompt_prints_agent_text_without_terminal_escapes(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    result = daemon.cli("session", "prompt", sid, HOSTILE, timeout=CLI_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert_no_escapes(result.stdout + result.stderr)
    assert "PWNED" in result.stdout and "red\tand a tab\nline two" in result.stdout  # tabs and newlines stay


def test_events_and_history_print_stored_text_without_terminal_escapes(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    daemon.run_turn(sid, HOSTILE)
    for args in (("events", sid), ("events", sid, "--type", "agent_message"), ("history", sid)):
        result = daemon.cli("session", *args, timeout=CLI_TIMEOUT)
        assert result.returncode == 0, result.stderr
        assert_no_escapes(result.stdout)
        assert "PWNED" in result.stdout
    # Scripts still get the text as stored, escaped by JSON.
    rows = json.loads(daemon.cli("session", "events", sid, "-o", "json", timeout=CLI_TIMEOUT).stdout)["events"]
    assert any("\x1b]0;PWNED\x07" in (row["content"].get("text") or "") for row in rows)


def test_following_events_into_a_pipe_its_reader_closed_ends_quietly_with_0(daemon: Daemon,
                                                                              workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    assert daemon.prompt(sid, "slow 40 0.1").status_code == 200  # rows keep coming after head is gone
    result = through_head(daemon, "session", "events", sid, "--follow")
    assert (result.returncode, result.stderr) == (0, "")
    assert len(result.stdout.splitlines()) == 1


def test_a_streamed_prompt_into_a_closed_pipe_exits_0_without_a_word(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    result = through_head(daemon, "session", "prompt", sid, "slow 5 0.2", "-o", "jsonl")
    assert (result.returncode, result.stderr) == (0, "")  # was 69 and a false "is the daemon running?"
    assert json.loads(result.stdout)["type"] == "user_message"


def test_a_long_read_into_a_closed_pipe_exits_0_without_a_word(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    daemon.run_turn(sid, "stream 300 1000")  # ~300 kB of rows: far more than a pipe holds
    for fmt in ("jsonl", "json"):
        result = through_head(daemon, "session", "events", sid, "-o", fmt)
        # Was 1 (rich-click's EPIPE exit); no "Exception ignored … BrokenPipeError" at interpreter exit either.
        assert (result.returncode, result.stderr) == (0, ""), fmt
        assert len(result.stdout.splitlines()) == 1


def test_ctrl_c_on_a_streamed_prompt_says_the_turn_goes_on_and_how_to_follow_or_stop_it(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    with running(daemon, "session", "prompt", sid, "slow 40 0.25") as proc:
        read_until(proc, rb"c1 ")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=CLI_TIMEOUT)
    assert proc.returncode == 130
    assert err.decode().strip().splitlines() == [
        f"interrupted: the turn goes on in session {sid}; follow it with `compozy session events {sid} --follow`, "
        f"or stop it with `compozy session interrupt {sid}`"]
    assert daemon.session(sid)["prompt_state"] == "prompting"
    stop = daemon.cli("session", "interrupt", sid, timeout=CLI_TIMEOUT)
    assert stop.returncode == 0 and stop.stdout.startswith("interrupted turn_"), stop.stdout + stop.stderr


def test_a_turn_waiting_for_approval_says_how_to_approve_it(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="reader")["id"]  # approve-reads: a write waits for a person
    with running(daemon, "session", "prompt", sid, "tool write out.txt hello") as proc:
        shown = read_until(proc, rb"waiting for approval[^\n]*\n").decode()
        [line] = [x for x in shown.splitlines() if x.startswith("waiting for approval")]
        request_id = line.rsplit(" ", 1)[1]
        assert line == f"waiting for approval (Write out.txt): compozy session approve {sid} {request_id}"
        answer = daemon.http.post(daemon.scoped(sid, f"/permissions/{request_id}"), json={"decision": "approve"})
        assert answer.status_code == 200, answer.text
        _, err = proc.communicate(timeout=CLI_TIMEOUT)
    assert proc.returncode == 0, err.decode()
    assert (workspace / "out.txt").read_text() == "hello"


def test_a_session_listing_read_line_by_line_holds_every_page(daemon: Daemon, workspace: Path) -> None:
    # `-o jsonl` has no page object to carry a cursor: a script that pipes it into `jq` got the first page only.
    ids = {daemon.create(workspace)["id"] for _ in range(5)}
    listed = subprocess.run(compozy("session", "list", "--workspace", str(workspace), "--limit", "2", "-o", "jsonl"),
                            env=daemon.env, cwd=str(ROOT), capture_output=True, text=True, timeout=CLI_TIMEOUT)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert sorted(row["id"] for row in rows) == sorted(ids)
    # `-o json` stays one page, with the cursor to the next.
    page = json.loads(subprocess.run(compozy("session", "list", "--workspace", str(workspace), "--limit", "2",
                                             "-o", "json"), env=daemon.env, cwd=str(ROOT), capture_output=True,
                                     text=True, timeout=CLI_TIMEOUT).stdout)
    assert len(page["sessions"]) == 2 and page["page"]["has_more"] and page["page"]["next_cursor"]
