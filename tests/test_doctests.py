"""Every ``Example:`` in fleetgym's docstrings runs as a doctest."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import fleetgym


def _modules() -> list[str]:
    names = ["fleetgym"]
    for info in pkgutil.walk_packages(fleetgym.__path__, prefix="fleetgym."):
        if info.name.endswith("__main__") or info.name == "fleetgym.setup":
            continue  # setup.py is the checkout's build script, not part of the package
        names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} doctest examples failed in {name}"
    )
