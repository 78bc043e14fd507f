"""Argument checks shared by the schedulers, the scheduling env and its cost model.

Each check returns the value as a plain Python number or raises a ``TypeError`` (wrong
type) or ``ValueError`` (out of range) whose message reads ``"<name>: expected ...,
actual ..."``. Booleans are refused where a number is expected; numpy scalars are
accepted. Imports numpy only.

Example:
    >>> check_integer("num_actors", np.int64(4), 1), check_number("beta", 0.5)
    (4, 0.5)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["check_integer", "check_number"]


def check_integer(name: str, value: Any, low: int) -> int:
    """``value`` as an int ``>= low``.

    Raises:
        TypeError: If ``value`` is not an integer (a bool is not).
        ValueError: If it is below ``low``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, actual {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name}: expected an integer >= {low}, actual {value}")
    return int(value)


def check_number(name: str, value: Any, *, low: float = 0.0, strict: bool = False) -> float:
    """``value`` as a finite float ``>= low`` (``> low`` with ``strict``).

    Raises:
        TypeError: If ``value`` is not a real number (a bool is not).
        ValueError: If it is not finite or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a number, actual {type(value).__name__} {value!r}")
    value = float(value)
    bad = value <= low if strict else value < low
    if not math.isfinite(value) or bad:
        op = ">" if strict else ">="
        raise ValueError(f"{name}: expected a finite number {op} {low:g}, actual {value!r}")
    return value
