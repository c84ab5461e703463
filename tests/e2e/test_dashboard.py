"""The browser dashboard against the real daemon, in Debian's Chromium.

Sessions run real agents: the built-in demo agent (`general`) and the scripted test agent (`scripted`,
whose first prompt word picks a scenario: `slow N INTERVAL` streams chunks `c0 `..`cN-1 `).
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from sessions.live.transcript import TRANSCRIPT_GENERATION
from tests.conftest import Daemon

STREAM_TIMEOUT_MS = 30_000


def open_session(page: Page, daemon: Daemon, session_id: str) -> None:
    page.goto(f"{daemon.base_url}/sessions/{session_id}")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")


def send_prompt(page: Page, text: str, mode: str = "queue") -> None:
    page.fill("#prompt-input", text)
    page.select_option("#prompt-mode", mode)
    page.click("#prompt-send")


def assistant_text(page: Page) -> str:
    return "".join(page.locator("#entries .entry-assistant .text").all_inner_texts())


def chunk_numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\bc(\d+)\b", text)]


def active_session(daemon: Daemon, workspace: Path, agent: str) -> dict[str, Any]:
    session = daemon.create(workspace, agent=agent)
    assert session["state"] == "active", session
    return session


def test_new_session_form_starts_a_session_that_the_dashboard_lists(page: Page, daemon: Daemon,
                                                                    workspace: Path) -> None:
    name = f"form-{uuid.uuid4().hex[:8]}"
    page.goto(daemon.base_url + "/")
    expect(page.locator("#daemon-status")).to_contain_text("daemon running")
    if page.get_attribute("#new-session", "open") is None:
        page.click("#new-session summary")
    page.select_option("#ns-agent", "general")
    page.fill("#ns-workspace", str(workspace))
    page.fill("#ns-name", name)
    page.fill("#ns-prompt", "hello from the form")
    page.click("#ns-submit")

    page.wait_for_url(re.compile(r"/sessions/sess_[0-9a-f]{16}$"))
    session_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("#s-name")).to_have_text(name)
    # The staged first prompt runs once the agent is up, and its reply streams onto this page.
    expect(page.locator("#entries")).to_contain_text("Hello from the Compozy demo agent. You said: hello from the form",
                                                     timeout=STREAM_TIMEOUT_MS)
    created = daemon.session(session_id)
    assert created["agent_name"] == "general"
    assert created["workspace_path"] == str(workspace.resolve())

    page.goto(daemon.base_url + "/")
    row = page.locator(f'tr[data-session-id="{session_id}"]')
    expect(row).to_be_visible()
    expect(row.locator(".col-session")).to_contain_text(name)
    expect(row.locator(".col-agent")).to_contain_text("general")
    expect(row.locator(".col-workspace")).to_contain_text(workspace.name)
    expect(row.locator(".badge")).to_have_text(re.compile(r"idle|running"))


def test_dashboard_shows_new_sessions_live_and_filters_by_state(page: Page, daemon: Daemon,
                                                               workspace: Path) -> None:
    page.goto(daemon.base_url + "/")
    expect(page.locator("#live-indicator")).to_have_text("live")
    session = daemon.create(workspace, agent="scripted", wait=False)
    # No reload: the catalog stream wakes the page, which refetches the list.
    row = page.locator(f'tr[data-session-id="{session["id"]}"]')
    expect(row).to_be_visible()
    daemon.wait_state(session["id"], {"active"})
    expect(row).to_have_attribute("data-state", "active")

    page.select_option("#f-state", "stopped")
    expect(row).to_have_count(0)
    assert "state=stopped" in page.url
    page.select_option("#f-state", "active")
    expect(page.locator(f'tr[data-session-id="{session["id"]}"]')).to_be_visible()


def test_reply_streams_in_incrementally(page: Page, daemon: Daemon, workspace: Path) -> None:
    session = active_session(daemon, workspace, "general")
    open_session(page, daemon, session["id"])
    expect(page.locator("#prompt-send")).to_be_enabled()
    send_prompt(page, "show me streaming")
    expect(page.locator("#entries .entry-user").last).to_have_text(re.compile("show me streaming"))
    reply = page.locator("#entries .entry-assistant").last
    expect(reply).to_contain_text("Hello from the Compozy demo agent. You said: show me streaming",
                                  timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#entries .entry-thought").last).to_be_visible()  # folded thought

    # Incremental: watch a slower stream and catch the bubble while it is still partial.
    slow = active_session(daemon, workspace, "scripted")
    open_session(page, daemon, slow["id"])
    send_prompt(page, "slow 30 0.15")
    bubble = page.locator("#entries .entry-assistant .text").last
    expect(bubble).to_contain_text("c3")
    partial = bubble.inner_text()
    assert "c29" not in partial, "the whole reply arrived at once"
    expect(page.locator("#entries .entry-assistant.streaming")).to_have_count(1)
    expect(bubble).to_contain_text("c29", timeout=STREAM_TIMEOUT_MS)
    assert chunk_numbers(bubble.inner_text()) == list(range(30))
    expect(page.locator("#entries .entry-turn-end").last).to_contain_text("end_turn")


def test_prompt_queued_while_busy_can_be_canceled_and_the_next_one_runs(page: Page, daemon: Daemon,
                                                                         workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_session(page, daemon, session["id"])
    # Long enough to stay busy while two prompts are queued and one is canceled, even on a loaded machine.
    send_prompt(page, "slow 80 0.1")
    expect(page.locator("#entries .entry-assistant .text").last).to_contain_text("c1")
    expect(page.locator("#s-badge")).to_have_text("running")

    send_prompt(page, "note first-queued", mode="queue")
    expect(page.locator("#composer-status")).to_contain_text("Queued at position 1")
    send_prompt(page, "note second-queued", mode="queue")
    expect(page.locator("#composer-status")).to_contain_text("Queued at position 2")
    items = page.locator("#queue-list .queue-item")
    expect(items).to_have_count(2)
    expect(items.nth(0)).to_contain_text("note first-queued")
    expect(items.nth(1)).to_contain_text("note second-queued")
    expect(page.locator("#queue-count")).to_have_text("2")

    items.nth(0).get_by_role("button", name="Cancel").click()
    expect(items).to_have_count(1)
    expect(items.nth(0)).to_contain_text("note second-queued")

    # Cancel the busy turn: the remaining entry is handed to the agent and leaves the queue.
    page.click("#btn-cancel-turn")
    expect(page.locator("#entries .entry-turn-end").first).to_have_text("turn cancelled")
    expect(page.locator("#entries")).to_contain_text("echo: note second-queued", timeout=STREAM_TIMEOUT_MS)
    expect(items).to_have_count(0)
    expect(page.locator("#queue-empty")).to_be_visible()
    users = page.locator("#entries .entry-user").all_inner_texts()
    assert not any("first-queued" in u for u in users)
    assert any("second-queued" in u for u in users)
    sent = [e["content"]["text"] for e in daemon.events(session["id"], type="user_message")]
    assert "note first-queued" not in sent
    assert "note second-queued" in sent
    markers = [e["content"]["title"] for e in daemon.events(session["id"], type="transcript_marker.created")]
    assert "prompt_dropped" in markers


def test_stop_button_stops_the_session_with_user_canceled(page: Page, daemon: Daemon, workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_session(page, daemon, session["id"])
    send_prompt(page, "slow 200 0.1")
    expect(page.locator("#entries .entry-assistant .text").last).to_contain_text("c1")

    page.once("dialog", lambda dialog: dialog.accept())  # a stop asks once
    page.click("#btn-stop")
    expect(page.locator("#s-state")).to_have_text("stopped", timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#s-outcome")).to_have_text("stopped by you")
    expect(page.locator("#s-stop")).to_have_text("user_canceled")
    expect(page.locator("#s-badge")).to_have_text("stopped")
    expect(page.locator("#btn-stop")).to_be_hidden()
    # A stopped session takes a prompt: the daemon reactivates it under the same id.
    expect(page.locator("#prompt-send")).to_have_text("Resume & send")
    expect(page.locator("#prompt-send")).to_be_enabled()
    expect(page.locator("#stream-indicator")).to_have_attribute("data-state", "ended")
    expect(page.locator("#entries .entry-banner").last).to_contain_text("Session stopped · user_canceled")
    stopped = daemon.session(session["id"])
    assert stopped["state"] == "stopped"
    assert stopped["stop_reason"] == "user_canceled"

    page.goto(daemon.base_url + "/")
    row = page.locator(f'tr[data-session-id="{session["id"]}"]')
    expect(row.locator(".col-stop")).to_have_text("user_canceled")
    expect(row.locator(".badge")).to_have_text("stopped")


def test_reload_mid_stream_shows_every_chunk_exactly_once(page: Page, daemon: Daemon, workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    open_session(page, daemon, session["id"])
    send_prompt(page, "slow 60 0.05")
    bubble = page.locator("#entries .entry-assistant .text").last
    expect(bubble).to_contain_text("c5")
    before = bubble.inner_text()
    assert "c59" not in before, "the stream finished before the reload"

    page.reload()
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    expect(page.locator("#entries")).to_contain_text("turn finished", timeout=STREAM_TIMEOUT_MS)
    text = assistant_text(page)
    assert chunk_numbers(text) == list(range(60)), text
    sequences = page.locator("#entries [data-seq]").evaluate_all("nodes => nodes.map(n => n.dataset.seq)")
    assert len(sequences) == len(set(sequences))
    # The page shows what the store holds: the same chunks, in the same order.
    stored = "".join(e["content"]["text"] for e in daemon.events(session["id"], type="agent_message"))
    assert chunk_numbers(stored) == chunk_numbers(text)


def test_events_download_streams_every_event_as_json_lines(page: Page, daemon: Daemon, workspace: Path) -> None:
    session = active_session(daemon, workspace, "general")
    daemon.run_turn(session["id"], "hello download")
    open_session(page, daemon, session["id"])
    with page.expect_download() as info:
        page.click("#btn-download")
    download = info.value
    assert download.suggested_filename == f"{session['id']}-events.jsonl"
    lines = Path(download.path()).read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["sequence"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows == daemon.all_events(session["id"])


class _EvilPage(BaseHTTPRequestHandler):
    """A page on another origin that tries to create a session on the loopback daemon."""

    target = ""

    def do_GET(self) -> None:
        body = f"""<!doctype html><html><body>
