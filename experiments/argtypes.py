"""``argparse`` types shared by the subcommands: bad values end in one clear line."""

from __future__ import annotations

import argparse


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
