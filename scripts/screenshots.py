"""Real screenshots of the dashboard and of a live session, for docs/ and the README.

Run from the repository root: `.venv/bin/python scripts/screenshots.py [--out docs/screenshots]`. A developer's
tool beside the tests, whose harness it drives: it lives in scripts/, not in a shipped package (those never
import `tests`).
It starts a throwaway daemon (the test suite's harness: the demo agent plus the scripted test agent),
drives a few sessions into telling states (idle, failed, stopped, one live and waiting for a person),
and photographs the pages in Debian's Chromium.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import Page, ViewportSize, expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import SCRIPTED, Daemon, start_daemon  # noqa: E402
from tests.e2e.conftest import CHROMIUM_ARGS, CHROMIUM_PATH  # noqa: E402

logger = logging.getLogger("compozy.screenshots")
VIEWPORT: ViewportSize = {"width": 1440, "height": 900}


def make_workspace(base: Path, name: str) -> Path:
    root = base / name
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text(f"# {name}\n\nA small service with a flaky integration test.\n")
    return root


def create(daemon: Daemon, workspace: Path, agent: str, name: str, prompt: str | None = None,
           wait: bool = True) -> str:
    session = daemon.create(workspace, agent=agent, name=name, prompt=prompt, wait=wait)
    return str(session["id"])


def wait_text(daemon: Daemon, session_id: str, needle: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        texts = [str(e["content"].get("text", "")) for e in daemon.events(session_id, type="agent_message")]
        if needle in "".join(texts):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{session_id}: no agent text {needle!r}")


def stage(daemon: Daemon, base: Path) -> tuple[str, str]:
    """Sessions in the states an operator meets; returns the ids of the live one and of one that did some work."""
    api_ws = make_workspace(base, "api-server")
    web_ws = make_workspace(base, "web-client")
    docs_ws = make_workspace(base, "docs-site")

    failed = create(daemon, api_ws, "scripted", "nightly flaky-test hunt")
    daemon.prompt(failed, "crash")
    create(daemon, web_ws, "broken", "upgrade the bundler", wait=False)
    stopped = create(daemon, docs_ws, "scripted", "rewrite the install guide")
    daemon.http.post(daemon.scoped(stopped, "/stop"))
    idle = create(daemon, docs_ws, "general", "summarize the README", prompt="read README.md and summarize it")
    wait_text(daemon, idle, "Hello from the Compozy demo agent")

    live = create(daemon, api_ws, "reader", "fix the retry logic in the API client")
    daemon.run_turn(live, "think The retry loop re-sends on 4xx too; reading the client first.")
    daemon.run_turn(live, "tool read README.md")
    # An edit under approve-reads waits for a person: the turn stays open, so the next prompt queues.
    response = daemon.prompt(live, "tool write notes.md retry only on 5xx and timeouts, with jittered backoff")
    assert response.status_code == 200, response.text
    deadline = time.monotonic() + 30
    while not daemon.http.get(daemon.scoped(live, "/permissions")).json().get("permissions"):
        if time.monotonic() > deadline:
            raise RuntimeError("the permission request never reached the board")
        time.sleep(0.1)
    queued = daemon.prompt(live, "then run the integration tests and report flaky ones")
    assert queued.status_code == 202, queued.text
    daemon.wait_state(failed, {"stopped"})

    # The work a coding agent shows: a Markdown review, an edit with its diff, a test run with coloured output; and
    # what it says of the session (modes, slash commands, context used and cost).
    work = create(daemon, api_ws, "modal", "review ratio() in calc.py")
    for prompt in ("agentinfo", "markdown", "diff", "terminal"):
        daemon.run_turn(work, prompt)
    return live, work


def shoot(page: Page, daemon: Daemon, live: str, work: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    page.goto(daemon.login_url())  # sign in as a user does: the one-time link sets the cookie, then opens "/"
    page.goto(daemon.base_url + "/")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    expect(page.locator("#live-indicator")).to_have_text("live")
    expect(page.locator("#daemon-status")).to_contain_text("daemon running")
    expect(page.locator("tr[data-badge='failed']").first).to_be_visible()
    page.wait_for_timeout(500)  # let the overview counters land
    page.screenshot(path=str(out / "dashboard.png"))

    page.goto(f"{daemon.base_url}/sessions/{live}")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    expect(page.locator("#stream-indicator")).to_have_attribute("data-state", "live")
    expect(page.locator("#permission-bar")).to_be_visible()
    expect(page.locator("#queue-list .queue-item")).to_have_count(1)
    page.locator(".entry-tool details.tool-output").first.evaluate("d => d.open = true")
    page.fill("#prompt-input", "Also add a unit test for the backoff.")
    page.wait_for_timeout(300)
    page.screenshot(path=str(out / "session.png"))

    page.set_viewport_size({"width": VIEWPORT["width"], "height": 1500})  # the review, the diff and the run in one
    page.goto(f"{daemon.base_url}/sessions/{work}")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    expect(page.locator("#entries .tool-diff")).to_have_count(2)
    page.locator("#entries .entry-thought").first.evaluate("d => d.open = true")
    log = page.locator("#entries .entry-tool").filter(has_text="Show the log")
    log.locator("details.tool-output").evaluate("d => d.open = true")
    expect(page.locator("#s-cost")).to_have_text("$0.42")
    page.locator("#entries .entry-assistant h2").first.evaluate("h => h.closest('.message').scrollIntoView()")
    page.wait_for_timeout(300)
    page.screenshot(path=str(out / "session-work.png"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="compozy-shots-") as tmp:
        base = Path(tmp)
        # The scripted agent with modes, as claude-agent-acp offers its plan mode.
        modal = [sys.executable, str(SCRIPTED), "--modes"]
        daemon = start_daemon(base / "home", extra_config=f'[providers.modal]\ncommand = {json.dumps(modal)}\n\n'
                                                          '[agents.modal]\nprovider = "modal"\n')
        try:
            live, work = stage(daemon, base / "workspaces")
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS)
                try:
                    page = browser.new_context(viewport=VIEWPORT).new_page()
                    page.set_default_timeout(20_000)
                    shoot(page, daemon, live, work, args.out)
                finally:
                    browser.close()
        finally:
            daemon.stop()
    logger.info("wrote dashboard.png, session.png and session-work.png in %s", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
