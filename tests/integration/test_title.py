"""Auto-title (`roles.auto_title`, docs/reference/sessions.md §3) against the real daemon and the offline demo agent,
which answers title requests deterministically: an unnamed session is titled once after its first reply,
an explicit name is never replaced, and `compozy session rename` wins over the title pass."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SCRIPTED, TITLES, Daemon, start_daemon, wait_for

START_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("home"), extra_config=TITLES, timeout=START_TIMEOUT)
    yield d
    d.stop()


def title_events(d: Daemon, sid: str) -> list[dict[str, Any]]:
    return [e for e in d.all_events(sid, type="system") if e["content"].get("title") == "auto_title"]


def title_pass_over(d: Daemon, sid: str) -> dict[str, Any]:
    """meta.json's auto_title record once the pass left `pending`."""
    return wait_for(lambda: (d.meta(sid).get("auto_title") or {}).get("status") not in (None, "pending")
                    and d.meta(sid)["auto_title"], what="the title pass to finish")


def test_the_first_reply_gives_an_unnamed_session_an_auto_title_once(daemon: Daemon, workspace: Path) -> None:
    created = daemon.create(workspace, agent="general")
    sid = created["id"]
    assert created["name"] is None and created["name_source"] is None
    daemon.run_turn(sid, "fix the flaky login test please")

    titled = wait_for(lambda: daemon.session(sid)["name"] and daemon.session(sid), what="an auto title")
    assert titled["name"] == "Fix the flaky login test please"
    assert titled["name_source"] == "auto_title"
    assert title_pass_over(daemon, sid) == {"status": "applied", "route": {
        "provider": "demo", "model": "demo-small", "reasoning_effort": ""}}
    assert [e["content"]["text"] for e in title_events(daemon, sid)] == [titled["name"]]
    # Stored in the catalog too: the list finds it by name.
    listing = daemon.cli_json("session", "list", "--query", "flaky login")["sessions"]
    assert [s["id"] for s in listing] == [sid]

    # One pass only: later replies do not retitle.
    daemon.run_turn(sid, "now something completely different")
    assert daemon.session(sid)["name"] == "Fix the flaky login test please"
    assert len(title_events(daemon, sid)) == 1


def test_an_explicit_name_is_never_replaced(daemon: Daemon, workspace: Path) -> None:
    created = daemon.cli_json("session", "new", "--agent", "general", "--cwd", str(workspace),
                              "--name", "my explicit name", "--prompt", "hello there world")
    sid = created["id"]
    daemon.wait_event(sid, "done")
    session = daemon.session(sid)
    assert session["name"] == "my explicit name" and session["name_source"] == "user"
    # Eligibility is decided when the reply is recorded: a named session never starts a pass.
    assert "auto_title" not in daemon.meta(sid)
    assert title_events(daemon, sid) == []


def test_a_rename_wins_over_a_finished_title_pass(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="general")["id"]
    daemon.run_turn(sid, "summarise the release notes")
    wait_for(lambda: daemon.session(sid)["name_source"] == "auto_title", what="an auto title")

    renamed = daemon.cli_json("session", "rename", sid, "release notes review")
    assert renamed["name"] == "release notes review" and renamed["name_source"] == "user"
    daemon.run_turn(sid, "and the changelog")
    session = daemon.session(sid)
    assert session["name"] == "release notes review" and session["name_source"] == "user"
    assert daemon.meta(sid)["name"] == "release notes review"


def test_a_rename_during_the_title_pass_wins(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="general")["id"]
    daemon.run_turn(sid, "write the migration plan")
    # The pass starts a throwaway agent after `done`; rename right away, most likely while it runs.
    response = daemon.http.patch(daemon.scoped(sid), json={"name": "migration plan"})
    assert response.status_code == 200, response.text

    def pass_over() -> dict[str, Any] | None:
        # Renaming again (same name) rewrites meta.json, so the pass's in-memory outcome shows there.
        assert daemon.http.patch(daemon.scoped(sid), json={"name": "migration plan"}).status_code == 200
        status = (daemon.meta(sid).get("auto_title") or {}).get("status")
        return daemon.meta(sid)["auto_title"] if status not in (None, "pending") else None

    outcome = wait_for(pass_over, what="the title pass to finish")
    assert outcome["status"] in ("skipped", "applied")
    session = daemon.session(sid)
    assert session["name"] == "migration plan" and session["name_source"] == "user"
    assert daemon.meta(sid)["name"] == "migration plan"
    assert len(title_events(daemon, sid)) <= 1


