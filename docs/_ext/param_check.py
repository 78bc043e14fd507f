"""Whether a public name's docstring describes its parameters (Google style).

The reference is built from the docstrings, so a parameter the docstring leaves out is a
parameter a reader meets as a bare type. :func:`problems` lists, for one object, each
parameter of its signature (a class: its constructor) without a described entry under
``Args:`` (or ``Attributes:``, for a config's fields), a parameter section that comes after
the examples or the errors, and prose before the parameters longer than a screen (that
narrative belongs on an explanation page). The Sphinx extension warns on each problem,
so ``sphinx-build -W`` fails on them; ``tests/test_docs_params.py`` reports the counts.
"""

from __future__ import annotations

import inspect
import re
from enum import Enum
from typing import Any

#: Section headers whose entries describe parameters.
PARAM_SECTIONS = {
    "Args",
    "Arguments",
    "Parameters",
    "Keyword Args",
    "Keyword Arguments",
    "Other Parameters",
    "Attributes",
}
#: Sections the parameters must come before.
LATER_SECTIONS = {"Example", "Examples", "Raises", "Returns", "Yields"}
#: The most prose a docstring may hold before its parameters (about one screen).
MAX_LEAD_CHARS = 2500

_HEADER = re.compile(r"^(?P<name>[A-Z][A-Za-z ]*):\s*$")
_ENTRY = re.compile(
    r"^(?P<names>\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?:\([^)]*\))?\s*:(?:\s+(?P<desc>.*))?$"
)


def _sections(doc: str) -> list[tuple[str, int, list[str]]]:
    """``(header, line index, body lines)`` of each top-level section of a docstring."""
    lines = doc.splitlines()
    found: list[tuple[str, int, list[str]]] = []
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if m:
            found.append((m["name"], i, []))
        elif found and (not line.strip() or line.startswith((" ", "\t"))):
            found[-1][2].append(line)
        elif found and line.strip():
            found.append(("", i, []))  # prose after a section ends it
    return found


def described(doc: str) -> dict[str, str]:
    """Parameter name -> its description, from every parameter section of ``doc``."""
    out: dict[str, str] = {}
    for header, _, body in _sections(doc):
        if header not in PARAM_SECTIONS:
            continue
        indents = [len(x) - len(x.lstrip()) for x in body if x.strip()]
        if not indents:
            continue
        base = min(indents)
        entries: list[list[str]] = []
        pending = ""
        for line in body:
            if not line.strip():
                if entries:
                    entries[-1].append("")
                continue
            indent = len(line) - len(line.lstrip())
            text = line.strip()
            if indent == base:
                if pending:
                    text = pending + " " + text
                    pending = ""
                if re.fullmatch(r"\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*,", text):
                    pending = text  # names wrapped over lines: "a, b," / "c: ..."
                    continue
                entries.append([text])
            elif entries:
                entries[-1].append(text)
        for entry in entries:
            m = _ENTRY.match(entry[0])
            if not m:
                continue
            desc = " ".join([m["desc"] or "", *entry[1:]]).strip()
            for name in re.split(r"\s*,\s*", m["names"]):
                out[name.lstrip("*")] = desc
    return out


def parameters(obj: Any) -> list[str]:
    """The public parameters of a function's or a class constructor's signature (none for
    a protocol, which is not instantiated, or an enum, whose constructor looks a member up)."""
    if inspect.isclass(obj) and (getattr(obj, "_is_protocol", False) or issubclass(obj, Enum)):
        return []
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [
        name for name in sig.parameters if name not in ("self", "cls") and not name.startswith("_")
    ]


def problems(obj: Any) -> list[str]:
    """What the docstring of ``obj`` lacks: undescribed parameters, section order, a long lead."""
    doc = inspect.cleandoc(getattr(obj, "__doc__", None) or "")
    out: list[str] = []
    have = described(doc)
    missing = [p for p in parameters(obj) if not have.get(p)]
    if missing:
        out.append("parameters not described: " + ", ".join(missing))
    sections = _sections(doc)
    first_param = next((i for h, i, _ in sections if h in PARAM_SECTIONS), None)
    if first_param is not None:
        later = [h for h, i, _ in sections if h in LATER_SECTIONS and i < first_param]
        if later:
            out.append(f"the parameters come after {', '.join(dict.fromkeys(later))}")
        lead = len("\n".join(doc.splitlines()[:first_param]))
        if lead > MAX_LEAD_CHARS:
            out.append(
                f"{lead} characters of prose before the parameters (at most {MAX_LEAD_CHARS};"
                " move the narrative to an explanation page)"
            )
    return out
