"""Debian's Chromium driven headless by Playwright, for the web view's tests (and its screenshots).

Playwright cannot download a browser of its own here: it drives ``/usr/bin/chromium``, which
scripts/test.sh installs from Debian's packages. Each run gets a fresh user-data-dir.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.net import LOOPBACK

if TYPE_CHECKING:  # playwright is imported where a browser starts
    from playwright.sync_api import Page, ViewportSize

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT: ViewportSize = {"width": 1280, "height": 760}
# Screenshots go to COPILOT_OTEL_SCREENSHOTS, else to one fresh temp dir per run (made on first use), removed at
# exit if no screenshot landed in it.
_screenshots: list[Path] = []


def screenshots_dir() -> Path:
    """Where this run's screenshots go."""
    if not _screenshots:
        chosen = os.environ.get("COPILOT_OTEL_SCREENSHOTS")
        if chosen:
            _screenshots.append(Path(chosen))
        else:
            made = Path(tempfile.mkdtemp(prefix="copilot-otel-screens-"))
            _screenshots.append(made)
            atexit.register(_remove_if_empty, made, os.getpid())
    return _screenshots[0]


def _remove_if_empty(folder: Path, creator: int) -> None:
    if os.getpid() == creator:  # a forked child inherits the hook: only the maker removes the folder
        with contextlib.suppress(OSError):  # not empty (the screenshots are what the folder is for), or gone
            folder.rmdir()


class Browser:
    """One headless Chromium with a fresh profile; ``page()`` opens a tab that records script errors."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self._profile = tempfile.TemporaryDirectory(prefix="copilot-otel-chromium-")
        self._pages: list = []
        self._playwright = sync_playwright().start()
        try:
            self.context = self._playwright.chromium.launch_persistent_context(
                self._profile.name, executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
                viewport=VIEWPORT)
        except BaseException:
            self._playwright.stop()
            self._profile.cleanup()
            raise
        self.context.set_default_timeout(15_000)

    def page(self) -> Page:
        """A new tab; its uncaught script errors land in ``page.errors`` (tests assert there are none)."""
        page = self.context.new_page()
        self._pages.append(page)
        errors: list[str] = []
        # tests read them as page.errors: an attribute of ours on Playwright's Page, which does not declare it
        page.errors = errors  # type: ignore[attr-defined]
        page.on("pageerror", lambda error: errors.append(str(error)))
        return page

    def close_pages(self) -> None:
        """Close every tab still open: each holds its page's event stream, and Chromium gives a host six
        connections, so tabs left open by earlier tests kept a later page from loading at all."""
        pages, self._pages = self._pages, []
        for page in pages:
            if not page.is_closed():
                page.close()

    @contextlib.contextmanager
    def another(self, **options):
        """A second Chromium (a context of its own, fresh profile) with more of Playwright's context options
        (``http_credentials``, ``ignore_https_errors``), closed at the end of the ``with`` block."""
        with tempfile.TemporaryDirectory(prefix="copilot-otel-chromium-") as profile:
            context = self._playwright.chromium.launch_persistent_context(
                profile, executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, viewport=VIEWPORT,
                **options)
            try:
                context.set_default_timeout(15_000)
                yield context
            finally:
                context.close()

    def close(self) -> None:
        try:
            self.context.close()
        finally:
            self._playwright.stop()
            self._profile.cleanup()


def view_url(port: int, path: str = "/") -> str:
    return f"http://{LOOPBACK}:{port}{path}"


def screenshot(page, name: str) -> Path:
    """Save the page as <screenshots_dir()>/<name>.png and return the path."""
    folder = screenshots_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    # Bytes, written here: with ``path=`` Playwright writes through a thread pool of its own.
    path.write_bytes(page.screenshot())
    return path
