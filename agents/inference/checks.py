"""Checks at the inference server's entries: versions, the clock, weights, finite values.

:func:`all_finite` is the one NaN/inf test of the request path (a client's submit and the
server's batch); the benchmarks measure it against a no-op in the same run.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = ["MAX_VERSION", "all_finite", "check_clock_reading", "check_weights"]

#: Largest weights version: answers carry it as an int64.
MAX_VERSION = 2**63 - 1


def check_clock_reading(now: Any) -> float:
    """``now`` (a clock reading) as a float, if it is a finite real number."""
    if isinstance(now, bool) or not isinstance(now, numbers.Real) or not math.isfinite(now):
        raise TypeError(f"clock: expected a callable returning finite seconds, actual {now!r:.80}")
    return float(now)


def check_weights(weights: Any) -> None:
    """A numpy state_dict with finite floating-point values (checked before the swap)."""
    if not isinstance(weights, dict) or not weights:
        raise TypeError(
            f"weights: expected a non-empty dict of numpy arrays, actual {type(weights).__name__}"
        )
    for key, value in weights.items():
        array = np.asarray(value) if isinstance(value, np.ndarray | np.generic) else None
        if array is None or array.dtype.kind not in "biuf":
            raise TypeError(
                f"weights[{key!r}]: expected a numeric numpy array, actual {type(value).__name__}"
            )
        if not all_finite(array):
            raise ValueError(f"weights[{key!r}]: expected finite values, actual NaN or inf")


def all_finite(array: np.ndarray) -> bool:
    """Whether every value of a numeric array is finite (integers and bools always are)."""
    return array.dtype.kind not in "fc" or bool(np.isfinite(array).all())
