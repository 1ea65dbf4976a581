"""Open a page as a person sees it: Debian's headless Chromium driven by Playwright (never a
downloaded browser), served from a folder over a localhost http.server.

``open_page(url, screenshot)`` loads the page, waits for the network to settle and returns a
:class:`PageCheck`: the title, the main content's text, every console error and uncaught page
error, every image that did not load (``naturalWidth == 0``) and the full-page screenshot it saved.
Tests call :func:`require_browser` first: it skips with the reason when Chromium or Playwright is
absent, unless ``ANB_REQUIRE_BROWSER`` is set (CI sets it), where it fails instead."""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

#: Where the page checks keep their screenshots (test artifacts).
SCREENSHOTS = Path(__file__).resolve().parents[1] / "build" / "screenshots"
CHROMIUM = Path(os.environ.get("ANB_CHROMIUM", "/usr/bin/chromium"))
#: Headless, sandbox-free (CI runs as root), and nothing that reaches beyond localhost.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
#: Images that have not loaded, or loaded empty, as the page's own script sees them.
BROKEN_IMAGES_JS = ("() => Array.from(document.images)"
                    ".filter(img => !img.complete || img.naturalWidth === 0)"
                    ".map(img => img.currentSrc || img.src || img.outerHTML.slice(0, 120))")


@dataclass
class PageCheck:
    """What a person would see at ``url``: its title, main text, errors and broken images."""

    url: str
    title: str
    main_text: str
    images: int
    broken_images: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    screenshot: Path | None = None


def browser_available() -> bool:
    """Whether Chromium and Playwright are here (with ``ANB_REQUIRE_BROWSER`` set, their absence
    fails the test instead): for a test that checks a page as one part of a longer run."""
    reason = _missing()
    if reason and os.environ.get("ANB_REQUIRE_BROWSER"):
        pytest.fail(f"ANB_REQUIRE_BROWSER is set but {reason}")
    return not reason


def require_browser() -> None:
    """Skip (or, with ``ANB_REQUIRE_BROWSER`` set, fail) when Chromium or Playwright is absent."""
    reason = _missing()
    if not reason:
        return
    if os.environ.get("ANB_REQUIRE_BROWSER"):
        pytest.fail(f"ANB_REQUIRE_BROWSER is set but {reason}")
    pytest.skip(reason)


def _missing() -> str:
    """Why the browser check cannot run here ("" when it can)."""
    missing = []
    if not CHROMIUM.is_file():
        missing.append(f"no Chromium at {CHROMIUM} (apt-get install -y chromium; "
                       "scripts/ci/browser.sh)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("Playwright for Python is not installed (pip install playwright)")
    return "; ".join(missing)


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on an ephemeral localhost port; yields its base URL (ends with ``/``)."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # the base's signature
        pass


def open_page(url: str, screenshot: Path, main_selector: str = "body") -> PageCheck:
    """Load ``url`` in headless Chromium and report what it shows; saves a full-page PNG to
    ``screenshot``. ``main_selector`` names the element whose text is the main content."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            # Chromium asks every server for /favicon.ico on its own; a page's own icon is
            # linked from the page (Material: assets/images/favicon.png) and still checked.
            page.route("**/favicon.ico", lambda route: route.fulfill(status=204))
            page.on("response", lambda response: errors.append(
                f"HTTP {response.status}: {response.url}") if response.status >= 400 else None)
            page.on("console", lambda message: errors.append(f"console: {message.text}")
                    if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
            page.on("requestfailed", lambda request: errors.append(
                f"request failed: {request.url} ({request.failure})"))
            response = page.goto(url, wait_until="load")
            if response is None:
                errors.append(f"no response for {url}")
            page.wait_for_load_state("networkidle")
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
            main = page.query_selector(main_selector)
            return PageCheck(url=url, title=page.title(),
                             main_text=main.inner_text() if main is not None else "",
                             images=page.evaluate("() => document.images.length"),
                             broken_images=page.evaluate(BROKEN_IMAGES_JS),
                             console_errors=errors, screenshot=screenshot)
        finally:
            browser.close()
