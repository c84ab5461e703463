"""The human CLI in an 80-column terminal, run for real against the daemon: `session events` prints one line per
event (sequence, age, type, summary) and `session list` never wraps an id; `-o json` stays the API's rows."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, Daemon, of_type, wait_for

COLUMNS = 80


def narrow(d: Daemon, *args: str, columns: int = COLUMNS, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "compozy.cli", *args], cwd=str(ROOT), capture_output=True,
                            text=True, timeout=60, env={**d.env, "COLUMNS": str(columns), "LINES": "24"})
    assert result.returncode == 0 or not check, result.stderr or result.stdout
    return result


def assert_fits(output: str, columns: int = COLUMNS) -> list[str]:
    lines = output.splitlines()
    too_wide = [line for line in lines if len(line) > columns]
    assert not too_wide, too_wide
    return lines


def test_session_events_prints_one_line_per_event_within_80_columns(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    daemon.run_turn(sid, "tool read README.md")
    daemon.run_turn(sid, "a long message " + "that goes on and on " * 20)
    rows = daemon.all_events(sid)

    lines = assert_fits(narrow(daemon, "session", "events", sid, "--raw").stdout)
    assert len(lines) == len(rows)  # one line per event, no header, no wrapped cells
    for line, row in zip(lines, rows, strict=True):
        seq, age, ago_word, type_ = line.split()[:4]
        assert int(seq) == row["sequence"] and type_ == row["type"]
        assert age.endswith("s") and ago_word == "ago"
    by_type = {row["type"]: line for line, row in zip(lines, rows, strict=True)}
    assert by_type["permission"].endswith("→ approved")
    assert "{" not in "".join(lines)  # summaries, not JSON
    assert by_type["done"].endswith("end_turn")
    long_reply = next(ln for ln in lines if "echo: a long message" in ln)
    assert long_reply.endswith("…") and len(long_reply) == COLUMNS


def test_session_events_since_keeps_only_newer_events(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    daemon.run_turn(sid, "first turn")
    rows = daemon.all_events(sid)
    later = daemon.run_turn(sid, "second turn")
    since = of_type(later, "user_message")[0]["timestamp"]

    shown = narrow(daemon, "session", "events", sid, "--since", since).stdout.splitlines()
    assert [int(line.split()[0]) for line in shown] == [e["sequence"] for e in later]
    assert narrow(daemon, "session", "events", sid, "--since", "1h", "-o", "json").stdout.count('"sequence"') == \
        len(rows) + len(later)
    bad = daemon.cli("session", "events", sid, "--since", "yesterday")
    assert bad.returncode == 65 and "--since" in bad.stderr


def test_session_events_json_is_the_api_rows_unchanged(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    daemon.run_turn(sid, "tool read README.md")
    assert json.loads(narrow(daemon, "session", "events", sid, "-o", "json").stdout)["events"] == daemon.events(sid)
    jsonl = narrow(daemon, "session", "events", sid, "-o", "jsonl").stdout.splitlines()
    assert [json.loads(line) for line in jsonl] == daemon.events(sid)


def test_session_list_keeps_ids_whole_with_relative_times(daemon: Daemon, workspace: Path) -> None:
    sids = [daemon.create(workspace, agent="scripted", name="a rather long session name " * 4)["id"]
            for _ in range(2)]
    lines = assert_fits(narrow(daemon, "session", "list", "--all").stdout)
    assert lines[0].split() == ["ID", "STATE", "AGENT", "ACTIVE", "NAME"]
    for sid in sids:
        [line] = [ln for ln in lines if sid in ln]
        assert line.startswith(sid + "  ")
        assert " ago" in line and "T" not in line.split("ago")[0][len(sid):]  # no ISO timestamp
        assert line.endswith("…")

    wide = narrow(daemon, "session", "list", "--all", "--wide").stdout.splitlines()
    assert wide[0].split()[:4] == ["ID", "NAME", "STATE", "BADGE"] and "FAILURE" in wide[0]
    assert all(any(line.startswith(sid) for line in wide) for sid in sids)

    listing = json.loads(narrow(daemon, "session", "list", "--all", "-o", "json").stdout)
    assert set(listing) == {"sessions", "page"} and {s["id"] for s in listing["sessions"]} >= set(sids)


def test_the_follow_lines_fit_80_columns(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    daemon.run_turn(sid, "a long message " + "that goes on and on " * 20)
    daemon.http.post(daemon.scoped(sid, "/stop"))
    lines = assert_fits(narrow(daemon, "session", "events", sid, "--follow").stdout)
    assert lines[-1].split()[2] == "session_stopped"


def test_task_and_workspace_tables_keep_ids_whole_and_jsonl_is_one_row_per_line(daemon: Daemon,
                                                                                 tmp_path: Path) -> None:
    # At 80 columns ids were folded (`task_1b1ac` / `63cdce64e6` / `f`), and `-o jsonl` printed the wrapper.
    created = [json.loads(narrow(daemon, "task", "create", "a task with a title long enough to wrap " * 3,
                                 "--cwd", str(tmp_path), "--agent", "missing", "--max-attempts", "1",
                                 "-o", "json").stdout)["task"]["id"] for _ in range(2)]
    shown = narrow(daemon, "task", "list").stdout
    assert all(task_id in shown for task_id in created), shown
    jsonl = [json.loads(line) for line in narrow(daemon, "task", "list", "-o", "jsonl").stdout.splitlines()]
    assert {row["id"] for row in jsonl} >= set(created) and all("status" in row for row in jsonl)
    workspace_id = jsonl[0]["workspace_id"]
    assert workspace_id in narrow(daemon, "workspace", "list").stdout
    items = [json.loads(line) for line in narrow(daemon, "doctor", "-o", "jsonl", check=False).stdout.splitlines()]
    assert items and all({"severity", "id"} <= set(item) for item in items)


def squeezed(text: str) -> str:
    """Text without its whitespace: what a wrapped output still says whole, wherever its lines broke."""
    return "".join(text.split())


def wordy(text: str) -> str:
    """squeezed(), without digits either: a doctor's timings and counts move between two runs."""
    return re.sub(r"[\d.]", "", squeezed(text))


