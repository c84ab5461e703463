"""Issue 44: what a person approves reads as it runs.

A U+202E (RIGHT-TO-LEFT OVERRIDE) in a command made "invoice_\\u202egpj.exe" read "invoice_exe.jpg" in the approval
card. The daemon escapes control and format characters in permission titles (sessions/core/visible.py); the page does
the same wherever it shows what the agent will run (the permission card, the permission bar and panel, the tool's
title and input, the inbox), and isolates those fields (`unicode-bidi: plaintext`), so no character of the agent's
reorders them. Each check here reads the text and where its letters land on screen.
"""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Locator, Page, expect

from tests.conftest import Daemon
from tests.e2e.test_dashboard import STREAM_TIMEOUT_MS, active_session
from tests.e2e.test_session_render import open_page, turn_ended

RLO = "\u202e"
COMMAND = f"touch invoice_{RLO}gpj.exe"
SHOWN = "touch invoice_\\u202egpj.exe"  # the escape, as text: what runs, in its order
# Where "gpj.exe" is on screen: its `g` left of its last `e` when it reads in its real order (under the override
# the run is drawn reversed, "exe.jpg", the `g` rightmost). Null when the node does not hold it.
READS_IN_ORDER = """(node) => {
  const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
  for (let text = walker.nextNode(); text; text = walker.nextNode()) {
    const at = text.data.indexOf("gpj.exe");
    if (at < 0) continue;
    const x = (i) => {
      const range = document.createRange();
      range.setStart(text, i);
      range.setEnd(text, i + 1);
      return range.getBoundingClientRect().x;
    };
    return x(at) < x(at + 6);
  }
  return null;
}"""


def reads_as_it_runs(node: Locator) -> None:
    expect(node).to_contain_text(SHOWN)
    text = node.evaluate("(n) => n.textContent")
    assert RLO not in text, f"a bidi override reached the page: {text!r}"
    node.scroll_into_view_if_needed()
    assert node.evaluate(READS_IN_ORDER) is True, f"{text!r} does not read in its order"


def test_a_bidi_override_in_a_command_shows_as_an_escape_in_its_real_order(page: Page, daemon: Daemon,
                                                                          workspace: Path) -> None:
    session = active_session(daemon, workspace, "reader")  # approve-reads: a command waits for a person
    open_page(page, daemon, session["id"])
    # The prompt names the command the scripted agent asks to run (`term --ask`), U+202E and all.
    assert daemon.prompt(session["id"], f"term --ask {COMMAND}").status_code == 200
    card = page.locator("#entries .entry-permission").last
    expect(card).to_have_attribute("data-decision", "pending", timeout=STREAM_TIMEOUT_MS)
    reads_as_it_runs(card.locator(".perm-what"))
    reads_as_it_runs(page.locator("#permission-bar .permission-request strong"))
    reads_as_it_runs(page.locator("#permissions-list .perm-what"))
    tool = page.locator("#entries .entry-tool").last
    reads_as_it_runs(tool.locator(".tool-title"))
    expect(tool.locator(".tool-title")).to_have_css("unicode-bidi", "plaintext")
    tool.locator(".tool-input summary").click()
    reads_as_it_runs(tool.locator(".tool-input pre"))

    # The inbox lists the request as it runs too, and answers it.
    page.goto(daemon.base_url + "/attention")
    row = page.locator("#attention-body tr[data-kind='permission']")
    reads_as_it_runs(row.locator("a"))
    row.get_by_role("button", name="Deny").click()
    expect(row).to_have_count(0)

    # The replay: the decided card, its note and the tool's title, still in their order.
    open_page(page, daemon, session["id"])
    turn_ended(page)
    card = page.locator("#entries .entry-permission").last
    expect(card).to_have_attribute("data-decision", "denied")
    reads_as_it_runs(card.locator(".perm-what"))
    reads_as_it_runs(page.locator("#entries .entry-tool .tool-title").last)
    assert not (workspace / f"invoice_{RLO}gpj.exe").exists()
