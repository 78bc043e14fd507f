"""Argument checks, written once for the whole package.

Every public constructor and entry point of fleetgym validates its arguments through these
functions, so the same mistake raises the same error everywhere:

* a value of the wrong *type* raises :class:`TypeError` (a ``bool`` is never a number);
* a value of the right type but outside its range raises :class:`ValueError`;
* every message reads ``"<argument>: expected …, actual …"`` and quotes at most
  :data:`QUOTE_LIMIT` characters of the offending value.

This module sits at the bottom of the layers next to :mod:`fleetgym.errors`: it imports
numpy and the standard library only.

Example:
    >>> check_int("num_actors", np.int64(4), low=1), check_float("beta", 0.5, low=0.0)
    (4, 0.5)
    >>> check_float("lr", float("inf"), low=0.0, strict=True)
    Traceback (most recent call last):
    ...
    ValueError: lr: expected a finite number > 0, actual inf
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = [
    "QUOTE_LIMIT",
    "check_bool",
    "check_choice",
    "check_float",
    "check_int",
    "check_probability",
    "check_timeout",
    "quote",
]

#: Longest prefix of a bad value quoted in an error message.
QUOTE_LIMIT = 80


def quote(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` cut to ``limit`` characters, so a huge input gives a short message.

    Example:
        >>> quote("x" * 200, limit=10)
        "'xxxxxxxx… (202 characters)"
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text)} characters)"


def _actual(value: Any) -> str:
    return f"{type(value).__name__} {quote(value)}"


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` as a Python int in ``[low, high]`` (either bound may be None).

    numpy integers are accepted; ``bool`` and floats are not, even ``3.0``.

    Raises:
        TypeError: If ``value`` is not an integer.
        ValueError: If it is out of range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int, actual {_actual(value)}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            bound = f">= {low}"
        elif low is None:
            bound = f"<= {high}"
        else:
            bound = f"in [{low}, {high}]"
        raise ValueError(f"{name}: expected an int {bound}, actual {quote(value)}")
    return value


def check_float(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    strict: bool = False,
    allow_inf: bool = False,
) -> float:
    """``value`` as a finite Python float in ``[low, high]`` (``(low, high)`` with ``strict``).

    NaN is always rejected; infinity only passes with ``allow_inf`` (and the bounds).

    Raises:
        TypeError: If ``value`` is not a real number.
        ValueError: If it is NaN, infinite (unless allowed) or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a number, actual {_actual(value)}")
    value = float(value)
    finite = math.isfinite(value) or (allow_inf and not math.isnan(value))
    too_low = low is not None and (value <= low if strict else value < low)
    too_high = high is not None and (value >= high if strict else value > high)
    if not finite or too_low or too_high:
        lo, hi = (">", "<") if strict else (">=", "<=")
        parts = ["a finite number" if not allow_inf else "a number (not NaN)"]
        if low is not None:
            parts.append(f"{lo} {low:g}")
        if high is not None:
            parts.append(f"{'and ' if low is not None else ''}{hi} {high:g}")
        raise ValueError(f"{name}: expected {' '.join(parts)}, actual {quote(value)}")
    return value


def check_probability(name: str, value: Any) -> float:
    """``value`` as a float in ``[0, 1]``.

    Raises:
        TypeError: If ``value`` is not a real number.
        ValueError: If it is outside ``[0, 1]`` or NaN.
    """
    return check_float(name, value, low=0.0, high=1.0)


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a bool; only ``True``/``False`` (and numpy bools) pass, never ``"no"``.

    Raises:
        TypeError: If ``value`` is not a bool.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, actual {_actual(value)}")
    return bool(value)


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """``value`` as one of the strings in ``choices``.

    Raises:
        TypeError: If ``value`` is not a string.
        ValueError: If it is not one of ``choices``.
    """
    options = tuple(choices)
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {options}, actual {_actual(value)}")
    if value not in options:
        raise ValueError(f"{name}: expected one of {options}, actual {quote(value)}")
    return value


def check_timeout(name: str, value: Any) -> float | None:
    """``value`` as a positive, finite number of seconds, or None (wait without limit).

    Raises:
        TypeError: If ``value`` is neither None nor a number.
        ValueError: If it is not positive and finite.
    """
    if value is None:
        return None
    return check_float(name, value, low=0.0, strict=True)
