"""Numbers that cannot lie (issue 44), the rules without a daemon: strict JSON out and in
(compozy_base/strict_json.py), money (sessions/core/money.py: amounts, currencies, a task's remainder), the
agent's NaN read as null by the transport, the cost and budget rules of AgentState, and budgets in config.toml."""

from __future__ import annotations

import asyncio
import datetime
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from compozy_base import strict_json
from compozy_base.config.loader import ConfigError, load_config
from sessions.acp.mapping import normalize_usage
from sessions.core import money
from sessions.core.enums import MarkerKind, StopReason
from sessions.core.record import SessionRecord
from sessions.runtime.agent_state import AgentState
from tests.unit.test_ndjson_reader import line, opened, response, run, update

NAN, INF = float("nan"), float("inf")


# ---- strict JSON -------------------------------------------------------------------------------------------------

def test_dumps_writes_a_number_that_is_not_finite_as_null_never_as_nan() -> None:
    value = {"a": NAN, "b": [INF, -INF, 1.5], "c": {"d": (NAN,)}, "e": "NaN"}
    text = strict_json.dumps(value, sort_keys=True)
    assert json.loads(text) == {"a": None, "b": [None, None, 1.5], "c": {"d": [None]}, "e": "NaN"}
    assert "NaN" not in text.replace('"NaN"', "") and "Infinity" not in text
    assert strict_json.dumps({"a": 1}, indent=2) == json.dumps({"a": 1}, indent=2)  # what is finite is untouched


class Encoder(json.JSONEncoder):
    """As ninja's NinjaJSONEncoder does: pydantic models and dates through `default`."""

    def default(self, o: Any) -> Any:
        if isinstance(o, BaseModel):
            return o.model_dump()
        if isinstance(o, datetime.date):
            return o.isoformat()
        return super().default(o)


def test_dumps_cleans_what_an_encoders_default_produced() -> None:
    class Model(BaseModel):
        cost: float

    text = strict_json.dumps({"m": Model(cost=NAN), "at": datetime.date(2026, 1, 2)}, cls=Encoder)
    assert strict_json.loads(text) == {"m": {"cost": None}, "at": "2026-01-02"}


def test_dumps_still_raises_what_is_not_about_numbers() -> None:
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular"):
        strict_json.dumps(looped)


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '[1e400]', '{"a": -1e999}'])
def test_loads_refuses_nan_and_infinity(text: str) -> None:
    with pytest.raises(strict_json.NotFinite):
        strict_json.loads(text)
    with pytest.raises(ValueError):
        strict_json.loads(text.encode())


def test_loads_refuses_a_repeated_key_unless_told_otherwise() -> None:
    text = '{"action": "accept", "content": {"n": 1}, "content": {"n": 2}}'
    with pytest.raises(strict_json.DuplicateKey, match="content"):
        strict_json.loads(text)
    with pytest.raises(strict_json.DuplicateKey):
        strict_json.loads('{"outer": {"k": 1, "k": 1}}')
    assert strict_json.loads(text, duplicates=True)["content"] == {"n": 2}
    assert strict_json.loads(b'{"a": [1, 2.5, "x"], "b": null}') == {"a": [1, 2.5, "x"], "b": None}


# ---- money -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "expected"), [
    (0, 0.0), (1.25, 1.25), (10, 10.0), (NAN, None), (INF, None), (-INF, None), (-1e9, None), (-0.01, None),
    (True, None), ("5", None), (None, None), (10 ** 400, None)])
def test_an_amount_is_finite_and_not_negative(value: object, expected: float | None) -> None:
    assert money.amount(value) == expected


@pytest.mark.parametrize(("raw", "counted"), [
    ({"amount": 0.5, "currency": "USD"}, {"amount": 0.5, "currency": "USD"}),
    ({"amount": 0.5, "currency": "USD "}, {"amount": 0.5, "currency": "USD"}),
    ({"amount": 0.5, "currency": " usd"}, {"amount": 0.5, "currency": "USD"}),
    ({"amount": 2}, {"amount": 2.0, "currency": "USD"}),
    ({"amount": 2, "currency": None}, {"amount": 2.0, "currency": "USD"}),
    ({"amount": NAN, "currency": "USD"}, None), ({"amount": -INF, "currency": "USD"}, None),
    ({"amount": -1e9, "currency": "USD"}, None), ({"amount": None, "currency": "USD"}, None),
    ({"amount": 5, "currency": "EUR"}, None), ({"amount": 5, "currency": "US D"}, None),
    ({"amount": 5, "currency": 840}, None), ("5 USD", None), (None, None)])