# ---- a title pass that fails (its provider cannot even initialize) -------------------------------------

@pytest.fixture(scope="module")
def failing_titles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("failing-titles-home"),
                     extra_config='[roles.auto_title]\nprovider = "broken"\n', timeout=START_TIMEOUT)
    yield d
    d.stop()


def failed_passes(d: Daemon) -> int:
    return d.log().count("auto-title pass failed")


def test_a_failed_title_pass_leaves_the_session_unnamed(failing_titles: Daemon, workspace: Path) -> None:
    d = failing_titles
    sid = d.create(workspace, agent="general")["id"]
    seen = failed_passes(d)
    d.run_turn(sid, "name me if you can")
    wait_for(lambda: failed_passes(d) > seen, what="the title pass to fail")
    session = d.session(sid)
    assert session["name"] is None and session["name_source"] is None
    assert title_events(d, sid) == []


def test_meta_json_records_the_outcome_of_a_failed_title_pass(failing_titles: Daemon, workspace: Path) -> None:
    d = failing_titles
    sid = d.create(workspace, agent="general")["id"]
    seen = failed_passes(d)
    d.run_turn(sid, "name me if you can")
    wait_for(lambda: failed_passes(d) > seen, what="the title pass to fail")
    assert title_pass_over(d, sid)["status"] == "failed"


# ---- a title agent that echoes its request ------------------------------------------------------------

def echo_providers() -> str:
    """Two echoing title agents: a parrot (the request word for word) and one that quotes it ("echo: …")."""
    agent = [sys.executable, str(SCRIPTED)]
    return (f'[providers.parrot]\ncommand = {json.dumps([*agent, "--echo-verbatim"])}\n\n'
            f'[providers.quoter]\ncommand = {json.dumps(agent)}\n\n'
            '[roles.auto_title]\nprovider = "parrot"\n')


@pytest.mark.parametrize("provider", ["parrot", "quoter"])
def test_a_title_agent_that_echoes_its_request_leaves_the_session_unnamed(
        tmp_path_factory: pytest.TempPathFactory, workspace: Path, provider: str) -> None:
    home = tmp_path_factory.mktemp(f"{provider}-titles-home")
    config = echo_providers().replace('provider = "parrot"', f'provider = "{provider}"')
    d = start_daemon(home, extra_config=config, timeout=START_TIMEOUT)
    try:
        sid = d.create(workspace, agent="general")["id"]
        d.run_turn(sid, "refactor the billing module")
        assert title_pass_over(d, sid)["status"] == "failed"
        session = d.session(sid)
        assert session["name"] is None and session["name_source"] is None
        assert title_events(d, sid) == []
        assert "ignored an echo of its own request" in d.log()
    finally:
        d.stop()


# ---- the first reply after context recovery --------------------------------------------------------------

def flaky_provider(home: Path) -> str:
    """A scripted agent whose session/new fails until a flag file exists (a failed start, then a recovery)."""
    flag = home / "flaky-ok"
    script = (f'if [ -e "{flag}" ]; then exec "{sys.executable}" "{SCRIPTED}"; '
              f'else exec "{sys.executable}" "{SCRIPTED}" --fail-new-session; fi')
    return (f'[providers.flaky]\ncommand = ["/bin/sh", "-c", {json.dumps(script)}]\n\n'
            '[agents.flaky]\nprovider = "flaky"\n')


@pytest.fixture(scope="module")
def demo_titles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """Titles from the demo agent (deterministic: the first words of the user's message) for any session."""
    home = tmp_path_factory.mktemp("demo-titles-home")
    d = start_daemon(home, extra_config=flaky_provider(home) + '[roles.auto_title]\nprovider = "demo"\n',
                     timeout=START_TIMEOUT)
    yield d
    d.stop()


def test_the_title_after_a_recovery_comes_from_what_the_user_typed(demo_titles: Daemon, workspace: Path) -> None:
    d = demo_titles
    flag = d.home / "flaky-ok"
    flag.unlink(missing_ok=True)
    sid = d.create(workspace, agent="flaky", prompt="plan the rollout")["id"]
    assert d.session(sid)["failure"]["kind"] == "startup_failure"
    flag.touch()
    # Reactivation runs the staged prompt (as typed: a start that failed left no conversation to rebuild).
    assert d.http.post(d.scoped(sid, "/reactivate")).status_code == 200
    d.wait_event(sid, "done")
    titled = wait_for(lambda: d.session(sid)["name"] and d.session(sid), what="an auto title")
    assert titled["name"] == "Plan the rollout"


