"""What a newcomer's probe of the dashboard found, in Chromium against the real daemon: a long name without
spaces pushed every column off the page, a phone-wide window scrolled sideways with the daemon status cut off,
the tasks page kept "unreachable" after the daemon answered again, `/tasks/` was a 404, and a session page
read `active` after the daemon itself shut down."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route, expect

from tests.conftest import Daemon, start_daemon

LONG_NAME = "averyveryveryverylongsessionname" * 5  # 160 characters, no space to break at


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("layout-home"))
    yield d
    d.stop()


def page_width(page: Page) -> tuple[int, int]:
    return page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


def test_a_long_name_without_spaces_stays_inside_the_window(page: Page, daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, name=LONG_NAME)["id"]
    page.goto(daemon.base_url + "/")
    expect(page.locator(f'tr[data-session-id="{sid}"]')).to_be_visible()
    scroll, inner = page_width(page)
    assert scroll <= inner, f"the page is {scroll} px wide in a {inner} px window"
    page.goto(daemon.base_url + f"/sessions/{sid}")
    expect(page.locator("#s-name")).to_have_text(LONG_NAME)
    box = page.locator("#s-name").bounding_box()
    assert box is not None and box["x"] + box["width"] <= inner


def test_a_phone_wide_window_keeps_the_daemon_status_in_view_and_scrolls_tables_in_place(
        page: Page, daemon: Daemon, workspace: Path) -> None:
    daemon.create(workspace, name="narrow")
    page.set_viewport_size({"width": 400, "height": 800})
    for path in ("/", "/tasks"):
        page.goto(daemon.base_url + path)
        status = page.locator("#daemon-status")
        expect(status).to_contain_text("daemon running")
        box = status.bounding_box()
        assert box is not None and box["y"] >= 0 and box["x"] + box["width"] <= 400, box
        scroll, inner = page_width(page)
        assert scroll <= inner, f"{path}: the page is {scroll} px wide in a {inner} px window"


def test_the_tasks_page_clears_its_load_error_once_the_daemon_answers(page: Page, daemon: Daemon) -> None:
    page.goto(daemon.base_url + "/tasks")
    error = page.locator("#tasks-error")

    def unreachable(route: Route) -> None:
        route.abort()

    page.route("**/api/tasks", unreachable)
    expect(error).to_be_visible(timeout=10_000)
    expect(error).to_contain_text("compozy daemon start")  # it says what to do
    page.unroute("**/api/tasks", unreachable)
    expect(error).to_be_hidden(timeout=10_000)


def test_a_trailing_slash_on_tasks_finds_the_page(page: Page, daemon: Daemon) -> None:
    page.goto(daemon.base_url + "/tasks/")
    assert page.url.endswith("/tasks")
    expect(page.locator("h1")).to_have_text("Tasks")


def test_a_workspace_registered_while_the_page_is_open_joins_the_filter(page: Page, daemon: Daemon,
                                                                        tmp_path: Path) -> None:
    page.goto(daemon.base_url + "/")
    expect(page.locator("#live-indicator")).to_have_text("live")
    fresh = tmp_path / "registered-later"
    fresh.mkdir()
    session = daemon.create(fresh, name="in a new workspace")
    expect(page.locator(f'tr[data-session-id="{session["id"]}"]')).to_be_visible(timeout=20_000)
    expect(page.locator(f'#f-workspace option[value="{session["workspace_id"]}"]')).to_have_count(1)
    expect(page.locator(f'#ns-workspaces option[value="{fresh.resolve()}"]')).to_have_count(1)


def test_a_session_page_shows_the_stop_when_the_daemon_itself_goes_away(page: Page, tmp_path: Path,
                                                                        workspace: Path) -> None:
    # The daemon's shutdown stops its sessions; the refetch after the stream's last frame then failed, and the
    # header read `active` with a Stop button beneath the "Session stopped" banner.
    own = start_daemon(tmp_path / "home")
    try:
        sid = own.create(workspace)["id"]
        page.goto(own.login_url())
        page.goto(own.base_url + f"/sessions/{sid}")
        expect(page.locator("#s-state")).to_have_text("active")
        expect(page.locator("#s-health")).to_have_text("healthy", timeout=20_000)
        expect(page.locator("#btn-stop")).to_be_visible()
    finally:
        own.stop()
    expect(page.locator("#s-state")).to_have_text("stopped", timeout=15_000)
    expect(page.locator("#s-stop")).to_have_text("shutdown")
    expect(page.locator("#btn-stop")).to_be_hidden()
    # The running session's health is greyed, not passed off as the stopped one's (unless the daemon's own
    # record of the stop arrived before it went away: then the pill shows that record's health).
    pill = page.locator("#s-health")
    assert "stale" in (pill.get_attribute("class") or "").split() or pill.inner_text() != "healthy"
