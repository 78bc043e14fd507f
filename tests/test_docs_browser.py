"""The built site, looked at in a real browser: headless Chromium renders the home page, a
guide and an API page, served from a local ``http.server`` on 127.0.0.1.

Each page must have its title, the navigation and the search box, show no raw Markdown or
reST markup in its text (a literal triple backtick, ``:class:`...```, ``](``), log nothing
to the console, and request no file the site lacks (the server records every request).
Screenshots go to ``$FLEETGYM_DOCS_ARTIFACTS`` (default: a temporary folder). Skipped when
no Chromium binary is found, or without the docs extra.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_docs_site import built_site
from test_docs_site import pytestmark as _needs_sphinx

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((path for name in BROWSERS if (path := shutil.which(name))), None)

pytestmark = [
    _needs_sphinx,
    pytest.mark.skipif(BROWSER is None, reason="no Chromium binary found"),
    pytest.mark.timeout(600),
]

#: page -> a words its <title> must contain.
PAGES = {
    "index.html": "fleetgym",
    "guides/train-and-evaluate.html": "Train under one network",
    "reference/api/fleetgym.wrappers.html": "fleetgym.wrappers",
}

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--window-size=1280,900",
    "--virtual-time-budget=5000",
)

#: Markup that must not survive into the rendered text.
RAW_MARKUP = ("```", ":class:`", ":func:`", ":mod:`", "](", ".. autoclass", "{toctree}")


class _Recorder(http.server.SimpleHTTPRequestHandler):
    requests: list[tuple[str, int]]

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.requests.append((self.path, int(code) if str(code).isdigit() else 0))

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list]]:
    site = built_site(tmp_path_factory)
    requests: list[tuple[str, int]] = []
    handler = functools.partial(
        type("Handler", (_Recorder,), {"requests": requests}), directory=str(site)
    )
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", requests
    finally:
        httpd.shutdown()
        httpd.server_close()


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium with a fresh profile; stdout and stderr captured."""
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [str(BROWSER), *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )


class _Text(html.parser.HTMLParser):
    """The visible text of a page (scripts and styles left out) and a few landmarks."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False
        self.has_search = False
        self.has_nav = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag in ("script", "style", "noscript"):
            self._skip += 1
        if tag == "title":
            self._in_title = True
        if tag == "input" and values.get("name") == "q":
            self.has_search = True
        if tag == "nav" or "sidebar-tree" in (values.get("class") or ""):
            self.has_nav = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript") and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.chunks.append(data)


_CONSOLE = re.compile(r"CONSOLE[^\]]*\]\s*(.*)")


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_renders_in_chromium(page: str, server: tuple[str, list], tmp_path: Path) -> None:
    base, requests = server
    url = base + page
    before = len(requests)
    proc = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = _Text()
    parsed.feed(proc.stdout)
    text = " ".join(" ".join(parsed.chunks).split())

    assert PAGES[page] in parsed.title, f"{page}: title {parsed.title!r}"
    assert parsed.has_nav, f"{page}: no navigation"
    assert parsed.has_search, f"{page}: no search box"
    raw = [m for m in RAW_MARKUP if m in text]
    assert not raw, f"{page}: raw markup in the rendered text: {raw}"
    assert len(text) > 500, f"{page}: the page is nearly empty ({len(text)} characters)"
    console = _CONSOLE.findall(proc.stderr)
    assert not console, f"{page}: console messages: {console}"
    missing = [p for p, code in requests[before:] if code >= 400 and p != "/favicon.ico"]
    assert not missing, f"{page}: requests that failed: {missing}"

    artifacts = Path(os.environ.get("FLEETGYM_DOCS_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / (page.replace("/", "_").removesuffix(".html") + ".png")
    proc = chromium(f"--screenshot={shot}", url)
    assert shot.is_file() and shot.stat().st_size > 10_000, proc.stderr[-2000:]
