"""The house's figures (the 2.0 clean-up measured them before and after).

Run from the repository root with the package importable::

    python .ci/house_metrics.py

* the largest public signatures (classes' ``__init__``, public functions and methods;
  configs and records, i.e. dataclasses and named tuples, are left out: their fields are the
  point) and how many public callables take more than 10 parameters;
* string-dispatch sites in the library (``wrappers/``, ``agents/``, ``meta_env/``,
  ``traces/``): comparisons of an extension axis (backend, actors, loss, compensation,
  inference, mode) with string literals;
* internal (non-``__init__``) modules whose ``__all__`` lists a name they do not define.

The wheel's lines of ``experiments/`` are printed by ``.ci/check_wheel.py``; the library's
duplicate pairs by the ``duplicates`` tool run on a copy of the four library folders.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("wrappers", "agents", "meta_env", "traces")
AXES = {"backend", "actors", "loss", "compensation", "inference", "mode", "actor_mode"}


def signatures() -> list[tuple[int, bool, str]]:
    import fleetgym

    skip = ("fleetgym.experiments", "fleetgym.tests", "fleetgym.benchmarks", "fleetgym.examples")
    mods = ["fleetgym"] + [
        m.name
        for m in pkgutil.walk_packages(fleetgym.__path__, "fleetgym.")
        if m.ispkg and not m.name.startswith(skip)
    ]
    rows, seen = [], set()
    for name in mods:
        try:
            module = importlib.import_module(name)
        except Exception:  # an extra that is not installed
            continue
        for public in getattr(module, "__all__", []):
            try:
                obj = getattr(module, public)
            except Exception:
                continue
            targets = []
            if inspect.isclass(obj):
                if dataclasses.is_dataclass(obj) or issubclass(obj, tuple):
                    continue
                targets.append((f"{obj.__module__}.{obj.__qualname__}", obj.__init__))
                for attr in dir(obj):
                    if attr.startswith("_"):
                        continue
                    value = inspect.getattr_static(obj, attr)
                    if isinstance(value, (classmethod, staticmethod)):
                        value = value.__func__
                    if inspect.isfunction(value):
                        targets.append((f"{obj.__module__}.{obj.__qualname__}.{attr}", value))
            elif callable(obj):
                qual = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', public)}"
                targets.append((qual, obj))
            for qual, func in targets:
                if qual in seen:
                    continue
                seen.add(qual)
                try:
                    params = list(inspect.signature(func).parameters.values())
                except (TypeError, ValueError):
                    continue
                params = [p for p in params if p.name not in ("self", "cls")]
                count = sum(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
                rows.append((count, any(p.kind == p.VAR_KEYWORD for p in params), qual))
    return sorted(rows, reverse=True)


def dispatch_sites() -> dict[str, list[int]]:
    sites: dict[str, list[int]] = {}
    for folder in LIBRARY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
                    continue
                if not isinstance(node.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                    continue
                left = node.left
                name = getattr(left, "id", None) or getattr(left, "attr", None)
                if name is None or name.lstrip("_") not in AXES:
                    continue
                right = node.comparators[0]
                values = [right] if isinstance(right, ast.Constant) else getattr(right, "elts", [])
                if values and all(
                    isinstance(v, ast.Constant) and isinstance(v.value, str) for v in values
                ):
                    sites.setdefault(str(path.relative_to(ROOT)), []).append(node.lineno)
    return sites


def reexports() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for folder in (*LIBRARY, "experiments"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "__init__.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            defined, listed = set(), None
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    defined.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Tuple):  # A, B = ...
                            defined.update(e.id for e in target.elts if isinstance(e, ast.Name))
                        if isinstance(target, ast.Name):
                            defined.add(target.id)
                            if target.id == "__all__" and isinstance(node.value, ast.List):
                                listed = [ast.literal_eval(e) for e in node.value.elts]
            foreign = [n for n in listed or [] if n not in defined]
            if foreign:
                out[str(path.relative_to(ROOT))] = foreign
    return out


def main() -> None:
    rows = signatures()
    print("largest public signatures (parameters, + ** when it also takes **kwargs):")
    for count, var, qual in rows[:8]:
        print(f"  {count:3d}{' +**' if var else '    '}  {qual}")
    print("public callables with more than 10 parameters:", sum(r[0] > 10 for r in rows))
    sites = dispatch_sites()
    print("string-dispatch sites in the library:", sum(map(len, sites.values())))
    for path, lines in sorted(sites.items()):
        print(f"  {path}: {sorted(lines)}")
    foreign = reexports()
    print("internal modules re-exporting names defined elsewhere:", len(foreign))
    for path, names in sorted(foreign.items()):
        print(f"  {path}: {', '.join(names)}")


if __name__ == "__main__":
    main()