def test_a_cost_counts_only_when_it_is_a_sound_amount_in_usd(raw: object, counted: dict[str, Any] | None) -> None:
    got, why = money.cost(raw)
    assert got == counted
    assert (why is None) == (counted is not None)


def test_a_tasks_remainder_is_never_more_than_its_cap_and_nothing_once_a_cost_cannot_be_counted() -> None:
    usd = {"amount": 0.25, "currency": "USD"}
    assert money.remainder(1.0, []) == 1.0
    assert money.remainder(1.0, [None, usd, usd]) == 0.5
    assert money.remainder(1.0, [{"amount": 3, "currency": "USD"}]) == 0.0
    for lie in (NAN, -INF, -1e9):
        assert money.remainder(1.0, [usd, {"amount": lie, "currency": "USD"}]) == 0.0
    assert money.remainder(1.0, [{"amount": 0.1, "currency": "EUR"}]) == 0.0


def test_usage_rows_keep_finite_counts_and_a_cost_a_budget_counts() -> None:
    raw = {"inputTokens": 10, "outputTokens": NAN, "totalTokens": INF, "used": 5, "size": 100,
           "cost": {"amount": 0.5, "currency": "usd "}}
    assert normalize_usage(raw) == {"input_tokens": 10, "context_used": 5, "context_size": 100, "cost_amount": 0.5,
                                    "cost_currency": "USD"}
    assert "cost_amount" not in normalize_usage({"cost": {"amount": -1e9, "currency": "USD"}})
    assert "cost_amount" not in normalize_usage({"cost": {"amount": 1, "currency": "EUR"}})


# ---- the transport: NaN from the agent is read as null, and said -------------------------------------------------

def test_the_transport_reads_an_agents_nan_and_infinity_as_null_and_reports_it() -> None:
    got: list[dict[str, Any]] = []
    violations: list[str] = []
    usage = update(1)
    usage["params"]["update"] = {"sessionUpdate": "usage_update", "used": NAN, "cost": {"amount": NAN}}
    answer = response(3, {"stopReason": "end_turn", "usage": {"totalTokens": INF}})

    async def main() -> None:
        async with opened(got.append, on_violation=violations.append) as (reader, transport):
            overflow = line(update(2)).replace(b'"n": 2', b'"n": 1e400')
            reader.feed_data(line(usage) + overflow + line(answer))
            reader.feed_eof()
            received = await transport.receive()
            assert received is not None and received["result"]["usage"] == {"totalTokens": None}
            assert await transport.receive() is None

    run(main)
    assert got[0]["update"] == {"sessionUpdate": "usage_update", "used": None, "cost": {"amount": None}}
    assert got[1]["n"] is None
    assert len(violations) == 3, violations
    assert all("NaN or Infinity" in v for v in violations), violations
    assert "usage_update" in violations[0] and "request 3" in violations[2], violations


# ---- the budget (AgentState) -------------------------------------------------------------------------------------

class Session:
    """What AgentState sees of a session: its record, the config's caps, and what it reports."""

    def __init__(self, cap: float = 0.0, carried: float | None = None, agent_cap: float = 0.0) -> None:
        self.rec = SessionRecord(id="sess_0123456789abcdef", workspace_id="ws_1", agent_name="a", state="active",
                                 provider="p", budget_usd=carried)
        self.config = SimpleNamespace(agents={"a": SimpleNamespace(max_cost_usd=agent_cap)}, max_cost_usd=cap)
        self.violations: list[str] = []
        self.markers: list[tuple[MarkerKind, str, dict[str, Any] | None]] = []
        self.stops: list[tuple[StopReason, str]] = []

    def protocol_violation(self, what: str) -> None:
        self.violations.append(what)

    def marker(self, kind: MarkerKind, summary: str, evidence: dict[str, Any] | None = None) -> None:
        self.markers.append((kind, summary, evidence))

    async def failure(self, kind: str, summary: str) -> dict[str, Any]:
        return {"kind": kind, "summary": summary}

    async def stop(self, reason: StopReason, detail: str, *, failure: dict[str, Any] | None = None) -> None:
        self.stops.append((reason, detail))


