"""The session page's evidence button downloads the session's redacted evidence archive."""

from __future__ import annotations

import tarfile
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import Daemon


def test_the_evidence_button_downloads_the_sessions_archive(page: Page, daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="general")["id"]
    daemon.run_turn(sid, "hello evidence")
    page.goto(f"{daemon.base_url}/sessions/{sid}")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    with page.expect_download() as info:
        page.click("#btn-evidence")
    download = info.value
    assert download.suggested_filename.startswith(f"compozy-evidence-{sid}-")
    with tarfile.open(download.path(), "r:gz") as archive:
        names = {m.name.split("/", 1)[1] for m in archive.getmembers()}
    assert {"manifest.json", "session.json", "events.jsonl", "recap.json"} <= names
