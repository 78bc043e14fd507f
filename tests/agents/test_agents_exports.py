"""Every name of ``agents/`` has one address: its defining module (read from the source,
nothing imported).

* an internal module (not an ``__init__``) exports (``__all__``) only the names it defines;
* an import ``from fleetgym.agents.<module> import name`` anywhere in the checkout takes
  ``name`` from the module that defines it, never through a module that imported it;
* a package's lazy exports (``lazy_exports(__name__, {name: submodule})``) point at the
  submodule that defines the name.

Package ``__init__`` files (``agents/learners/losses/__init__.py`` included) may re-export.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "agents"
#: Folders of the checkout that hold no source of this package (environments, outputs).
NOT_SOURCE = {".venv", "build", "dist", "fleetgym-out", "runs", "node_modules"}


def _defined(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level, not by import."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _exported(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return None


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _internal_modules() -> list[Path]:
    return [path for path in sorted(AGENTS.rglob("*.py")) if path.name != "__init__.py"]


def _source_files() -> list[Path]:
    return [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if not any(
            part in NOT_SOURCE or part.startswith(".") for part in path.relative_to(ROOT).parts[:-1]
        )
    ]


def _module_file(module: str) -> Path | None:
    """The file of ``fleetgym.agents.<...>`` when it is a module (not a package), else None."""
    path = ROOT.joinpath(*module.split(".")[1:]).with_suffix(".py")
    return path if path.is_file() else None


@pytest.mark.parametrize("path", _internal_modules(), ids=_name)
def test_an_internal_module_exports_only_what_it_defines(path: Path) -> None:
    tree = _parse(path)
    exported = _exported(tree)
    foreign = sorted(set(exported or ()) - _defined(tree))
    assert not foreign, (
        f"{_name(path)}: expected __all__ to name only what the module defines, "
        f"actual also {foreign} (import them from their defining module)"
    )


def test_names_are_imported_from_their_defining_module() -> None:
    defined: dict[Path, set[str]] = {}
    wrong: list[str] = []
    for path in _source_files():
        for node in ast.walk(_parse(path)):
            if not (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("fleetgym.agents.")
            ):
                continue
            module = _module_file(node.module)
            if module is None:
                continue
            if module not in defined:
                defined[module] = _defined(_parse(module))
            foreign = sorted(a.name for a in node.names if a.name not in defined[module])
            if foreign:
                wrong.append(f"{_name(path)}:{node.lineno}: {node.module} {foreign}")
    assert not wrong, (
        "expected each name imported from the module that defines it, actual through "
        "another module:\n" + "\n".join(wrong)
    )


def _lazy_maps(tree: ast.Module) -> list[dict[str, str]]:
    """The ``{name: submodule}`` maps a package ``__init__`` hands to ``lazy_exports``."""
    assigned = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    maps = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "lazy_exports"
            and len(node.args) == 2
        ):
            value = node.args[1]
            if isinstance(value, ast.Name):
                value = assigned[value.id]
            maps.append(ast.literal_eval(value))
    return maps


@pytest.mark.parametrize("path", sorted(AGENTS.rglob("__init__.py")), ids=_name)
def test_lazy_exports_point_at_the_defining_module(path: Path) -> None:
    wrong = []
    for lazy in _lazy_maps(_parse(path)):
        for name, submodule in lazy.items():
            module = path.parent / f"{submodule}.py"
            if not module.is_file():  # a subpackage, whose __init__ may re-export
                continue
            if name not in _defined(_parse(module)):
                wrong.append(f"{name} -> {submodule}")
    assert not wrong, (
        f"{_name(path)}: expected lazy exports from the defining module, actual {wrong}"
    )


def test_the_check_sees_a_re_export() -> None:
    tree = ast.parse("from x import a\nb = 1\n__all__ = ['a', 'b']\n")
    assert sorted(set(_exported(tree) or ()) - _defined(tree)) == ["a"]
