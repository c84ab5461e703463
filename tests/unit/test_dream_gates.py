"""Dreams' gates (dreams/gates.py): pure rules, the clock a parameter; and the answer a dream's agent gives."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compozy_base.config.memory import DreamConfig
from dreams.answer import parse_answer
from dreams.gates import GateInputs, blocked
from tests.django_env import ensure_django

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
CONFIG = DreamConfig(min_interval=3600, min_sessions=2, min_candidates=1)


def inputs(**changes: object) -> GateInputs:
    base = {"running": False, "last_dream_at": NOW - timedelta(hours=2), "completed_since": 2, "candidates": 1}
    return GateInputs(**{**base, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(("changes", "gate"), [
    ({"running": True}, "one_runner"),
    ({"last_dream_at": NOW - timedelta(minutes=59)}, "min_interval"),
    ({"completed_since": 1}, "min_sessions"),
    ({"candidates": 0}, "min_candidates"),
    ({"running": True, "candidates": 0}, "one_runner"),  # the first gate that does not pass is named
])
def test_the_first_closed_gate_is_named(changes: dict[str, object], gate: str) -> None:
    closed = blocked(inputs(**changes), CONFIG, NOW)
    assert closed is not None and closed.gate == gate and closed.detail


def test_open_gates_let_a_dream_run() -> None:
    assert blocked(inputs(), CONFIG, NOW) is None
    assert blocked(inputs(last_dream_at=None), CONFIG, NOW) is None  # never dreamt: no interval to wait
    open_config = DreamConfig(min_interval=0, min_sessions=0, min_candidates=0)
    assert blocked(inputs(last_dream_at=NOW, completed_since=0, candidates=0), open_config, NOW) is None


def test_a_dreams_answer_is_its_last_json_block() -> None:
    text = 'thinking\n```json\n{"decisions": []}\n```\nthen\n```json\n{"decisions": [{"action": "delete"}, 3]}\n```'
    assert parse_answer(text) == [{"action": "delete"}]
    with pytest.raises(ValueError, match="no fenced json"):
        parse_answer("nothing to say")


def _dream_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[Any]) -> str:
    from sessions.store import folder
    from sessions.store.events import EventLog
    from sessions.store.ids import new_session_id

    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path / "home"))
    session_id = new_session_id()
    folder.events_path(session_id).parent.mkdir(parents=True)
    log = EventLog(folder.events_path(session_id), "scripted")
    log.append(events)
    log.close()
    return session_id


def test_a_dreams_answer_streamed_over_many_rows_is_read_whole(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_django()
    from dreams.runner import _outcome
    from sessions.store.ops import NewEvent

    turn, earlier = "turn_00000000000000d1", "turn_00000000000000d0"
    decisions = [{"action": "delete", "slug": f"stale-{i}", "type": "project", "reason": "stale"} for i in range(30)]
    answer = "Consolidated.\n\n```json\n" + json.dumps({"decisions": decisions}) + "\n```\n"
    pieces = [answer[i:i + 40] for i in range(0, len(answer), 40)]
    assert len(pieces) > 20  # more rows than the newest-20 read the answer once came from
    events = [NewEvent("agent_message", earlier, {"text": "an earlier turn's words "}),
              NewEvent("done", earlier, {"stop_reason": "end_turn"}),
              *(NewEvent("agent_message", turn, {"text": p}) for p in pieces),
              NewEvent("done", turn, {"stop_reason": "end_turn"})]
    outcome = _outcome(_dream_session(tmp_path, monkeypatch, events))
    assert outcome == ("done", answer)
    assert len(parse_answer(outcome[1])) == 30


@pytest.mark.parametrize("stop", ["cancelled", "max_tokens", "refusal"])
def test_a_dream_turn_cut_short_fails_like_a_task_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       stop: str) -> None:
    ensure_django()
    from dreams.runner import _outcome
    from sessions.store.ops import NewEvent

    turn = "turn_00000000000000d2"
    events = [NewEvent("agent_message", turn, {"text": "Consolidated.\n\n```json\n{\"deci"}),
              NewEvent("done", turn, {"stop_reason": stop})]
    assert _outcome(_dream_session(tmp_path, monkeypatch, events)) == (
        "failed", f"the dream's turn failed: the turn ended with stop reason {stop}")
