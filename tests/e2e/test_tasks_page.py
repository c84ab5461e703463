"""The dashboard's tasks page in Chromium against the real daemon: needs-attention first, attempts and their
linked sessions, and the Retry and Cancel buttons."""

from __future__ import annotations

import re
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
    d = start_daemon(tmp_path_factory.mktemp("tasks-page-home"), extra_config=SUPERVISION, timeout=120)
    yield d
    d.stop()


def create(d: Daemon, workspace: Path, prompt: str, **extra: object) -> str:
    response = d.http.post("/api/tasks", json={"prompt": prompt, "agent_name": "scripted",
                                               "workspace_path": str(workspace), **extra})
    assert response.status_code == 201, response.text
    return str(response.json()["task"]["id"])


def status(d: Daemon, task_id: str) -> str:
    return str(d.http.get(f"/api/tasks/{task_id}").json()["task"]["status"])


def test_no_task_needing_attention_is_not_shown_in_red(page: Page, daemon: Daemon) -> None:
    page.goto(daemon.base_url + "/tasks")
    expect(page.locator("#stat-needs-attention")).to_have_text("0")
    expect(page.locator('.stat[data-stat="needs_attention"]')).not_to_have_class(re.compile(r"\bstat-bad\b"))


def test_tasks_page_lists_needs_attention_first_with_sessions_and_retries(page: Page, daemon: Daemon,
                                                                          workspace: Path) -> None:
    done = create(daemon, workspace, "hello", title="a task that works")
    silent = create(daemon, workspace, "hang", title="a task that goes silent", max_attempts=1)
    wait_for(lambda: status(daemon, done) == "succeeded", 60, "the working task to succeed")
    wait_for(lambda: status(daemon, silent) == "needs_attention", 60, "the silent task to need attention")
    page.goto(daemon.base_url + "/tasks")
    rows = page.locator("#tasks-body tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-status", "needs_attention")
    expect(rows.first).to_contain_text("supervised_silence_exhausted")
    expect(rows.first.locator("a[href^='/sessions/sess_']")).to_have_count(1)
    expect(page.locator("#stat-needs-attention")).to_have_text("1")
    needs_attention = page.locator('.stat[data-stat="needs_attention"]')
    expect(needs_attention).to_have_class(re.compile(r"\bstat-bad\b"))
    rows.first.get_by_role("button", name="Retry").click()
    expect(page.locator(f"#tasks-body tr[data-task-id='{silent}']")).to_contain_text("2 / 1")
    page.locator(f"#tasks-body tr[data-task-id='{silent}']").get_by_role("button", name="Cancel").click()
    expect(page.locator(f"#tasks-body tr[data-task-id='{silent}']")).to_have_attribute("data-status", "canceled")
    # Nothing needs attention any more: the poll turns the count back from red.
    expect(page.locator("#stat-needs-attention")).to_have_text("0")
    expect(needs_attention).not_to_have_class(re.compile(r"\bstat-bad\b"))
    expect(page.locator(".topnav a[href='/tasks']")).to_be_visible()
