"""The Providers page in Chromium against the real daemon: each provider's state, and a key set from the page that
reaches the next agent's environment without ever coming back to the page (issue 48)."""

from __future__ import annotations

import hashlib
import shutil
import stat
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import Daemon, module_daemon, said
from tests.integration.test_providers_reload import EXTRA

KEY = "sk-test-compozy-page-key-0123456789abcdef"
VARIABLE = "SCRIPTED_SECRET_KEY"


# A provider whose binary is missing (`nobinary`) and one that needs a login (`authy`), as the reload test has them.
daemon = module_daemon(EXTRA)


def test_the_page_shows_each_providers_state_and_sets_a_key_that_reaches_the_agent(
        page: Page, daemon: Daemon, workspace: Path) -> None:
    page.goto(daemon.base_url + "/providers")
    gone = page.locator("#providers-body tr[data-provider='nobinary']")
    expect(gone).to_have_attribute("data-found", "missing")
    expect(gone.locator(".provider-hint")).to_contain_text("'no-such-agent-acp-binary' is not on PATH")
    claude = page.locator("#providers-body tr[data-provider='claude']")
    expect(claude).to_contain_text("ANTHROPIC_API_KEY")
    if shutil.which("npx") and not shutil.which("claude-agent-acp"):
        expect(claude).to_have_attribute("data-found", "npx")

    form = page.locator("form.provider-key[data-provider='scripted']")
    form.locator("input[name='variable']").fill(VARIABLE)
    form.locator("input[name='value']").fill(KEY)
    form.get_by_role("button", name="Save").click()
    expect(page.locator("#providers-note")).to_contain_text(f"scripted: {VARIABLE} set; providers reloaded")
    expect(page.locator("form.provider-key[data-provider='scripted'] input[name='value']")).to_have_value("")
    assert KEY not in page.content()
    secrets = daemon.home / "secrets.toml"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600 and KEY in secrets.read_text()

    sid = daemon.create(workspace)["id"]
    assert said(daemon.run_turn(sid, f"envhash {VARIABLE}")) == hashlib.sha256(KEY.encode()).hexdigest()

    page.locator("form.provider-key[data-provider='scripted']").get_by_role("button", name="Test").click()
    expect(page.locator("#providers-note")).to_contain_text("scripted: scripted-agent 1.0 answered")
    page.locator("form.provider-key[data-provider='nobinary']").get_by_role("button", name="Test").click()
    expect(page.locator("#providers-error")).to_contain_text("'no-such-agent-acp-binary' is not on PATH")
    assert KEY not in page.content()


def test_the_page_offers_the_login_methods_the_agent_lists(page: Page, daemon: Daemon) -> None:
    page.goto(daemon.base_url + "/providers")
    page.locator("form.provider-key[data-provider='authy']").get_by_role("button", name="Test").click()
    expect(page.locator("#providers-note")).to_contain_text("login methods")
    expect(page.locator("#providers-login")).to_contain_text("login (Log in): run `")  # a terminal method: named
    page.locator("#providers-login button[data-method='env-key']").click()
    expect(page.locator("#providers-note")).to_contain_text("authy: logged in with env-key")
    page.locator("#providers-login button[data-method='api-key']").click()
    expect(page.locator("#providers-note")).to_contain_text("authy: logged in with api-key")
