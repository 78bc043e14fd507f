"""One public address per name, and docs that use only public addresses.

The public API is the ``__all__`` of the modules in :data:`PUBLIC_MODULES` (the list
docs/compatibility.md gives); every other module is internal. A name in two public
modules, a public name that does not resolve, or a documented import path that does not
exist or is internal fails here.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PUBLIC_MODULES = (
    "fleetgym",
    "fleetgym.errors",
    "fleetgym.wrappers",
    "fleetgym.wrappers.remote",
    "fleetgym.wrappers.cells",
    "fleetgym.traces",
    "fleetgym.meta_env",
    "fleetgym.agents",
    "fleetgym.agents.fleet",
    "fleetgym.agents.inference",
    "fleetgym.agents.learners",
    "fleetgym.agents.planning",
    "fleetgym.agents.policies",
    "fleetgym.agents.rollout",
    "fleetgym.agents.schedulers",
    "fleetgym.agents.tokens",
    "fleetgym.agents.workloads",
    "fleetgym.agents.world_model",
)


def _exports(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    exports = getattr(module, "__all__", None)
    assert isinstance(exports, list), f"{module_name}: expected a list __all__"
    return exports


def test_every_public_module_exports_names_that_resolve():
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        exports = _exports(module_name)
        assert len(set(exports)) == len(exports), f"{module_name}: __all__ repeats a name"
        for name in exports:
            assert getattr(module, name, None) is not None or name == "__version__", (
                f"{module_name}.{name} is in __all__ but does not resolve"
            )


def test_every_public_name_has_one_public_address():
    seen: dict[str, str] = {}
    twice = []
    for module_name in PUBLIC_MODULES:
        for name in _exports(module_name):
            if name in seen:
                twice.append(f"{name}: {seen[name]} and {module_name}")
            seen.setdefault(name, module_name)
    assert not twice, "names exported by two public modules:\n" + "\n".join(twice)


def test_the_compatibility_policy_lists_the_public_modules():
    page = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(fleetgym[\w.]*)` \|", page, flags=re.M))
    assert listed == set(PUBLIC_MODULES)


def test_the_package_exports_its_version_from_one_place():
    import fleetgym

    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in text and "fleetgym.__version__" in text
    assert re.fullmatch(r"\d+\.\d+\.\d+", fleetgym.__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {fleetgym.__version__}" in changelog


# -- documented paths -------------------------------------------------------------------------
_FROM_IMPORT = re.compile(r"^\s*from (fleetgym[\w.]*) import ([^\n#]+)", re.M)
_IMPORT = re.compile(r"^\s*import (fleetgym[\w.]*)", re.M)
_DOTTED = re.compile(r"`(fleetgym(?:\.\w+)+)(?:\([^`]*\))?`")
_RUN_MODULE = re.compile(r"python -m (fleetgym(?:\.\w+)+)")


def _documents() -> list[Path]:
    # (CHANGELOG.md is left out: its migration table names the removed addresses on purpose.)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return pages + sorted((ROOT / "examples").rglob("*.py"))


def _is_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return False
    return True


def _public_address(dotted: str) -> str | None:
    """``None`` when ``dotted`` (a module or a module's name, attribute paths allowed)
    is a public address; else what is wrong with it."""
    if dotted in PUBLIC_MODULES:
        return None
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        if module_name in PUBLIC_MODULES:
            name = parts[cut]
            if name in _exports(module_name):
                return None
            if _is_module(f"{module_name}.{name}"):
                return f"internal module {module_name}.{name}"
            return f"{name} is not a public name of {module_name}"
    return "not under a public module"


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        found = []
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fleetgym"):
                found.append((node.module or "", [alias.name for alias in node.names]))
            elif isinstance(node, ast.Import):
                found += [(a.name, []) for a in node.names if a.name.startswith("fleetgym")]
        return found
    found = [
        (module, [n.split(" as ")[0].strip() for n in names.strip("() ").split(",") if n.strip()])
        for module, names in _FROM_IMPORT.findall(text)
    ]
    return found + [(module, []) for module in _IMPORT.findall(text)]


@pytest.mark.parametrize("path", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_and_examples_use_only_public_addresses(path):
    text = path.read_text(encoding="utf-8")
    wrong = []
    for module_name, names in _imports(path):
        if names:
            for name in names:
                if name == "*":
                    continue
                problem = _public_address(f"{module_name}.{name}")
                if problem and not (module_name == "fleetgym" and name in PUBLIC_MODULES_SHORT):
                    wrong.append(f"from {module_name} import {name}: {problem}")
        elif module_name not in PUBLIC_MODULES:
            wrong.append(f"import {module_name}: not a public module")
    commands = {m for m in _RUN_MODULE.findall(text)}
    for module_name in commands:
        if not _is_module(module_name):
            wrong.append(f"python -m {module_name}: no such module")
    if path.suffix == ".md":
        for dotted in set(_DOTTED.findall(text)) - commands:
            problem = _public_address(dotted)
            if problem:
                wrong.append(f"`{dotted}`: {problem}")
    assert not wrong, f"{path.relative_to(ROOT)}:\n" + "\n".join(sorted(wrong))


#: Subpackages a document may import from the package (``from fleetgym import wrappers``).
PUBLIC_MODULES_SHORT = {m.split(".", 1)[1] for m in PUBLIC_MODULES if m.count(".") == 1}
