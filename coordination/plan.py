"""A task's plan: `{"steps": [{"id": "a", "prompt": "…", "after": []}, …]}`, checked whole before anything is made
(pure: tests/unit/test_coordination_plan.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_STEPS = 32
STEP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class PlanError(ValueError):
    """What is wrong with a plan, naming the step."""


@dataclass(frozen=True)
class PlannedStep:
    id: str
    prompt: str
    after: tuple[str, ...]


def parse(raw: object) -> list[PlannedStep]:
    if not isinstance(raw, dict) or not isinstance(raw.get("steps"), list) or not raw["steps"]:
        raise PlanError('a plan is {"steps": [{"id", "prompt", "after"}, …]} with at least one step')
    if set(raw) - {"steps"}:
        raise PlanError(f"unknown plan field(s): {', '.join(sorted(set(raw) - {'steps'}))}")
    if len(raw["steps"]) > MAX_STEPS:
        raise PlanError(f"a plan has at most {MAX_STEPS} steps")
    steps: list[PlannedStep] = []
    for i, body in enumerate(raw["steps"]):
        if not isinstance(body, dict) or set(body) - {"id", "prompt", "after"}:
            raise PlanError(f"steps[{i}]: an object with id, prompt and after only")
        sid, prompt, after = body.get("id"), body.get("prompt"), body.get("after", [])
        if not isinstance(sid, str) or not STEP_ID.fullmatch(sid):
            raise PlanError(f"steps[{i}].id: a short plain name")
        if not isinstance(prompt, str) or not prompt.strip():
            raise PlanError(f"steps[{i}] ({sid}).prompt: required")
        if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
            raise PlanError(f"steps[{i}] ({sid}).after: a list of step ids")
        if sid in {s.id for s in steps}:
            raise PlanError(f"steps[{i}].id: {sid!r} is named twice")
        steps.append(PlannedStep(sid, prompt, tuple(dict.fromkeys(after))))
    ids = {s.id for s in steps}
    for s in steps:
        unknown = [a for a in s.after if a not in ids]
        if unknown or s.id in s.after:
            raise PlanError(f"step {s.id}: after names {', '.join(unknown) or s.id}, "
                            + ("no step of the plan" if unknown else "itself"))
    _no_cycle(steps)
    return steps


def _no_cycle(steps: list[PlannedStep]) -> None:
    """Kahn's order: a step left over waits on a circle."""
    waiting = {s.id: set(s.after) for s in steps}
    done: set[str] = set()
    while True:
        ready = [sid for sid, after in waiting.items() if after <= done]
        if not ready:
            break
        for sid in ready:
            done.add(sid)
            del waiting[sid]
    if waiting:
        raise PlanError(f"steps {', '.join(sorted(waiting))} wait on each other in a circle")


def runnable(statuses: dict[str, str], after: dict[str, tuple[str, ...]]) -> list[str]:
    """The queued steps whose every `after` step succeeded."""
    return [sid for sid, status in statuses.items()
            if status == "queued" and all(statuses.get(a) == "succeeded" for a in after[sid])]
