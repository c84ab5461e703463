"""Costs and budgets as numbers that cannot lie (issue 44): an amount is finite and not negative, and a cost is in
USD, the one currency a budget (`max_cost_usd`) is in. Pure: the runtime checks what an agent reports with it
(sessions/runtime/agent_state.py), tasks what their attempts' records say (tasks/costs.py).

Each lie dodged a budget: NaN and -Infinity compare false with any cap, -1e9 is under every cap (and, as a turn's
cost, credited a task with a billion USD for its next attempt), and a currency other than exactly "USD" skipped the
check. A cost that cannot be counted is refused, and a budget that cannot be checked counts as reached.
"""

from __future__ import annotations

import math

from sessions.core.record import CostDoc

BUDGET_CURRENCY = "USD"


def amount(value: object) -> float | None:
    """`value` as an amount of money: a finite, non-negative float; None for anything else (a bool, a string, NaN,
    an infinity, a negative number, an integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def currency(value: object) -> str | None:
    """An ISO 4217 code as written in upper case. "USD " and "usd" are USD: space and case carry nothing in a code
    of three letters, and the amount means the same whatever they are, so normalising cannot make a cost lie (and
    refusing would stop an honest agent that pads). No currency at all is USD, as before (what agents that omit it
    report in). Anything that is not three letters: None."""
    if value is None or value == "":
        return BUDGET_CURRENCY
    if not isinstance(value, str):
        return None
    code = value.strip().upper()
    return code if len(code) == 3 and code.isascii() and code.isalpha() else None


def cost(raw: object) -> tuple[CostDoc | None, str | None]:
    """A cost an agent reported, ACP's `{amount, currency}`: (`{"amount", "currency": "USD"}`, None) when a budget
    can count it, else (None, why not). Only USD counts: a budget has no exchange rate, and a cost in EUR skipped it."""
    if not isinstance(raw, dict):
        return None, f"the cost {raw!r:.60} is not an object"
    value = amount(raw.get("amount"))
    if value is None:
        return None, f"the cost amount {raw.get('amount')!r:.40} is not a finite, non-negative number"
    code = currency(raw.get("currency"))
    if code != BUDGET_CURRENCY:
        return None, f"the cost currency {raw.get('currency')!r:.40} is not {BUDGET_CURRENCY}, the budget's currency"
    return {"amount": value, "currency": code}, None


def remainder(cap: float, costs: list[object]) -> float:
    """What a budget of `cap` USD leaves after `costs` (the earlier attempts' cumulative costs, None where one
    reported none): never more than `cap`, never below 0, and 0 when a cost cannot be counted (a NaN or a negative
    cost must not hand the next attempt an inflated or endless budget)."""
    spent = 0.0
    for reported in costs:
        if reported is None:
            continue
        counted, _ = cost(reported)
        if counted is None:
            return 0.0
        spent += counted["amount"]
    return round(min(cap, max(0.0, cap - spent)), 6)