def test_task_show_keeps_status_outcome_and_ids_readable_at_80_columns(daemon: Daemon, tmp_path: Path) -> None:
    task_id = json.loads(narrow(daemon, "task", "create", "crash", "--title", "a task whose agent crashes " * 3,
                                "--cwd", str(tmp_path), "--agent", "scripted", "--max-attempts", "2",
                                "-o", "json").stdout)["task"]["id"]
    def settled(runs: int) -> dict[str, Any]:
        return wait_for(lambda: (t := daemon.cli_json("task", "show", task_id))["task"]["status"] in (
            "failed", "needs_attention", "succeeded") and len(t["task"]["runs"]) == runs and t, timeout=60,
            what=f"the task's attempt {runs} settled")

    settled(1)
    assert daemon.cli("task", "retry", task_id).returncode == 0
    shown = settled(2)
    lines = assert_fits(narrow(daemon, "task", "show", task_id).stdout)
    assert [line.split() for line in lines if line.startswith("#")] == [["#", "RUN", "STATUS", "OUTCOME", "SESSION"]]
    for run in shown["task"]["runs"]:
        [line] = [ln for ln in lines if ln.split()[1:2] == [run["id"]] and ln.split()[0] == str(run["attempt"])]
        # Every cell whole, in its column: the attempt, the run, its status, its outcome and its session.
        assert line.split() == [str(run["attempt"]), run["id"], run["status"], run.get("outcome") or "-",
                                run.get("session_id") or "-"], line
    # A retry always links its attempt to the last (tasks/services.py retry_task), and the table says so.
    first, second = shown["task"]["runs"][0], shown["task"]["runs"][1]
    assert second["recovers_run_id"] == first["id"], second
    assert f"recovers {second['recovers_run_id']}" in "\n".join(lines)
    history = shown["history"]
    assert history and all(squeezed(e["kind"]) in squeezed("\n".join(lines)) for e in history)
    assert all(squeezed(e.get("reason") or "") in squeezed("\n".join(lines)) for e in history)