# ---- title passes are bounded: each starts a whole agent process ---------------------------------------

def slow_title_provider(log: Path) -> str:
    """The demo agent behind a shell that logs when each title agent starts, then takes 1.5 s to boot."""
    script = f'date +%s.%N >> "{log}"; sleep 1.5; exec "{sys.executable}" -m sessions.acp.demo_agent'
    return (f'[providers.slowtitle]\ncommand = ["/bin/sh", "-c", {json.dumps(script)}]\n\n'
            '[roles.auto_title]\nprovider = "slowtitle"\n')


def test_at_most_two_title_passes_run_at_once(tmp_path_factory: pytest.TempPathFactory, workspace: Path) -> None:
    home = tmp_path_factory.mktemp("slow-titles-home")
    log = home / "title-starts.log"
    d = start_daemon(home, extra_config=slow_title_provider(log), timeout=START_TIMEOUT)
    try:
        sids = [d.create(workspace, prompt=f"task number {i}")["id"] for i in range(5)]
        for sid in sids:
            wait_for(lambda sid=sid: d.session(sid)["name_source"] == "auto_title", timeout=90,
                     what="every session titled")
        starts = sorted(float(line) for line in log.read_text().split())
        assert len(starts) == 5
        # A third pass can only start once one of the two before it has finished (each takes >= 1.5 s).
        assert all(starts[i + 2] - starts[i] >= 1.4 for i in range(len(starts) - 2)), starts
    finally:
        d.stop()


# ---- every key of [roles.auto_title]: the agent, its overrides, the fallback routes (issue 50, row 3) ------------

ROUTES = """
[agents.titler]
provider = "demo"

[roles.auto_title]
enabled = true
agent = "titler"
model = "demo-huge"  # not offered by the demo agent: this route cannot open the title session

[[roles.auto_title.fallback_chain]]
provider = "broken"  # its agent never completes the handshake

[[roles.auto_title.fallback_chain]]
provider = "demo"
model = "demo-large"

[[roles.auto_title.fallback_chain]]
provider = "scripted"  # never reached: the route before opened the title session
"""


def fallbacks(d: Daemon, sid: str) -> list[dict[str, Any]]:
    return [e["content"]["raw"] for e in d.all_events(sid, type="system")
            if e["content"].get("title") == "role.fallback.used"]


def test_the_title_agent_model_and_fallback_routes_come_from_the_role(tmp_path_factory: pytest.TempPathFactory,
                                                                      workspace: Path) -> None:
    d = start_daemon(tmp_path_factory.mktemp("routes-home"), extra_config=ROUTES, timeout=START_TIMEOUT)
    try:
        assert "unknown key roles.auto_title" not in d.log()  # every key of the table is read
        sid = d.create(workspace)["id"]  # a scripted session: its own agent would only echo the request
        d.run_turn(sid, "rotate the signing keys")
        assert title_pass_over(d, sid) == {"status": "applied", "route": {
            "provider": "demo", "model": "demo-large", "reasoning_effort": ""}}
        assert d.session(sid)["name"] == "Rotate the signing keys"
        used = fallbacks(d, sid)
        assert [(u["role"], u["attempt"], u["provider"], u["model"]) for u in used] == [
            ("auto_title", 1, "broken", ""), ("auto_title", 2, "demo", "demo-large")]
        assert "'demo-huge' rejected" in used[0]["reason"]  # the role's model, applied through the agent's options
        assert "initialize" in used[1]["reason"] or "Transport" in used[1]["reason"], used[1]["reason"]
    finally:
        d.stop()


def test_a_title_session_once_opened_is_never_rerouted(tmp_path_factory: pytest.TempPathFactory,
                                                       workspace: Path) -> None:
    """The first route opens the title session, then answers with an echo of the request (no title): the pass fails
    there, and the fallback route is not tried."""
    config = echo_providers().replace('provider = "parrot"', 'provider = "quoter"') + (
        '\n[[roles.auto_title.fallback_chain]]\nprovider = "demo"\n')
    d = start_daemon(tmp_path_factory.mktemp("no-reroute-home"), extra_config=config, timeout=START_TIMEOUT)
    try:
        sid = d.create(workspace, agent="general")["id"]
        d.run_turn(sid, "refactor the billing module")
        outcome = title_pass_over(d, sid)
        assert outcome["status"] == "failed" and outcome["route"]["provider"] == "quoter"
        assert fallbacks(d, sid) == []
        assert d.session(sid)["name"] is None
    finally:
        d.stop()
