"""Sphinx directives that generate the reference from the code itself.

* ``fleetgym-module``: one public module's ``__all__``, each name documented by autodoc
  under that module (its one canonical address); lazily exported names (PEP 562) are
  reached with ``getattr``. A public name without a docstring, or a parameter its
  docstring does not describe (``param_check.py``), is a warning (so the ``-W`` build
  fails).
* ``fleetgym-env-ids``: the table of environment IDs from
  :data:`fleetgym.registration.ENV_SPECS`.
* ``fleetgym-cli``: every ``fleetgym`` subcommand's ``--help``, from
  :func:`fleetgym.cli.build_parser`.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import typing
from functools import cache
from pathlib import Path
from typing import Any

import param_check  # docs/_ext, on the path conf.py sets
from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


def kind(obj: Any) -> str:
    """The autodoc directive that documents ``obj``."""
    if typing.get_origin(obj) is not None:  # a type alias: Callable[..., Actor]
        return "data"
    if inspect.isclass(obj):
        return "autoexception" if issubclass(obj, BaseException) else "autoclass"
    if callable(obj) and not isinstance(obj, type):
        return "autofunction"
    return "data"


#: Top-level parts of the repository that are not the library (scripts, tests, the CLI).
_NOT_LIBRARY = {"setup", "__main__", "cli", "experiments", "tests", "benchmarks", "examples"}


@cache
def _attr_docs(package: str) -> dict[str, str]:
    """``#:`` comments of every module-level name in ``package`` and its submodules."""
    from sphinx.pycode import ModuleAnalyzer

    module = importlib.import_module(package)
    names = [package]
    if hasattr(module, "__path__"):
        names += [
            m.name
            for m in pkgutil.walk_packages(module.__path__, package + ".")
            if m.name.split(".")[1] not in _NOT_LIBRARY and not m.name.endswith("__main__")
        ]
    found: dict[str, str] = {}
    for name in names:
        try:
            docs = ModuleAnalyzer.for_module(name).find_attr_docs()
        except Exception:  # a module that cannot be analysed has no comments to give
            continue
        for (scope, attr), lines in docs.items():
            if scope == "" and attr not in found:
                found[attr] = "\n".join(lines).strip()
    return found


def data_doc(module: str, name: str) -> str:
    """The ``#:`` comment of a public constant, looked up in its module's package."""
    if name == "__version__":
        return "The installed version of fleetgym."
    for package in (module, "fleetgym"):
        doc = _attr_docs(package).get(name)
        if doc:
            return doc
    return ""


def public_names(module_name: str) -> list[tuple[str, Any]]:
    """``(name, object)`` for each name of the module's ``__all__``, lazy ones included."""
    module = importlib.import_module(module_name)
    return [(name, getattr(module, name)) for name in module.__all__]


def parameter_problems(address: str, obj: Any) -> list[tuple[str, str]]:
    """What the docstrings of a public function or class, and of the class's documented
    public methods, lack (:func:`param_check.problems`): ``(address, problem)`` pairs."""
    if kind(obj) == "data":
        return []
    items = [(address, obj)]
    if inspect.isclass(obj):
        for attr, member in vars(obj).items():
            func = member.__func__ if isinstance(member, staticmethod | classmethod) else member
            if attr.startswith("_") or not inspect.isfunction(func):
                continue
            if not (func.__doc__ or "").strip():
                continue  # autodoc leaves an undocumented member out of the page
            module = getattr(inspect.unwrap(func), "__module__", "") or ""
            if module.startswith("fleetgym"):
                items.append((f"{address}.{attr}", func))
    return [(where, p) for where, item in items for p in param_check.problems(item)]


def has_doc(module_name: str, name: str, obj: Any) -> bool:
    """Whether a public name has a docstring (a constant: a ``#:`` comment)."""
    if kind(obj) == "data":
        return bool(data_doc(module_name, name))
    return bool((getattr(obj, "__doc__", None) or "").strip())


