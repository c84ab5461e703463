"""Numbers that cannot lie, through the real daemon and the scripted agent (issue 44, "Numbers"): a cost the budget
cannot count (NaN, -Infinity, -1e9, EUR, "USD ") cannot dodge `max_cost_usd`, a task's next attempt is never
handed more than its task's remainder, and no route, stream or CLI answer carries NaN or Infinity however many the
agent sent (every answer is parsed with a parser that refuses them, as a browser's JSON.parse does)."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, Daemon, of_type, start_daemon, wait_for

pytestmark = pytest.mark.timeout(180)

CAP = 1.0
CONFIG = f'[agents.capped]\nprovider = "scripted"\nmax_cost_usd = {CAP:g}\n'


def strict(text: str | bytes) -> Any:
    """JSON as RFC 8259 has it: no NaN or Infinity (nor a number that overflows to it), no duplicate keys."""
    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"{text} overflows")
        return value

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise ValueError(f"duplicate keys in {keys}")
        return dict(items)

    return json.loads(text, parse_constant=constant, parse_float=number, object_pairs_hook=pairs)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("numbers-home"), extra_config=CONFIG)
    yield d
    d.stop()


def violations(daemon: Daemon, sid: str) -> list[str]:
    return [e["content"]["text"] for e in of_type(daemon.all_events(sid), "system")
            if e["content"].get("title") == "protocol_violation"]


@pytest.mark.parametrize("cost", ["nan", "-inf", "-1e9", "5:EUR", "5:USD+", "0.5 nan", "0.5 -1e9"],
                         ids=["nan", "-inf", "-1e9", "eur", "usd-padded", "nan-after-real", "negative-after-real"])
def test_a_cost_the_budget_cannot_count_does_not_dodge_max_cost_usd(daemon: Daemon, workspace: Path,
                                                                    cost: str) -> None:
    # Each of these kept the session running past its cap: NaN and -Infinity compare false, -1e9 is under any cap,
    # and a currency other than exactly "USD" skipped the check.
    sid = daemon.create(workspace, agent="capped")["id"]
    assert daemon.prompt(sid, f"cost {cost} hold").status_code == 200
    stopped = daemon.wait_state(sid, {"stopped"}, timeout=30)
    assert stopped["stop_reason"] == "budget_exceeded", stopped
    assert stopped["failure"]["kind"] == "budget_exceeded", stopped
    usage = daemon.meta(sid).get("usage") or {}
    if usage.get("cost") is not None:  # what the record counts is a sound cost, never the lie
        assert math.isfinite(usage["cost"]["amount"]) and usage["cost"]["amount"] >= 0, usage
        assert usage["cost"]["currency"] == "USD", usage
    if "USD+" not in cost:  # "USD " is read as USD (normalised, not refused)
        assert any("cost" in v for v in violations(daemon, sid)), violations(daemon, sid)


def test_a_padded_or_lowercase_usd_is_counted_as_usd(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="capped")["id"]
    turn = daemon.run_turn(sid, "cost 0.25:USD+ 0.5:usd")
    assert of_type(turn, "done"), [e["type"] for e in turn]
    assert daemon.session(sid)["state"] == "active"
    saved = wait_for(lambda: daemon.meta(sid).get("usage"), what="the usage saved with the turn's end")
    assert saved["cost"] == {"amount": 0.5, "currency": "USD"}
    assert of_type(turn, "done")[0]["content"]["cost"] == {"amount": 0.5, "currency": "USD"}


def task_of(daemon: Daemon, task_id: str) -> dict[str, Any]:
    answer = daemon.http.get(f"/api/tasks/{task_id}")
    assert answer.status_code == 200, answer.text
    return strict(answer.content)["task"]


@pytest.mark.parametrize("lie", ["-1e9", "nan", "-inf"])
def test_a_tasks_next_attempt_is_never_handed_more_than_the_tasks_remainder(daemon: Daemon, workspace: Path,
                                                                           lie: str) -> None:
    # A negative turn cost credited the task (1 - -1e9: the retry's cap was a billion USD); NaN made the remainder
    # NaN, which no cost reaches.
    created = daemon.http.post("/api/tasks", json={"prompt": f"cost {lie} fail", "agent_name": "capped",
                                                   "workspace_path": str(workspace)})
    assert created.status_code == 201, created.text
    task_id = created.json()["task"]["id"]

    def settled(attempts: int) -> dict[str, Any] | None:
        task = task_of(daemon, task_id)
        done = task["attempts"] == attempts and task["runs"][-1]["status"] == "finished"
        return task if done and task["status"] not in ("queued", "running") else None

    wait_for(lambda: settled(1), timeout=60, what="the first attempt to end")
    assert daemon.http.post(f"/api/tasks/{task_id}/retry").status_code == 200
    task = wait_for(lambda: settled(2), timeout=60, what="the retry to end")
    assert task["status"] != "succeeded", task
    for session_id in task["session_ids"]:
        budget = daemon.meta(session_id).get("budget_usd")
        assert budget is None or (math.isfinite(budget) and 0 <= budget <= CAP), (session_id, budget)
    if task["cost"] is not None:
        assert math.isfinite(task["cost"]["amount"]) and task["cost"]["amount"] >= 0, task["cost"]


# ---- no route emits NaN ----------------------------------------------------------------------------------------

def sse_data(daemon: Daemon, path: str, *, method: str = "GET", body: Any = None, seconds: float = 2.0,
             until: str | None = None) -> list[str]:
    """The `data:` lines a stream sends within `seconds` (or until a line holding `until`)."""
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    with daemon.client(timeout=httpx.Timeout(30.0, read=seconds)) as client:
        try:
            with client.stream(method, path, json=body) as answer:
                assert answer.status_code == 200, answer.read()
                for line in answer.iter_lines():
                    if line.startswith("data:"):
                        lines.append(line[5:].strip())
                    if (until is not None and until in line) or time.monotonic() > deadline:
                        break
        except httpx.ReadTimeout:
            pass
    return lines


def walk(daemon: Daemon, params: dict[str, str]) -> list[str]:
    """Every GET operation of the OpenAPI document, its path parameters filled from `params`: the paths answered
    (each answer parsed strictly)."""
    document = strict(daemon.http.get("/api/openapi.json").content)
    seen = []
    for path, operations in document["paths"].items():
        if "get" not in operations:
            continue
        names = [p["name"] for p in operations["get"].get("parameters", []) if p["in"] == "path"]
        if any(name not in params for name in names):
            raise AssertionError(f"no value for a path parameter of {path}: {names}")
        url = path.format(**{name: params[name] for name in names})
        answer = daemon.http.get(url)
        assert answer.status_code < 500, (url, answer.status_code, answer.text[:300])
        if answer.headers.get("content-type", "").startswith("application/json"):
            try:
                strict(answer.content)
            except ValueError as exc:
                raise AssertionError(f"GET {url} answered JSON a browser cannot read ({exc}): "
                                     f"{answer.text[:300]}") from None
        seen.append(url)
    return seen


def test_no_route_stream_or_cli_answer_carries_nan_or_infinity(daemon: Daemon, workspace: Path) -> None:
    # `/api/sessions` emitted bare NaN for a session whose agent reported a NaN cost: the dashboard's list showed
    # no session at all.
    session = daemon.create(workspace)
    sid, ws = session["id"], session["workspace_id"]
    # The turn's own stream (its events as they come), up to the question the agent asks last.
    frames = sse_data(daemon, daemon.scoped(sid, "/prompt"), method="POST", body={"message": "nans"}, seconds=15,
                      until="elicitation")
    pending = wait_for(lambda: daemon.http.get(daemon.scoped(sid, "/elicitations")).json()["elicitations"],
                       what="the agent's question")
    task = daemon.http.post("/api/tasks", json={"prompt": "cost nan", "agent_name": "scripted",
                                                "workspace_path": str(workspace)})
    assert task.status_code == 201, task.text
    task_id = task.json()["task"]["id"]
    wait_for(lambda: task_of(daemon, task_id)["status"] not in ("queued", "running"), what="the task to end")
    params = {"workspace": ws, "workspace_id": ws, "session_id": sid, "task_id": task_id, "ref": ws,
              "name": "scripted", "agent": "scripted", "request_id": pending[0]["id"],
              "slug": "no-such-entry"}
    walked = walk(daemon, params)
    assert any(url.endswith("/elicitations") for url in walked) and "/api/sessions" in walked, walked
    answer_path = daemon.scoped(sid, f"/elicitations/{pending[0]['id']}")
    for body in (b'{"action": "accept", "content": {"count": NaN}}',
                 b'{"action": "accept", "content": {"count": 1}, "content": {"count": 2}}'):
        refused = daemon.http.post(answer_path, content=body, headers={"content-type": "application/json"})
        assert refused.status_code == 400, (body, refused.text)
    answered = daemon.http.post(answer_path, json={"action": "accept", "content": {"count": 3}})
    assert answered.status_code == 200, answered.text
    strict(answered.content)
    daemon.wait_event(sid, "done")
    walk(daemon, params)  # again, with the turn's end (its usage) stored
    frames += sse_data(daemon, daemon.scoped(sid, "/stream"))
    frames += sse_data(daemon, daemon.scoped(sid, "/stream") + "?frames=raw&after_sequence=0")
    for data in frames:
        try:
            strict(data)
        except ValueError as exc:
            raise AssertionError(f"a stream frame a browser cannot read ({exc}): {data[:300]}") from None
    repaired = daemon.http.post(daemon.scoped(sid, "/repair"), params={"dry_run": "true"})
    assert repaired.status_code in (200, 409), repaired.text  # 409: the session is live
    strict(repaired.content)
    for args in (("session", "list", "--all"), ("session", "status", sid), ("session", "events", sid),
                 ("session", "history", sid), ("task", "show", task_id)):
        result = daemon.cli(*args, "-o", "json")
        assert result.returncode == 0, (args, result.stderr)
        strict(result.stdout)
    # What is stored holds none either: meta.json, and every event row.
    strict((daemon.home / "sessions" / sid / "meta.json").read_text())
    with sqlite3.connect(daemon.home / "sessions" / sid / "events.db") as db:
        for (content,) in db.execute("SELECT content FROM events"):
            strict(content)
    found = violations(daemon, sid)
    assert any("NaN" in v or "Infinity" in v for v in found), found


def test_a_request_body_with_nan_or_a_duplicate_key_is_refused(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    for body, code in ((b'{"name": NaN}', "malformed_json"), (b'{"name": "a", "name": "b"}', "duplicate_key"),
                       (b'{"ttl_seconds": Infinity}', "malformed_json")):
        answer = daemon.http.post(daemon.scoped(sid, "/attach"), content=body,
                                  headers={"content-type": "application/json"})
        assert answer.status_code == 400, (body, answer.text)
        assert strict(answer.content)["code"] == code, (body, answer.text)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_budget_of_nan_or_inf_stops_the_daemon_from_starting(tmp_path: Path, value: str) -> None:
    # Both were accepted: a NaN cap is reached by no cost, and an infinite one is no cap that says so.
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f"[limits]\nmax_cost_usd = {value}\n")
    env = {**os.environ, "COMPOZY_HOME": str(home)}
    env.pop("COMPOZY_URL", None)
    started = subprocess.run([sys.executable, "-m", "compozy.cli", "daemon", "start", "--port", "0"], env=env,
                             cwd=str(ROOT), capture_output=True, text=True, timeout=120)
    if started.returncode == 0:  # it started after all: not left running
        subprocess.run([sys.executable, "-m", "compozy.cli", "daemon", "stop"], env=env, cwd=str(ROOT),
                       capture_output=True, timeout=120)
    assert started.returncode == 78, started.stderr
    [line] = started.stderr.strip().splitlines()
    assert "limits.max_cost_usd: must be a finite, non-negative number" in line, line
