"""Each module of ``experiments/`` exports (``__all__``) only the names it defines, so that
every name has one address: its defining module (read from the source, nothing imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
#: Folders of experiments/ kept by others in this release (``calf/setup.py`` re-exports
#: ``ALGOS`` of ``calf/hyperparams.py``).
NOT_CHECKED = ("calf",)


def _modules() -> list[Path]:
    return [
        path
        for path in sorted(EXPERIMENTS.rglob("*.py"))
        if path.relative_to(EXPERIMENTS).parts[0] not in NOT_CHECKED
    ]


def _defined_and_exported(path: Path) -> tuple[set[str], list[str] | None]:
    """The names ``path`` binds at its top level (not by import), and its ``__all__``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined: set[str] = set()
    exported: list[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            defined |= names
            if "__all__" in names and node.value is not None:
                exported = list(ast.literal_eval(node.value))
    return defined, exported


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_exports_only_what_it_defines(path: Path) -> None:
    defined, exported = _defined_and_exported(path)
    public = {name for name in defined if not name.startswith("_") and name != "logger"}
    if exported is None:
        assert not public, f"{path.relative_to(ROOT)}: expected an __all__, actual none"
        return
    foreign = sorted(set(exported) - defined)
    assert not foreign, (
        f"{path.relative_to(ROOT)}: expected __all__ to name only what the module defines, "
        f"actual also {foreign} (import them from their defining module)"
    )
