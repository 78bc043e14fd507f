"""Gymnasium spaces and their elements as wire data (JSON meta plus numpy arrays).

Supported: ``Box``, ``Discrete``, ``MultiDiscrete`` and ``MultiBinary`` (the spaces whose
elements are single arrays). Elements travel as one array each; a ``Discrete`` element
as a 0-d int64 array.

Example:
    >>> from gymnasium import spaces
    >>> meta, arrays = describe_space(spaces.Box(-1.0, 1.0, (3,)))
    >>> build_space(meta, arrays)
    Box(-1.0, 1.0, (3,), float32)
    >>> space = spaces.Discrete(2)
    >>> int(from_wire(space, to_wire(space, 1)))
    1
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.errors import ProtocolError, UnsupportedSpaceError

__all__ = ["build_space", "describe_space", "from_wire", "to_wire"]

_SUPPORTED = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def describe_space(space: gym.Space[Any]) -> tuple[dict[str, Any], list[np.ndarray]]:
    """A space as (meta, arrays) for a frame.

    Raises:
        UnsupportedSpaceError: For a space other than Box, Discrete, MultiDiscrete, MultiBinary.
    """
    if isinstance(space, spaces.Box):
        return {"kind": "Box", "dtype": str(space.dtype)}, [space.low, space.high]
    if isinstance(space, spaces.Discrete):
        return {"kind": "Discrete", "n": int(space.n), "start": int(space.start)}, []
    if isinstance(space, spaces.MultiDiscrete):
        return {"kind": "MultiDiscrete", "dtype": str(space.dtype)}, [space.nvec, space.start]
    if isinstance(space, spaces.MultiBinary):
        return {"kind": "MultiBinary", "n": [int(x) for x in np.atleast_1d(space.n)]}, []
    raise UnsupportedSpaceError(
        f"space: expected one of {[c.__name__ for c in _SUPPORTED]}, actual {space}"
    )


def build_space(meta: dict[str, Any], arrays: list[np.ndarray]) -> gym.Space[Any]:
    """The space that :func:`describe_space` described.

    Raises:
        ProtocolError: For a description that does not make a valid space.
    """
    kind = meta.get("kind")
    try:
        if kind == "Box" and len(arrays) == 2:
            dtype = np.dtype(_dtype_name(meta.get("dtype")))
            return spaces.Box(arrays[0], arrays[1], dtype=dtype)  # type: ignore[arg-type]
        if kind == "Discrete" and not arrays:
            return spaces.Discrete(_int(meta.get("n")), start=_int(meta.get("start")))
        if kind == "MultiDiscrete" and len(arrays) == 2:
            dtype = np.dtype(_dtype_name(meta.get("dtype")))
            return spaces.MultiDiscrete(arrays[0], dtype=dtype, start=arrays[1])  # type: ignore[arg-type]
        if kind == "MultiBinary" and not arrays:
            n = meta.get("n")
            if not isinstance(n, list) or not all(isinstance(x, int) for x in n):
                raise ValueError(f"n: expected a list of ints, actual {n!r}")
            return spaces.MultiBinary(n[0] if len(n) == 1 else n)
    except (ValueError, TypeError, AssertionError) as exc:
        raise ProtocolError(f"space description: expected a valid {kind}, actual {exc}") from exc
    raise ProtocolError(f"space description: expected a supported space, actual {meta!r}")


def _int(x: Any) -> int:
    if not isinstance(x, int) or isinstance(x, bool):
        raise TypeError(f"expected an int, actual {x!r}")
    return x


def _dtype_name(x: Any) -> str:
    allowed = {"float16", "float32", "float64", "int8", "int16", "int32", "int64"}
    allowed |= {"uint8", "uint16", "uint32", "uint64"}
    if x not in allowed:
        raise ValueError(f"dtype: expected one of {sorted(allowed)}, actual {x!r}")
    return str(x)


def to_wire(space: gym.Space[Any], x: Any) -> np.ndarray:
    """An element of ``space`` as one array (a Discrete element as a 0-d int64)."""
    if isinstance(space, spaces.Discrete):
        return np.asarray(int(x), dtype=np.int64)
    return np.asarray(x, dtype=space.dtype)


def from_wire(space: gym.Space[Any], arr: np.ndarray) -> Any:
    """The element of ``space`` that an array from the wire carries.

    Raises:
        ProtocolError: If the array's shape or kind does not fit the space.
    """
    if isinstance(space, spaces.Discrete):
        if arr.shape != () or arr.dtype.kind not in "iu":
            raise ProtocolError(
                f"element: expected a 0-d integer array for {space}, "
                f"actual {arr.dtype} of shape {arr.shape}"
            )
        return space.dtype.type(int(arr))
    if arr.shape != space.shape:
        raise ProtocolError(
            f"element: expected shape {space.shape} for {space}, actual {arr.shape}"
        )
    return arr.astype(space.dtype, copy=False)
