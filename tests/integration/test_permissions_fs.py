"""Permission policy and workspace-confined fs (sessions/acp/client_side.py), through real tool calls of the
scripted agent: approve-all reads, deny-all refuses, and no path resolves outside the workspace roots."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.conftest import Daemon, of_type


def reply(events: list[dict[str, Any]]) -> list[str]:
    return [e["content"]["text"] for e in of_type(events, "agent_message")]


def test_approve_all_agent_reads_a_workspace_file(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="scripted")
    turn = daemon.run_turn(session["id"], "tool read README.md")
    [permission] = of_type(turn, "permission")
    assert permission["content"]["decision"] == "approved"
    assert permission["content"]["decision_source"] == "policy:approve-all"
    [result] = of_type(turn, "tool_result")
    assert result["content"]["status"] == "completed"
    assert result["content"]["tool_result"]["content"] == "hello from the workspace\n"
    assert result["content"]["tool_call_id"] == permission["content"]["tool_call_id"]
    # The request is recorded before the result it gates.
    assert permission["sequence"] < result["sequence"]
    assert reply(turn) == ["tool allow"]


def test_deny_all_agent_gets_denied_and_a_failed_tool_result(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="denier")
    turn = daemon.run_turn(session["id"], "tool read README.md")
    [permission] = of_type(turn, "permission")
    assert permission["content"]["decision"] == "denied"
    assert permission["content"]["decision_source"] == "policy:deny-all"
    [result] = of_type(turn, "tool_result")
    assert result["content"]["status"] == "failed"
    assert result["content"]["tool_error"] == "permission denied"
    assert "hello from the workspace" not in str(turn)
    assert reply(turn) == ["tool reject"]


def test_reading_outside_the_workspace_is_refused_and_recorded(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="scripted")
    turn = daemon.run_turn(session["id"], "tool read /etc/passwd")
    fs_denials = [e for e in of_type(turn, "permission") if e["content"].get("action") == "fs/read_text_file"]
    assert len(fs_denials) == 1
    denial = fs_denials[0]["content"]
    assert denial["decision"] == "denied" and denial["resource"] == "/etc/passwd"
    [result] = of_type(turn, "tool_result")
    assert result["content"]["status"] == "failed"
    assert "outside the workspace" in result["content"]["tool_error"]
    assert "root:" not in str(turn)  # not a byte of the file reached the agent or the store
    assert reply(turn) == ["tool error"]


def test_writing_inside_the_workspace_writes_the_file(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="scripted")
    turn = daemon.run_turn(session["id"], "tool write notes/out.txt hello there")
    [result] = of_type(turn, "tool_result")
    assert result["content"]["status"] == "completed", result
    assert (workspace / "notes" / "out.txt").read_text() == "hello there"


def test_writing_through_a_symlink_that_leaves_the_workspace_is_refused(daemon: Daemon, workspace: Path,
                                                                       tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "target.txt"
    target.write_text("untouched")
    (workspace / "link.txt").symlink_to(target)
    (workspace / "linkdir").symlink_to(outside, target_is_directory=True)
    session = daemon.create(workspace, agent="scripted")

    for path in ("link.txt", "linkdir/target.txt", "linkdir/new.txt"):
        turn = daemon.run_turn(session["id"], f"tool write {path} pwned")
        denials = [e for e in of_type(turn, "permission") if e["content"].get("action") == "fs/write_text_file"]
        assert len(denials) == 1, path
        assert denials[0]["content"]["decision"] == "denied"
        assert denials[0]["content"]["resource"] == str(workspace / path)
        [result] = of_type(turn, "tool_result")
        assert result["content"]["status"] == "failed", path
    assert target.read_text() == "untouched"
    assert not (outside / "new.txt").exists()


def test_a_symlink_loop_is_refused_and_recorded_not_an_internal_error(daemon: Daemon, workspace: Path) -> None:
    (workspace / "loop").symlink_to(workspace / "loop")
    session = daemon.create(workspace, agent="scripted")
    turn = daemon.run_turn(session["id"], "tool read loop")
    denials = [e for e in of_type(turn, "permission") if e["content"].get("action") == "fs/read_text_file"]
    assert len(denials) == 1 and denials[0]["content"]["decision"] == "denied"
    [result] = of_type(turn, "tool_result")
    assert result["content"]["status"] == "failed"
    assert daemon.session(session["id"])["state"] == "active"


def test_reading_a_missing_file_answers_acp_resource_not_found(daemon: Daemon, workspace: Path) -> None:
    # Agents such as gemini-cli read a file to learn it does not exist yet; -32603 stops them.
    session = daemon.create(workspace, agent="scripted")
    turn = daemon.run_turn(session["id"], "tool read not-there-yet.txt")
    [result] = of_type(turn, "tool_result")
    assert result["content"]["status"] == "failed"
    # The scripted agent reports the JSON-RPC error it got: code, message, data.
    error = result["content"]["tool_error"]
    assert error.startswith("-32002 Resource not found"), error
    assert str(workspace / "not-there-yet.txt") in error
    assert reply(turn) == ["tool error"]
    assert daemon.session(session["id"])["state"] == "active"


def test_a_fifo_in_the_workspace_is_refused_at_once_not_waited_on(daemon: Daemon, workspace: Path) -> None:
    # A blocking open of a FIFO held a pool thread until someone wrote to it; eight of them stalled every
    # other session's prompts. Now only regular files are served, and the open never blocks.
    os.mkfifo(workspace / "pipe")
    session = daemon.create(workspace, agent="scripted")
    for verb in ("read pipe", "write pipe data"):
        turn = daemon.run_turn(session["id"], f"tool {verb}")
        [result] = of_type(turn, "tool_result")
        assert result["content"]["status"] == "failed", verb
        error = result["content"]["tool_error"]
        assert error.startswith("-32602") and "not a regular file" in error, error
    assert daemon.session(session["id"])["state"] == "active"
