"""The session page shows what the agent says of its session (issue 30, points 4 and 5), in Chromium against the real
daemon and the scripted agent with `--modes`: cost, a context meter and the mode (switched from the page) in the
header, cost in the dashboard's list, and the agent's slash commands offered in the composer on `/`."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import SCRIPTED, Daemon, start_daemon, wait_for
from tests.e2e.test_dashboard import STREAM_TIMEOUT_MS, send_prompt

PHONE = {"width": 375, "height": 740}
DASH = "\u2013"  # what the page shows for "none"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("agent-state-home")
    command = [sys.executable, str(SCRIPTED), "--modes", "--prompt-log", str(home / "modal-prompts.jsonl")]
    d = start_daemon(home, extra_config=f'[providers.modal]\ncommand = {json.dumps(command)}\n\n'
                                        '[agents.modal]\nprovider = "modal"\n', timeout=120)
    yield d
    d.stop()


def open_page(page: Page, daemon: Daemon, session_id: str) -> None:
    page.goto(f"{daemon.base_url}/sessions/{session_id}")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")


def agentinfo(page: Page, daemon: Daemon, workspace: Path) -> str:
    """A session whose agent has said its commands, usage and cost, open in the page."""
    sid = daemon.create(workspace, agent="modal")["id"]
    open_page(page, daemon, sid)
    send_prompt(page, "agentinfo")
    expect(page.locator("#entries .entry-turn-end")).to_have_count(1, timeout=STREAM_TIMEOUT_MS)
    wait_for(lambda: daemon.session(sid)["usage"], timeout=10, what="the usage on the record")
    return sid


def prompts(daemon: Daemon) -> list[str]:
    log = daemon.home / "modal-prompts.jsonl"
    return [json.loads(line)["text"] for line in log.read_text().splitlines()] if log.exists() else []


def test_the_header_shows_cost_context_and_mode_and_switches_the_mode(page: Page, daemon: Daemon,
                                                                      workspace: Path) -> None:
    sid = agentinfo(page, daemon, workspace)
    expect(page.locator("#s-cost")).to_have_text("$0.42", timeout=STREAM_TIMEOUT_MS)
    meter = page.locator("#s-context")
    expect(meter).to_be_visible()
    assert meter.evaluate("m => m.value") == pytest.approx(0.95)
    expect(page.locator("#s-context-label")).to_have_text("95k / 100k")
    mode = page.locator("#s-mode")
    expect(mode).to_be_visible()
    expect(mode).to_have_value("default")
    expect(mode.locator("option")).to_have_text(["Default", "Plan"])
    expect(mode).to_be_enabled()

    mode.select_option("plan")
    wait_for(lambda: daemon.session(sid)["mode"]["current"] == "plan", timeout=10, what="the mode switched to plan")
    expect(page.locator("#composer-status")).to_have_text("Mode: Plan.")
    expect(mode).to_have_value("plan")
    # Switched elsewhere (the API), the page follows.
    assert daemon.http.post(daemon.scoped(sid, "/mode"), json={"mode": "default"}).status_code == 200
    expect(mode).to_have_value("default", timeout=STREAM_TIMEOUT_MS)

    # A reload shows the same from the record.
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    expect(page.locator("#s-cost")).to_have_text("$0.42")
    expect(page.locator("#s-context-label")).to_have_text("95k / 100k")

    # An agent that offers no modes has no switcher; no usage reads as a dash.
    plain = daemon.create(workspace)["id"]
    open_page(page, daemon, plain)
    expect(page.locator("#s-mode-box")).to_be_hidden()
    expect(page.locator("#s-cost")).to_have_text(DASH)
    expect(page.locator("#s-context")).to_be_hidden()


def test_the_dashboard_lists_the_cost(page: Page, daemon: Daemon, workspace: Path) -> None:
    sid = agentinfo(page, daemon, workspace)
    plain = daemon.create(workspace)["id"]
    page.goto(daemon.base_url + "/")
    expect(page.locator("#sessions-table th.col-cost")).to_have_text("Cost")
    cost = page.locator(f'tr[data-session-id="{sid}"] td.col-cost')
    expect(cost).to_have_text("$0.42")
    expect(cost).to_have_attribute("title", "context 95k / 100k")
    expect(page.locator(f'tr[data-session-id="{plain}"] td.col-cost')).to_have_text(DASH)


def test_slash_offers_the_agents_commands_filtered_and_keyboard_navigable(page: Page, daemon: Daemon,
                                                                          workspace: Path) -> None:
    agentinfo(page, daemon, workspace)
    box = page.locator("#prompt-input")
    menu = page.locator("#slash-menu")
    options = menu.get_by_role("option")
    box.click()
    box.press("/")
    expect(menu).to_be_visible()
    expect(options.locator(".slash-name")).to_have_text(["/review", "/init"])
    expect(options.locator(".slash-description")).to_have_text(["Review the current changes", "Write an AGENTS.md"])
    expect(box).to_have_attribute("aria-expanded", "true")
    expect(options.nth(0)).to_have_attribute("aria-selected", "true")
    box.press("ArrowDown")
    expect(options.nth(1)).to_have_attribute("aria-selected", "true")
    expect(box).to_have_attribute("aria-activedescendant", "slash-option-1")
    box.press("ArrowDown")  # wraps round
    expect(options.nth(0)).to_have_attribute("aria-selected", "true")
    box.press("ArrowUp")
    expect(options.nth(1)).to_have_attribute("aria-selected", "true")
    box.press("Escape")
    expect(menu).to_be_hidden()
    expect(box).to_have_value("/")
    expect(box).to_have_attribute("aria-expanded", "false")

    # Typing filters (names that start with it first, then those that contain it); Tab picks the highlighted one.
    box.press("i")
    expect(menu).to_be_visible()
    expect(options.locator(".slash-name")).to_have_text(["/init", "/review"])
    box.press("n")
    expect(options.locator(".slash-name")).to_have_text(["/init"])
    box.press("Tab")
    expect(box).to_have_value("/init ")
    expect(menu).to_be_hidden()
    expect(box).to_be_focused()

    # Enter picks too; the arguments follow and the prompt is sent as typed.
    box.fill("")
    box.press("/")
    box.press_sequentially("rev")
    expect(options.locator(".slash-name")).to_have_text(["/review"])
    box.press("Enter")
    expect(box).to_have_value("/review ")
    box.press_sequentially("the diff")
    expect(menu).to_be_hidden()  # a space ended the command name
    page.click("#prompt-send")
    wait_for(lambda: "/review the diff" in prompts(daemon), timeout=20, what="the slash command at the agent")
    # Nothing the agent does not offer is suggested.
    box.fill("")
    box.press_sequentially("/zz")
    expect(menu).to_be_hidden()


def test_the_header_and_the_slash_menu_fit_a_phone(page: Page, daemon: Daemon, workspace: Path) -> None:
    page.set_viewport_size(PHONE)
    agentinfo(page, daemon, workspace)
    expect(page.locator("#s-cost")).to_have_text("$0.42", timeout=STREAM_TIMEOUT_MS)
    for node in ("#s-cost", "#s-context", "#s-context-label", "#s-mode"):
        target = page.locator(node)
        expect(target).to_be_visible()
        box = target.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (node, box)
    page.locator("#prompt-input").scroll_into_view_if_needed()
    page.locator("#prompt-input").click()
    page.keyboard.press("/")
    menu = page.locator("#slash-menu")
    expect(menu).to_be_visible()
    box = menu.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"the page is {scroll} px wide in a {inner} px window"
    page.locator("#slash-menu [role=option]").first.click()
    expect(page.locator("#prompt-input")).to_have_value("/review ")
