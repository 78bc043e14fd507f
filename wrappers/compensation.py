"""Compensation for a network between agent and environment (CALF's delay-robust inputs).

A remote agent behind :class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper` sees
stale observations and cannot tell which of its actions have been applied. What it
legitimately knows is (a) the observations it received, (b) the send timestamp each
observation packet carries, hence the packet's age on arrival, and (c) the actions it
sent. The wrappers here turn exactly that into a flat observation vector:

- :class:`ObservationAgeFeatures` appends the age of the delivered observation (from the
  packet's timestamp, reported by the shim as ``info["obs_age_steps"]``) and whether it is
  a new packet or a repeat of the last one;
- :class:`ObservationHistory` stacks the last ``k`` delivered observations (Gymnasium's
  :class:`~gymnasium.wrappers.FrameStackObservation`), with ``k`` chosen from the
  network's own staleness distribution by :func:`history_length_for_profile`;
- :class:`SentActionHistory` appends the last ``m`` actions the agent *sent* (one-hot for
  discrete spaces, raw for boxes), which are the actions still in flight.

None of them reads ``info["applied_action"]`` or ``info["true_obs"]``: those are ground
truth for analysis and oracle critics, which a deployed agent never has.
:func:`make_robust_env` builds the whole stack around any env for a profile.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import FlattenObservation, FrameStackObservation

from fleetgym.errors import UnsupportedSpaceError

logger = logging.getLogger(__name__)

__all__ = [
    "ObservationAgeFeatures",
    "ObservationHistory",
    "SentActionHistory",
    "history_length_for_profile",
    "make_robust_env",
    "staleness_quantile",
]

#: Keys of the shim's ``info`` this module reads. Both are derived from the timestamp the
#: observation packet carries, so a real receiver can compute them too.
AGE_KEY = "obs_age_steps"


# --------------------------------------------------------------------------------------
# k from the channel model
# --------------------------------------------------------------------------------------
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


def _check_quantile(quantile: float) -> float:
    if isinstance(quantile, bool) or not isinstance(quantile, (int, float)):
        raise TypeError(f"quantile: expected a float in (0, 1], actual {quantile!r}")
    if not 0.0 < float(quantile) <= 1.0 or math.isnan(float(quantile)):
        raise ValueError(f"quantile: expected a float in (0, 1], actual {quantile!r}")
    return float(quantile)


def _check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected a positive int, actual {value!r}")
    if int(value) < 1:
        raise ValueError(f"{name}: expected a positive int, actual {value!r}")
    return int(value)


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
    from fleetgym.wrappers.network_shim import NetworkShimWrapper

    quantile = _check_quantile(quantile)
    n_steps = _check_positive_int("n_steps", n_steps)
    if path not in ("uplink", "round_trip"):
        raise ValueError(f"path: expected 'uplink' or 'round_trip', actual {path!r}")
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
) -> int:
    extra = {} if delivery is None else {"delivery": delivery}
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
        **shim_kwargs: More :class:`NetworkShimWrapper` arguments (channels, delivery).

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
    if isinstance(step_ms, bool) or not isinstance(step_ms, (int, float)):
        raise TypeError(f"step_ms: expected a positive number, actual {step_ms!r}")
    if not float(step_ms) > 0 or not math.isfinite(float(step_ms)):
        raise ValueError(f"step_ms: expected a positive number, actual {step_ms!r}")
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
            f"profile: expected a profile name or a non-empty sequence of names, actual {profile!r}"
        )
    # Only what changes the packet schedule matters; drop the rest so the cache applies.
    measured = {
        key: value
        for key, value in shim_kwargs.items()
        if value is not None and key not in ("start_action", "copy_observations", "block_size")
    }
    lengths = []
    for name in names:
        if isinstance(name, str) and set(measured) <= {"delivery"}:
            lengths.append(
                _cached_history_length(
                    name, float(step_ms), quantile, path, n_steps, seed, measured.get("delivery")
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


# --------------------------------------------------------------------------------------
# Wrappers
# --------------------------------------------------------------------------------------
def _require_box(env: gym.Env[Any, Any], who: str) -> spaces.Box:
    space = env.observation_space
    if not isinstance(space, spaces.Box):
        raise UnsupportedSpaceError(
            f"{who}: expected a Box observation space (flatten Dict/Tuple first), actual {space}"
        )
    return space


class ObservationAgeFeatures(
    gym.Wrapper[np.ndarray, Any, np.ndarray, Any], gym.utils.RecordConstructorArgs
):
    """Appends the delivered observation's age and a "new packet" flag to a flat observation.

    Models what a remote agent computes from the timestamp each observation packet
    carries: the packet's age ``a_t`` in control periods (``info["obs_age_steps"]`` of the
    shim, i.e. now minus the send tick) and whether the packet is new, i.e. its send tick
    ``t - a_t`` is later than the previous one's. The observation becomes the flattened
    original (as float32) followed by ``[min(a_t, max_age_steps) / max_age_steps, new]``.
    Without a shim underneath (no age in ``info``) the age is 0 and every step is new, so
    the same policy input layout works on a bare env.

    Example:
        >>> import gymnasium as gym
        >>> from fleetgym.wrappers.network_shim import NetworkShimWrapper
        >>> env = ObservationAgeFeatures(NetworkShimWrapper(gym.make("CartPole-v1"), profile="wifi-normal"))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs[-2:].tolist()
        ((6,), [0.0, 1.0])

    Args:
        env: The env, normally a :class:`NetworkShimWrapper` (or wrapping one
            without changing ``info``); its observation space must be a Box.
        max_age_steps: Ages at or above this saturate the feature at 1.

    Raises:
        UnsupportedSpaceError: if the observation space is not a Box.
        TypeError, ValueError: if ``max_age_steps`` is not a positive int.
    """

    def __init__(self, env: gym.Env[Any, Any], max_age_steps: int = 10) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, max_age_steps=max_age_steps)
        gym.Wrapper.__init__(self, env)
        self.max_age_steps = _check_positive_int("max_age_steps", max_age_steps)
        box = _require_box(env, "ObservationAgeFeatures")
        low = np.concatenate([box.low.astype(np.float32).ravel(), np.zeros(2, np.float32)])
        high = np.concatenate([box.high.astype(np.float32).ravel(), np.ones(2, np.float32)])
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        self._tick = 0
        self._last_sent_tick = -1

    def _features(self, obs: Any, info: dict[str, Any]) -> np.ndarray:
        age = int(info.get(AGE_KEY, 0))
        sent_tick = self._tick - age
        new = 1.0 if sent_tick > self._last_sent_tick else 0.0
        self._last_sent_tick = max(self._last_sent_tick, sent_tick)
        feat = np.array([min(age, self.max_age_steps) / self.max_age_steps, new], np.float32)
        return np.concatenate([np.asarray(obs, dtype=np.float32).ravel(), feat])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._tick = 0
        self._last_sent_tick = -1
        return self._features(obs, info), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._tick += 1
        return self._features(obs, info), reward, terminated, truncated, info


class ObservationHistory(FrameStackObservation, gym.utils.RecordConstructorArgs):
    """The last k delivered observations, with k chosen from the network underneath.

    Gymnasium's :class:`~gymnasium.wrappers.FrameStackObservation` (shape ``(k, *obs)``,
    oldest first, padded with the reset observation). When ``stack_size`` is ``None`` it
    finds the :class:`NetworkShimWrapper` in the stack and sets
    k = :func:`history_length_for_profile` of that shim's configuration (its profile or
    channels, control period and delivery order), so the stack covers the staleness of
    the network in ``quantile`` of the steps.

    Example:
        >>> import gymnasium as gym
        >>> from fleetgym.wrappers.network_shim import NetworkShimWrapper
        >>> shim = NetworkShimWrapper(gym.make("CartPole-v1"), profile="wifi-normal")
        >>> env = ObservationHistory(shim)
        >>> env.stack_size >= 2, env.observation_space.shape[1:]
        (True, (4,))

    Args:
        env: The env whose observations to stack.
        stack_size: k, or ``None`` to derive it from the shim in ``env``.
        quantile: Quantile of staleness used when deriving k.
        padding_type: As for FrameStackObservation (``"reset"`` or ``"zero"``).

    Raises:
        TypeError, ValueError: on a bad argument, or if ``stack_size`` is ``None`` and
            ``env`` holds no shim.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        stack_size: int | None = None,
        *,
        quantile: float = 0.99,
        padding_type: str = "reset",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, stack_size=stack_size, quantile=quantile, padding_type=padding_type
        )
        if stack_size is None:
            k = history_length_for_env(env, quantile=quantile)
        else:
            k = _check_positive_int("stack_size", stack_size)
        FrameStackObservation.__init__(self, env, k, padding_type=padding_type)


