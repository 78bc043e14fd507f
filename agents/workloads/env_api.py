"""Whether an environment keeps the Gymnasium API, checked before a workload trains on it.

:func:`check_env_api` resets a probe instance and steps it once, and refuses an env whose
``reset`` takes no seed or does not return ``(obs, info)``, whose ``step`` does not return
Gymnasium's five values, or whose observations do not match its observation space, with
an :class:`~fleetgym.errors.EnvAPIError` naming the env and what is wrong.
"""

from __future__ import annotations

import copy
import inspect
import random
import warnings
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.errors import EnvAPIError
from fleetgym.validation import quote

__all__ = ["check_env_api"]


#: The wrappers ``gym.make`` adds around every env: the probe looks beneath them (a
#: ``TimeLimit`` would fail on an old-API step before the step's values could be read).
_MAKE_WRAPPERS = (
    gym.wrappers.TimeLimit,
    gym.wrappers.OrderEnforcing,
    gym.wrappers.PassiveEnvChecker,
)


def _mismatch(space: gym.Space, obs: Any) -> str | None:
    """Why ``obs`` does not have the structure and shape of ``space`` (None: it has)."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping) or set(obs) != set(space.spaces):
            keys = sorted(map(str, obs)) if isinstance(obs, Mapping) else type(obs).__name__
            return f"keys {quote(keys)}, expected {sorted(space.spaces)}"
        for key, part in space.spaces.items():
            why = _mismatch(part, obs[key])
            if why is not None:
                return f"[{key!r}]: {why}"
        return None
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, (tuple, list)) or len(obs) != len(space.spaces):
            return f"{quote(obs, 60)}, expected a tuple of {len(space.spaces)}"
        for i, (part, value) in enumerate(zip(space.spaces, obs, strict=True)):
            why = _mismatch(part, value)
            if why is not None:
                return f"[{i}]: {why}"
        return None
    if isinstance(
        space,
        (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary),
    ):
        try:
            array = np.asarray(obs)
        except Exception:  # ragged nested lists, objects numpy cannot hold
            return f"{quote(obs, 60)}, expected an array of shape {space.shape}"
        if array.dtype.kind not in "biuf":
            return f"{quote(obs, 60)}, expected numbers of shape {space.shape}"
        if array.shape != space.shape:
            return f"shape {array.shape}, expected {space.shape}"
    return None  # other spaces: their preprocessing refuses them


def _takes_seed(reset: Any) -> bool:
    """Whether ``reset`` takes ``seed=`` (True where its signature cannot be read)."""
    try:
        parameters = inspect.signature(reset).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "seed" or p.kind is p.VAR_KEYWORD for p in parameters)


def _values(result: Any) -> str:
    """How many values ``reset`` or ``step`` returned, in words."""
    if not isinstance(result, tuple):
        return f"a single {type(result).__name__}"
    return f"{len(result)} values"


def check_env_api(env: gym.Env, name: str) -> None:
    """Reset ``env`` and step it once, as Gymnasium's env checker does, and refuse an env
    whose ``reset`` does not return ``(obs, info)``, whose ``step`` does not return the
    five values of the Gymnasium API (the old Gym API returns four), or whose
    observations have another shape than its observation space's.

    Meant for a probe instance the caller then closes: it is reset with seed 0 and its
    action space's generator is not used (a copy draws the action); NumPy's and Python's
    global generators are left as they were. An env whose ``reset`` or ``step`` raises is
    not judged here (the rollout reports it, naming the step).

    Raises:
        EnvAPIError: the message names the env (``name``) and what is wrong.
    """
    inner = env
    while isinstance(inner, _MAKE_WRAPPERS):
        inner = inner.env

    def refuse(what: str) -> EnvAPIError:
        return EnvAPIError(
            f"workload: expected an env that follows the Gymnasium API, actual {quote(name)} "
            f"({what})"
        )

    # The global generators an env might draw from, restored after the probe.
    saved = np.random.get_state(), random.getstate()  # noqa: NPY002
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if not _takes_seed(inner.reset):
                raise refuse("its reset takes no seed= (the old Gym API: reset(self))")
            try:
                result = inner.reset(seed=0)
            except Exception:
                return
            if not isinstance(result, tuple) or len(result) != 2:
                old = "" if isinstance(result, tuple) else " (the old Gym API: obs alone)"
                raise refuse(
                    f"its reset returns {_values(result)}{old}, not the two (obs, info) of "
                    "Gymnasium's reset"
                )
            why = _mismatch(env.observation_space, result[0])
            if why is not None:
                raise refuse(f"the observation of its reset has {why} by its observation_space")
            try:
                action_space = copy.deepcopy(env.action_space)
                action_space.seed(0)
                stepped: Any = inner.step(action_space.sample())
            except Exception:
                return
            result = stepped
            if not isinstance(result, tuple) or len(result) != 5:
                four = isinstance(result, tuple) and len(result) == 4
                old = " (obs, reward, done, info: the old Gym API)" if four else ""
                raise refuse(
                    f"its step returns {_values(result)}{old}, not the five (obs, reward, "
                    "terminated, truncated, info) of Gymnasium's step"
                )
            why = _mismatch(env.observation_space, result[0])
            if why is not None:
                raise refuse(f"the observation of its step has {why} by its observation_space")
    finally:
        np.random.set_state(saved[0])  # noqa: NPY002
        random.setstate(saved[1])
