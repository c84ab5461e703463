"""A stopped session's page in Chromium against the real daemon: the session is continued elsewhere (the CLI)
or from the page itself, and its replies stream into the open page without a reload; the header and the health
pill follow each state change at once.

The scripted agent echoes a prompt; a reactivated one gets its first prompt wrapped in the recovered context
(`… User request: <prompt>`) and echoes that whole.
"""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Dialog, Page, expect

from tests.conftest import Daemon
from tests.e2e.test_dashboard import STREAM_TIMEOUT_MS, active_session, chunk_numbers, open_session, send_prompt

# Well under the 30 s health poll and the 30 s poll of a stopped session's record.
FOLLOW_MS = 8_000


def stopped_session(daemon: Daemon, workspace: Path) -> dict[str, object]:
    session = active_session(daemon, workspace, "scripted")
    daemon.run_turn(session["id"], "hello before the stop")
    assert daemon.http.post(daemon.scoped(session["id"], "/stop")).status_code in (200, 202, 204)
    return daemon.wait_state(session["id"], {"stopped"})


def test_a_session_continued_elsewhere_streams_into_its_open_page(page: Page, daemon: Daemon,
                                                                  workspace: Path) -> None:
    session = stopped_session(daemon, workspace)
    open_session(page, daemon, session["id"])
    expect(page.locator("#s-state")).to_have_text("stopped")
    expect(page.locator("#stream-indicator")).to_have_attribute("data-state", "ended")
    entries_before = page.locator("#entries > .message").count()

    result = daemon.cli("session", "prompt", session["id"], "continued-from-the-cli")
    assert result.returncode == 0, result.stderr
    # No reload: the page sees the session come back and reopens the stream after its cursor.
    reply = page.locator("#entries .entry-assistant").last
    expect(reply).to_contain_text("User request: continued-from-the-cli", timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#s-state")).to_have_text("active", timeout=FOLLOW_MS)
    expect(page.locator("#stream-indicator")).to_have_attribute("data-state", "live")
    expect(page.locator("#prompt-send")).to_have_text("Send")
    # The earlier transcript stays, each entry once.
    assert page.locator("#entries > .message").count() > entries_before
    ids = page.locator("#entries > .message").evaluate_all("nodes => nodes.map(n => n.dataset.entryId)")
    assert len(ids) == len(set(ids))

    # Live again: a later turn streams in chunk by chunk.
    send_prompt(page, "slow 20 0.05")
    expect(page.locator("#entries .entry-assistant .text").last).to_contain_text("c19", timeout=STREAM_TIMEOUT_MS)
    assert chunk_numbers(page.locator("#entries .entry-assistant .text").last.inner_text()) == list(range(20))


def test_the_page_resumes_a_stopped_session_and_the_health_pill_follows(page: Page, daemon: Daemon,
                                                                        workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_session(page, daemon, session["id"])
    expect(page.locator("#s-health")).to_have_text("healthy", timeout=FOLLOW_MS)

    # Stopped by someone else: header and health pill change together, long before their slow polls.
    assert daemon.http.post(daemon.scoped(session["id"], "/stop")).status_code in (200, 202, 204)
    expect(page.locator("#s-state")).to_have_text("stopped", timeout=FOLLOW_MS)
    # A stop is no alarm: the header reads how it ended, and the wake service's `dead` is not shown (issue 48).
    expect(page.locator("#s-outcome")).to_have_text("stopped by you", timeout=FOLLOW_MS)
    health = page.locator("#s-health")
    expect(health).to_be_hidden(timeout=FOLLOW_MS)

    send = page.locator("#prompt-send")
    expect(send).to_be_enabled()
    expect(send).to_have_text("Resume & send")
    expect(page.locator("#composer-status")).to_contain_text("resumes it")
    send_prompt(page, "resumed-from-the-page")
    expect(page.locator("#entries .entry-user").last).to_have_text(re.compile("resumed-from-the-page"),
                                                                   timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#entries .entry-assistant").last).to_contain_text("resumed-from-the-page",
                                                                          timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#composer-status")).to_contain_text("Session resumed")
    expect(page.locator("#s-state")).to_have_text("active", timeout=FOLLOW_MS)
    expect(health).to_have_text("healthy", timeout=FOLLOW_MS)
    expect(page.locator("#stream-indicator")).to_have_attribute("data-state", "live")
    resumed = daemon.session(session["id"])
    assert resumed["state"] == "active"
    assert resumed["id"] == session["id"]


def test_cancel_turn_says_what_happened_and_stop_asks_first_when_prompts_are_queued(page: Page, daemon: Daemon,
                                                                                    workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_session(page, daemon, session["id"])
    send_prompt(page, "slow 200 0.1")
    expect(page.locator("#entries .entry-assistant .text").last).to_contain_text("c1")
    page.click("#btn-cancel-turn")
    expect(page.locator("#composer-status")).to_have_text("Turn canceled.")

    # The second turn must be running (its own user entry shown, the badge busy) before the next prompt, or that
    # one is not queued behind it: the first turn's "c1" is already on the page.
    users = page.locator("#entries .entry-user").count()
    send_prompt(page, "slow 200 0.1")
    expect(page.locator("#entries .entry-user")).to_have_count(users + 1)
    expect(page.locator("#s-badge")).to_have_text("running")
    expect(page.locator("#prompt-send")).to_be_enabled()
    send_prompt(page, "note stays queued")
    expect(page.locator("#queue-count")).to_have_text("1", timeout=15_000)
    dialogs: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.click("#btn-stop")
    expect(page.locator("#btn-stop")).to_be_enabled()
    assert dialogs and "Stop this session?" in dialogs[0] and "1 queued prompt" in dialogs[0]
    assert daemon.session(session["id"])["state"] == "active"  # dismissed: nothing stopped
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#btn-stop")
    expect(page.locator("#s-state")).to_have_text("stopped", timeout=STREAM_TIMEOUT_MS)


def test_the_transcript_is_reachable_with_the_keyboard(page: Page, daemon: Daemon, workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_session(page, daemon, session["id"])
    transcript = page.locator("#transcript")
    expect(transcript).to_have_attribute("tabindex", "0")
    expect(transcript).to_have_attribute("aria-label", re.compile("Transcript"))
    page.focus("#btn-evidence")
    for _ in range(5):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "transcript":
            break
    assert page.evaluate("document.activeElement.id") == "transcript"


def test_a_failed_start_says_its_error_once(page: Page, daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="missing")
    assert session["state"] == "stopped"
    open_session(page, daemon, session["id"])
    banners = page.locator("#entries .entry-banner")
    expect(banners).to_have_count(2)
    expect(banners.first).to_contain_text("No such file or directory")
    expect(banners.last).to_have_text("Session stopped · error")
    assert page.locator("#entries").inner_text().count("crash bundle") == 1
