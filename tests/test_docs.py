"""The documentation stays true: links resolve, nothing cites a file outside the repository,
the README stays a front door, and the figures cheap enough to recompute match the pages.

The figure checks read the number written in the page and recompute it with the same call
the page names, so a change that moves a figure fails here until the page is updated.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

#: The README is a front door, not a lab notebook.
README_MAX_BYTES = 10_000

#: Folders never scanned: virtual environments, caches, build and run outputs.
SKIP_DIRS = {"__pycache__", "build", "dist", "runs", "fleetgym-out", "node_modules"}

#: Files outside the repository that no code or doc may cite (split so this file does not
#: match itself).
FORBIDDEN_CITATIONS = ("DESIGN" + ".md", "shared" + "/", "seeds" + "/")

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_SRC = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", re.IGNORECASE)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def doc_pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]


def _strip_code(text: str) -> str:
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def links(text: str) -> list[str]:
    """Link and image targets of a Markdown text, outside code blocks and code spans.

    Example:
        >>> links("see [a](docs/a.md#x), ![b](b.png) and `[c](not-a-link)`")
        ['docs/a.md#x', 'b.png']
    """
    body = _strip_code(text)
    return _LINK.findall(body) + _HTML_SRC.findall(body)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading.

    Example:
        >>> slug("Results: CartPole-v1")
        'results-cartpole-v1'
        >>> slug("wifi-degraded: which change brings the paper's pattern back")
        'wifi-degraded-which-change-brings-the-papers-pattern-back'
    """
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (duplicates numbered as GitHub does)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE))


def repo_files(suffixes: tuple[str, ...]) -> list[Path]:
    """Files of the repository with these suffixes (hidden folders and outputs skipped)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")
        ]
        found.extend(Path(folder) / name for name in files if name.endswith(suffixes))
    return sorted(found)


# ---------------------------------------------------------------------- links and size
@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if _is_external(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if ROOT not in dest.parents and dest != ROOT:
            broken.append(f"{target} (outside the repository)")
        elif not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_docs_pages_exist() -> None:
    for name in (
        "design",
        "network-shim",
        "calf",
        "fleet",
        "learner",
        "actor-scheduling",
        "learned-scheduler",
    ):
        page = DOCS / ("" if name == "design" else "explanation") / f"{name}.md"
        assert page.is_file(), f"{page.relative_to(ROOT)} is missing"


def test_readme_is_a_front_door() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md: expected <= {README_MAX_BYTES} bytes, actual {size}"
    )


def test_readme_test_command_is_ci_command() -> None:
    """CI runs the README's test command, on the wheel it built instead of the checkout."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    install = 'pip install torch==2.13.0 ".[all,test]" && pytest'
    assert install in readme
    assert install.replace(" torch", " -q torch").replace('".[', '"$wheel[') in ci
    assert "-m build" in ci and "twine check" in ci


def test_no_citation_of_files_outside_the_repository() -> None:
    offenders = []
    for path in repo_files((".py", ".md")):
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            for cited in FORBIDDEN_CITATIONS:
                if cited in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {cited}")
    assert not offenders, "cites a file outside the repository:\n" + "\n".join(offenders)


# ------------------------------------------------------------------ figures that stay true
def _table(page: Path, first_header: str) -> list[list[str]]:
    """The rows (header first) of the Markdown table whose first header cell is given."""
    lines = [line.strip() for line in page.read_text(encoding="utf-8").splitlines()]
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_header:
            rows = [cells]
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip("|").split("|")])
            return rows
    raise AssertionError(f"{page.name}: no table starting with {first_header!r}")


def test_history_lengths_in_calf_page() -> None:
    """docs/explanation/calf.md's k per profile is what history_length_for_profile computes."""
    from fleetgym.wrappers import history_length_for_profile

    header, row = _table(DOCS / "explanation" / "calf.md", "profile")[:2]
    assert row[0] == "k"
    checked = 0
    for column, written in zip(header[1:], row[1:], strict=True):
        profile, _, option = column.partition(",")
        path = "round_trip" if "round_trip" in option else "uplink"
        k = history_length_for_profile(profile.strip(), step_ms=20.0, path=path)
        assert int(written) == k, (
            f"docs/explanation/calf.md: k for {column}: written {written}, computed {k}"
        )
        checked += 1
    assert checked >= 5


def test_robust_env_width_in_calf_page() -> None:
    """docs/explanation/calf.md's `Box(28,)` and k = 3 for CartPole under wifi-normal."""
    from fleetgym.wrappers import history_length_for_profile, make_robust_env

    text = (DOCS / "explanation" / "calf.md").read_text(encoding="utf-8")
    match = re.search(r"env\.observation_space\s+# Box\((\d+),\): (\d+) x \(4 obs", text)
    assert match, "docs/explanation/calf.md: the robust env's observation space comment is missing"
    env = make_robust_env("CartPole-v1", "wifi-normal")
    try:
        assert env.observation_space.shape == (int(match.group(1)),)
    finally:
        env.close()
    assert int(match.group(2)) == history_length_for_profile("wifi-normal", step_ms=20.0)


def test_profile_table_in_shim_page() -> None:
    """docs/explanation/network-shim.md lists every profile, with the channels' own figures."""
    from fleetgym.wrappers.profiles import get_profile, list_profiles

    rows = _table(DOCS / "explanation" / "network-shim.md", "profile")[1:]
    names = [row[0].strip("`") for row in rows]
    assert sorted(names) == sorted(list_profiles())
    pattern = re.compile(r"^(\d+(?:\.\d+)?)(?: ± (\d+(?:\.\d+)?))? ms, (?:no loss|(\d+) % loss)$")
    checked = 0
    for name, (_, figures) in zip(names, rows, strict=True):
        match = pattern.match(figures)
        if match is None:
            continue
        mean, std, loss = match.groups()
        for channel in (get_profile(name).uplink, get_profile(name).downlink):
            assert channel.mean_ms == pytest.approx(float(mean)), name
            assert channel.std_ms == pytest.approx(float(std or 0.0)), name
            assert channel.loss == pytest.approx(float(loss or 0.0) / 100.0), name
        checked += 1
    assert checked >= 4