def test_doctor_wraps_at_words_and_shows_each_command_at_80_columns(daemon: Daemon) -> None:
    before = json.loads(narrow(daemon, "doctor", "-o", "json", check=False).stdout)["items"]
    output = narrow(daemon, "doctor", check=False).stdout
    after = json.loads(narrow(daemon, "doctor", "-o", "json", check=False).stdout)["items"]
    # The module's other tests share this daemon, so a count may move between the runs (the queue's, crash bundles,
    # failures): the same checks must be there, and those whose answer held still are checked word for word.
    ids_before, ids_after = {item["id"] for item in before}, {item["id"] for item in after}
    assert len(ids_before & ids_after) >= len(ids_before) - 2
    items = [item for item in before if item in after]
    assert len(items) >= len(before) // 2
    lines = assert_fits(output)
    assert lines[0].startswith("compozy doctor: ") and "Try" not in output.split("\n", 1)[0]
    for item in items:
        assert any(line.startswith(item["severity"]) and item["title"][:40] in line for line in lines), item
        assert wordy(item["message"]) in wordy(output), item["message"]
        if item.get("suggested_command"):
            assert squeezed("try: " + item["suggested_command"]) in squeezed(output)
    # No word is cut between two lines: each line of a message ends on a whole word of it.
    words = {word for item in before + after for text in (item["message"], item.get("suggested_command") or "")
             for word in text.split()}
    wrapped = [line.strip() for line in lines[1:] if line.startswith(" " * 9)]
    assert wrapped and all(line.split()[-1] in words or len(line) >= 70 for line in wrapped if line.split()), wrapped


def test_attention_keeps_the_whole_reason_at_80_columns(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    assert daemon.prompt(sid, "crash").status_code == 200
    daemon.wait_state(sid, {"stopped"})
    items = wait_for(lambda: [i for i in daemon.cli_json("attention")["items"] if i.get("session_id") == sid],
                     what="the failed session in the attention list")
    output = narrow(daemon, "attention").stdout
    lines = assert_fits(output)
    assert lines[0].split()[:4] == ["ID", "KIND", "SINCE", "FOR"]
    for item in items:
        assert any(line.startswith(item["id"] + "  ") and sid in line for line in lines), lines
        assert squeezed(item["summary"]) in squeezed(output), (item["summary"], output)


def test_session_events_merges_a_replys_chunks_into_one_line_unless_raw(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    turn = daemon.run_turn(sid, "slow 6 0.2")  # apart in time: the store keeps them as rows of their own
    chunks = of_type(turn, "agent_message")
    assert len(chunks) >= 2  # the store may coalesce chunks that came together; several rows stay
    merged = assert_fits(narrow(daemon, "session", "events", sid).stdout)
    [reply] = [line for line in merged if line.split()[3] == "agent_message"]
    assert int(reply.split()[0]) == chunks[0]["sequence"] and reply.endswith("c0 c1 c2 c3 c4 c5"), reply
    raw = narrow(daemon, "session", "events", sid, "--raw").stdout.splitlines()
    assert len([line for line in raw if line.split()[3] == "agent_message"]) == len(chunks)
    assert len(raw) == len(merged) + len(chunks) - 1


def test_session_prompt_shows_each_tool_call_as_one_line(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    sent = narrow(daemon, "session", "prompt", sid, "tool read README.md")
    calls = of_type(daemon.all_events(sid), "tool_call")
    results = of_type(daemon.all_events(sid), "tool_result")
    assert calls and results
    title = calls[0]["content"].get("title") or calls[0]["content"].get("tool_name")
    expected = f"tool {title}: {results[0]['content']['status']}"
    assert sent.stdout.splitlines().count(expected) == 1, (sent.stdout, calls[0])
