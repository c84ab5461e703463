"""`session history`: events grouped by turn in user-visible order, newest N turns, bounded per turn."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Daemon


def test_history_groups_turns_in_order_and_bounds_a_huge_turn(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    # 750 tool calls and their results: 1,500 rows that never merge (streamed text chunks do, events §2).
    for text in ("echo one", "echo two", "tools 750 0"):
        daemon.run_turn(sid, text, timeout=90)
    turns = daemon.cli_json("session", "history", sid)
    prompts = [t["events"][0]["content"]["text"] for t in turns if t["events"][0]["type"] == "user_message"]
    assert prompts == ["echo one", "echo two"], "the huge turn's user_message is beyond its kept tail"
    huge = turns[-1]
    assert huge["truncated"] is True
    assert len(huge["events"]) == 1000
    stored = [e for e in daemon.all_events(sid) if e["turn_id"] == huge["turn_id"]]
    assert len(stored) > 1500
    assert huge["omitted_events"] == len(stored) - 1000
    assert huge["events"][-1]["type"] == "done"
    sequences = [e["sequence"] for t in turns for e in t["events"]]
    assert sequences == sorted(sequences)

    last_two = daemon.cli_json("session", "history", sid, "--last", "2")
    assert [t["turn_id"] for t in last_two] == [t["turn_id"] for t in turns[-2:]]
    assert "truncated" not in last_two[0]
