"""`GET /metrics` scraped from the real daemon in Prometheus text format: sessions by state, events appended,
turn durations, SSE clients, supervision actions and failures by kind move with what the sessions do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Daemon, start_daemon, wait_for

SUPERVISION = ('[session.supervision]\nactivity_heartbeat_interval = "0.5s"\ninactivity_warning_after = "1s"\n'
               'inactivity_timeout = "2s"\ntimeout_cancel_grace = "1s"\nprogress_notify_interval = "0s"\n')


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("metrics-home"), extra_config=SUPERVISION)
    yield d
    d.stop()


def scrape(d: Daemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample, keyed by (name, sorted labels)."""
    response = d.http.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_turn_moves_events_turns_and_sessions_by_state(daemon: Daemon, workspace: Path) -> None:
    before = scrape(daemon)
    assert {value(before, "compozy_sessions", state=s) for s in ("starting", "active", "stopping", "stopped")} \
        == {0.0}
    assert ("compozy_store_commit_seconds_count", ()) in before  # observed by the store writer

    sid = daemon.create(workspace, agent="scripted")["id"]
    turn = daemon.run_turn(sid, "tool read README.md")
    after = scrape(daemon)
    assert value(after, "compozy_sessions", state="active") == 1
    stored = len(daemon.all_events(sid))
    assert stored >= len(turn)
    assert value(after, "compozy_events_appended_total") - value(before, "compozy_events_appended_total") == stored
    turns = "compozy_turn_duration_seconds_count"
    assert value(after, turns) == value(before, turns) + 1

    daemon.http.post(daemon.scoped(sid, "/stop"))
    stopped = scrape(daemon)
    assert value(stopped, "compozy_sessions", state="active") == 0
    assert value(stopped, "compozy_sessions", state="stopped") == 1


def test_a_crash_counts_a_failure_by_kind(daemon: Daemon, workspace: Path) -> None:
    before = scrape(daemon)
    sid = daemon.create(workspace, agent="scripted")["id"]
    assert daemon.prompt(sid, "crash").status_code == 200
    kind = daemon.wait_state(sid, {"stopped"})["failure"]["kind"]
    after = scrape(daemon)
    assert value(after, "compozy_session_failures_total", kind=kind) == \
        value(before, "compozy_session_failures_total", kind=kind) + 1


def test_sse_clients_are_counted_while_they_stream(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    base = scrape(daemon)
    with daemon.client(timeout=30) as client, \
            client.stream("GET", daemon.scoped(sid, "/stream"), params={"frames": "raw"}) as stream:
        lines = stream.iter_lines()  # kept: a dropped line iterator closes the response when collected
        assert next(lines) == ": connected"
        assert value(scrape(daemon), "compozy_sse_clients", stream="session") == \
            value(base, "compozy_sse_clients", stream="session") + 1
    wait_for(lambda: value(scrape(daemon), "compozy_sse_clients", stream="session")
             == value(base, "compozy_sse_clients", stream="session"), timeout=10, what="the SSE client to go")


def test_supervision_actions_are_counted_by_action_and_result(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="scripted")["id"]
    assert daemon.prompt(sid, "silent 30").status_code == 200
    daemon.wait_event(sid, "runtime_warning", timeout=30)
    samples = wait_for(lambda: (s := scrape(daemon)) and value(
        s, "compozy_supervision_actions_total", action="timeout", result="canceled") >= 1 and s,
        timeout=30, what="a counted timeout")
    assert value(samples, "compozy_supervision_actions_total", action="warning", result="recorded") >= 1


def test_metrics_and_pages_answer_other_methods_and_missing_tokens_in_json(daemon: Daemon) -> None:
    # No page and no scrape takes a write: a script's POST gets 405 in the common shape, not Django's CSRF page.
    for route in ("/metrics", "/", "/tasks", "/static/x.js"):
        response = daemon.http.post(route)
        assert response.status_code == 405, (route, response.text[:300])
        assert response.json()["code"] == "method_not_allowed", route
    # A Prometheus scrape without the token is a machine: JSON with a code, not the dashboard's sign-in page.
    response = httpx.get(daemon.base_url + "/metrics")
    assert response.status_code == 401 and response.json()["code"] == "auth_required", response.text[:300]