def test_prices_in_scheduling_page() -> None:
    """docs/explanation/actor-scheduling.md's derived prices come out of the pricing presets."""
    from fleetgym.meta_env.pricing import get_pricing

    text = (DOCS / "explanation" / "actor-scheduling.md").read_text(encoding="utf-8")
    cpu = get_pricing("aci-cpu")
    actor = re.search(r"1 vCPU \+ 1 GB \(\$([\d.]+)/s\)", text)
    learner = re.search(r"2 vCPU \+ 4 GB \(\$([\d.]+)/s\)", text)
    ratio = re.search(r"costs ([\d.]+)x a 1 vCPU \+ 1 GB\s+container per second", text)
    assert actor and learner and ratio, (
        "docs/explanation/actor-scheduling.md: a price figure is missing"
    )
    assert float(actor.group(1)) == pytest.approx(cpu.actor_price_per_s, rel=1e-9)
    assert float(learner.group(1)) == pytest.approx(cpu.learner_second, rel=1e-9)
    core_per_s = cpu.server_actor_vm_hour / cpu.server_actor_vm_cores / 3600.0
    assert float(ratio.group(1)) == pytest.approx(core_per_s / cpu.actor_price_per_s, abs=0.05)


def test_scheduling_defaults_table() -> None:
    """docs/explanation/actor-scheduling.md's defaults table is the presets' table."""
    from fleetgym.meta_env.presets import scheduling_defaults

    rows = _table(DOCS / "explanation" / "actor-scheduling.md", "workload, preset")[1:]
    assert len(rows) >= 3
    for row in rows:
        workload, preset = (part.strip() for part in row[0].split(","))
        d = scheduling_defaults(workload, preset)
        c = d.compute
        expected = [
            d.steps_per_actor,
            d.target_return,
            d.max_rounds,
            d.budget,
            d.beta,
            d.penalty_scale,
            c.actor_step_s * 1e3,
            c.actor_overhead_s * 1e3,
            c.learner_sample_s * 1e3,
            c.learner_overhead_s * 1e3,
        ]
        written = [float(cell) for cell in row[1:]]
        assert written == pytest.approx(expected, rel=1e-9), f"{row[0]}: {written} != {expected}"


def test_layout_table_matches_the_tree() -> None:
    """Every file or folder the design page's layout table names exists where the row says."""
    missing = []
    for row in _table(DOCS / "design.md", "path")[1:]:
        folders = [ROOT] + [
            ROOT / token for token in re.findall(r"`([^`]+/)`", row[0]) if (ROOT / token).is_dir()
        ]
        for token in re.findall(r"`([^`\s]+)`", " ".join(row)):
            if not token.endswith((".py", "/")):
                continue
            if not any((folder / token).exists() for folder in folders):
                missing.append(token)
    assert not missing, f"docs/design.md layout names paths not in the tree: {missing}"


# ------------------------------------------------------------ tables that fit, provenance
#: Most columns a table may have and still fit the site's content column (the site's
#: tables.css sets their font); a wider one is split (returns, then gaps) or transposed.
MAX_COLUMNS = 8
#: Tables allowed wider, with why: short numeric cells that fit at the table font.
WIDE_TABLES = {("explanation/actor-scheduling.md", "workload, preset")}

_COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
NOT_RECORDED = "commit not recorded"


def tables_of(page: Path) -> list[tuple[int, list[str], str]]:
    """``(line, header cells, text of its section before it)`` for each Markdown table."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[tuple[int, list[str], str]] = []
    section = 0
    for i, line in enumerate(lines):
        if re.match(r"^#{1,4} ", line):
            section = i
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            found.append((i + 1, header, "\n".join(lines[section:i])))
    return found


def test_tables_fit_the_page() -> None:
    wide = [
        f"{page.relative_to(DOCS)}:{line} ({len(header)} columns)"
        for page in sorted(DOCS.rglob("*.md"))
        for line, header, _ in tables_of(page)
        if len(header) > MAX_COLUMNS
        and (page.relative_to(DOCS).as_posix(), header[0]) not in WIDE_TABLES
    ]
    assert not wide, f"tables wider than {MAX_COLUMNS} columns (split or transpose): {wide}"


def results_provenance() -> tuple[int, int, list[str]]:
    """Of the results pages' tables: how many name the commit they were measured on (in
    their section, or the page's Commit line), how many are marked "commit not recorded",
    and which are neither."""
    recorded = unknown = 0
    unmarked: list[str] = []
    for page in sorted((DOCS / "results").glob("*.md")):
        head = "\n".join(page.read_text(encoding="utf-8").splitlines()[:12])
        page_commit = bool(_COMMIT.search(head)) and not re.search(
            r"before 1\.0\.0|not record", head
        )
        for line, _, context in tables_of(page):
            if _COMMIT.search(context) or page_commit:
                recorded += 1
            elif NOT_RECORDED in context:
                unknown += 1
            else:
                unmarked.append(f"{page.name}:{line}")
    return recorded, unknown, unmarked


def test_every_results_table_names_its_commit_or_says_it_is_unknown() -> None:
    recorded, unknown, unmarked = results_provenance()
    assert not unmarked, f"results tables without a commit or a '{NOT_RECORDED}' mark: {unmarked}"
    assert recorded > 0
