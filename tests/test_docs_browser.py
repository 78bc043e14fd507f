"""The built site, looked at in a real browser: headless Chromium renders the home page, a
guide and an API page, served from a local ``http.server`` on 127.0.0.1; and a newcomer's
path: from the home page's four doors to their guides, each guide's first code block run
on the install the guide states, and the API entry of every fleetgym name it uses.

Each page must have its title, the navigation and the search box, show no raw Markdown or
reST markup in its text (a literal triple backtick, ``:class:`...```, ``](``), log nothing
to the console, and request no file the site lacks (the server records every request).
Screenshots go to ``$FLEETGYM_DOCS_ARTIFACTS`` (default: a temporary folder). Skipped when
no Chromium binary is found, or without the docs extra. The guides' code runs with
``$FLEETGYM_GUIDE_PYTHON`` (default: this interpreter), the optional packages the stated
install lacks hidden (``guide_install.py``).
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from guide_install import hidden_modules, installed_extras, run_blocks
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


# ------------------------------------------------------------------- the four doors
class _Page(html.parser.HTMLParser):
    """A rendered page's text, its tables' links (row by row), its code blocks
    (language, text) and the ids of its elements."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.rows: list[list[str]] = []
        self.code: list[tuple[str, str]] = []
        self.ids: set[str] = set()
        self._skip = 0
        self._in_table = 0
        self._lang: str | None = None
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        classes = (values.get("class") or "").split()
        if tag in ("script", "style", "noscript"):
            self._skip += 1
        elif tag == "table":
            self._in_table += 1
        elif tag == "tr" and self._in_table:
            self.rows.append([])
        elif tag == "a" and self._in_table and self.rows and values.get("href"):
            self.rows[-1].append(str(values["href"]))
        elif tag == "div":
            lang = [c.removeprefix("highlight-") for c in classes if c.startswith("highlight-")]
            if lang:
                self._lang = lang[0]
        elif tag == "pre" and self._lang:
            self._pre += 1
            self.code.append((self._lang, ""))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript") and self._skip:
            self._skip -= 1
        elif tag == "table" and self._in_table:
            self._in_table -= 1
        elif tag == "pre" and self._pre:
            self._pre -= 1
            self._lang = None

    def handle_data(self, data: str) -> None:
        if self._pre:
            lang, text = self.code[-1]
            self.code[-1] = (lang, text + data)
        elif not self._skip:
            self.text.append(data)


def _open(url: str) -> _Page:
    proc = chromium("--dump-dom", url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = _Page()
    page.feed(proc.stdout)
    return page


def _shoot(url: str, name: str, tmp_path: Path) -> None:
    artifacts = Path(os.environ.get("FLEETGYM_DOCS_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    chromium(f"--screenshot={artifacts / name}", url)


#: The install line as the browser shows it: ``Install: pip install "fleetgym[sb3]"``.
_RENDERED_INSTALL = re.compile(r'Install:\s*pip install ["“]?fleetgym(?:\[(?P<extras>[\w,-]+)\])?')
_IMPORT = re.compile(
    r"^\s*from (fleetgym(?:\.\w+)*) import (?:\(([^)]*)\)|([^\n#]+))", re.MULTILINE
)
_ATTRIBUTE = re.compile(r"\bfleetgym((?:\.\w+)+)")


def names_used(code: str) -> set[tuple[str, str]]:
    """``(module, name)`` of each fleetgym name a block imports or spells out in full.

    Example:
        >>> sorted(names_used("from fleetgym.wrappers import A, B as C\\nfleetgym.wrappers.D"))
        [('fleetgym.wrappers', 'A'), ('fleetgym.wrappers', 'B'), ('fleetgym.wrappers', 'D')]
    """
    found: set[tuple[str, str]] = set()
    for module, wrapped, line in _IMPORT.findall(code):
        for item in (wrapped or line).split(","):
            name = item.split(" as ")[0].strip()
            if name and not name.startswith("_"):
                found.add((module, name))
    for dotted in _ATTRIBUTE.findall(code):
        parts = ("fleetgym" + dotted).split(".")
        module, name = ".".join(parts[:-1]), parts[-1]
        if importlib.util.find_spec(module) is not None and name[0].isupper():
            found.add((module, name))
    return found


def test_four_doors_lead_to_guides_that_run(server: tuple[str, list], tmp_path: Path) -> None:
    """Home page -> each door's guide -> its first code block, run on the stated install
    -> the API entry of every fleetgym name the guide's code uses."""
    base, _ = server
    python = os.environ.get("FLEETGYM_GUIDE_PYTHON") or sys.executable
    home = _open(base + "index.html")
    _shoot(base + "index.html", "door_home.png", tmp_path)
    doors = [row[0] for row in home.rows if row and row[0].startswith("guides/")]
    assert len(doors) == 4, f"the home page's doors: {home.rows}"
    report = []
    for number, href in enumerate(doors, 1):
        url = base + href.partition("#")[0]
        guide = _open(url)
        _shoot(url, f"door{number}_{Path(href).stem}.png", tmp_path)
        text = " ".join(" ".join(guide.text).split())
        install = _RENDERED_INSTALL.search(text)
        assert install, f"{href}: no install line in the rendered page"
        extras = frozenset(filter(None, (install["extras"] or "").split(",")))
        need = [
            m
            for m in ("torch", "stable_baselines3", "transformers")
            if m not in hidden_modules(extras)
        ]
        lacking = [
            m
            for m in need
            if subprocess.run([python, "-c", f"import {m}"], capture_output=True).returncode
        ]
        if lacking:
            pytest.skip(
                f"{python} lacks {lacking}, which {href}'s install brings; "
                "set FLEETGYM_GUIDE_PYTHON"
            )
        assert guide.code, f"{href}: no code block"
        lang, first = guide.code[0]
        assert lang in ("python", "bash"), f"{href}: first block in {lang}"
        work = tmp_path / f"door{number}"
        work.mkdir()
        done = run_blocks([(lang, first)], extras, work, python=python)
        assert done.returncode == 0, (
            f"{href}, first block on fleetgym[{','.join(sorted(extras))}]:\n{first}\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
        used = set().union(*(names_used(code) for _, code in guide.code))
        pages: dict[str, set[str]] = {}
        for module, name in sorted(used):
            pages.setdefault(module, set()).add(name)
        for module, names in pages.items():
            api = _open(base + f"reference/api/{module}.html")
            missing = sorted(n for n in names if f"{module}.{n}" not in api.ids)
            assert not missing, f"{href} uses {module}.{missing}: no API entry"
        report.append(
            f"{href}: install {sorted(installed_extras(extras))}, {len(used)} API names found"
        )
    print("\n".join(report))
