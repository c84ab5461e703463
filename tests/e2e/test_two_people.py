"""Two people on one session (issue 49), in two browser contexts each signed in with its own token: the viewer
sees the controller's prompts live, cannot send, and sees who answered a permission."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.conftest import Daemon
from tests.e2e.conftest import DEFAULT_TIMEOUT_MS, VIEWPORT
from tests.e2e.test_dashboard import STREAM_TIMEOUT_MS, open_session, send_prompt


def signed_in(browser: Browser, daemon: Daemon, secret: str) -> BrowserContext:
    """A browser signed in the way a person with a token signs in: their token asks for a one-time login link."""
    minted = httpx.post(f"{daemon.base_url}/api/auth/ticket", headers={"Authorization": f"Bearer {secret}"},
                        timeout=10)
    assert minted.status_code == 201, minted.text
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    context.new_page().goto(daemon.base_url + minted.json()["login_path"])
    return context


@pytest.fixture
def people(browser: Browser, daemon: Daemon) -> Iterator[dict[str, Page]]:
    daemon.cli_json("user", "add", "carol", "--role", "operator")
    daemon.cli_json("user", "add", "vic", "--role", "viewer")
    contexts = {name: signed_in(browser, daemon, daemon.cli_json("token", "create", "--user", name)["secret"])
                for name in ("carol", "vic")}
    try:
        yield {name: context.pages[0] for name, context in contexts.items()}
    finally:
        for context in contexts.values():
            context.close()


def test_the_viewer_sees_the_controllers_prompts_live_cannot_send_and_sees_who_answered(
        daemon: Daemon, people: dict[str, Page], workspace: Path) -> None:
    carol, vic = people["carol"], people["vic"]
    # Carol's session (she holds control): created with her token, as her dashboard would.
    token = daemon.cli_json("token", "create", "--user", "carol", "--scope", "prompt")["secret"]
    created = httpx.post(f"{daemon.base_url}/api/sessions", headers={"Authorization": f"Bearer {token}"},
                         json={"agent_name": "reader", "workspace_path": str(workspace)}, timeout=30)
    assert created.status_code == 201, created.text
    sid = created.json()["session"]["id"]
    daemon.wait_state(sid, {"active"})
    for page in (carol, vic):
        open_session(page, daemon, sid)
    expect(carol.locator("#signed-in")).to_have_text("signed in as carol")
    expect(vic.locator("#signed-in")).to_have_text("signed in as vic")
    expect(vic.locator("#prompt-send")).to_be_disabled()
    expect(vic.locator("#composer-status")).to_contain_text("watching")

    send_prompt(carol, "tool write shared.txt hello")
    expect(vic.locator("#entries .entry-user").last).to_contain_text("tool write shared.txt hello",
                                                                     timeout=STREAM_TIMEOUT_MS)
    request = vic.locator("#permission-bar .permission-request")
    expect(request).to_be_visible(timeout=STREAM_TIMEOUT_MS)
    expect(request.locator("button")).to_have_count(0)  # a viewer watches the request; it may not answer

    carol.locator("#permission-bar button.approve").click()
    decision = vic.locator("#entries .entry-permission .perm-decision").last
    expect(decision).to_have_text("approved by carol", timeout=STREAM_TIMEOUT_MS)
    expect(vic.locator("#prompt-send")).to_be_disabled()
    assert (workspace / "shared.txt").read_text() == "hello"
