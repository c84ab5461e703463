"""A coordinated task's plan (coordination/plan.py): checked whole, and which steps may run."""

from __future__ import annotations

import pytest

from coordination.plan import PlanError, parse, runnable


def test_a_plan_parses_in_order_and_its_runnable_steps_wait_for_theirs() -> None:
    steps = parse({"steps": [{"id": "a", "prompt": "p"}, {"id": "b", "prompt": "p", "after": ["a", "a"]},
                             {"id": "c", "prompt": "p", "after": ["a"]}]})
    assert [(s.id, s.after) for s in steps] == [("a", ()), ("b", ("a",)), ("c", ("a",))]
    after = {s.id: s.after for s in steps}
    assert runnable({"a": "queued", "b": "queued", "c": "queued"}, after) == ["a"]
    assert runnable({"a": "running", "b": "queued", "c": "queued"}, after) == []
    assert runnable({"a": "succeeded", "b": "queued", "c": "running"}, after) == ["b"]


@pytest.mark.parametrize(("raw", "says"), [
    ({"steps": []}, "at least one step"),
    ({"steps": [{"id": "a", "prompt": "p"}], "extra": 1}, "unknown plan field"),
    ({"steps": [{"id": "a b", "prompt": "p"}]}, r"steps\[0\]\.id"),
    ({"steps": [{"id": "a", "prompt": " "}]}, "prompt: required"),
    ({"steps": [{"id": "a", "prompt": "p"}, {"id": "a", "prompt": "p"}]}, "named twice"),
    ({"steps": [{"id": "a", "prompt": "p", "after": ["z"]}]}, "no step of the plan"),
    ({"steps": [{"id": "a", "prompt": "p", "after": ["a"]}]}, "itself"),
    ({"steps": [{"id": "a", "prompt": "p", "after": ["b"]}, {"id": "b", "prompt": "p", "after": ["a"]}]},
     "in a circle"),
    ({"steps": [{"id": f"s{i}", "prompt": "p"} for i in range(33)]}, "at most 32"),
])
def test_a_plan_it_cannot_run_is_refused_naming_why(raw: object, says: str) -> None:
    with pytest.raises(PlanError, match=says):
        parse(raw)
