"""Smoke test for the browser plumbing: Playwright + Debian Chromium against a local page."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import Page, expect

PAGE_HTML = b"""<!doctype html>
<html>
<head><meta charset="utf-8"><title>smoke</title></head>
<body>
  <h1 id="status">waiting</h1>
  <button id="go" type="button">Click me</button>
  <script>
    document.getElementById("go").addEventListener("click", function () {
      document.getElementById("status").textContent = "clicked";
    });
  </script>
</body>
</html>
"""


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path not in ("/", "/index.html"):
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE_HTML)))
        self.end_headers()
        self.wfile.write(PAGE_HTML)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def local_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, name="smoke-http", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_click_changes_text_and_screenshot(page: Page, local_server: str, tmp_path) -> None:
    page.goto(local_server)
    status = page.locator("#status")
    expect(status).to_have_text("waiting")

    page.get_by_role("button", name="Click me").click()
    expect(status).to_have_text("clicked")

    shot = tmp_path / "smoke.png"
    page.screenshot(path=str(shot), full_page=True)
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
