"""Checks the learners share: seeds, versions, paths, observations, trajectories, arrays.

Every learner entry point (:class:`~fleetgym.agents.learners.ppo.PPOLearner`,
:class:`~fleetgym.agents.learners.lag.CompensatedPPOLearner`,
:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`) checks its arguments
and the files it reads through these functions, so a bad value raises the same clean
error everywhere (see docs/errors.md):

* :func:`check_seed`, :func:`check_version` -- ints in ``[0, 2**63 - 1]`` (torch
  generators, numpy's int64 lag arithmetic and the inference server's versions);
* :func:`check_path` -- a file path (``str`` or ``os.PathLike``, not empty, not a folder);
* :func:`check_observation` -- one observation or a batch of them, of numbers, of the
  policy's shape, finite;
* :func:`check_trajectory` -- a trajectory a learner can update on (lengths, shapes,
  finite numbers, possible actions);
* :func:`check_series`, :func:`check_flags` -- the per-step arrays of an advantage
  estimator (GAE, V-trace): one length, finite numbers.

The checkpoint files are read in :mod:`~fleetgym.agents.learners.checkpoint`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from fleetgym.validation import check_int, quote

#: Largest seed and policy version (int64: torch generators, numpy lag arrays, the server).
MAX_SEED = 2**63 - 1
MAX_VERSION = 2**63 - 1


def _bounded(name: str, value: Any, high: int, label: str) -> int:
    value = check_int(name, value, low=0)
    if value > high:
        raise ValueError(f"{name}: expected an int >= 0 and <= {label}, actual {quote(value)}")
    return value


def check_seed(name: str, value: Any) -> int:
    """``value`` as a seed in ``[0, 2**63 - 1]``.

    Example:
        >>> check_seed("seed", 2**64)
        Traceback (most recent call last):
        ...
        ValueError: seed: expected an int >= 0 and <= 2**63 - 1, actual 18446744073709551616

    Raises:
        TypeError: If it is not an int.
        ValueError: If it is negative or too large.
    """
    return _bounded(name, value, MAX_SEED, "2**63 - 1")


def check_version(name: str, value: Any) -> int:
    """``value`` as a policy version in ``[0, 2**63 - 1]``.

    Raises:
        TypeError: If it is not an int.
        ValueError: If it is negative or too large.
    """
    return _bounded(name, value, MAX_VERSION, "2**63 - 1")


def check_observation(name: str, value: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, bool]:
    """``value`` as a batch of observations of ``shape``, and whether it was a single one.

    Accepts one observation of ``shape`` or a batch ``(n, *shape)`` with ``n >= 1``, of
    bools, integers or floats (an ``object`` array of numbers too), all finite.

    Raises:
        TypeError: If it is not an array of numbers (a string, ``None``, ``object``s).
        ValueError: On another shape, an empty batch, NaN or infinity.
    """
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"{name}: expected an array of numbers, actual {type(value).__name__}")
    try:
        array = np.asarray(value)
        if array.dtype.kind == "O":
            array = array.astype(np.float64)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(
            f"{name}: expected an array of numbers, actual {type(value).__name__} {quote(value)}"
        ) from None
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected an array of numbers, actual dtype {array.dtype}")
    single = array.shape == shape
    batch = array[None] if single else array
    if batch.shape[1:] != shape or batch.ndim != len(shape) + 1 or batch.shape[0] < 1:
        expected = ", ".join(map(str, shape))
        raise ValueError(
            f"{name}: expected shape {shape} or (n >= 1, {expected}), actual {array.shape}"
        )
    if batch.dtype.kind == "f" and not np.isfinite(batch).all():
        raise ValueError(f"{name}: expected finite values, actual NaN or inf")
    return batch, single


#: A trajectory's per-step arrays, and whether each must hold finite numbers.
TRAJECTORY_ARRAYS = {
    "obs": True,
    "actions": True,
    "log_probs": True,
    "values": True,
    "rewards": True,
    "terminated": False,
    "truncated": False,
    "truncation_values": True,
}


def check_trajectory(
    name: str, traj: Any, obs_shape: tuple[int, ...], discrete: bool, action_dim: int
) -> None:
    """Refuse a trajectory a learner cannot update on, naming ``name`` and the field.

    Every per-step array must be an ``np.ndarray`` of numbers with one entry per reward,
    observations of ``obs_shape``, numbers finite (``last_value`` too), and actions the
    policy's: integers in ``[0, action_dim)`` for a categorical policy, ``action_dim``
    finite floats per step for a Gaussian one.

    Raises:
        TypeError: For a field that is not an array of numbers.
        ValueError: For a wrong length or shape, NaN, infinity or an impossible action.
    """
    arrays: dict[str, np.ndarray] = {}
    for field in TRAJECTORY_ARRAYS:
        value = getattr(traj, field, None)
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
            kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise TypeError(f"{name}.{field}: expected an np.ndarray of numbers, actual {kind}")
        arrays[field] = value
    n = arrays["rewards"].shape[0] if arrays["rewards"].ndim == 1 else -1
    action_shape = () if discrete else (action_dim,)
    shapes = {"obs": obs_shape, "actions": action_shape}
    for field, array in arrays.items():
        expected = (n, *shapes.get(field, ()))
        if array.shape != expected:
            raise ValueError(f"{name}.{field}: expected shape {expected}, actual {array.shape}")
        if TRAJECTORY_ARRAYS[field] and array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(f"{name}.{field}: expected finite values, actual NaN or inf")
    actions = arrays["actions"]
    if discrete and len(actions):
        if actions.dtype.kind not in "iu":
            raise TypeError(
                f"{name}.actions: expected integer actions, actual dtype {actions.dtype}"
            )
        if actions.min() < 0 or actions.max() >= action_dim:
            raise ValueError(
                f"{name}.actions: expected actions in [0, {action_dim}), actual "
                f"[{actions.min()}, {actions.max()}]"
            )
    last = getattr(traj, "last_value", None)
    if isinstance(last, bool) or not isinstance(last, numbers.Real) or not math.isfinite(last):
        raise ValueError(f"{name}.last_value: expected a finite number, actual {quote(last)}")


def check_series(**arrays: Any) -> list[np.ndarray]:
    """Equally long 1-D arrays of finite numbers, as float64 (their names in the errors).

    Example:
        >>> check_series(rewards=[1, 2], values=np.zeros(3))
        Traceback (most recent call last):
        ...
        ValueError: rewards, values: expected one length, actual {'rewards': 2, 'values': 3}

    Raises:
        TypeError: For an array that is not of numbers.
        ValueError: For one that is not 1-D or not finite, or for differing lengths.
    """
    out = []
    for name, value in arrays.items():
        try:
            array = np.asarray(value, np.float64)
        except (TypeError, ValueError, OverflowError):
            raise TypeError(
                f"{name}: expected an array of numbers, actual {quote(value)}"
            ) from None
        if array.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array, actual shape {array.shape}")
        if not np.isfinite(array).all():
            raise ValueError(f"{name}: expected finite values, actual NaN or inf")
        out.append(array)
    lengths = {name: len(a) for name, a in zip(arrays, out, strict=True)}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{', '.join(lengths)}: expected one length, actual {lengths}")
    return out


def check_flags(n: int, **arrays: Any) -> None:
    """Episode-end flags: ``n`` of each (one per reward).

    Raises:
        ValueError: For another length or a flags array that is not 1-D.
    """
    for name, value in arrays.items():
        shape = np.shape(value)
        if shape != (n,):
            raise ValueError(f"{name}: expected {n} flags (one per reward), actual shape {shape}")


__all__ = [
    "MAX_SEED",
    "MAX_VERSION",
    "check_flags",
    "check_observation",
    "check_seed",
    "check_series",
    "check_trajectory",
    "check_version",
]
