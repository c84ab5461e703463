"""The dashboard's Memory page in Chromium against the real daemon: browse, search, edit, write, and what a session
was given, every value shown as text."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import Daemon, module_daemon, wait_for

HOSTILE = '<img src=x onerror="window.__pwned=1">'

daemon = module_daemon()


def test_the_memory_page_browses_searches_edits_and_shows_a_snapshot(page: Page, daemon: Daemon,
                                                                   workspace: Path) -> None:
    daemon.cli_json("memory", "write", "--scope", "global", "--type", "user", "--name", "Prefers tabs",
                    "--description", HOSTILE, "Indent with tabs.")
    page.goto(daemon.base_url + "/memory")
    expect(page.locator("#stat-index")).to_have_text("fresh")
    row = page.locator("#memory-body tr[data-slug='prefers-tabs']")
    expect(row).to_contain_text(HOSTILE)  # as text: the markup never ran
    assert page.evaluate("window.__pwned") is None

    page.fill("#memory-query", "tabs")
    page.click("#memory-filter button[type=submit]")
    expect(page.locator("#memory-body tr")).to_have_count(1)
    page.locator("#memory-body a[data-slug='prefers-tabs']").click()
    expect(page.locator("#editor-body")).to_have_value("Indent with tabs.\n")
    page.fill("#editor-body", "Indent with tabs, width 4.")
    page.click("#editor-form button[type=submit]")
    wait_for(lambda: daemon.cli_json("memory", "show", "prefers-tabs")["entry"]["body"]
             == "Indent with tabs, width 4.\n", 30, "the edit to be saved")

    page.click("#memory-reset")
    page.fill("#new-name", "Run the linter")
    page.fill("#new-body", "make lint before a commit")
    page.select_option("#new-type", "feedback")
    page.click("#new-form button[type=submit]")
    expect(page.locator("#memory-body tr[data-slug='run-the-linter']")).to_have_count(1)

    session = daemon.create(workspace)["id"]
    daemon.run_turn(session, "echo hello")
    page.fill("#snapshot-session", session)
    page.click("#snapshot-form button[type=submit]")
    expect(page.locator("#snapshot-text")).to_contain_text("Indent with tabs, width 4.")
