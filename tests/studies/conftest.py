"""Fixtures of the studies' tests: a study script of ``studies/`` (a checkout's folder, not a
package) loaded by its path."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

STUDIES = Path(__file__).resolve().parents[2] / "studies"


def _load_study(name: str) -> ModuleType:
    """The module ``studies/<name>.py``; skips the test where the folder is absent (an sdist)."""
    path = STUDIES / f"{name}.py"
    if not path.is_file():
        pytest.skip(f"studies/{name}.py: expected a checkout, actual no such file")
    spec = importlib.util.spec_from_file_location(f"studies_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_study() -> Callable[[str], ModuleType]:
    """:func:`_load_study`: the module of a study script, by its name."""
    return _load_study
