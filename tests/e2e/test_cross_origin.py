"""A page from another origin, in a browser that is signed in to the dashboard, can neither read nor write.

The hostile page is served from another loopback port: the most dangerous neighbour, because cookies ignore ports
(it is "same-site", so the browser attaches the dashboard cookie to its requests). The guard refuses them by
Origin and Sec-Fetch-Site; the browser's CORS rules keep the page from reading what little is answered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.conftest import Daemon

ATTACK = """<!doctype html><html><body><script>
window.results = {};
const target = %(target)s, body = %(body)s;
async function attempt(name, run) {
  try { results[name] = await run(); } catch (err) { results[name] = "blocked"; }
}
function listen(path) {
  return new Promise(resolve => {
    const source = new EventSource(target + path, {withCredentials: true});
    let opened = false, frames = 0;
    source.onopen = () => { opened = true; };
    source.onmessage = () => { frames += 1; };
    const finish = outcome => { source.close(); resolve({outcome, opened, frames}); };
    source.onerror = () => finish("error");
    setTimeout(() => finish("timeout"), 5000);
  });
}
(async () => {
  await attempt("simple_post", async () => { await fetch(target + "/api/sessions", {method: "POST", mode: "no-cors",
      credentials: "include", headers: {"Content-Type": "text/plain"}, body}); return "sent, unreadable"; });
  await attempt("json_post", async () => (await fetch(target + "/api/sessions", {method: "POST",
      credentials: "include", headers: {"Content-Type": "application/json"}, body})).status);
  await attempt("read_list", async () => (await (await fetch(target + "/api/sessions",
      {credentials: "include"})).text()).slice(0, 80));
  results.catalog_stream = await listen("/api/sessions/catalog-stream");
  results.session_stream = await listen(%(stream)s);
  results.done = true;
})();
</script></body></html>"""


class _AttackPage(BaseHTTPRequestHandler):
    html = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.html)))
        self.end_headers()
        self.wfile.write(self.html)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def attack_page(daemon: Daemon, workspace: Path) -> Iterator[tuple[str, str]]:
    """(URL of the hostile page, id of a live session it goes after)."""
    session = daemon.create(workspace, agent="general")
    html = ATTACK % {"target": json.dumps(daemon.base_url), "stream": json.dumps(daemon.scoped(session["id"],
                                                                                              "/stream")),
                     "body": json.dumps(json.dumps({"agent_name": "general", "workspace_path": str(workspace),
                                                    "name": "cross-origin"}))}
    handler = type("AttackPage", (_AttackPage,), {"html": html.encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="attack-page", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", session["id"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def live_viewers(daemon: Daemon, session_id: str) -> int:
    report = daemon.cli_json("doctor", "--only", "live_streams")
    return int(report["items"][0]["evidence"]["sessions"].get(session_id, 0))


def test_a_page_on_another_origin_can_neither_read_a_stream_nor_write(
        page: Page, daemon: Daemon, attack_page: tuple[str, str]) -> None:
    url, session_id = attack_page
    # The page fixture signed this browser in: the dashboard cookie is there for the attack to borrow.
    assert any(c["name"] == "compozy_auth" for c in page.context.cookies(daemon.base_url))
    answers: list[tuple[str, int]] = []
    page.on("response", lambda r: answers.append((r.url, r.status)) if r.url.startswith(daemon.base_url) else None)

    page.goto(url)
    page.wait_for_function("window.results.done === true", timeout=30_000)
    results: dict[str, Any] = page.evaluate("window.results")

    assert results["json_post"] == "blocked"  # needs a CORS preflight, never granted
    assert results["read_list"] == "blocked"  # no CORS headers: the browser hides the answer
    for stream in ("catalog_stream", "session_stream"):
        assert results[stream] == {"outcome": "error", "opened": False, "frames": 0}, results
    assert answers and {status for _, status in answers} == {403}, answers  # and the guard refused every one

    listed = daemon.http.get("/api/sessions", params={"all": "true", "limit": 100}).json()["sessions"]
    assert [s for s in listed if s.get("name") == "cross-origin"] == []
    assert live_viewers(daemon, session_id) == 0