def _find_shim(env: gym.Env[Any, Any]) -> Any:
    from fleetgym.wrappers.network_shim import NetworkShimWrapper

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


def _action_width(space: spaces.Space[Any]) -> int:
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, spaces.MultiBinary):
        return int(np.prod(space.shape))
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape))
    raise UnsupportedSpaceError(
        f"SentActionHistory: expected a Discrete, MultiDiscrete, MultiBinary or Box action "
        f"space, actual {space}"
    )


class SentActionHistory(
    gym.Wrapper[np.ndarray, Any, np.ndarray, Any], gym.utils.RecordConstructorArgs
):
    """Appends the last m actions the agent sent to a flat observation.

    Put outside the shim, it records every action passed to ``step`` — the action *sent*,
    whether or not the network delivers it — which is what a remote agent knows about the
    actions still in flight. Encoding: one-hot per action for Discrete, concatenated
    one-hots for MultiDiscrete, 0/1 for MultiBinary, raw values clipped to the bounds for
    Box. Oldest first; before the first action of an episode the slots are zero (no
    action sent). The observation becomes ``[obs (flattened, float32), a_{t-m+1..t}]``.

    Example:
        >>> import gymnasium as gym
        >>> env = SentActionHistory(gym.make("CartPole-v1"), history_length=3)
        >>> obs, _ = env.reset(seed=0)
        >>> obs, *_ = env.step(1)
        >>> obs.shape, obs[4:].tolist()
        ((10,), [0.0, 0.0, 0.0, 0.0, 0.0, 1.0])

    Args:
        env: The env, with a Box observation space.
        history_length: m >= 1.

    Raises:
        UnsupportedSpaceError: for a non-Box observation space or an unsupported action space.
        TypeError, ValueError: if ``history_length`` is not a positive int.
    """

    def __init__(self, env: gym.Env[Any, Any], history_length: int = 4) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, history_length=history_length)
        gym.Wrapper.__init__(self, env)
        self.history_length = _check_positive_int("history_length", history_length)
        box = _require_box(env, "SentActionHistory")
        self._width = _action_width(env.action_space)
        act = env.action_space
        if isinstance(act, spaces.Box):
            a_low = np.broadcast_to(act.low, act.shape).astype(np.float32).ravel()
            a_high = np.broadcast_to(act.high, act.shape).astype(np.float32).ravel()
            self._pad = np.clip(np.zeros(self._width, np.float32), a_low, a_high)
        else:
            a_low = np.zeros(self._width, np.float32)
            a_high = np.ones(self._width, np.float32)
            self._pad = np.zeros(self._width, np.float32)
        m = self.history_length
        low = np.concatenate([box.low.astype(np.float32).ravel(), np.tile(a_low, m)])
        high = np.concatenate([box.high.astype(np.float32).ravel(), np.tile(a_high, m)])
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        self._history = np.tile(self._pad, (m, 1))

    def _encode(self, action: Any) -> np.ndarray:
        space = self.env.action_space
        if isinstance(space, spaces.Discrete):
            code = np.zeros(self._width, np.float32)
            code[int(action) - int(space.start)] = 1.0
            return code
        if isinstance(space, spaces.MultiDiscrete):
            parts = []
            for a, n, s in zip(
                np.asarray(action).ravel(),
                space.nvec.ravel(),
                np.asarray(space.start).ravel()
                if space.start is not None
                else np.zeros(space.nvec.size, np.int64),
                strict=True,
            ):
                one = np.zeros(int(n), np.float32)
                one[int(a) - int(s)] = 1.0
                parts.append(one)
            return np.concatenate(parts)
        if isinstance(space, spaces.MultiBinary):
            return np.asarray(action, dtype=np.float32).ravel()
        assert isinstance(space, spaces.Box)  # guaranteed by _action_width
        return np.clip(
            np.asarray(action, dtype=np.float32).ravel(),
            np.broadcast_to(space.low, space.shape).ravel(),
            np.broadcast_to(space.high, space.shape).ravel(),
        ).astype(np.float32)

    def _observation(self, obs: Any) -> np.ndarray:
        return np.concatenate([np.asarray(obs, dtype=np.float32).ravel(), self._history.ravel()])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._history = np.tile(self._pad, (self.history_length, 1))
        return self._observation(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        code = self._encode(action)
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._history = np.roll(self._history, -1, axis=0)
        self._history[-1] = code
        return self._observation(obs), reward, terminated, truncated, info


# --------------------------------------------------------------------------------------
# The whole robust stack
# --------------------------------------------------------------------------------------
def make_robust_env(
    env: str | gym.Env[Any, Any],
    profile: str | Sequence[str] | None = "wifi-normal",
    *,
    step_ms: float | None = None,
    history_length: int | None = None,
    action_history_length: int | None = None,
    age_features: bool = True,
    quantile: float = 0.99,
    max_age_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    **shim_kwargs: Any,
) -> gym.Env[np.ndarray, Any]:
    """Builds shim + compensation around an env: the input a delay-robust policy sees.

    Stack (inside out): ``NetworkShimWrapper(env, profile, ...)`` →
    :class:`ObservationAgeFeatures` (optional) → :class:`ObservationHistory` (k frames) →
    flatten → :class:`SentActionHistory` (m actions; ``0`` disables it). The result has a
    flat float32 Box observation, fit for SB3's ``MlpPolicy`` and
    ``RecurrentPPO``'s ``MlpLstmPolicy``. To evaluate one policy under another network,
    build the same stack with the same ``history_length`` / ``action_history_length``
    and another ``profile``: the observation layout only depends on those.

    Example:
        >>> env = make_robust_env("CartPole-v1", "wifi-normal", history_length=3, action_history_length=4)
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape  # 3 frames x (4 + 2 age features) + 4 one-hot actions x 2
        (26,)

    Args:
        env: A registered env ID or an env instance (observation space must be a Box;
            flatten Dict observations first, e.g. MiniGrid's ``ImgObsWrapper``).
        profile: Profile name, sequence of names drawn per episode, or ``None`` with
            explicit ``uplink``/``downlink`` channels in ``shim_kwargs``.
        step_ms: Control period; ``None`` takes the env's ``dt`` / ``tau`` (see the shim).
        history_length: k; ``None`` = :func:`history_length_for_profile` (``quantile``).
        action_history_length: m; ``None`` = the round-trip staleness quantile + 1;
            ``0`` = no action history.
        age_features: Append :class:`ObservationAgeFeatures`.
        quantile: Quantile used for the automatic lengths.
        max_age_steps: Saturation of the age feature; ``None`` = max(k, 2).
        env_kwargs: Keyword arguments of ``gym.make`` when ``env`` is an ID.
        **shim_kwargs: More :class:`NetworkShimWrapper` arguments (channels,
            ``delivery``, ``start_action``, ...).

    Returns:
        The wrapped env.

    Raises:
        TypeError, ValueError: on a bad argument (also the shim's own validation).
    """
    from fleetgym.wrappers.network_shim import NetworkShimWrapper

    if isinstance(env, str):
        base: gym.Env[Any, Any] = gym.make(env, **(env_kwargs or {}))
    elif isinstance(env, gym.Env):
        if env_kwargs:
            raise ValueError(
                f"env_kwargs: expected None when env is an instance, actual {env_kwargs!r}"
            )
        base = env
    else:
        raise TypeError(f"env: expected an env ID or a gymnasium.Env, actual {env!r}")
    if not isinstance(age_features, bool):
        raise TypeError(f"age_features: expected a bool, actual {age_features!r}")
    shim_args = dict(shim_kwargs)
    if step_ms is not None:
        shim_args["step_ms"] = step_ms
    robust: gym.Env[Any, Any] = NetworkShimWrapper(base, profile=profile, **shim_args)
    period = float(robust.step_ms)  # type: ignore[attr-defined]
    measured = {k: v for k, v in shim_kwargs.items() if k not in ("start_action",)}
    if history_length is None:
        k = history_length_for_profile(profile, period, quantile, **measured)
    else:
        k = _check_positive_int("history_length", history_length)
    if action_history_length is None:
        m = history_length_for_profile(profile, period, quantile, path="round_trip", **measured)
    else:
        if (
            isinstance(action_history_length, bool)
            or not isinstance(action_history_length, (int, np.integer))
            or action_history_length < 0
        ):
            raise ValueError(
                f"action_history_length: expected an int >= 0 or None, "
                f"actual {action_history_length!r}"
            )
        m = int(action_history_length)
    if age_features:
        robust = ObservationAgeFeatures(robust, max_age_steps=max_age_steps or max(k, 2))
    else:
        _require_box(robust, "make_robust_env")
    if k > 1:
        robust = FlattenObservation(ObservationHistory(robust, k))
    elif not age_features:
        robust = FlattenObservation(robust)
    if m > 0:
        robust = SentActionHistory(robust, m)
    return robust