class ModuleDirective(SphinxDirective):
    """``.. fleetgym-module:: fleetgym.agents``: the module's docstring and ``__all__``."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        module_name = self.arguments[0]
        lines = [f".. py:module:: {module_name}", ""]
        module = importlib.import_module(module_name)
        if module.__doc__:
            lines += [".. automodule:: " + module_name, "   :no-index:", ""]
        for name, obj in public_names(module_name):
            if not has_doc(module_name, name, obj):
                logger.warning(
                    f"{module_name}.{name} is public but has no docstring",
                    location=self.get_location(),
                )
            for where, problem in parameter_problems(f"{module_name}.{name}", obj):
                logger.warning(f"{where}: {problem}", location=self.get_location())
            directive = kind(obj)
            if directive == "data":
                lines += [f".. py:data:: {name}", f"   :value: {_short_repr(obj)}", ""]
                lines += ["   " + line for line in data_doc(module_name, name).splitlines()]
                lines.append("")
                continue
            lines += [f".. {directive}:: {module_name}::{name}"]
            if directive != "autofunction":
                lines += ["   :members:", "   :show-inheritance:"]
            lines.append("")
        node = nodes.section()
        node.document = self.state.document
        self.state.nested_parse(StringList("\n".join(lines).splitlines()), 0, node)
        return node.children


def _short_repr(obj: Any) -> str:
    text = repr(obj)
    if len(text) > 120:
        text = text[:117] + "..."
    return " ".join(text.split())


class EnvIdsDirective(SphinxDirective):
    """``.. fleetgym-env-ids::``: the registered environment IDs, as a table."""

    def run(self) -> list[nodes.Node]:
        from fleetgym.registration import ENV_SPECS

        lines = [".. list-table::", "   :header-rows: 1", ""]
        lines.append("   * - ID\n     - made by\n     - fixed arguments\n     - deterministic")
        for env_id, spec in ENV_SPECS.items():
            module, _, attr = spec["entry_point"].partition(":")
            kwargs = spec.get("kwargs") or {}
            fixed = ", ".join(f"``{k}={v!r}``" for k, v in kwargs.items()) or "\\-"
            lines.append(f"   * - ``{env_id}``")
            lines.append(f"     - ``{module}.{attr}``")
            lines.append(f"     - {fixed}")
            lines.append("     - " + ("no" if spec.get("nondeterministic") else "yes"))
        lines.append("")
        node = nodes.section()
        node.document = self.state.document
        self.state.nested_parse(StringList("\n".join(lines).splitlines()), 0, node)
        return node.children


def command_helps() -> list[tuple[str, str]]:
    """``(command line, --help text)`` for ``fleetgym`` and every (nested) subcommand."""
    from fleetgym.cli import build_parser

    found: list[tuple[str, str]] = []

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        found.append((prefix, parser.format_help()))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(f"{prefix} {name}", child)

    walk("fleetgym", build_parser())
    return found


class CliDirective(SphinxDirective):
    """``.. fleetgym-cli::``: one section per command, its ``--help`` verbatim."""

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for command, text in command_helps():
            section = nodes.section(ids=[nodes.make_id(command)])
            section += nodes.title(text=command)
            block = nodes.literal_block(text, text)
            block["language"] = "text"
            section += block
            out.append(section)
        return out


#: Markdown files of the repository outside docs/ that pages link to -> the site's page
#: that includes them (the link works on GitHub and on the site).
REPO_PAGES = {"CHANGELOG": "changelog", "traces/README": "reference/traces"}


class RepoPageLinks(SphinxPostTransform):
    """Links to a repository Markdown file outside docs/ go to the page that includes it."""

    default_priority = 8  # before MyST's resolver (9)

    def run(self, **kwargs: Any) -> None:
        root = Path(self.env.srcdir).resolve().parent
        for node in self.document.findall(addnodes.pending_xref):
            if node.get("reftype") != "myst" or node.get("refdomain") != "doc":
                continue
            target = Path(str(node["reftarget"]))
            if not target.is_absolute():
                continue
            try:
                rel = target.resolve().relative_to(root).as_posix()
            except ValueError:
                continue
            if rel in REPO_PAGES:
                node["reftarget"] = REPO_PAGES[rel]


_NAMES_CONTINUED = re.compile(r"^(\s+)[\w*]+(?:,\s*[\w*]+)*,\s*$")
_NAMES_END = re.compile(r"^\s+[\w*]+(?:,\s*[\w*]+)*:\s")


def join_wrapped_names(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Join an ``Args:`` entry whose names wrap over lines (``a, b,`` / ``    c: ...``),
    which napoleon would read as two entries."""
    i = 0
    while i < len(lines) - 1:
        first, second = lines[i], lines[i + 1]
        if _NAMES_CONTINUED.match(first) and _NAMES_END.match(second):
            lines[i : i + 2] = [first.rstrip() + " " + second.strip()]
            continue
        i += 1


def drop_foreign_sources(app: Sphinx) -> list[Any]:
    """Keep viewcode's source index to fleetgym's modules: an alias such as
    ``dict[str, np.ndarray]`` reports the module ``builtins``, whose page viewcode cannot
    write, so its index entry would be a broken link."""
    modules = getattr(app.env, "_viewcode_modules", {})
    for name in [n for n in modules if n.split(".")[0] != "fleetgym"]:
        del modules[name]
    return []


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("html-collect-pages", drop_foreign_sources, priority=400)
    app.add_post_transform(RepoPageLinks)
    app.connect("autodoc-process-docstring", join_wrapped_names, priority=400)
    app.add_directive("fleetgym-module", ModuleDirective)
    app.add_directive("fleetgym-env-ids", EnvIdsDirective)
    app.add_directive("fleetgym-cli", CliDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
