"""What a task's attempts cost, and what its budget leaves: the agents' reported cost on each attempt's session
record (sessions/runtime/agent_state.py), summed over the attempts. Only costs a budget can count are summed
(sessions/core/money.py); one it cannot (a record an earlier version wrote with NaN or -1e9) leaves no budget."""

from __future__ import annotations

from compozy_base.config.loader import get_config
from sessions.core import money
from sessions.core.errors import Conflict, NotFound
from sessions.core.record import CostDoc
from sessions.services.lookup import read_session_meta
from tasks.models import Task, TaskRun


def session_cost(session_id: str) -> object:
    """A session's cumulative cost as its record says it (`{amount, currency}`, unchecked); None when it reported
    none, or is gone."""
    try:
        usage = read_session_meta(session_id).get("usage") or {}
    except (NotFound, Conflict):  # removed, or its meta.json unreadable: it adds nothing it can prove
        return None
    return usage.get("cost") if isinstance(usage, dict) else None


def task_cost(runs: list[TaskRun]) -> CostDoc | None:
    """What a task's attempts cost together, in USD: the costs a budget can count (others are left out)."""
    costs = [c for r in runs if r.session_id and (c := money.cost(session_cost(r.session_id))[0]) is not None]
    if not costs:
        return None
    return {"amount": round(sum(c["amount"] for c in costs), 6), "currency": money.BUDGET_CURRENCY}


def budget_left(task: Task) -> float | None:
    """What a task's cost budget leaves for its next attempt (USD), None without a budget: the budget spans the
    attempts, so a retry starts with what the earlier ones did not spend."""
    config = get_config()
    agent = config.agents.get(task.agent_name or config.default_agent)
    cap = (agent.max_cost_usd if agent is not None and agent.max_cost_usd else 0.0) or config.max_cost_usd
    if not cap:
        return None
    return money.remainder(cap, [session_cost(r.session_id) for r in task.runs.exclude(session_id="")])
