"""The sessions list in Chromium against a daemon of its own (the tests count rows): "Load more" survives the
live refetch, a session waiting for an approval stands out, and a clean stop is not "unhealthy"."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.conftest import JSON_ONLY, Daemon, start_daemon, wait_for

LIST_TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("dashboard-list-home"))
    yield d
    d.stop()


def failed_session(daemon: Daemon, workspace: Path, name: str) -> str:
    """A session whose agent cannot start: it stops at once with a startup failure (the cheapest row there is)."""
    while True:
        response = daemon.http.post("/api/sessions", json={"agent_name": "missing", "workspace_path": str(workspace),
                                                          "name": name})
        if response.status_code != 429:  # agent_limit_reached while earlier ones are still stopping
            assert response.status_code == 201, response.text
            return str(response.json()["session"]["id"])
        time.sleep(0.05)


def total(daemon: Daemon) -> int:
    return int(daemon.http.get("/api/sessions", params={"all": "true", "limit": 1}).json()["page"]["total"])


def rows(page: Page) -> Locator:
    return page.locator("#sessions-body tr")


def test_load_more_survives_the_live_refetch(page: Page, daemon: Daemon, workspace: Path) -> None:
    for i in range(105):  # more than one page (100)
        failed_session(daemon, workspace, f"bulk-{i}")
    wait_for(lambda: total(daemon) == 105, 30, "105 sessions")
    page.goto(daemon.base_url + "/")
    expect(page.locator("#live-indicator")).to_have_text("live")
    expect(rows(page)).to_have_count(100)
    page.click("#load-more")
    expect(rows(page)).to_have_count(105)
    expect(page.locator("#load-more")).to_be_hidden()

    # A catalog change refetches the list: it keeps every row shown, and the new one.
    newest = failed_session(daemon, workspace, "after-load-more")
    expect(page.locator(f'tr[data-session-id="{newest}"]')).to_be_visible(timeout=LIST_TIMEOUT_MS)
    expect(rows(page)).to_have_count(106)
    expect(page.locator("#sessions-count")).to_have_text("Showing 106 of 106")
    page.wait_for_timeout(1_000)  # the debounced refetch has settled, and still shows them all
    expect(rows(page)).to_have_count(106)
    expect(page.locator("#load-more")).to_be_hidden()

    # A filter change starts over with one page.
    page.fill("#f-q", "bulk")
    expect(rows(page)).to_have_count(100)
    expect(page.locator("#load-more")).to_be_visible()


def test_a_session_waiting_for_an_approval_stands_out_in_the_list(page: Page, daemon: Daemon,
                                                                  workspace: Path) -> None:
    session = daemon.create(workspace, agent="reader")  # approve-reads: a write waits for a person
    response = daemon.http.post(daemon.scoped(session["id"], "/prompt"), json={"message": "tool write notes.md hi"},
                                headers=JSON_ONLY)
    assert response.status_code in (200, 202), response.text
    wait_for(lambda: daemon.session(session["id"])["pending_permissions"] == 1, 30, "the permission request")
    page.goto(daemon.base_url + "/")
    row = page.locator(f'tr[data-session-id="{session["id"]}"]')
    expect(row).to_have_attribute("data-pending-permissions", "1")
    expect(row.locator(".col-status .chip-approval")).to_have_text("needs approval")
    expect(page.locator("#stat-approval")).to_have_text("1")
    expect(page.locator('.stat[data-stat="approval"]')).to_have_class(re.compile(r"\bstat-warn\b"))

    request_id = daemon.http.get(daemon.scoped(session["id"], "/permissions")).json()["permissions"][0]["request_id"]
    decided = daemon.http.post(daemon.scoped(session["id"], f"/permissions/{request_id}"), json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    # Answered elsewhere: the live list drops the chip.
    expect(row.locator(".chip-approval")).to_have_count(0, timeout=LIST_TIMEOUT_MS)
    expect(page.locator("#stat-approval")).to_have_text("0")
    assert (workspace / "notes.md").read_text() == "hi"


def test_a_clean_stop_is_neutral_and_not_unhealthy(page: Page, daemon: Daemon, workspace: Path) -> None:
    clean = daemon.create(workspace)
    assert daemon.http.post(daemon.scoped(clean["id"], "/stop")).status_code in (200, 202, 204)
    daemon.wait_state(clean["id"], {"stopped"})
    crashed = failed_session(daemon, workspace, "crashed")
    daemon.wait_state(crashed, {"stopped"})
    page.goto(daemon.base_url + "/")
    clean_row = page.locator(f'tr[data-session-id="{clean["id"]}"]')
    crashed_row = page.locator(f'tr[data-session-id="{crashed}"]')
    # Both are `dead` to the wake service (no agent process), which is no alarm: each reads as how it ended, and
    # only the failure is shown as one (issue 48).
    expect(clean_row.locator(".outcome")).to_have_text("stopped by you")
    expect(crashed_row.locator(".outcome")).to_have_text(re.compile(r"^failed: "))
    expect(crashed_row.locator(".outcome")).to_have_class(re.compile(r"\boutcome-failed\b"))
    for row in (clean_row, crashed_row):
        expect(row.locator(".col-health")).to_have_text("not running")
        expect(row.locator(".col-health")).to_have_attribute("data-health", "dead")

    page.check("#f-unhealthy")
    expect(crashed_row).to_be_visible()
    expect(clean_row).to_have_count(0)
    loaded = rows(page).count()
    # The filter works on the loaded rows, and says so.
    expect(page.locator("#sessions-count")).to_have_text(re.compile(rf"^{loaded} shown of \d+ loaded"))


def test_the_unhealthy_filter_looks_beyond_the_first_page(page: Page, daemon: Daemon, workspace: Path) -> None:
    # Ticked with only the first 100 rows loaded, it said "No sessions match" (or too few) while failed sessions
    # sat on the pages not loaded; opening `/?unhealthy=true` found them.
    while total(daemon) < 105:
        failed_session(daemon, workspace, "more-failures")
    sessions = daemon.http.get("/api/sessions", params={"all": "true", "limit": 100}).json()
    everything = sessions["sessions"]
    while sessions["page"]["has_more"]:
        sessions = daemon.http.get("/api/sessions", params={"all": "true", "limit": 100,
                                                            "cursor": sessions["page"]["next_cursor"]}).json()
        everything += sessions["sessions"]
    failed = [s for s in everything if s.get("failure")]
    assert len(failed) > 100
    page.goto(daemon.base_url + "/")
    expect(rows(page)).to_have_count(100)
    page.check("#f-unhealthy")
    expect(page.locator(f'tr[data-session-id="{failed[-1]["id"]}"]')).to_be_visible(timeout=LIST_TIMEOUT_MS)
    expect(page.locator("#sessions-count")).to_have_text(re.compile(rf"^{len(failed)} shown of"))
