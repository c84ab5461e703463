"""Browser fixtures for the end-to-end tests.

The tests drive Debian's Chromium (``/usr/bin/chromium``) through Playwright's sync API.
Playwright never downloads a browser of its own here; ``.ci/run`` installs the Debian package.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright

E2E_DIR = Path(__file__).resolve().parent

CHROMIUM_PATH = os.environ.get("COMPOZY_CHROMIUM", "/usr/bin/chromium")

CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # The CI network is closed: keep Chromium from phoning home and stalling.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
DEFAULT_TIMEOUT_MS = 15_000


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected under tests/e2e with ``e2e``."""
    for item in items:
        if item.path.resolve().is_relative_to(E2E_DIR):
            item.add_marker(pytest.mark.e2e)


# Module scope: the sync API's event loop must not outlive the browser tests (see pyproject testpaths).
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not (os.path.isfile(CHROMIUM_PATH) and os.access(CHROMIUM_PATH, os.X_OK)):
        pytest.fail(
            f"Chromium not found at {CHROMIUM_PATH}: the e2e tests need Debian's Chromium. "
            "Run `scripts/ensure-system-deps.sh` (`make test` and `.ci/run` do), or `apt-get install chromium`, "
            "or point COMPOZY_CHROMIUM at a Chromium binary.",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM_PATH,
            args=CHROMIUM_ARGS,
            timeout=60_000,
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh browser context; with a daemon in the test, signed in the way a user is: the one-time link that
    `compozy dashboard` prints sets the dashboard cookie."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    try:
        page = context.new_page()
        if "daemon" in request.fixturenames:
            page.goto(request.getfixturevalue("daemon").login_url())
        yield page
    finally:
        context.close()
