"""What a task's attempts cost, and what its budget leaves: the agents' reported cost on each attempt's session
record (sessions/runtime/agent_state.py), summed over the attempts."""

from __future__ import annotations

from compozy_base.config.loader import get_config
from sessions.core.errors import Conflict, NotFound
from sessions.core.record import CostDoc
from sessions.services.lookup import read_session_meta
from tasks.models import Task, TaskRun


def session_cost(session_id: str) -> CostDoc | None:
    """A session's cumulative cost ({amount, currency}) as its record says; None when unknown or gone."""
    try:
        usage = read_session_meta(session_id).get("usage") or {}
    except (NotFound, Conflict):  # removed, or its meta.json unreadable: it adds nothing it can prove
        return None
    cost = usage.get("cost") if isinstance(usage, dict) else None
    return cost if isinstance(cost, dict) and isinstance(cost.get("amount"), int | float) else None


def task_cost(runs: list[TaskRun]) -> CostDoc | None:
    """What a task's attempts cost together (the agents' reports, in their currency; USD when they mix)."""
    costs = [c for r in runs if r.session_id and (c := session_cost(r.session_id)) is not None]
    if not costs:
        return None
    return {"amount": round(sum(float(c["amount"]) for c in costs), 6), "currency": costs[0].get("currency") or "USD"}


def budget_left(task: Task) -> float | None:
    """What a task's cost budget leaves for its next attempt (USD), None without a budget: the budget spans the
    attempts, so a retry starts with what the earlier ones did not spend."""
    config = get_config()
    agent = config.agents.get(task.agent_name or config.default_agent)
    cap = (agent.max_cost_usd if agent is not None and agent.max_cost_usd else 0.0) or config.max_cost_usd
    if not cap:
        return None
    spent = task_cost(list(task.runs.exclude(session_id="")))
    return round(cap - (float(spent["amount"]) if spent else 0.0), 6)