<form id="attack" method="post" action="{self.target}/api/sessions" enctype="text/plain">
<input type="hidden" name='{{"agent_name":"general","workspace_path":"/tmp","name":"evil","x":"' value='"}}'>
<button id="go" type="submit">go</button></form></body></html>""".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def evil_origin(daemon: Daemon) -> Iterator[str]:
    handler = type("EvilPage", (_EvilPage,), {"target": daemon.base_url})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="evil-origin", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def evil_sessions(daemon: Daemon) -> list[dict[str, Any]]:
    listed = daemon.http.get("/api/sessions", params={"all": "true", "limit": 100}).json()["sessions"]
    return [s for s in listed if s.get("name") == "evil"]


def test_writes_from_another_origin_are_refused(page: Page, daemon: Daemon, evil_origin: str) -> None:
    page.goto(evil_origin)
    body = json.dumps({"agent_name": "general", "workspace_path": "/tmp", "name": "evil"})
    url = f"{daemon.base_url}/api/sessions"

    # A JSON fetch needs a CORS preflight, which the daemon never grants.
    outcome = page.evaluate("""async ([url, body]) => {
        try { await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"}, body});
              return "sent"; } catch (err) { return "blocked"; } }""", [url, body])
    assert outcome == "blocked"

    # A "simple" request skips the preflight and reaches the daemon: the origin guard refuses it.
    with page.expect_response(lambda r: r.url == url and r.request.method == "POST") as info:
        page.evaluate("""([url, body]) => fetch(url, {method: "POST", mode: "no-cors",
            headers: {"Content-Type": "text/plain"}, body}).catch(() => null)""", [url, body])
    assert info.value.status == 403

    # A classic cross-site form post is refused the same way.
    page.click("#go")
    expect(page.locator("body")).to_contain_text("origin_forbidden")
    assert evil_sessions(daemon) == []

    # The same write from the daemon's own origin (the dashboard's fetch) is allowed.
    page.goto(daemon.base_url + "/")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    status = page.evaluate("""async () => (await fetch("/api/sessions", {method: "POST",
        headers: {"Content-Type": "application/json"}, body: JSON.stringify({workspace_path: "relative"})})).status""")
    assert status == 400  # past the origin guard; refused only for its invalid body


def test_static_files_are_served_with_types_and_never_from_outside_the_app(daemon: Daemon) -> None:
    css = daemon.http.get("/static/frontend/css/app.css")
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
    js = daemon.http.get("/static/frontend/js/session.js")
    assert js.headers["content-type"].startswith("text/javascript")
    dashboard = daemon.http.get("/")
    for response in (css, js, dashboard):  # set once for every response, by SecurityMiddleware
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"
    assert "default-src" in dashboard.headers["content-security-policy"]
    assert daemon.http.options("/sessions/sess_0000000000000000/events.jsonl").status_code == 405
    assert daemon.http.get("/static/frontend/css/app.css",
                           headers={"If-None-Match": css.headers["etag"]}).status_code == 304
    for path in ("/static/frontend/../../views.py", "/static/..%2fviews.py", "/static/frontend/%2e%2e/%2e%2e/views.py",
                 "/static/.hidden", "/static/frontend/js/"):
        response = daemon.http.get(path)
        assert response.status_code == 404, path
        assert b"def " not in response.content


def test_unknown_session_page_is_a_readable_404(page: Page, daemon: Daemon) -> None:
    response = page.goto(f"{daemon.base_url}/sessions/sess_0000000000000000")
    assert response is not None and response.status == 404
    expect(page.locator("h1")).to_have_text("Session not found")


def test_unknown_page_addresses_are_a_readable_404_and_api_misses_stay_json(page: Page, daemon: Daemon,
                                                                          workspace: Path) -> None:
    for path in ("/nope", "/sessions/", "/tasks/nope", "/sessions/sess_0000000000000000/nope"):
        response = page.goto(daemon.base_url + path)
        assert response is not None and response.status == 404, path
        assert response.headers["content-type"].startswith("text/html"), path
        expect(page.locator("h1")).to_have_text("Page not found")
        expect(page.locator("main")).to_contain_text(path)
    # A session page's address with a trailing slash leads to the page.
    session = active_session(daemon, workspace, "scripted")
    page.goto(f"{daemon.base_url}/sessions/{session['id']}/")
    assert page.url == f"{daemon.base_url}/sessions/{session['id']}"
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    # The API, /static/ and scripts keep the JSON 404, even for a browser.
    for path in ("/api/nope", "/static/nope.js"):
        response = page.goto(daemon.base_url + path)
        assert response is not None and response.status == 404, path
        assert response.headers["content-type"].startswith("application/json"), path
    for path in ("/nope", "/api/nope"):
        miss = daemon.http.get(path)
        assert miss.status_code == 404
        assert miss.json()["code"] == "not_found"
    assert daemon.http.get("/metrics").status_code == 200


def test_the_transcript_is_the_servers_rendered_from_transcript_frames(page: Page, daemon: Daemon,
                                                                      workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    daemon.run_turn(session["id"], "tool read README.md")
    daemon.run_turn(session["id"], "hello frames")
    streams: list[str] = []
    page.on("request", lambda r: streams.append(r.url) if "/stream" in r.url else None)
    open_session(page, daemon, session["id"])
    # The first paint is a transcript_snapshot: the page records it and the fences it came with.
    root = page.locator("html")
    expect(root).to_have_attribute("data-snapshots", "1")
    expect(root).to_have_attribute("data-generation", str(TRANSCRIPT_GENERATION))
    assert streams and all("frames=raw" not in url for url in streams), streams
    assert all("epoch=" in url and "generation=" in url for url in streams), streams
    # Each entry on the page is one of the server's assembled messages, in its order (the raw assembler
    # had no message ids to show).
    server = daemon.http.get(daemon.scoped(session["id"], "/transcript")).json()["entries"]
    shown = page.locator("#entries > .message").evaluate_all("nodes => nodes.map(n => n.dataset.entryId)")
    assert shown == [e["message"]["id"] for e in server]
    tool = page.locator("#entries .entry-tool").first
    expect(tool.locator(".tool-status")).to_have_text("completed")

    # Live: a new turn arrives as deltas on the same stream, upserting the server's entries.
    send_prompt(page, "slow 20 0.05")
    expect(page.locator("#entries .entry-turn-end").last).to_contain_text("end_turn", timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#entries .entry-assistant .text").last).to_contain_text("c19")
    server = daemon.http.get(daemon.scoped(session["id"], "/transcript")).json()["entries"]
    shown = page.locator("#entries > .message").evaluate_all("nodes => nodes.map(n => n.dataset.entryId)")
    assert shown == [e["message"]["id"] for e in server]
    assert root.get_attribute("data-snapshots") == "1", "a delta was replaced by a snapshot"
    assert int(root.get_attribute("data-cursor") or 0) == daemon.all_events(session["id"])[-1]["sequence"]


def test_a_pending_permission_is_approved_from_its_transcript_card(page: Page, daemon: Daemon,
                                                                   workspace: Path) -> None:
    session = active_session(daemon, workspace, "reader")  # approve-reads: a write waits for a person
    open_session(page, daemon, session["id"])
    send_prompt(page, "tool write notes.md hello")
    card = page.locator("#entries .entry-permission").last
    expect(card).to_have_attribute("data-decision", "pending", timeout=STREAM_TIMEOUT_MS)
    card.get_by_role("button", name="Approve").click()
    expect(card).to_have_attribute("data-decision", re.compile("approve"), timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#entries .entry-tool").last.locator(".tool-status")).to_have_text("completed",
                                                                                           timeout=STREAM_TIMEOUT_MS)
    expect(page.locator("#permissions-panel")).to_be_hidden()
    assert (workspace / "notes.md").read_text() == "hello"


def test_older_entries_load_from_transcript_pages_each_once_in_order(page: Page, daemon: Daemon,
                                                                     workspace: Path) -> None:
    session = active_session(daemon, workspace, "scripted")
    for i in range(60):  # 120 entries: more than the first snapshot holds
        daemon.run_turn(session["id"], f"turn {i}")
    open_session(page, daemon, session["id"])
    expect(page.locator("#load-older")).to_be_visible()
    messages = page.locator("#entries > .message")
    first = messages.count()
    page.click("#load-older")
    expect(page.locator("#older-status")).to_have_text("Beginning of the session")
    assert messages.count() > first
    server = daemon.http.get(daemon.scoped(session["id"], "/transcript"), params={"limit": 1000}).json()["entries"]
    shown = messages.evaluate_all("nodes => nodes.map(n => n.dataset.entryId)")
    assert shown == [e["message"]["id"] for e in server]
    expect(page.locator("#entries .entry-user").first).to_have_text(re.compile("turn 0$"))
