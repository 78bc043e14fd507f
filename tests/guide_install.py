"""Run a guide's code on the install its page states.

Each guide says under its title which install it needs
(``**Install:** `pip install "fleetgym[sb3]"```). Its blocks run in a fresh interpreter
in which every optional package that install would not bring cannot be imported: a
``sitecustomize`` put first on ``PYTHONPATH`` hides them, so the ``fleetgym`` commands a
bash block starts and the processes they spawn see the same install. A guide that uses a
package its stated install lacks fails here, as it would for a reader.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from fleetgym.extras import OPTIONAL_MODULES

INSTALL = re.compile(
    r'^\*\*Install:\*\* `pip install "?fleetgym(?:\[(?P<extras>[\w,-]+)\])?"?`', re.MULTILINE
)

_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["'](?P<extra>[\w-]+)["']""")
_SELF = re.compile(r"^fleetgym\[(?P<extras>[\w,-]+)\]")

SITECUSTOMIZE = """\
import importlib.machinery, os, sys

_HIDDEN = set(filter(None, os.environ.get("FLEETGYM_HIDE_MODULES", "").split(",")))
_PATHS = importlib.machinery.PathFinder


class _WithoutExtras:
    # The path finder, blind to the hidden packages: importing one fails as if it were
    # absent, and importlib.util.find_spec says None, as libraries probing for it expect.
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in _HIDDEN:
            return None
        return _PATHS.find_spec(name, path, target)

    @classmethod
    def invalidate_caches(cls):
        _PATHS.invalidate_caches()

    @classmethod
    def find_distributions(cls, *args, **kwargs):
        return _PATHS.find_distributions(*args, **kwargs)


if _HIDDEN:
    sys.meta_path[:] = [_WithoutExtras if f is _PATHS else f for f in sys.meta_path]
"""

DRIVER = """\
import json, subprocess, sys

if __name__ == "__main__":
    blocks = json.load(open(sys.argv[1], encoding="utf-8"))
    namespace = {"__name__": "__main__"}
    for number, (lang, code) in enumerate(blocks, 1):
        print(f"== block {number} ({lang})", flush=True)
        if lang == "python":
            exec(compile(code, f"<block {number}>", "exec"), namespace)
            continue
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code])
        if done.returncode != 0:
            sys.exit(f"block {number} (bash) exited {done.returncode}")
"""


def stated_extras(text: str) -> frozenset[str] | None:
    """The extras a guide's ``**Install:**`` line names (empty: the core), or ``None``."""
    match = INSTALL.search("\n".join(text.splitlines()[:6]))
    if match is None:
        return None
    return frozenset(filter(None, (match["extras"] or "").split(",")))


def installed_extras(extras: frozenset[str]) -> frozenset[str]:
    """``extras`` with the extras they pull in (``sb3`` brings ``agents``), from the
    installed package's metadata."""
    pulls: dict[str, set[str]] = {}
    for requirement in importlib.metadata.requires("fleetgym") or []:
        marker = _EXTRA_MARKER.search(requirement)
        inner = _SELF.match(requirement)
        if marker and inner:
            pulls.setdefault(marker["extra"], set()).update(inner["extras"].split(","))
    found = set(extras)
    todo = list(extras)
    while todo:
        for extra in pulls.get(todo.pop(), ()):
            if extra not in found:
                found.add(extra)
                todo.append(extra)
    return frozenset(found)


def hidden_modules(extras: frozenset[str]) -> list[str]:
    """The optional top-level modules an install with ``extras`` would not have."""
    have = installed_extras(extras)
    return sorted(m for m, (extra, _) in OPTIONAL_MODULES.items() if extra not in have)


def run_blocks(
    blocks: list[tuple[str, str]],
    extras: frozenset[str],
    cwd: Path,
    python: str = sys.executable,
    timeout: float = 540,
) -> subprocess.CompletedProcess[str]:
    """Run ``(language, code)`` blocks in order, in ``cwd``, with ``python``, on the
    install ``extras`` states (the other optional packages hidden)."""
    hide_dir = cwd / "_install"
    hide_dir.mkdir(exist_ok=True)
    (hide_dir / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    (hide_dir / "driver.py").write_text(DRIVER, encoding="utf-8")
    (hide_dir / "blocks.json").write_text(json.dumps(blocks), encoding="utf-8")
    env = dict(os.environ)
    env["FLEETGYM_HIDE_MODULES"] = ",".join(hidden_modules(extras))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hide_dir), env.get("PYTHONPATH")]))
    env["PATH"] = str(Path(python).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MPLBACKEND", "Agg")
    return subprocess.run(
        [python, str(hide_dir / "driver.py"), str(hide_dir / "blocks.json")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
