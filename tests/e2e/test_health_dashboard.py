"""Health in the browser dashboard, against a real daemon whose idle threshold is two seconds: a stale session
shows as stale in the sessions list (and under the unhealthy filter), its page shows the health pill and the
wake panel, and the HEARTBEAT.md panel shows each agent's policy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Daemon, start_daemon, wait_for

STALE_CONFIG = '\n[agents.heartbeat]\nsession_health_stale_after = "2s"\n'


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """This module's daemon (the `page` fixture signs in to it): idle sessions turn stale after 2 s."""
    home = tmp_path_factory.mktemp("health-e2e")
    policy = home / "agents" / "scripted" / "HEARTBEAT.md"
    policy.parent.mkdir(parents=True)
    policy.write_text("---\nversion: 1\nsummary: look at the inbox\n---\nInbox first.\n")
    broken = home / "agents" / "reader" / "HEARTBEAT.md"
    broken.parent.mkdir(parents=True)
    broken.write_text("---\nversion: 1\nlease: 5m\n---\n")
    d = start_daemon(home, STALE_CONFIG)
    yield d
    d.stop()


def listed(daemon: Daemon, session_id: str) -> dict[str, object]:
    rows = daemon.http.get("/api/sessions", params={"include_health": "true"}).json()["sessions"]
    return next(s["health"] for s in rows if s["id"] == session_id)


def test_a_stale_session_shows_as_stale_in_the_list_and_on_its_page(page: Page, daemon: Daemon,
                                                                     workspace: Path) -> None:
    stale = daemon.create(workspace)
    wait_for(lambda: listed(daemon, stale["id"])["health"] == "stale", timeout=20, what="the session to go stale")
    page.goto(daemon.base_url + "/")
    row = page.locator(f'tr[data-session-id="{stale["id"]}"]')
    expect(row.locator("td.col-health .health-pill")).to_have_text("stale")
    expect(row.locator("td.col-health")).to_have_attribute("data-health", "stale")
    expect(row.locator("td.col-health .wake-state")).to_have_text("session_unhealthy")
    # A fresh prompt makes it healthy; the unhealthy filter keeps only the sessions still unhealthy.
    fresh = daemon.create(workspace)
    daemon.run_turn(fresh["id"], "hello")
    page.check("#f-unhealthy")
    expect(page).to_have_url(f"{daemon.base_url}/?unhealthy=true")
    expect(row).to_be_visible()
    expect(page.locator(f'tr[data-session-id="{fresh["id"]}"]')).to_have_count(0)
    # The session page: the pill says stale, the wake panel says why a wake may not target it.
    page.goto(f"{daemon.base_url}/sessions/{stale['id']}")
    expect(page.locator("#s-health")).to_have_text("stale")
    expect(page.locator("#d-wake")).to_contain_text("session_unhealthy")


def test_the_heartbeat_panel_shows_each_agents_policy(page: Page, daemon: Daemon) -> None:
    page.goto(daemon.base_url + "/")
    expect(page.locator('#heartbeat-body tr[data-agent="scripted"]')).to_have_attribute("data-policy", "valid")
    expect(page.locator('#heartbeat-body tr[data-agent="scripted"]')).to_contain_text("look at the inbox")
    reader = page.locator('#heartbeat-body tr[data-agent="reader"]')
    expect(reader).to_have_attribute("data-policy", "invalid")
    expect(reader).to_contain_text("heartbeat_forbidden_field")
    # The fix itself and the file, in the cell: they were only in a tooltip, out of keyboard and touch reach.
    expect(reader).to_contain_text("is not for HEARTBEAT.md")
    expect(reader).to_contain_text("HEARTBEAT.md")
    expect(page.locator('#heartbeat-body tr[data-agent="general"]')).to_have_attribute("data-policy", "missing")
    expect(page.locator("#wake-service")).to_contain_text("wake service:")
