"""Tables shared by the experiments: grouping records, Markdown tables, CSV files.

Every experiment ends the same way: records (dataclasses or dicts) are grouped by a key,
each group becomes a row of a table, and the table goes to Markdown for people and to CSV
for scripts. These three steps are written once, here.

Example:
    >>> groups = group_by([("a", 1), ("b", 2), ("a", 3)], key=lambda r: r[0])
    >>> {k: [v for _, v in rs] for k, rs in groups.items()}
    {'a': [1, 3], 'b': [2]}
    >>> print("\\n".join(markdown_table(["name", "n"], [["a", "2"], ["b", "1"]])))
    | name | n |
    |---|---|
    | a | 2 |
    | b | 1 |
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["as_row", "group_by", "markdown_table", "mean_std", "write_csv"]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def group_by(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """``items`` grouped by ``key(item)``, groups and their members in first-seen order."""
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def mean_std(values: Iterable[float]) -> tuple[float, float]:
    """Mean and population std of the non-NaN ``values`` (NaN, NaN when none are left).

    Example:
        >>> mean_std([1.0, 3.0, float("nan")])
        (2.0, 1.0)
    """
    kept = [float(v) for v in values if not math.isnan(v)]
    if not kept:
        return math.nan, math.nan
    return statistics.fmean(kept), (statistics.pstdev(kept) if len(kept) > 1 else 0.0)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table (cells are written as given)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def as_row(record: Any) -> dict[str, Any]:
    """A record as a flat dict: a dataclass instance by its fields, a mapping as is.

    Raises:
        TypeError: for anything else.
    """
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    if isinstance(record, Mapping):
        return dict(record)
    raise TypeError(f"record: expected a dataclass instance or a mapping, actual {record!r}")


def write_csv(
    path: str | Path, rows: Iterable[Any], *, fieldnames: Sequence[str] | None = None
) -> Path:
    """Write ``rows`` (dataclass instances or mappings, see :func:`as_row`) as CSV.

    The columns are ``fieldnames``, else the keys of the first row; keys a row lacks are
    left empty and keys not in the columns are dropped. The parent folder is created.

    Raises:
        ValueError: no rows and no ``fieldnames``.
    """
    table = [as_row(r) for r in rows]
    if fieldnames is None:
        if not table:
            raise ValueError("rows: expected at least one row (or fieldnames), actual none")
        fieldnames = list(table[0])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(fieldnames), extrasaction="ignore")
        writer.writeheader()
        for row in table:
            writer.writerow({k: row.get(k) for k in fieldnames})
    return path
