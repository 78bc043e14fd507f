"""How stale a network makes the agent's input: the history lengths the compensation uses.

:func:`staleness_quantile` measures a high percentile of the observation (or round-trip)
age through the real :class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper` on a
counter env; :func:`history_length_for_profile` turns it into CALF's k = d + 1 for a
profile, and :func:`history_length_for_env` for the shim inside an env stack. The wrappers
that use these lengths are in :mod:`fleetgym.wrappers.compensation`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.validation import check_choice, check_float, check_int, quote
from fleetgym.wrappers.network_shim import NetworkShimWrapper

__all__ = [
    "MAX_HISTORY",
    "history_length_for_env",
    "history_length_for_profile",
    "staleness_quantile",
]

#: Key of the shim's ``info`` with the delivered observation's age. It is derived from the
#: timestamp the observation packet carries, so a real receiver can compute it too.
AGE_KEY = "obs_age_steps"
#: Largest history length (frames or actions) and Monte-Carlo sample size accepted.
MAX_HISTORY = 10_000
MAX_SAMPLES = 10_000_000


class _TickEnv(gym.Env[np.ndarray, np.int64]):
    """Counter env used to measure staleness: the observation is the tick index."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, np.inf, shape=(1,), dtype=np.float64)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return np.array([0.0]), {}

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        self._t += 1
        return np.array([float(self._t)]), 0.0, False, False, {}


def _check_quantile(quantile: Any) -> float:
    value = check_float("quantile", quantile, 0.0, 1.0)
    if value == 0.0:
        raise ValueError("quantile: expected a finite number > 0 and <= 1, actual 0.0")
    return value


def _check_length(name: str, value: Any) -> int:
    return check_int(name, value, 1, MAX_HISTORY)


def staleness_quantile(
    profile: str | None = None,
    step_ms: float = 20.0,
    quantile: float = 0.99,
    *,
    path: str = "uplink",
    n_steps: int = 20_000,
    seed: int = 0,
    **shim_kwargs: Any,
) -> int:
    """High-percentile staleness, in control periods, of a network configuration.

    Measured by Monte-Carlo through the real :class:`NetworkShimWrapper` on a counter
    env, so every rule of the loop model (loss holding the last observation, FIFO
    queueing, trace wrap-around) is accounted for exactly as in training.

    Args:
        profile: A profile name (see :func:`fleetgym.wrappers.profiles.list_profiles`);
            ``None`` when ``uplink``/``downlink`` channels are given in ``shim_kwargs``.
        step_ms: The control period in milliseconds.
        quantile: Which quantile of the staleness distribution, in (0, 1].
        path: ``"uplink"`` for the age of the delivered observation, ``"round_trip"``
            for observation age + age of the applied action (how far back the
            actions still in flight reach).
        n_steps: Monte-Carlo sample size (one long episode).
        seed: Seed of the shim's packet schedule.
        **shim_kwargs: More keyword arguments of :class:`NetworkShimWrapper`
            (``uplink``, ``downlink``, ``delivery``, ...).

    Returns:
        The ``quantile`` of the per-step staleness, rounded up to whole steps.

    Raises:
        TypeError, ValueError: on a bad argument.

    Example:
        >>> staleness_quantile("perfect", step_ms=20.0)
        0
    """
    quantile = _check_quantile(quantile)
    n_steps = check_int("n_steps", n_steps, 1, MAX_SAMPLES)
    check_choice("path", path, ("uplink", "round_trip"))
    kwargs = dict(shim_kwargs)
    if profile is not None:
        kwargs["profile"] = profile
    shim = NetworkShimWrapper(_TickEnv(), step_ms=step_ms, **kwargs)
    shim.reset(seed=seed)
    ages = np.empty(n_steps, dtype=np.int64)
    for i in range(n_steps):
        _, _, _, _, info = shim.step(0)
        age = int(info[AGE_KEY])
        if path == "round_trip":
            age += int(info["action_age_steps"])
        ages[i] = age
    shim.close()
    # "inverted_cdf" is the smallest observed age whose empirical CDF reaches the
    # quantile: an age that really occurs, never an interpolation between two.
    return int(np.quantile(ages, quantile, method="inverted_cdf"))


@functools.lru_cache(maxsize=256)
def _cached_history_length(
    profile: str,
    step_ms: float,
    quantile: float,
    path: str,
    n_steps: int,
    seed: int,
    delivery: str | None,
    timing: str | None = None,
    uplink_share: float | None = None,
) -> int:
    given = {"delivery": delivery, "timing": timing, "uplink_share": uplink_share}
    extra = {key: value for key, value in given.items() if value is not None}
    return (
        staleness_quantile(
            profile, step_ms, quantile, path=path, n_steps=n_steps, seed=seed, **extra
        )
        + 1
    )


