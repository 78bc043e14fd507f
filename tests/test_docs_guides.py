"""Every code block of the guides runs, as a reader would run it.

The ``python`` blocks of a page run in order in one namespace (a later block may use an
earlier one's names), and its ``bash`` blocks run in a shell, in the same scratch folder
with the budgets the page gives (small, so the whole set stays a few minutes on two
cores). A block preceded by ``<!-- not-run: REASON -->`` is skipped (a Ray cluster, a
browser): the reason is shown in the page's source, and such blocks stay few.
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", guide_pages(), ids=lambda p: p.stem)
def test_guide_code_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    assert shutil.which("fleetgym", path=env["PATH"]) or True
    namespace: dict[str, object] = {"__name__": "__main__"}
    for number, (lang, code, runs) in enumerate(blocks(page.read_text(encoding="utf-8")), 1):
        if not runs:
            continue
        where = f"{page.name}, block {number}"
        if lang == "python":
            script = tmp_path / f"block{number}.py"
            script.write_text(code, encoding="utf-8")
            namespace = runpy.run_path(str(script), init_globals=namespace, run_name="__main__")
        else:
            proc = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", code],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert proc.returncode == 0, (
                f"{where}:\n{code}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
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
