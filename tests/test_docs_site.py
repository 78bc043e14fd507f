"""The documentation site builds without a warning, documents every public name, and its
internal links resolve (offline).

The build is ``sphinx-build -W --keep-going -b html docs OUT`` (as ``.ci/run`` and
``fleetgym docs --strict``): a broken cross-reference, a docstring that is not valid reST,
a public name without a docstring (docs/_ext/fleetgym_sphinx.py warns) or a page outside
the table of contents fails it. Skipped when Sphinx, furo or MyST is not installed (the
``docs`` extra).
"""

from __future__ import annotations

import html.parser
import importlib
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("sphinx", "furo", "myst_parser")),
    reason="the docs extra (sphinx, furo, myst-parser) is not installed",
)


def build_site(out: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """Build the site into ``out`` as CI does; returns the process and its wall time."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
        + [str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"},
    )
    return proc, time.perf_counter() - started


_BUILT: dict[str, Path] = {}


def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once per test session (this module and the browser test share it)."""
    if "site" not in _BUILT:
        out = Path(os.environ.get("FLEETGYM_DOCS_OUT") or tmp_path_factory.mktemp("site"))
        proc, seconds = build_site(out)
        assert proc.returncode == 0, f"sphinx-build -W failed:\n{proc.stderr[-6000:]}"
        (out / ".build-seconds").write_text(f"{seconds:.1f}\n")
        _BUILT["site"] = out
    return _BUILT["site"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_site(tmp_path_factory)


def test_the_site_builds_without_warnings(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "search.html").is_file()


def public_names() -> list[str]:
    """Every public name, by its one address: ``module.name``."""
    from test_public_api import PUBLIC_MODULES

    return [
        f"{module}.{name}"
        for module in PUBLIC_MODULES
        for name in importlib.import_module(module).__all__
    ]


def documented_names(site: Path) -> set[str]:
    """The Python objects the site's inventory (objects.inv) documents."""
    from sphinx.util.inventory import InventoryFile

    with open(site / "objects.inv", "rb") as stream:
        inventory = InventoryFile.load(stream, "", lambda base, uri: uri)
    names: set[str] = set()
    for kind, entries in (
        inventory.data.items() if hasattr(inventory, "data") else inventory.items()
    ):
        if kind.startswith("py:"):
            names.update(entries)
    return names


def test_every_public_name_has_a_reference_entry(site: Path) -> None:
    documented = documented_names(site)
    missing = [name for name in public_names() if name not in documented]
    assert not missing, f"public names without an API reference entry: {missing}"


def test_one_page_per_public_module() -> None:
    from test_public_api import PUBLIC_MODULES

    pages = {p.stem for p in (DOCS / "reference" / "api").glob("fleetgym*.md")}
    assert pages == set(PUBLIC_MODULES)


def test_the_env_ids_and_commands_are_in_the_reference(site: Path) -> None:
    from test_cli_convention import COMMANDS

    from fleetgym.registration import ENV_SPECS

    envs = (site / "reference" / "envs.html").read_text(encoding="utf-8")
    assert all(env_id in envs for env_id in ENV_SPECS)
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    assert all(f"fleetgym {command}" in cli for command in COMMANDS)


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "a" and values.get("href"):
            self.targets.append(str(values["href"]))
        if tag == "img" and values.get("src"):
            self.targets.append(str(values["src"]))


def _parse(path: Path, cache: dict[Path, _Links]) -> _Links:
    if path not in cache:
        cache[path] = _Links()
        cache[path].feed(path.read_text(encoding="utf-8"))
    return cache[path]


def test_internal_links_resolve(site: Path) -> None:
    """Every relative link of every page names a file of the site, and its #anchor exists."""
    parsed: dict[Path, _Links] = {}
    broken = []
    for page in sorted(site.rglob("*.html")):
        if page.name in ("genindex.html", "search.html"):
            continue
        if "_modules" in page.parts and page.name != "index.html":
            continue  # the highlighted sources; their index is checked
        links = _parse(page, parsed)
        for target in links.targets:
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or target.startswith(("mailto:", "javascript:")):
                continue
            dest = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if dest.is_dir():
                dest = dest / "index.html"
            if not dest.exists():
                broken.append(f"{page.relative_to(site)}: {target} (no such file)")
                continue
            if parts.fragment and dest.suffix == ".html":
                ids = _parse(dest, parsed).ids
                if parts.fragment not in ids:
                    broken.append(f"{page.relative_to(site)}: {target} (no such anchor)")
    assert not broken, "broken links in the site:\n" + "\n".join(broken[:50])


def test_site_figures(site: Path) -> None:
    """Pages and words per section, reference coverage and build time (docs/site_figures.py),
    written to ``$FLEETGYM_DOCS_ARTIFACTS/site-figures.json`` when that is set."""
    import json

    from test_public_api import PUBLIC_MODULES

    sys.path.insert(0, str(DOCS))
    try:
        import site_figures
    finally:
        sys.path.remove(str(DOCS))
    assert tuple(site_figures.public_modules()) == PUBLIC_MODULES
    seconds_file = site / ".build-seconds"
    seconds = float(seconds_file.read_text()) if seconds_file.is_file() else None
    result = site_figures.figures(site, seconds)
    assert result["reference_coverage"] == 1.0
    assert result["sections"]["results"]["pages"] >= 7
    assert result["sections"]["getting started and guides"]["pages"] >= 10
    if os.environ.get("FLEETGYM_DOCS_ARTIFACTS"):
        out = Path(os.environ["FLEETGYM_DOCS_ARTIFACTS"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "site-figures.json").write_text(json.dumps(result, indent=2) + "\n")


class _Prose(html.parser.HTMLParser):
    """The text of a page's main article outside code (pre, code, scripts)."""

    CODE = ("pre", "code", "script", "style", "kbd", "samp")

    def __init__(self) -> None:
        super().__init__()
        self.article = 0
        self.code = 0
        self.chunks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.article += tag == "article"
        self.code += tag in self.CODE

    def handle_endtag(self, tag: str) -> None:
        self.article -= tag == "article" and self.article > 0
        self.code -= tag in self.CODE and self.code > 0

    def handle_data(self, data: str) -> None:
        if self.article and not self.code:
            self.chunks.append(data)


#: Markdown or reST that did not render, as it would show in a page's prose.
RAW_MARKUP = ("```", "](", ":class:`", ":func:`", ":meth:`", ":attr:`", ":data:`", ":mod:`")


def test_no_raw_markup_in_any_page(site: Path) -> None:
    """Every page's prose is rendered: no Markdown fence, link or reST role left as text."""
    found = []
    for page in sorted(site.rglob("*.html")):
        if "_modules" in page.parts:
            continue
        prose = _Prose()
        prose.feed(page.read_text(encoding="utf-8"))
        text = " ".join(prose.chunks)
        found += [f"{page.relative_to(site)}: {m!r}" for m in RAW_MARKUP if m in text]
    assert not found, "raw markup in the rendered pages:\n" + "\n".join(found)