def history_length_for_profile(
    profile: str | Sequence[str] | None,
    step_ms: float,
    quantile: float = 0.99,
    *,
    path: str = "uplink",
    n_steps: int = 20_000,
    seed: int = 0,
    **shim_kwargs: Any,
) -> int:
    """History length k = (``quantile`` of staleness in steps) + 1 for a network profile.

    With k frames the agent's input still holds the observation it would have had
    without the network in ``quantile`` of the steps (CALF's k = d + 1). For a sequence
    of profiles (drawn per episode) k is the maximum over them, so the stack is long
    enough for the worst profile of the mix. Results for named profiles are cached.

    Args:
        profile: A profile name, a sequence of names, or ``None`` with explicit channels
            in ``shim_kwargs``.
        step_ms: The control period in milliseconds.
        quantile: Quantile of the staleness distribution, in (0, 1].
        path: ``"uplink"`` (observation age: frame stacks) or ``"round_trip"``
            (observation + action age: action history).
        n_steps: Monte-Carlo sample size per profile.
        seed: Seed of the packet schedule.
        **shim_kwargs: More :class:`NetworkShimWrapper` arguments (channels, delivery,
            timing, uplink_share).

    Returns:
        k >= 1.

    Raises:
        TypeError, ValueError: on a bad argument; UnknownProfileError for an unknown name.

    Example:
        >>> history_length_for_profile("perfect", step_ms=20.0)
        1
        >>> history_length_for_profile("ethernet", step_ms=20.0)
        1
    """
    quantile = _check_quantile(quantile)
    step_ms = check_float("step_ms", step_ms, 0.0, strict=True)
    check_choice("path", path, ("uplink", "round_trip"))
    if profile is None:
        channels = {
            k: v for k, v in shim_kwargs.items() if k not in ("start_action", "copy_observations")
        }
        return (
            staleness_quantile(
                None,
                float(step_ms),
                quantile,
                path=path,
                n_steps=n_steps,
                seed=seed,
                **channels,
            )
            + 1
        )
    names = [profile] if isinstance(profile, str) else list(profile)
    if not names or not all(isinstance(n, str) or hasattr(n, "uplink") for n in names):
        raise TypeError(
            "profile: expected a profile name or a non-empty sequence of names, "
            f"actual {quote(profile)}"
        )
    # Only what changes the packet schedule matters; drop the rest so the cache applies.
    measured = {
        key: value
        for key, value in shim_kwargs.items()
        if value is not None and key not in ("start_action", "copy_observations", "block_size")
    }
    lengths = []
    for name in names:
        if isinstance(name, str) and set(measured) <= {"delivery", "timing", "uplink_share"}:
            lengths.append(
                _cached_history_length(
                    name,
                    float(step_ms),
                    quantile,
                    path,
                    n_steps,
                    seed,
                    measured.get("delivery"),
                    measured.get("timing"),
                    measured.get("uplink_share"),
                )
            )
        else:
            lengths.append(
                staleness_quantile(
                    name,
                    float(step_ms),
                    quantile,
                    path=path,
                    n_steps=n_steps,
                    seed=seed,
                    **measured,
                )
                + 1
            )
    return max(lengths)


def _find_shim(env: gym.Env[Any, Any]) -> Any:
    current: Any = env
    while current is not None:
        if isinstance(current, NetworkShimWrapper):
            return current
        current = getattr(current, "env", None)
    return None


def history_length_for_env(
    env: gym.Env[Any, Any], quantile: float = 0.99, *, path: str = "uplink"
) -> int:
    """:func:`history_length_for_profile` of the :class:`NetworkShimWrapper` inside ``env``.

    Args:
        env: An env stack that contains a shim.
        quantile: Quantile of staleness.
        path: ``"uplink"`` or ``"round_trip"``.

    Returns:
        k >= 1.

    Raises:
        ValueError: if ``env`` holds no shim.
    """
    shim = _find_shim(env)
    if shim is None:
        raise ValueError(
            f"expected an env stack containing a NetworkShimWrapper to derive the history "
            f"length from, actual {env}; pass the length explicitly"
        )
    saved = dict(getattr(shim, "_saved_kwargs", {}))
    saved.pop("env", None)
    step_ms = float(shim.step_ms)
    saved.pop("step_ms", None)
    profile = saved.pop("profile", None)
    if profile is not None and not isinstance(profile, str) and not hasattr(profile, "uplink"):
        profile = list(profile)
    if profile is not None:
        saved.pop("uplink", None)
        saved.pop("downlink", None)
    return history_length_for_profile(profile, step_ms, quantile, path=path, **saved)
