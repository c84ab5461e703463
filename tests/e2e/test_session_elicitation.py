"""The agent's questions (ACP elicitations, form mode) answered from the session page, at phone width too.

The scripted agent's `ask [message]` asks for `name` (string, required), `count` (number, required), `urgent`
(boolean) and `color` (one of red, green, blue), then says what came back: `ask accept: {json}`, `ask decline` or
`ask cancel`. The page builds the form from that schema, live; checks it as the server would; shows the server's
problems next to their fields; and treats the agent's message as text.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from playwright.sync_api import Locator, Page, ViewportSize, expect

from tests.conftest import Daemon
from tests.e2e.test_dashboard import STREAM_TIMEOUT_MS, active_session, send_prompt
from tests.e2e.test_session_render import open_page, turn_ended

PHONE: ViewportSize = {"width": 375, "height": 740}


def question(page: Page) -> Locator:
    form = page.locator("#elicitations form.elicitation")
    expect(form).to_have_count(1, timeout=STREAM_TIMEOUT_MS)
    return form


def agent_said(page: Page, text: str) -> None:
    expect(page.locator("#entries .entry-assistant .text").last).to_contain_text(text, timeout=STREAM_TIMEOUT_MS)


def no_sideways_scroll(page: Page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], "the page scrolls sideways"


def test_a_question_is_answered_with_a_form_from_its_schema_at_phone_width(page: Page, daemon: Daemon,
                                                                           workspace: Path) -> None:
    page.set_viewport_size(PHONE)
    session = active_session(daemon, workspace, "scripted")
    open_page(page, daemon, session["id"])
    send_prompt(page, "ask Who is asking, and how many?")
    form = question(page)  # live: the page was open before the agent asked
    expect(form.locator(".elicitation-message")).to_have_text("Who is asking, and how many?")

    # The fields the schema asks for, as their types' controls; the required ones marked.
    expect(form.locator("input[name='name']")).to_have_attribute("type", "text")
    expect(form.locator("input[name='count']")).to_have_attribute("type", "number")
    expect(form.locator("input[name='urgent']")).to_have_attribute("type", "checkbox")
    expect(form.locator("select[name='color'] option")).to_have_text(["—", "red", "green", "blue"])
    for name, required in (("name", True), ("count", True), ("urgent", False), ("color", False)):
        expect(form.locator(f".elicit-field[data-field='{name}'] .required-mark")).to_have_count(1 if required else 0)
    expect(form.locator(".field-hint")).to_have_text(["who is asking"])  # the schema's description, once
    expect(form).not_to_contain_text("null")
    expect(form.get_by_label("Name")).to_be_visible()
    expect(form.get_by_label("How many")).to_be_visible()

    # It fits a phone: nothing scrolls sideways, every control and button lies within the screen.
    no_sideways_scroll(page)
    for control in [*form.locator("input, select").all(), *form.locator("button").all()]:
        control.scroll_into_view_if_needed()
        box = control.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    submit = form.get_by_role("button", name="Submit")
    box = submit.bounding_box()
    assert box is not None and box["height"] >= 24, f"a tap target too small: {box}"
    if os.environ.get("COMPOZY_SHOT"):
        page.screenshot(path=os.environ["COMPOZY_SHOT"], full_page=True)

    # A required field left empty: the page says so beside it and sends nothing.
    form.get_by_label("How many").fill("2")
    submit.click()
    expect(form.locator("[data-problem-for='name']")).to_have_text("name is required")
    expect(form.locator("[data-problem-for='count']")).to_be_hidden()
    assert len(daemon.http.get(daemon.scoped(session["id"], "/elicitations")).json()["elicitations"]) == 1

    # What only the server checks (a choice the schema does not offer): its 400 problem is shown at its field.
    form.get_by_label("Name").fill("Ada")
    form.locator("select[name='color']").evaluate(
        "s => s.append(Object.assign(document.createElement('option'), {value: 'purple', textContent: 'purple'}))")
    form.locator("select[name='color']").select_option("purple")
    submit.click()
    expect(form.locator("[data-problem-for='color']")).to_have_text("color must be one of red, green, blue")
    expect(form.locator("[data-problem-for='name']")).to_be_hidden()
    no_sideways_scroll(page)

    # A fitting answer reaches the agent, typed as the schema says, and the form goes away.
    form.locator("select[name='color']").select_option("green")
    form.get_by_label("Urgent?").check()
    submit.click()
    answer = {"color": "green", "count": 2, "name": "Ada", "urgent": True}
    agent_said(page, "ask accept: " + json.dumps(answer, sort_keys=True))
    expect(page.locator("#elicitations")).to_be_hidden()
    expect(page.locator("#elicitations form")).to_have_count(0)
    turn_ended(page)


def test_a_question_opened_from_the_inbox_is_declined(page: Page, daemon: Daemon, workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    assert daemon.prompt(session["id"], "ask Shall I go on?").status_code == 200
    page.goto(daemon.base_url + "/attention")
    row = page.locator("#attention-body tr[data-kind='elicitation']")
    expect(row).to_have_count(1, timeout=STREAM_TIMEOUT_MS)
    expect(row).to_contain_text("Shall I go on?")
    row.get_by_role("link", name="Open", exact=True).click()
    expect(page).to_have_url(f"{daemon.base_url}/sessions/{session['id']}")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    form = question(page)  # already waiting when the page loaded
    expect(form.locator(".elicitation-message")).to_have_text("Shall I go on?")
    form.get_by_role("button", name="Decline").click()
    agent_said(page, "ask decline")
    expect(page.locator("#elicitations")).to_be_hidden()
    turn_ended(page)
    assert daemon.http.get(daemon.scoped(session["id"], "/elicitations")).json()["elicitations"] == []


def test_a_hostile_message_is_shown_as_text_and_a_question_can_be_canceled(page: Page, daemon: Daemon,
                                                                           workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_page(page, daemon, session["id"])
    hostile = '<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> [go](javascript:window.pwned=3)'
    send_prompt(page, f"ask {hostile}")
    form = question(page)
    expect(form.locator(".elicitation-message")).to_have_text(hostile)
    for tag in ("img", "script", "a", "iframe", "svg"):
        expect(page.locator(f"#elicitations {tag}")).to_have_count(0)
    handlers = page.locator("#elicitations").evaluate(
        "root => [...root.querySelectorAll('*')].flatMap(n => [...n.attributes]).map(a => a.name)"
        ".filter(n => n.startsWith('on'))")
    assert handlers == [], handlers
    form.get_by_role("button", name="Cancel").click()
    agent_said(page, "ask cancel")
    expect(page.locator("#elicitations")).to_be_hidden()
    turn_ended(page)
    assert page.evaluate("window.pwned") is None, "a payload in the agent's message ran"
