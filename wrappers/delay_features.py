"""The inputs a remote agent legitimately has, as observation wrappers (CALF's delay-robust
inputs).

A remote agent behind :class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper` sees
stale observations and cannot tell which of its actions have been applied. What it
legitimately knows is (a) the observations it received, (b) the send timestamp each
observation packet carries, hence the packet's age on arrival, and (c) the actions it
sent. The wrappers here turn exactly that into a flat observation vector:

- :class:`ObservationAgeFeatures` appends the age of the delivered observation (from the
  packet's timestamp, reported by the shim as ``info["obs_age_steps"]``) and whether it is
  a new packet or a repeat of the last one (optionally a stall flag: the observation is
  ``stall_steps`` ticks old or more);
- :class:`ObservationHistory` stacks the last ``k`` delivered observations (Gymnasium's
  :class:`~gymnasium.wrappers.FrameStackObservation`), with ``k`` chosen from the
  network's own staleness distribution by
  :func:`~fleetgym.wrappers.staleness.history_length_for_profile` (at most
  :data:`~fleetgym.wrappers.staleness.HISTORY_CAP` frames);
- :class:`SentActionHistory` appends the last ``m`` actions the agent *sent* (one-hot for
  discrete spaces, raw for boxes), which are the actions still in flight.

None of them reads ``info["applied_action"]`` or ``info["true_obs"]``: those are ground
truth for analysis and oracle critics, which a deployed agent never has.
:func:`~fleetgym.wrappers.compensation.make_robust_env` builds the whole stack around any
env for a profile.
"""

from __future__ import annotations

import warnings
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import FlattenObservation, FrameStackObservation

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import check_int, quote
from fleetgym.wrappers.action_check import ActionCheck
from fleetgym.wrappers.staleness import AGE_KEY, HISTORY_CAP, MAX_HISTORY, history_length_for_env

__all__ = [
    "ObservationAgeFeatures",
    "ObservationHistory",
    "SentActionHistory",
    "cap_length",
    "check_length",
    "compensate",
    "require_box",
]


def check_length(name: str, value: Any) -> int:
    return check_int(name, value, 1, MAX_HISTORY)


def cap_length(name: str, length: int, cap: int, what: str, network: str) -> int:
    """``length`` (measured from the network) at most ``cap``, with a warning when cut."""
    if length <= cap:
        return length
    warnings.warn(
        f"{name}: the network {network} asks for {length} {what} (its staleness quantile "
        f"is {length - 1} ticks), more than max_history={cap}: capped at {cap}, and the age "
        f"features gain the stall flag (pass {name}, max_history or stall_features to "
        "choose)",
        UserWarning,
        stacklevel=3,
    )
    return cap


