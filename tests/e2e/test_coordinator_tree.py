"""A coordinator's session page shows its spawned children as a tree, each a link to its own page."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import Daemon, module_daemon, wait_for

daemon = module_daemon()


def test_the_coordinator_page_shows_its_children(page: Page, daemon: Daemon, workspace: Path) -> None:
    made = daemon.http.post("/api/tasks", json={
        "prompt": "two steps", "agent_name": "scripted", "workspace_path": str(workspace),
        "plan": {"steps": [{"id": "first", "prompt": "hang"}, {"id": "second", "prompt": "hang"}]}})
    assert made.status_code == 201, made.text
    task_id = made.json()["task"]["id"]

    def children() -> list[str] | None:
        steps = daemon.http.get(f"/api/tasks/{task_id}/steps").json()["steps"]
        ids = [s["session_id"] for s in steps if s["session_id"]]
        return ids if len(ids) == 2 else None

    first, _ = wait_for(children, 60, "both steps' children")
    coordinator = daemon.meta(first)["lineage"]["parent_session_id"]
    page.goto(f"{daemon.base_url}/sessions/{coordinator}")
    expect(page.locator("#tree-panel")).to_be_visible()
    expect(page.locator("#tree-count")).to_have_text("2")
    link = page.locator(f"#tree-list li[data-id='{first}'] a")
    expect(link).to_have_text("step:first")
    link.click()
    expect(page).to_have_url(f"{daemon.base_url}/sessions/{first}")
