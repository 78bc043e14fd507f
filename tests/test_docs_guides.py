"""Every code block of the guides runs, as a reader would run it.

The ``python`` blocks of a page run in order in one namespace (a later block may use an
earlier one's names), and its ``bash`` blocks run in a shell, in the same scratch folder
with the budgets the page gives (small, so the whole set stays a few minutes on two
cores). A block preceded by ``<!-- not-run: REASON -->`` is skipped (a Ray cluster, a
browser): the reason is shown in the page's source, and such blocks stay few.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest
from guide_install import run_blocks, stated_extras

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ROOT / "docs" / "guides"

_BLOCK = re.compile(
    r"(?P<skip><!-- not-run: [^>]+-->\s*\n)?^```(?P<lang>python|bash)[^\n]*\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


def blocks(text: str) -> list[tuple[str, str, bool]]:
    """``(language, code, runs)`` of each python and bash block of a Markdown text.

    Example:
        >>> blocks("```python\\nx = 1\\n```\\n<!-- not-run: Ray -->\\n```bash\\nray start\\n```\\n")
        [('python', 'x = 1\\n', True), ('bash', 'ray start\\n', False)]
    """
    return [(m["lang"], m["code"], m["skip"] is None) for m in _BLOCK.finditer(text)]


def guide_pages() -> list[Path]:
    return sorted(GUIDES.glob("*.md"))


def test_every_guide_has_code() -> None:
    assert len(guide_pages()) >= 5
    for page in guide_pages():
        found = blocks(page.read_text(encoding="utf-8"))
        assert any(runs for _, _, runs in found), f"{page.name}: no block that runs"
        skipped = sum(not runs for _, _, runs in found)
        assert skipped <= 2, f"{page.name}: {skipped} blocks not run"


def test_guides_stay_short() -> None:
    """A guide is one task: at most ~150 lines; measured tables live in results/."""
    long = {p.name: n for p in guide_pages() if (n := len(p.read_text().splitlines())) > 160}
    assert not long, f"guides over 160 lines: {long}"


def test_every_guide_states_its_install() -> None:
    """Under its title each guide names the install its code needs."""
    missing = [p.name for p in guide_pages() if stated_extras(p.read_text()) is None]
    assert not missing, f'guides without an "**Install:** `pip install ...`" line: {missing}'


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", guide_pages(), ids=lambda p: p.stem)
def test_guide_code_runs(page: Path, tmp_path: Path) -> None:
    """The page's blocks run in order on the install it states (the optional packages
    that install lacks are hidden from this interpreter and every process it starts)."""
    text = page.read_text(encoding="utf-8")
    extras = stated_extras(text)
    assert extras is not None, f"{page.name}: no install line"
    code = [(lang, body) for lang, body, runs in blocks(text) if runs]
    done = run_blocks(code, extras, tmp_path)
    assert done.returncode == 0, (
        f"{page.name} on `pip install fleetgym[{','.join(sorted(extras))}]`:\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    )


def test_home_page_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The home page's Python example runs on the core install (its bash block is the
    install line itself, not run here)."""
    monkeypatch.chdir(tmp_path)
    page = ROOT / "docs" / "index.md"
    python = [
        code for lang, code, _ in blocks(page.read_text(encoding="utf-8")) if lang == "python"
    ]
    assert python, "docs/index.md: no Python example"
    namespace: dict[str, object] = {"__name__": "__main__"}
    for number, code in enumerate(python, 1):
        script = tmp_path / f"home{number}.py"
        script.write_text(code, encoding="utf-8")
        namespace = runpy.run_path(str(script), init_globals=namespace, run_name="__main__")