# --------------------------------------------------------------------------------------
# Wrappers
# --------------------------------------------------------------------------------------
def require_box(env: gym.Env[Any, Any], who: str) -> spaces.Box:
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
    original (as float32) followed by ``[min(a_t, max_age_steps) / max_age_steps, new]``
    (the age saturates at ``max_age_steps``), and with ``stall_steps`` a stall flag,
    ``1`` when ``a_t >= stall_steps`` (the agent has had no fresh observation for that
    many ticks: a stall, however long, is one flag instead of hundreds of frames).
    Without a shim underneath (no age in ``info``) the age is 0 and every step is new, so
    the same policy input layout works on a bare env.

    Args:
        env: The env, normally a :class:`NetworkShimWrapper` (or wrapping one
            without changing ``info``); its observation space must be a Box.
        max_age_steps: Ages at or above this saturate the feature at 1.
        stall_steps: Append the stall flag, set from this age on (``None``: no flag).

    Example:
        >>> import gymnasium as gym
        >>> from fleetgym.wrappers.network_shim import NetworkShimWrapper
        >>> env = ObservationAgeFeatures(NetworkShimWrapper(gym.make("CartPole-v1"), profile="wifi-normal"))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs[-2:].tolist()
        ((6,), [0.0, 1.0])

    Raises:
        UnsupportedSpaceError: if the observation space is not a Box.
        TypeError, ValueError: if ``max_age_steps`` or ``stall_steps`` is not a positive int.
    """

    def __init__(
        self, env: gym.Env[Any, Any], max_age_steps: int = 10, *, stall_steps: int | None = None
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, max_age_steps=max_age_steps, stall_steps=stall_steps
        )
        gym.Wrapper.__init__(self, env)
        self.max_age_steps = check_length("max_age_steps", max_age_steps)
        self.stall_steps = None if stall_steps is None else check_length("stall_steps", stall_steps)
        box = require_box(env, "ObservationAgeFeatures")
        n = 2 if self.stall_steps is None else 3
        low = np.concatenate([box.low.astype(np.float32).ravel(), np.zeros(n, np.float32)])
        high = np.concatenate([box.high.astype(np.float32).ravel(), np.ones(n, np.float32)])
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        self._tick = 0
        self._last_sent_tick = -1

    def _features(self, obs: Any, info: dict[str, Any]) -> np.ndarray:
        age = int(info.get(AGE_KEY, 0))
        sent_tick = self._tick - age
        new = 1.0 if sent_tick > self._last_sent_tick else 0.0
        self._last_sent_tick = max(self._last_sent_tick, sent_tick)
        feat = [min(age, self.max_age_steps) / self.max_age_steps, new]
        if self.stall_steps is not None:
            feat.append(1.0 if age >= self.stall_steps else 0.0)
        return np.concatenate(
            [np.asarray(obs, dtype=np.float32).ravel(), np.asarray(feat, dtype=np.float32)]
        )

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
    the network in ``quantile`` of the steps, up to ``max_history`` frames (a
    ``UserWarning`` says when the network asks for more: it has stalls).

    Args:
        env: The env whose observations to stack.
        stack_size: k, or ``None`` to derive it from the shim in ``env``.
        quantile: Quantile of staleness used when deriving k.
        padding_type: As for FrameStackObservation (``"reset"`` or ``"zero"``).
        max_history: Cap of the derived k (default
            :data:`~fleetgym.wrappers.staleness.HISTORY_CAP`, 16).

    Example:
        >>> import gymnasium as gym
        >>> from fleetgym.wrappers.network_shim import NetworkShimWrapper
        >>> shim = NetworkShimWrapper(gym.make("CartPole-v1"), profile="wifi-normal")
        >>> env = ObservationHistory(shim)
        >>> env.stack_size >= 2, env.observation_space.shape[1:]
        (True, (4,))

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
        max_history: int = HISTORY_CAP,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            stack_size=stack_size,
            quantile=quantile,
            padding_type=padding_type,
            max_history=max_history,
        )
        if stack_size is None:
            cap = check_length("max_history", max_history)
            measured = history_length_for_env(env, quantile=quantile)
            k = cap_length("stack_size", measured, cap, "frames", "of the shim")
        else:
            k = check_length("stack_size", stack_size)
        FrameStackObservation.__init__(self, env, k, padding_type=padding_type)


_FLAT_LEAVES = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)


def _flattens_to_vector(space: spaces.Space[Any]) -> bool:
    if isinstance(space, _FLAT_LEAVES):
        return True
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        subs = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        return all(_flattens_to_vector(sub) for sub in subs)
    return False


def _flat_action_space(space: spaces.Space[Any]) -> spaces.Box:
    """The flat Box ``gymnasium.spaces.flatten`` maps actions of ``space`` into."""
    if not _flattens_to_vector(space):
        raise UnsupportedSpaceError(
            "SentActionHistory: expected an action space that flattens to a vector (Discrete, "
            f"MultiDiscrete, MultiBinary, Box, or a Dict/Tuple of them), actual {space}"
        )
    flat = spaces.flatten_space(space)
    assert isinstance(flat, spaces.Box)  # true for every space _flattens_to_vector accepts
    return flat


class SentActionHistory(
    gym.Wrapper[np.ndarray, Any, np.ndarray, Any], gym.utils.RecordConstructorArgs
):
    """Appends the last m actions the agent sent to a flat observation.

    Put outside the shim, it records every action passed to ``step`` — the action *sent*,
    whether or not the network delivers it — which is what a remote agent knows about the
    actions still in flight. Encoding: ``gymnasium.spaces.flatten`` (one-hot for Discrete,
    concatenated one-hots for MultiDiscrete, 0/1 for MultiBinary, raw values for Box, the
    parts concatenated for Dict and Tuple), clipped to the bounds of the flattened space,
    as float32. Each action is checked against the action space when it is sent. Oldest
    first; before the first action of an episode the slots are zero (no
    action sent). The observation becomes ``[obs (flattened, float32), a_{t-m+1..t}]``.

    Args:
        env: The env, with a Box observation space.
        history_length: m >= 1.

    Example:
        >>> import gymnasium as gym
        >>> env = SentActionHistory(gym.make("CartPole-v1"), history_length=3)
        >>> obs, _ = env.reset(seed=0)
        >>> obs, *_ = env.step(1)
        >>> obs.shape, obs[4:].tolist()
        ((10,), [0.0, 0.0, 0.0, 0.0, 0.0, 1.0])

    Raises:
        UnsupportedSpaceError: for a non-Box observation space or an unsupported action space.
        TypeError, ValueError: if ``history_length`` is not an int in [1, 10000].
        InvalidActionError: From ``step``, for an action outside the action space.
    """

    def __init__(self, env: gym.Env[Any, Any], history_length: int = 4) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, history_length=history_length)
        gym.Wrapper.__init__(self, env)
        self.history_length = check_length("history_length", history_length)
        box = require_box(env, "SentActionHistory")
        flat = _flat_action_space(env.action_space)
        self._width = spaces.flatdim(env.action_space)
        # Bounds in the flat space's own dtype: actions are cast to float32, then clipped.
        self._low, self._high = flat.low, flat.high
        a_low, a_high = flat.low.astype(np.float32), flat.high.astype(np.float32)
        self._pad = np.clip(np.zeros(self._width, np.float32), a_low, a_high)
        m = self.history_length
        low = np.concatenate([box.low.astype(np.float32).ravel(), np.tile(a_low, m)])
        high = np.concatenate([box.high.astype(np.float32).ravel(), np.tile(a_high, m)])
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        self._history = np.tile(self._pad, (m, 1))
        self._check_action = ActionCheck(env.action_space)
        self._t = 0

    def _encode(self, action: Any) -> np.ndarray:
        flat = np.asarray(spaces.flatten(self.env.action_space, action), dtype=np.float32)
        return np.clip(flat, self._low, self._high).astype(np.float32)

    def _observation(self, obs: Any) -> np.ndarray:
        return np.concatenate([np.asarray(obs, dtype=np.float32).ravel(), self._history.ravel()])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._history = np.tile(self._pad, (self.history_length, 1))
        self._t = 0
        return self._observation(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        self._check_action(action, self._t)
        code = self._encode(action)
        self._t += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._history = np.roll(self._history, -1, axis=0)
        self._history[-1] = code
        return self._observation(obs), reward, terminated, truncated, info


# --------------------------------------------------------------------------------------
# The whole robust stack
# --------------------------------------------------------------------------------------


def compensate(
    env: gym.Env[Any, Any],
    history_length: int,
    action_history_length: int,
    *,
    age_features: bool = True,
    max_age_steps: int | None = None,
    stall_steps: int | None = None,
) -> gym.Env[np.ndarray, Any]:
    """The compensation stack of :func:`make_robust_env` around an env that already has its
    network: a shim, or the remote env of Mode 3 (``fleetgym/Remote-v0``), whose ``info``
    carries the same packet ages.

    Args:
        env: The networked env (Box observations).
        history_length: k frames (>= 1).
        action_history_length: m sent actions (0: none).
        age_features: Append :class:`ObservationAgeFeatures`.
        max_age_steps: Saturation of the age feature; ``None`` = max(k, 2).
        stall_steps: Append the stall flag, set from this observation age on (``None``:
            no flag; needs ``age_features``).

    Returns:
        The wrapped env, with the flat float32 observation :func:`make_robust_env` builds.
    """
    k = check_length("history_length", history_length)
    m = check_int("action_history_length", action_history_length, 0, MAX_HISTORY)
    robust = env
    if age_features:
        robust = ObservationAgeFeatures(
            robust,
            max_age_steps=max(k, 2) if max_age_steps is None else max_age_steps,
            stall_steps=stall_steps,
        )
    else:
        if stall_steps is not None:
            raise ValueError(
                f"stall_steps: expected None when age_features is False (the stall flag is "
                f"one of the age features), actual {quote(stall_steps)}"
            )
        require_box(robust, "make_robust_env")
    if k > 1:
        robust = FlattenObservation(ObservationHistory(robust, k))
    elif not age_features:
        robust = FlattenObservation(robust)
    if m > 0:
        robust = SentActionHistory(robust, m)
    return robust
