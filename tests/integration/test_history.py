"""`session history`: events grouped by turn in user-visible order, newest N turns, bounded per turn."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Daemon


def test_history_groups_turns_in_order_and_bounds_a_huge_turn(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    for text in ("echo one", "echo two", "stream 1500"):
        daemon.run_turn(sid, text, timeout=90)
    turns = daemon.cli_json("session", "history", sid)
    prompts = [t["events"][0]["content"]["text"] for t in turns if t["events"][0]["type"] == "user_message"]
    assert prompts == ["echo one", "echo two"], "the huge turn's user_message is beyond its kept tail"
    huge = turns[-1]
    assert huge["truncated"] is True
    assert len(huge["events"]) == 1000
    assert huge["omitted_events"] == 1500 + 2 - 1000  # user_message + 1500 chunks + done
    assert huge["events"][-1]["type"] == "done"
    sequences = [e["sequence"] for t in turns for e in t["events"]]
    assert sequences == sorted(sequences)

    last_two = daemon.cli_json("session", "history", sid, "--last", "2")
    assert [t["turn_id"] for t in last_two] == [t["turn_id"] for t in turns[-2:]]
    assert "truncated" not in last_two[0]
