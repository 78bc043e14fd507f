"""How stale a network makes the agent's input: the history lengths the compensation uses.

:func:`staleness_quantile` measures a high percentile of the observation (or round-trip)
age through the real :class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper` on a
counter env; :func:`history_length_for_profile` turns it into CALF's k = d + 1 for a
profile, and :func:`history_length_for_env` for the shim inside an env stack;
:func:`action_delay_for_profile` measures the network's median action age, the prior of
the predictive compensation. The wrappers that use these are in
:mod:`fleetgym.wrappers.compensation`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.validation import check_choice, check_float, check_int, quote
from fleetgym.wrappers.network_shim import NetworkShimWrapper
from fleetgym.wrappers.shim_config import resolve_profiles

__all__ = [
    "HISTORY_CAP",
    "MAX_HISTORY",
    "action_delay_for_profile",
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
#: Largest history length (frames or sent actions) that ``make_robust_env`` and
#: ``ObservationHistory`` choose by themselves: 16 ticks (320 ms at CartPole's 20 ms
#: period). The CALF study's PPO learns from stacks of 4 frames and 6 actions (wifi-normal);
#: a network whose staleness quantile is longer than this is one with stalls, and a stack
#: of hundreds of frames (a 1,500-number input) is no input PPO learns from. Ages beyond the
#: cap are reported by the age features' stall flag instead.
HISTORY_CAP = 16
#: Shim arguments that do not change the packet schedule (left out of the measurements).
_UNMEASURED = ("start_action", "copy_observations", "block_size", "info")


class TickEnv(gym.Env[np.ndarray, np.int64]):
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
    obs_ages, action_ages = _loop_ages(profile, step_ms, n_steps, seed, shim_kwargs)
    ages = obs_ages + action_ages if path == "round_trip" else obs_ages
    return _quantile(ages, quantile)


def _quantile(ages: np.ndarray, quantile: float) -> int:
    # "inverted_cdf" is the smallest observed age whose empirical CDF reaches the
    # quantile: an age that really occurs, never an interpolation between two.
    return int(np.quantile(ages, quantile, method="inverted_cdf"))


def _loop_ages(
    profile: Any, step_ms: float, n_steps: int, seed: int, shim_kwargs: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """``info["obs_age_steps"]`` and ``info["action_age_steps"]`` of one episode of
    ``n_steps`` ticks through the real shim on a counter env."""
    kwargs = dict(shim_kwargs)
    if profile is not None:
        kwargs["profile"] = profile
    shim = NetworkShimWrapper(TickEnv(), step_ms=step_ms, **kwargs)
    shim.reset(seed=seed)
    obs_ages = np.empty(n_steps, dtype=np.int64)
    action_ages = np.empty(n_steps, dtype=np.int64)
    for i in range(n_steps):
        _, _, _, _, info = shim.step(0)
        obs_ages[i] = info[AGE_KEY]
        action_ages[i] = info["action_age_steps"]
    shim.close()
    return obs_ages, action_ages


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
    single = isinstance(profile, (str, os.PathLike)) or hasattr(profile, "uplink")
    names: list[Any] = [profile] if single else list(profile)
    if not names or not all(
        isinstance(n, (str, os.PathLike)) or hasattr(n, "uplink") for n in names
    ):
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


#: How :func:`action_delay_for_profile` sums up the action ages.
ACTION_DELAY_STATISTICS = ("mode", "median")


def _action_age(
    profiles: tuple[Any, ...] | None,
    step_ms: float,
    n_steps: int,
    seed: int,
    statistic: str,
    items: tuple[tuple[str, Any], ...],
) -> int:
    kwargs = dict(items)
    runs = [
        _loop_ages(profile, step_ms, n_steps, seed, kwargs)
        for profile in (profiles if profiles is not None else (None,))
    ]
    if statistic == "median":
        obs_ages = np.concatenate([obs for obs, _ in runs])
        round_trips = obs_ages + np.concatenate([action for _, action in runs])
        return max(0, _quantile(round_trips, 0.5) - _quantile(obs_ages, 0.5))
    # The ticks at which an action has arrived (before, the start action is applied:
    # its age is the tick's index + 1).
    ticks = np.arange(n_steps)
    ages = np.concatenate([action[action <= ticks] for _, action in runs])
    return int(np.argmax(np.bincount(ages))) if ages.size else 0


_cached_action_age = functools.lru_cache(maxsize=256)(_action_age)


def action_delay_for_profile(
    profile: Any,
    step_ms: float,
    *,
    statistic: str = "mode",
    n_steps: int = 5_000,
    seed: int = 0,
    **shim_kwargs: Any,
) -> int:
    """The network's most likely action age in ticks: the prior ``action_delay`` of the
    predictive compensation.

    Measured like :func:`staleness_quantile`, through the real
    :class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper` on a counter env (the
    shim's own timeline: the loop's offsets, FIFO queueing, loss holding the last
    action), over ``n_steps`` ticks: the most frequent ``info["action_age_steps"]`` once
    an action has arrived (``statistic="mode"``, ties to the smaller age), or the median
    round trip (``obs_age_steps + action_age_steps``) minus the median observation age
    (``"median"``, the CALF study's estimator). The two agree on unimodal networks (every
    built-in profile but ``trace-wifi-office``: mode 0, median 1); under a network with
    stalls the difference of medians moves off the usual age (2 ticks on the
    ``wifi-stalls`` trace of docs/predictive.md, where 68 % of the actions are applied at
    age 0). Under a constant
    delay both are the age the shim applies every action at (75 ms each way at 20 ms: 4).
    For a sequence of profiles (one drawn per episode) the ages of every profile are
    pooled. :func:`~fleetgym.wrappers.make_robust_env` passes the mode to
    :class:`~fleetgym.wrappers.PredictiveObservation` unless ``action_delay`` is given.
    Results are cached per configuration.

    Args:
        profile: A profile name, a :class:`~fleetgym.wrappers.profiles.NetworkProfile`, a
            profile file, a sequence of them, or ``None`` with ``uplink``/``downlink``
            channels in ``shim_kwargs``.
        step_ms: The control period in milliseconds.
        statistic: ``"mode"`` or ``"median"`` (above).
        n_steps: Monte-Carlo sample size per profile.
        seed: Seed of the packet schedule.
        **shim_kwargs: More :class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper`
            arguments (channels, ``delivery``, ``timing``, ``uplink_share``; those that do
            not change the packet schedule, such as ``start_action``, are ignored).

    Example:
        >>> action_delay_for_profile("wifi-normal", step_ms=20.0)
        1
        >>> from fleetgym.wrappers import FixedDelay
        >>> action_delay_for_profile(None, 20.0, uplink=FixedDelay(75), downlink=FixedDelay(75))
        4

    Returns:
        The action age, >= 0.

    Raises:
        TypeError, ValueError: On a bad argument; UnknownProfileError for an unknown name.
    """
    step_ms = check_float("step_ms", step_ms, 0.0, strict=True)
    check_choice("statistic", statistic, ACTION_DELAY_STATISTICS)
    n_steps = check_int("n_steps", n_steps, 1, MAX_SAMPLES)
    seed = check_int("seed", seed, 0)
    measured = {
        key: value
        for key, value in shim_kwargs.items()
        if value is not None and key not in _UNMEASURED
    }
    profiles = None if profile is None else resolve_profiles(profile)
    items = tuple(sorted(measured.items()))
    args = (profiles, float(step_ms), n_steps, seed, statistic, items)
    try:
        hash(args)
    except TypeError:  # a channel that cannot be hashed: measured every time
        return _action_age(*args)
    return _cached_action_age(*args)


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
