"""The inbox and its count in Chromium against the real daemon (issue 31): the header counts what waits on a person
on every page, the inbox lists it live, a permission is approved from it, a failure acknowledged, and a task that
needs attention is there too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Daemon, start_daemon, wait_for

SUPERVISION = ('[session.supervision]\nactivity_heartbeat_interval = "0.5s"\ninactivity_warning_after = "0s"\n'
               'inactivity_timeout = "0s"\nquiet_after = "1s"\nstop_grace = "1s"\n[tasks]\nlease_ttl = "4s"\n'
               '[roles.auto_title]\nenabled = false\n')


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("inbox-home"), extra_config=SUPERVISION, timeout=120)
    yield d
    d.stop()


def items(d: Daemon) -> list[dict[str, str]]:
    return list(d.http.get("/api/attention").json()["items"])


def test_the_count_shows_on_every_page_and_the_inbox_answers_a_permission(
        page: Page, daemon: Daemon, workspace: Path) -> None:
    page.goto(daemon.base_url + "/")
    count = page.locator("#attention-count")
    expect(count).to_be_hidden()  # nothing waits: no badge at all

    sid = daemon.create(workspace, agent="reader")["id"]
    assert daemon.prompt(sid, "tool write x.txt hi there").status_code == 200
    expect(count).to_have_text("1")  # live on the dashboard (its catalog stream rings the count)
    expect(count).to_be_visible()
    page.goto(daemon.base_url + "/tasks")
    expect(page.locator("#attention-count")).to_have_text("1")
    page.goto(f"{daemon.base_url}/sessions/{sid}")
    expect(page.locator("#attention-count")).to_have_text("1")

    page.locator("#attention-link").click()
    expect(page).to_have_url(daemon.base_url + "/attention")
    row = page.locator("#attention-body tr[data-kind='permission']")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("asks permission")
    expect(row.locator(f"a[href='/sessions/{sid}']")).to_have_count(1)
    row.get_by_role("button", name="Approve").click()
    expect(page.locator("#attention-body tr")).to_have_count(0)
    expect(page.locator("#attention-empty")).to_be_visible()
    expect(page.locator("#attention-count")).to_be_hidden()
    wait_for(lambda: (workspace / "x.txt").exists(), what="the approved write")


def test_a_failure_appears_live_and_is_acknowledged_and_a_task_needing_attention_is_listed(
        page: Page, daemon: Daemon, workspace: Path) -> None:
    page.goto(daemon.base_url + "/attention")
    expect(page.locator("#attention-empty")).to_be_visible()
    sid = daemon.create(workspace)["id"]
    assert daemon.prompt(sid, "crash").status_code == 200
    failed = page.locator("#attention-body tr[data-kind='failed']")
    expect(failed).to_have_count(1)
    expect(page.locator("#attention-count")).to_have_text("1")
    failed.get_by_role("button", name="Acknowledge").click()
    expect(failed).to_have_count(0)
    expect(page.locator("#attention-count")).to_be_hidden()

    response = daemon.http.post("/api/tasks", json={"prompt": "hang", "agent_name": "scripted", "max_attempts": 1,
                                                    "workspace_path": str(workspace), "title": "goes silent"})
    assert response.status_code == 201, response.text
    wait_for(lambda: any(i["kind"] == "task" for i in items(daemon)), 90, "the task to need attention")
    task = page.locator("#attention-body tr[data-kind='task']")
    expect(task).to_have_count(1)
    expect(task).to_contain_text("goes silent")
    expect(page.locator("#attention-count")).to_have_text("1")


# Chromium headless shows no notification anyone could see: the page's Notification is wrapped to record what the
# dashboard asks the browser to show (the real API underneath, permission granted by the browser context).
RECORD_NOTIFICATIONS = """
window.__shown = [];
const Real = window.Notification;
class Recorded extends Real {
  constructor(title, options) { super(title, options); window.__shown.push({ title, body: options && options.body }); }
}
Object.defineProperty(Recorded, "permission", { get: () => Real.permission });
Recorded.requestPermission = (...args) => Real.requestPermission(...args);
window.Notification = Recorded;
"""


def test_browser_notifications_are_opt_in_and_show_each_new_item_once(
        page: Page, daemon: Daemon, workspace: Path) -> None:
    page.context.grant_permissions(["notifications"], origin=daemon.base_url)
    page.add_init_script(RECORD_NOTIFICATIONS)
    page.goto(daemon.base_url + "/attention")
    toggle = page.locator("#notify-toggle")
    expect(toggle).to_have_text("Notify me")
    first = daemon.create(workspace)["id"]
    assert daemon.prompt(first, "crash").status_code == 200
    expect(page.locator("#attention-body tr[data-kind='failed']")).to_have_count(1)
    assert page.evaluate("window.__shown") == []  # not opted in: nothing shown

    toggle.click()
    expect(toggle).to_have_text("Notifications on")
    second = daemon.create(workspace)["id"]
    assert daemon.prompt(second, "crash").status_code == 200
    expect(page.locator("#attention-body tr[data-kind='failed']")).to_have_count(2)
    page.wait_for_function("window.__shown.length >= 1")
    shown = page.evaluate("window.__shown")
    assert len(shown) == 1 and second in shown[0]["body"] and shown[0]["title"] == "Compozy: failed"
