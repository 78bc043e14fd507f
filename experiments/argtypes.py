"""``argparse`` types shared by the subcommands: bad values end in one clear line."""

from __future__ import annotations

import argparse
import json
from typing import Any


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer >= {minimum}, actual {text!r}"
        ) from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, actual {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1.

    Example:
        >>> positive_int("3")
        3
    """
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0.

    Example:
        >>> non_negative_int("0")
        0
    """
    return _int_at_least(text, 0)


def env_kwarg(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``, the value parsed as JSON when it can be (else kept as a string).

    Example:
        >>> env_kwarg("budget=0.01"), env_kwarg("pricing=lambda")
        (('budget', 0.01), ('pricing', 'lambda'))
    """
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, actual {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value  # a bare string such as pricing=lambda
