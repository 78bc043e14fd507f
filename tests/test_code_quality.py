"""The package stays ruff-, format- and mypy-clean and keeps its import layers.

The settings live in pyproject.toml. mypy cannot see the editable install's import hook,
so it checks the package through a temporary folder holding a ``fleetgym`` symlink to the
repository root. import-linter checks the layer ladder (experiments/cli -> meta_env ->
agents -> wrappers -> traces -> errors/validation) and that no sibling modules import
each other in a cycle (function-local imports included).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> list[str]:
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return [sys.executable, "-m", name]


def test_ruff_is_clean():
    cmd = _tool("ruff") + ["check", str(ROOT)]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    cmd = _tool("ruff") + ["format", "--check", str(ROOT)]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_layers_are_kept():
    if shutil.which("lint-imports") is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    result = subprocess.run(["lint-imports"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean(tmp_path):
    cmd = _tool("mypy") + ["--cache-dir", str(tmp_path / "cache"), "-p", "fleetgym"]
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "fleetgym").symlink_to(ROOT, target_is_directory=True)
    env = dict(os.environ, MYPYPATH=str(tmp_path / "root"))
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
