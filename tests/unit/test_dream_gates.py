"""Dreams' gates (dreams/gates.py): pure rules, the clock a parameter; and the answer a dream's agent gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from compozy_base.config.memory import DreamConfig
from dreams.answer import parse_answer
from dreams.gates import GateInputs, blocked

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
