"""The session page shows the agent's work: Markdown, diffs, terminals, late notes; and runs none of its payloads.

The scripted agent's `markdown`, `diff`, `terminal`, `late` and `hostile html` scenarios emit what coding agents emit
(and what an attacker would); each test checks the live tail, then the replay after a reload.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from sessions.core.enums import EventType
from sessions.store.events import EventLog
from sessions.store.ops import NewEvent
from tests.conftest import Daemon
from tests.e2e.test_dashboard import STREAM_TIMEOUT_MS, active_session, send_prompt

PHONE = {"width": 375, "height": 740}


def open_page(page: Page, daemon: Daemon, session_id: str) -> Any:
    response = page.goto(f"{daemon.base_url}/sessions/{session_id}")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    return response


def turn_ended(page: Page, count: int = 1) -> None:
    expect(page.locator("#entries .entry-turn-end")).to_have_count(count, timeout=STREAM_TIMEOUT_MS)


def test_markdown_is_rendered_live_and_in_the_replay(page: Page, daemon: Daemon, workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_page(page, daemon, session["id"])
    send_prompt(page, "markdown")
    turn_ended(page)
    for _ in ("live", "replay"):
        answer = page.locator("#entries .entry-assistant .text.md").last
        expect(answer.locator("h2")).to_have_text("Review of calc.py")
        expect(answer.locator("h2 code")).to_have_text("calc.py")
        expect(answer.locator("strong")).to_have_text("Division by zero")
        expect(answer.locator("em")).to_have_text("b")
        expect(answer.locator("ul > li")).to_have_count(2)
        expect(answer.locator("table th")).to_have_text(["case", "before", "after"])
        expect(answer.locator("table td").first).to_have_text("b = 0")
        docs = answer.get_by_role("link", name="the docs")
        expect(docs).to_have_attribute("href", "https://docs.python.org/3/")
        expect(docs).to_have_attribute("rel", "noopener noreferrer")
        expect(answer.get_by_role("link", name="mail us")).to_have_attribute("href", "mailto:dev@example.com")
        block = answer.locator(".code-block")
        expect(block.locator(".code-lang")).to_have_text("python")
        expect(block.locator("pre code")).to_contain_text("return None if b == 0 else a / b")
        assert "```" not in answer.inner_text() and "**" not in answer.inner_text()
        thought = page.locator("#entries .entry-thought").last
        thought.locator("summary").click()
        expect(thought.locator(".text.md strong")).to_have_text("calc.py")
        expect(thought.locator("a")).to_have_count(0)  # a file name is not a host name
        expect(answer.locator("a")).to_have_count(2)
        expect(page.locator("#entries .streaming")).to_have_count(0)
        page.reload()
        expect(page.locator("html")).to_have_attribute("data-ready", "true")


def test_hostile_agent_output_runs_nothing_and_the_page_sends_a_strict_csp(page: Page, daemon: Daemon,
                                                                          workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    response = open_page(page, daemon, session["id"])
    csp = response.headers["content-security-policy"]
    directives = {d.split()[0]: d.split()[1:] for d in csp.split(";") if d.strip()}
    assert directives["script-src"] == ["'self'"], csp  # no 'unsafe-inline', no 'unsafe-eval', no foreign origin
    assert directives["default-src"] == ["'none'"] and directives["object-src"] == ["'none'"], csp
    assert directives["img-src"] == ["'self'"] and directives["frame-src"] == ["'none'"], csp
    assert directives["require-trusted-types-for"] == ["'script'"], csp
    assert directives["trusted-types"] == ["dompurify"], csp
    assert directives["base-uri"] == ["'none'"] and directives["frame-ancestors"] == ["'none'"], csp

    # What the API and the download answer is data: opened in a tab, it may run nothing either.
    for url in (f"/api/sessions/{session['id']}", daemon.scoped(session["id"], "/transcript"),
                f"/sessions/{session['id']}/events.jsonl"):
        answer = daemon.http.get(url)
        assert answer.status_code == 200, answer.text
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "sandbox" in policy, (url, policy)

    send_prompt(page, "hostile html")
    turn_ended(page)
    for when in ("live", "replay"):
        entries = page.locator("#entries")
        # Every payload arrived, as text.
        expect(entries.locator(".entry-assistant .text").last).to_contain_text('<img src=x onerror="window.pwned=1">')
        expect(entries.locator(".entry-assistant .text").last).to_contain_text("<script>window.pwned=2</script>")
        for thought in entries.locator(".entry-thought summary").all():
            thought.click()
        tool = entries.locator(".entry-tool").last
        expect(tool.locator(".tool-title")).to_have_text("<img src=x onerror=window.pwned=6>")
        expect(tool.locator(".diff-path")).to_have_text("<img src=x onerror=window.pwned=5>")
        tool.locator(".tool-output summary").click()
        # No element an attacker needs reached the DOM, and no link leads anywhere but http(s) or mailto.
        for tag in ("img", "script", "iframe", "svg", "object", "embed", "style", "form", "input"):
            expect(entries.locator(tag)).to_have_count(0)
        hrefs = entries.locator("a").evaluate_all("nodes => nodes.map(n => n.getAttribute('href'))")
        assert all(h is None or re.match(r"^(https?:|mailto:)", h) for h in hrefs), hrefs
        handlers = entries.evaluate("root => [...root.querySelectorAll('*')].flatMap(n => [...n.attributes])"
                                    ".map(a => a.name).filter(n => n.startsWith('on'))")
        assert handlers == [], handlers
        for name in ("click me", "data", "raw link"):
            for target in entries.get_by_text(name, exact=True).all():
                target.click()
        page.wait_for_timeout(300)  # a payload that ran would have set the flag by now
        assert page.evaluate("window.pwned") is None, f"a payload ran ({when})"
        assert page.url.startswith(f"{daemon.base_url}/sessions/"), page.url
        page.reload()
        expect(page.locator("html")).to_have_attribute("data-ready", "true")
        turn_ended(page)

    # Beyond the sanitiser: the page itself refuses an HTML string in an HTML sink, and inline script.
    refused = page.evaluate("""() => {
        try { document.body.insertAdjacentHTML("beforeend", "<img src=x onerror='window.pwned=11'>"); return false; }
        catch (err) { return err instanceof TypeError; }
    }""")
    assert refused, "Trusted Types did not refuse a plain HTML string"
    refused = page.evaluate("""() => {
        const s = document.createElement("script");
        try { s.textContent = "window.pwned = 12"; } catch (err) { return err instanceof TypeError; }
        document.body.append(s);
        return false;
    }""")
    assert refused, "Trusted Types did not refuse a plain string as a script's text"
    assert page.evaluate("window.pwned") is None, "inline script ran"


def test_an_edit_shows_its_diff_live_and_in_the_replay(page: Page, daemon: Daemon, workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_page(page, daemon, session["id"])
    send_prompt(page, "diff big")
    turn_ended(page)
    for _ in ("live", "replay"):
        diffs = page.locator("#entries .tool-diff")
        expect(diffs).to_have_count(3)
        edit = diffs.nth(0)
        expect(edit.locator(".diff-path")).to_have_text(re.compile(r"/calc\.py$"))
        expect(edit.locator(".diff-new")).to_have_count(0)
        expect(edit.locator(".diff-file")).to_have_text([re.compile(r"^--- /\S+/calc\.py$"),
                                                         re.compile(r"^\+\+\+ /\S+/calc\.py$")])
        expect(edit.locator(".diff-add")).to_have_text(["+    if b == 0:", "+        return None"])
        expect(edit.locator(".diff-del")).to_have_text(["-    # divides by zero"])
        expect(edit.locator(".diff-ctx")).to_have_text([" def ratio(a, b):", "     return a / b"])
        expect(edit.locator(".diff-hunk")).to_have_text("@@ -1,3 +1,4 @@")
        expect(edit.locator(".diff-count")).to_have_text("+2 \u22121")
        rows = edit.locator(".diff-line:not(.diff-file):not(.diff-hunk)").all_inner_texts()
        assert [r[0] for r in rows] == [" ", "-", "+", "+", " "], rows
        created = diffs.nth(1)
        expect(created.locator(".diff-new")).to_have_text("new file")
        expect(created.locator(".diff-add")).to_have_text(["+# Notes", "+", "+ratio() no longer divides by zero."])
        expect(created.locator(".diff-file").first).to_have_text("--- /dev/null")
        big = diffs.nth(2)
        expect(big.locator(".diff-count")).to_have_text("+400 \u22120")
        expect(big.get_by_text("+line 10", exact=True)).to_be_visible()
        expect(big.get_by_text("+line 399", exact=True)).to_be_hidden()
        show = big.get_by_role("button", name=re.compile(r"Show all 401 lines \(341 more\)"))
        show.click()
        expect(big.get_by_text("+line 399", exact=True)).to_be_attached()
        expect(show).to_have_count(0)
        page.reload()
        expect(page.locator("html")).to_have_attribute("data-ready", "true")


def test_terminals_and_coloured_output_are_monospace_bounded_and_free_of_escapes(page: Page, daemon: Daemon,
                                                                                   workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_page(page, daemon, session["id"])
    send_prompt(page, "terminal")
    turn_ended(page)
    terminal = page.locator('#entries .tool-terminal[data-terminal-id="term-1"]').first
    expect(terminal.locator(".terminal-state")).to_have_text("no output reported")
    log = page.locator("#entries .entry-tool").filter(has_text="Show the log")
    expect(log.locator(".tool-output summary")).to_have_text("Result · 62 lines")
    log.locator(".tool-output summary").click()
    output = log.locator("pre.tool-text")
    expect(output.locator(".ansi-fg-32")).to_have_text("PASSED")
    expect(output.locator(".ansi-fg-31.ansi-bold")).to_have_text("FAILED")
    assert "\x1b" not in output.inner_text() and "[0m" not in output.inner_text()
    expect(output).to_have_css("font-family", re.compile("mono", re.I))
    expect(output.get_by_text("log line 59")).to_be_hidden()
    log.get_by_role("button", name="Show all 62 lines (32 more)").click()
    expect(output).to_contain_text("log line 59")

    # The terminal's output arrives later, in a `terminal_exited` system row (recorded by the daemon's terminal
    # support; appended here, once the session stopped, as `compozy session repair` does): the replay shows it.
    assert daemon.http.post(daemon.scoped(session["id"], "/stop")).status_code in (200, 202, 204)
    daemon.wait_state(session["id"], {"stopped"})
    events = EventLog(daemon.home / "sessions" / session["id"] / "events.db", "scripted")
    events.append([NewEvent(EventType.SYSTEM, "", {"title": "terminal_exited", "raw": {
        "terminal_id": "term-1", "command": "pytest -q", "exit_code": 1,
        "output": "\x1b[31mFAILED\x1b[0m test_zero <script>window.pwned=1</script>\n"}})])
    events.close()
    open_page(page, daemon, session["id"])
    exited = page.locator('#entries .entry-terminal .tool-terminal[data-terminal-id="term-1"]')
    expect(exited.locator(".terminal-command")).to_have_text("$ pytest -q")
    expect(exited.locator(".terminal-exit")).to_have_text("exit 1")
    expect(exited.locator(".ansi-fg-31")).to_have_text("FAILED")
    expect(exited.locator("pre.tool-text")).to_contain_text("<script>window.pwned=1</script>")
    assert page.evaluate("window.pwned") is None


def test_a_message_after_the_turn_ended_is_shown_as_such_without_a_caret(page: Page, daemon: Daemon,
                                                                         workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_page(page, daemon, session["id"])
    send_prompt(page, "late 0.5")
    turn_ended(page)
    late = page.locator("#entries .message.out-of-turn")
    expect(late).to_contain_text("a note after the turn", timeout=STREAM_TIMEOUT_MS)
    expect(late.locator(".out-of-turn-label")).to_have_text(re.compile("after the turn ended"))
    expect(page.locator("#entries .streaming")).to_have_count(0)
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    expect(page.locator("#entries .message.out-of-turn .out-of-turn-label")).to_have_count(1)
    expect(page.locator("#entries .streaming")).to_have_count(0)


def test_a_permission_is_answered_from_a_phone_width_page(page: Page, daemon: Daemon, workspace: Path) -> None:
    page.set_viewport_size(PHONE)
    session = active_session(daemon, workspace, "reader")  # approve-reads: a write waits for a person
    open_page(page, daemon, session["id"])
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], "the page scrolls sideways"
    send_prompt(page, "tool write phone.md from the phone")
    bar = page.locator("#permission-bar .permission-request")
    expect(bar).to_be_visible(timeout=STREAM_TIMEOUT_MS)
    approve = bar.get_by_role("button", name="Approve")
    approve.scroll_into_view_if_needed()
    box = approve.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert box["height"] >= 24, f"a tap target too small: {box}"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], "the page scrolls sideways"
    if os.environ.get("COMPOZY_SHOT"):
        page.screenshot(path=os.environ["COMPOZY_SHOT"], full_page=True)
    approve.click()
    card = page.locator("#entries .entry-permission").last
    expect(card).to_have_attribute("data-decision", re.compile("approve"), timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#permission-bar")).to_be_hidden()
    turn_ended(page)
    assert (workspace / "phone.md").read_text() == "from the phone"