def report(session: Session, *costs: object) -> AgentState:
    state = AgentState(session)  # type: ignore[arg-type]

    async def main() -> None:
        state.turn_started()
        for cost in costs:
            state.update("usage_update", {"sessionUpdate": "usage_update", "cost": cost})
        await asyncio.sleep(0)

    asyncio.run(main())
    return state


@pytest.mark.parametrize("lie", [{"amount": None, "currency": "USD"}, {"amount": -INF, "currency": "USD"},
                                 {"amount": -1e9, "currency": "USD"}, {"amount": 5, "currency": "EUR"},
                                 {"amount": NAN}, "lots"])
def test_a_cost_the_budget_cannot_count_is_refused_and_stops_a_budgeted_session(lie: object) -> None:
    session = Session(cap=1.0)
    report(session, {"amount": 0.25, "currency": "USD"}, lie)
    assert session.rec.usage is not None and session.rec.usage.cost is not None
    assert (session.rec.usage.cost.amount, session.rec.usage.cost.currency) == (0.25, "USD")  # the lie is not kept
    assert len(session.violations) == 1 and "cost" in session.violations[0], session.violations
    assert [s[0] for s in session.stops] == [StopReason.BUDGET_EXCEEDED]
    assert session.markers[0][0] == MarkerKind.BUDGET_EXCEEDED and session.markers[0][2]["refused"]


def test_without_a_budget_a_refused_cost_is_only_reported() -> None:
    session = Session()
    state = report(session, {"amount": 0.25, "currency": "USD"}, {"amount": -1e9, "currency": "USD"})
    assert session.violations and not session.stops
    assert state.turn_cost() == {"amount": 0.25, "currency": "USD"}


def test_a_padded_usd_counts_and_reaches_the_budget() -> None:
    session = Session(cap=1.0)
    report(session, {"amount": 0.5, "currency": "usd"}, {"amount": 1.5, "currency": "USD "})
    assert not session.violations
    assert session.stops and "1.50 USD reached the budget of 1.00 USD" in session.stops[0][1]


def test_a_turns_cost_is_never_negative() -> None:
    session = Session()
    state = report(session, {"amount": 2.0, "currency": "USD"})
    state.turn_started()
    state.update("usage_update", {"sessionUpdate": "usage_update", "cost": {"amount": 0.5, "currency": "USD"}})
    assert state.turn_cost() == {"amount": 0.0, "currency": "USD"}


@pytest.mark.parametrize(("cap", "agent_cap", "carried", "budget"), [
    (0.0, 0.0, None, None), (5.0, 0.0, None, 5.0), (5.0, 2.0, None, 2.0), (5.0, 2.0, 1.5, 1.5),
    (5.0, 2.0, 1e9, 2.0), (5.0, 0.0, NAN, 0.0), (5.0, 0.0, -1e9, 0.0), (5.0, 0.0, INF, 0.0), (0.0, 0.0, 0.75, 0.75)])
def test_a_sessions_budget_is_what_its_task_left_never_more_than_its_cap(
        cap: float, agent_cap: float, carried: float | None, budget: float | None) -> None:
    state = AgentState(Session(cap=cap, carried=carried, agent_cap=agent_cap))  # type: ignore[arg-type]
    assert state.budget_usd() == budget


def test_nothing_left_stops_at_the_first_cost_reported() -> None:
    session = Session(cap=5.0, carried=NAN)
    report(session, {"amount": 0.0, "currency": "USD"})
    assert session.stops


# ---- config.toml -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "inf", "+inf", "-inf", "-1", "1e400", "99999999999999999999" * 20])
@pytest.mark.parametrize("table", ["[limits]", '[agents.capped]\nprovider = "p"'])
def test_a_budget_that_is_not_a_finite_amount_is_refused(tmp_path: Path, table: str, value: str) -> None:
    (tmp_path / "config.toml").write_text(f'[providers.p]\ncommand = "x"\n\n{table}\nmax_cost_usd = {value}\n')
    with pytest.raises(ConfigError, match="max_cost_usd: must be a finite, non-negative number"):
        load_config(tmp_path)


def test_a_finite_budget_loads(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[limits]\nmax_cost_usd = 2.5\n")
    assert math.isclose(load_config(tmp_path).max_cost_usd, 2.5)
