"""The check of every action a shim sends: cheap on the hot path, exact in its message."""

from __future__ import annotations

import numbers
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.errors import InvalidActionError
from fleetgym.validation import quote

__all__ = ["ActionCheck"]

#: Each signed integer dtype's unsigned twin (same size), for one-reduction range checks.
_UNSIGNED = {np.dtype(f"i{size}"): np.dtype(f"u{size}") for size in (1, 2, 4, 8)}


def _safe_contains(space: gym.Space[Any], action: Any) -> bool:
    try:
        return bool(space.contains(action))
    except Exception:  # a malformed value can make a space's own check raise
        return False


class ActionCheck:
    """Checks each action a shim sends against the action space, cheaply on the hot path.

    Gymnasium's ``space.contains`` rules, except for Box actions: any real dtype passes (a
    float64 action for a float32 space) if the shape matches and every value is finite;
    finite values outside the bounds pass too, as the env would receive them without the
    shim (Box envs such as Pendulum and MuJoCo clip them; the compensation wrappers record
    them clipped), while NaN and infinity never pass. A Discrete action must be an integer
    (``0.7`` and ``1.0`` are rejected, not truncated). With ``batch`` the check applies to a
    whole batch of shape ``(batch, *shape)`` of an array space; a scalar is not broadcast.

    Args:
        space: The (single) action space.
        batch: Number of sub-envs for a batch of actions, or None for one action.

    Example:
        >>> check = ActionCheck(spaces.Discrete(2))
        >>> check(1, step=0)
        >>> check(0.7, step=3)
        Traceback (most recent call last):
        ...
        fleetgym.errors.InvalidActionError: action at step 3: expected an element of Discrete(2), actual float 0.7
    """

    __slots__ = (
        "int_range",
        "space",
        "batch",
        "_discrete",
        "_box",
        "_lo",
        "_hi",
        "_low",
        "_high",
        "_max",
        "_kinds",
        "_array",
        "_batch_shape",
    )

    def __init__(self, space: gym.Space[Any], batch: int | None = None) -> None:
        self.space = space
        self.batch = batch
        self._batch_shape = None if batch is None else (batch, *(space.shape or ()))
        self._discrete = isinstance(space, spaces.Discrete)
        #: ``(start, start + n)`` of a Discrete space, else None: a hot loop may skip the
        #: call for a Python int ``a`` with ``start <= a < start + n`` (it would pass).
        self.int_range: tuple[int, int] | None = None
        self._box = isinstance(space, spaces.Box)
        self._array = isinstance(
            space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)
        )
        self._lo = self._hi = 0
        self._low: Any = None
        self._high: Any = None
        self._kinds = "iub"
        self._max = np.maximum.reduce
        if isinstance(space, spaces.Discrete):
            self._lo, self._hi = int(space.start), int(space.start + space.n)
            self._low, self._high = self._lo, self._hi - 1
            self.int_range = (self._lo, self._hi)
        elif isinstance(space, spaces.MultiDiscrete):
            self._low, self._high = space.start, space.start + space.nvec - 1
        elif isinstance(space, spaces.MultiBinary):
            self._low, self._high = 0, 1
        elif isinstance(space, spaces.Box):
            self._low, self._high = space.low, space.high
            self._kinds = "iubf"

    def __call__(self, action: Any, step: int) -> None:
        """Raise :class:`InvalidActionError` unless ``action`` is valid.

        Raises:
            InvalidActionError: Naming the step, the space and (a bounded quote of) the action.
        """
        if self.batch is None:
            if type(action) is int and self._discrete:
                if self._lo <= action < self._hi:
                    return  # the common case, kept cheap
            elif self._array:
                if self._valid_array(action, self.space.shape):
                    return
            elif _safe_contains(self.space, action):
                return
        elif self._array and self._valid_array(action, self._batch_shape):
            return
        what = "an element of" if self.batch is None else f"a batch of {self.batch} actions of"
        raise InvalidActionError(
            f"action at step {step}: expected {what} {self.space}, "
            f"actual {type(action).__name__} {quote(action)}"
        )

    def _valid_array(self, action: Any, shape: Any) -> bool:
        if isinstance(action, np.ndarray):
            x = action
        elif isinstance(action, (numbers.Number, list, tuple, np.generic)):
            try:
                x = np.asarray(action)
            except (ValueError, TypeError, OverflowError):
                return False
        else:
            return False
        if x.shape != shape or x.dtype.kind not in self._kinds:
            return False
        if x.size == 0:
            return True
        if self._discrete:
            unsigned = _UNSIGNED.get(x.dtype) if self._lo == 0 else None
            if unsigned is not None:
                # One reduction checks both bounds: negative integers viewed as unsigned
                # are larger than any valid action.
                return bool(self._max(x.view(unsigned)) < self._hi)
            return bool(self._lo <= x.min() and x.max() < self._hi)
        if self._box:
            return x.dtype.kind != "f" or bool(np.isfinite(x).all())
        return bool(np.all(x >= self._low) and np.all(x <= self._high))
