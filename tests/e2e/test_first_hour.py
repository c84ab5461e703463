"""Issue 48 in Chromium, at desktop and phone (375 px) widths: a stopped session reads as its outcome, a quiet turn
says so, the demo agent's tour shows a permission, a question, a diff and a terminal, Enter sends, and Interrupt
asks before it drops a queued prompt. One daemon for the module; the quiet notice comes after 2 s here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Dialog, Page, ViewportSize, expect

from tests.conftest import NO_TITLE, Daemon, module_daemon, wait_for
from tests.e2e.test_dashboard import STREAM_TIMEOUT_MS, open_session

CONFIG = ('[session.supervision]\nquiet_notice_after = "2s"\nquiet_attention_after = "4s"\n'
          '[agents.demoreads]\nprovider = "demo"\npermissions = "approve-reads"\n' + NO_TITLE)
WIDTHS: dict[str, ViewportSize] = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 375, "height": 740}}

daemon = module_daemon(CONFIG, timeout=120.0)


@pytest.fixture(params=list(WIDTHS))
def width(page: Page, request: pytest.FixtureRequest) -> str:
    page.set_viewport_size(WIDTHS[request.param])
    return str(request.param)


def fits(page: Page) -> None:
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"the page is {scroll} px wide in a {inner} px window"


def test_a_stopped_completed_session_reads_as_completed_not_dead(page: Page, daemon: Daemon, workspace: Path,
                                                                 width: str) -> None:
    sid = daemon.create(workspace)["id"]
    daemon.run_turn(sid, "exitidle 0.2")  # the agent finishes its turn, then exits 0: it completed
    daemon.wait_state(sid, {"stopped"})
    open_session(page, daemon, sid)
    expect(page.locator("#s-outcome")).to_have_text("completed")
    expect(page.locator("#s-outcome")).to_have_class(re.compile(r"\boutcome-ok\b"))
    expect(page.locator("#s-health")).to_be_hidden()
    shown = page.locator("#session-head").inner_text()  # what is visible: the wake service's values are not
    assert "dead" not in shown and "session_unhealthy" not in shown, shown
    fits(page)

    page.goto(daemon.base_url + "/")
    row = page.locator(f'tr[data-session-id="{sid}"]')
    expect(row.locator(".outcome")).to_have_text("completed")
    assert "dead" not in row.inner_text()
    expect(row.locator(".preview")).to_have_text("bye")  # its last message
    if width == "phone":
        # A card, not a table row: no header row, and nothing scrolls sideways.
        expect(page.locator("#sessions-table thead")).to_be_hidden()
        box = row.bounding_box()
        assert box is not None and box["x"] + box["width"] <= WIDTHS["phone"]["width"], box
    fits(page)


def test_a_quiet_turn_shows_its_notice_on_the_page_and_in_the_list(page: Page, daemon: Daemon, workspace: Path,
                                                                   width: str) -> None:
    sid = daemon.create(workspace)["id"]
    open_session(page, daemon, sid)
    page.fill("#prompt-input", "hang")
    page.press("#prompt-input", "Enter")
    working = page.locator("#s-working")
    expect(working).to_contain_text("working", timeout=STREAM_TIMEOUT_MS)  # then nothing more comes
    expect(working).to_have_text(re.compile(r"^no output for \d+s$"), timeout=STREAM_TIMEOUT_MS)
    expect(working).to_have_attribute("data-quiet", "true")
    fits(page)

    wait_for(lambda: daemon.session(sid)["quiet"], what="the quiet notice in the record")
    page.goto(daemon.base_url + "/")
    expect(page.locator(f'tr[data-session-id="{sid}"] .quiet-notice')).to_contain_text("no output for")
    assert daemon.http.post(daemon.scoped(sid, "/prompt/cancel")).status_code == 200


def test_the_demo_tour_shows_a_permission_a_question_a_diff_and_a_terminal(page: Page, daemon: Daemon,
                                                                           workspace: Path, width: str) -> None:
    sid = daemon.create(workspace, agent="demoreads")["id"]  # the built-in demo agent, asked before it writes
    open_session(page, daemon, sid)
    expect(page.locator("#transcript-empty .demo-words")).to_contain_text("tour")  # the words, on an empty page
    page.fill("#prompt-input", "tour")
    page.press("#prompt-input", "Enter")

    form = page.locator("#elicitations form.elicitation")  # the question
    expect(form).to_have_count(1, timeout=STREAM_TIMEOUT_MS)
    expect(form).to_contain_text("Which greeting should the tour write?")
    form.locator("select[name='greeting']").select_option("Howdy")
    form.get_by_role("button", name="Submit").click()

    for title in ("Edit compozy-tour.md", "Run:"):  # approve-reads: the edit, then the command, wait for a person
        card = page.locator('#entries .entry-permission[data-decision="pending"]').last
        expect(card).to_contain_text(title, timeout=STREAM_TIMEOUT_MS)
        card.get_by_role("button", name="Approve").click()
        expect(page.locator('#entries .entry-permission[data-decision="pending"]')).to_have_count(
            0, timeout=STREAM_TIMEOUT_MS)

    expect(page.locator("#entries .tool-diff .diff-path").last).to_have_text(re.compile(r"compozy-tour\.md$"),
                                                                          timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#entries .tool-terminal").last).to_be_attached()
    code = page.locator("#entries .code-block").filter(has=page.locator("code.language-python")).last
    expect(code).to_be_visible(timeout=STREAM_TIMEOUT_MS)
    expect(code.locator(".hljs-keyword").first).to_have_text("def")  # highlighted
    expect(code.locator(".code-copy")).to_have_text("Copy")
    expect(page.locator("#entries .entry-plan").last).to_be_attached()
    assert "Howdy from the Compozy demo tour." in (workspace / "compozy-tour.md").read_text()
    fits(page)


def test_enter_sends_and_shift_enter_starts_a_new_line(page: Page, daemon: Daemon, workspace: Path,
                                                       width: str) -> None:
    sid = daemon.create(workspace, agent="general")["id"]
    open_session(page, daemon, sid)
    box = page.locator("#prompt-input")
    box.fill("first line")
    box.press("Shift+Enter")
    box.type("second line")
    assert box.input_value() == "first line\nsecond line"
    assert page.locator("#entries .entry-user").count() == 0  # Shift+Enter sent nothing
    box.press("Enter")
    expect(page.locator("#entries .entry-user")).to_have_count(1, timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#entries .entry-assistant").last).to_contain_text("You said: first line",
                                                                          timeout=STREAM_TIMEOUT_MS)
    expect(box).to_have_value("")


def test_interrupt_with_a_queued_prompt_asks_first_and_shows_what_it_dropped(page: Page, daemon: Daemon,
                                                                             workspace: Path, width: str) -> None:
    sid = daemon.create(workspace, agent="general")["id"]
    open_session(page, daemon, sid)
    page.fill("#prompt-input", "slow")
    page.press("#prompt-input", "Enter")
    expect(page.locator("#s-working")).to_contain_text("working", timeout=STREAM_TIMEOUT_MS)
    page.fill("#prompt-input", "queued behind the slow turn")
    page.press("#prompt-input", "Enter")
    expect(page.locator("#queue-count")).to_have_text("1", timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#btn-interrupt")).to_have_attribute("data-drops", "1 queued prompt")

    dialogs: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.click("#btn-interrupt")
    wait_for(lambda: dialogs, timeout=10, what="the interrupt's question")
    assert "drops 1 queued prompt" in dialogs[0]
    session = daemon.session(sid)
    assert session["prompt_state"] == "prompting"  # dismissed: nothing was interrupted
    assert len(daemon.http.get(daemon.scoped(sid, "/prompt/queue")).json()["queue"]) == 1

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#btn-interrupt")
    expect(page.locator("#composer-status")).to_contain_text("dropped 1 waiting prompt", timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#queue-count")).to_have_text("0")
    dropped = page.locator('#entries [data-marker="prompt_dropped"]').last
    expect(dropped).to_contain_text("queued behind the slow turn", timeout=STREAM_TIMEOUT_MS)
