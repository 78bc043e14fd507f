"""Figures of the built documentation site: pages and words per section, the share of
public names with an API reference entry, and the build time.

Usage (from the repository root)::

    python docs/site_figures.py --build OUT    # build with sphinx-build -W, then measure
    python docs/site_figures.py OUT            # measure a site already built in OUT

Words are counted in each page's rendered main text (the ``<article>`` furo renders,
scripts and code blocks included, navigation left out), so the API pages count what
autodoc generated from the docstrings.
"""

from __future__ import annotations

import argparse
import html.parser
import importlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent


def public_modules() -> list[str]:
    """The public modules, as docs/compatibility.md lists them (tests/test_public_api.py
    checks that list against the package)."""
    page = (DOCS / "compatibility.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `(fleetgym[\w.]*)` \|", page, flags=re.M)


SECTIONS = ("getting started and guides", "in depth", "explanation", "results", "reference")


def section(page: str) -> str | None:
    """The site section of a page (its path in the site, without ``.html``)."""
    if page in ("genindex", "search", "py-modindex") or page.startswith("_"):
        return None
    if page == "install" or page == "index" or page.startswith("guides/"):
        return "getting started and guides"
    if page.startswith("results/"):
        return "results"
    if page == "design" or page.startswith("explanation/"):
        return "explanation"
    if page.startswith("reference/") or page in ("errors", "faq", "compatibility", "changelog"):
        return "reference"
    return "in depth"


class _Article(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.words = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "article" or self.depth:
            self.depth += 1 if tag not in ("br", "img", "input", "meta", "link", "hr") else 0

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag not in ("br", "img", "input", "meta", "link", "hr"):
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.words += len(data.split())


def words(path: Path) -> int:
    parser = _Article()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser.words


def documented(site: Path) -> set[str]:
    from sphinx.util.inventory import InventoryFile

    with open(site / "objects.inv", "rb") as stream:
        inventory = InventoryFile.load(stream, "", lambda base, uri: uri)
    data = inventory.data if hasattr(inventory, "data") else inventory
    return {name for kind, entries in data.items() if kind.startswith("py:") for name in entries}


def figures(site: Path, build_seconds: float | None = None) -> dict:
    per: dict[str, dict[str, int]] = {s: {"pages": 0, "words": 0} for s in SECTIONS}
    for page in sorted(site.rglob("*.html")):
        name = page.relative_to(site).with_suffix("").as_posix()
        if name.startswith("_modules") or (where := section(name)) is None:
            continue
        per[where]["pages"] += 1
        per[where]["words"] += words(page)
    names = [
        f"{module}.{name}"
        for module in public_modules()
        for name in importlib.import_module(module).__all__
    ]
    have = documented(site)
    covered = sum(name in have for name in names)
    return {
        "sections": per,
        "public_names": len(names),
        "with_reference_entry": covered,
        "reference_coverage": round(covered / len(names), 4),
        "build_seconds": build_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site's folder")
    parser.add_argument("--build", action="store_true", help="build it first (-W), timed")
    args = parser.parse_args(argv)
    seconds = None
    if args.build:
        started = time.perf_counter()
        command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
        subprocess.run([*command, str(DOCS), str(args.site)], check=True)
        seconds = round(time.perf_counter() - started, 1)
    result = figures(args.site, seconds)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
