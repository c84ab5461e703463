# ruff: noqa: T201 - the report is this script's output
"""Session page load on a 100k-event session, in Debian's Chromium.

Target (issue 6): the page of a 100,000-event session is interactive within 2 s on this machine.
"Interactive" = the first transcript snapshot is on screen and the composer has taken typed input.

    .venv/bin/python bench/page_load.py [--events 100000] [--runs 5]

1. Start the real daemon (the test suite's harness), create a session with the scripted agent, stop it.
2. Append `--events` realistic events to its events.db with the store's own writer (EventLog): turns of
   a user message, a thought, a tool call and its result, a streamed reply in many chunks, usage, done.
3. Open the session page `--runs` times (the first with a cold cache) and time, from navigation start:
   the server's first byte, the page's own ready mark (tail rendered, composer wired), the composer
   accepting typed text, and one older page loading on demand.
Exits non-zero when a correctness check fails (the tail is not the newest events, or renders twice).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page, sync_playwright  # noqa: E402

from tests.conftest import Daemon, start_daemon  # noqa: E402
from tests.e2e.conftest import CHROMIUM_ARGS, CHROMIUM_PATH  # noqa: E402

TARGET_SECONDS = 2.0
# One synthetic turn: user, thought, tool call + result, reply chunks, usage, done.
REPLY_CHUNKS = 20
BATCH = 5_000


def turn_events(turn: int) -> list[tuple[str, dict[str, Any]]]:
    call = f"tool-{turn}"
    rows: list[tuple[str, dict[str, Any]]] = [
        ("user_message", {"text": f"Step {turn}: look at module_{turn % 97}.py and tighten its error handling."}),
        ("thought", {"text": f"Module {turn % 97} swallows exceptions in two places; read it first."}),
        ("tool_call", {"tool_call_id": call, "title": f"Read module_{turn % 97}.py", "tool_name": "read",
                       "tool_kind": "read", "status": "pending", "tool_input": {"path": f"src/module_{turn % 97}.py"}}),
        ("tool_result", {"tool_call_id": call, "tool_name": "read", "status": "completed",
                         "tool_result": {"content": "def handler(event):\n    try:\n        return work(event)\n"
                                                   "    except Exception:\n        pass\n" * 6}}),
    ]
    rows += [("agent_message", {"text": f"chunk {i} of the answer for step {turn}, with some more words. "})
             for i in range(REPLY_CHUNKS)]
    rows += [("usage", {"usage": {"input_tokens": 1200 + turn, "output_tokens": 300}}),
             ("done", {"stop_reason": "end_turn", "prompt_stop_reason": "end_turn"})]
    return rows


def build_store(daemon: Daemon, workspace: Path, total: int) -> tuple[str, int]:
    """A stopped session whose events.db holds `total` more events; returns (session id, max sequence)."""
    from sessions.store.events import EventLog, max_sequence
    from sessions.store.folder import events_path
    from sessions.store.ops import NewEvent

    session = daemon.create(workspace, agent="scripted", name=f"{total // 1000}k-event session")
    response = daemon.http.post(daemon.scoped(session["id"], "/stop"))
    assert response.status_code == 204, response.text
    path = events_path(session["id"], daemon.home)
    log = EventLog(path, "scripted")
    try:
        pending: list[NewEvent] = []
        written, turn = 0, 0
        while written < total:
            turn += 1
            for type_, content in turn_events(turn):
                if written >= total:
                    break
                pending.append(NewEvent(type_, f"turn_{turn:016x}", content))
                written += 1
                if len(pending) >= BATCH:
                    log.append(pending)
                    pending = []
        log.append(pending)
    finally:
        log.close()
    return session["id"], max_sequence(path)


def measure(page: Page, url: str) -> dict[str, float]:
    start = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.wait_for_selector("html[data-ready='true']", state="attached")
    # The page's own clock stamps the first keystroke it handles (ms since navigation start).
    page.evaluate("""() => document.getElementById('prompt-input').addEventListener('input',
        () => { window.benchTypedAt ??= performance.now(); })""")
    page.fill("#prompt-input", "is this interactive?")
    accepted = time.perf_counter() - start
    assert page.input_value("#prompt-input") == "is this interactive?"
    nav = page.evaluate("""() => { const n = performance.getEntriesByType('navigation')[0];
        return {ttfb: n.responseStart, dcl: n.domContentLoadedEventEnd, ready: window.compozyReadyAt,
                typed: window.benchTypedAt}; }""")
    first = int(page.locator("#entries > [data-seq]").first.get_attribute("data-seq") or 0)
    t0 = time.perf_counter()
    page.click("#load-older")
    # The page's CSP forbids Playwright's string predicates: poll the first sequence instead.
    deadline = time.monotonic() + 10
    while int(page.locator("#entries > [data-seq]").first.get_attribute("data-seq") or 0) >= first:
        if time.monotonic() > deadline:
            raise AssertionError("the older page never arrived")
        time.sleep(0.005)
    older = time.perf_counter() - t0
    return {"ttfb_ms": nav["ttfb"], "dcl_ms": nav["dcl"], "ready_ms": nav["ready"], "typed_ms": nav["typed"],
            "input_s": accepted, "older_ms": older * 1000}


def check_tail(page: Page, max_seq: int) -> None:
    """The page shows the newest events, each once, in order."""
    seqs = page.locator("#entries [data-seq]").evaluate_all("nodes => nodes.map(n => Number(n.dataset.seq))")
    assert seqs, "the transcript rendered nothing"
    assert len(seqs) == len(set(seqs)), "a sequence rendered twice"
    assert seqs == sorted(seqs), "entries out of order"
    cursor = int(page.get_attribute("html", "data-cursor") or 0)
    assert cursor == max_seq, f"the tail ends at {cursor}, the store at {max_seq}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Session page load on a large session.")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="compozy-page-load-") as tmp:
        base = Path(tmp)
        workspace = base / "workspace"
        workspace.mkdir()
        daemon = start_daemon(base / "home")
        try:
            t0 = time.perf_counter()
            session_id, max_seq = build_store(daemon, workspace, args.events)
            build_s = time.perf_counter() - t0
            from sessions.store.folder import events_path

            db = events_path(session_id, daemon.home)
            print(f"session {session_id}: {max_seq} events, events.db {db.stat().st_size / 1e6:.1f} MB "
                  f"(built in {build_s:.1f} s)")
            url = f"{daemon.base_url}/sessions/{session_id}"
            results = []
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS)
                try:
                    context = browser.new_context(viewport={"width": 1280, "height": 800})
                    page = context.new_page()
                    page.goto(daemon.login_url())  # sign in as a user does: the one-time link sets the cookie
                    for run in range(args.runs):
                        result = measure(page, url)
                        if run == 0:
                            check_tail(page, max_seq)
                        results.append(result)
                        label = "cold" if run == 0 else "warm"
                        print(f"run {run + 1} ({label}): first byte {result['ttfb_ms']:.0f} ms, "
                              f"DOMContentLoaded {result['dcl_ms']:.0f} ms, ready {result['ready_ms']:.0f} ms, "
                              f"keystroke handled {result['typed_ms']:.0f} ms "
                              f"(wall clock with Playwright {result['input_s'] * 1000:.0f} ms), "
                              f"older page {result['older_ms']:.0f} ms")
                finally:
                    browser.close()
        finally:
            daemon.stop()
    typed = [r["typed_ms"] / 1000 for r in results]
    wall = [r["input_s"] for r in results]
    print()
    print(f"{'metric':<52}{'value':>9}{'target':>8}{'ratio':>7}")
    for label, values in (("interactive (page clock), median s", typed), ("interactive (page clock), worst s", typed),
                          ("interactive (wall clock incl. Playwright), median s", wall)):
        value = max(values) if "worst" in label else statistics.median(values)
        print(f"{label:<52}{value:>9.3f}{TARGET_SECONDS:>8.1f}{value / TARGET_SECONDS:>7.2f}")
    older = statistics.median(r['older_ms'] for r in results)
    print(f"{'older page of 50 transcript entries, median ms':<52}{older:>9.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
