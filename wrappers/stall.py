"""What the loop does in a stall: the env side's safe action after a command timeout.

A network stall (a Wi-Fi link that buffers for seconds while a robot moves) leaves the env
without fresh actions. The shim's rule (:class:`~fleetgym.wrappers.NetworkShimWrapper`) is
the zero-order hold of sampled-data control: the env keeps applying the last action that
arrived, however old. A real actuator usually has a command timeout instead: after
``stall_steps`` control periods without a fresh command it applies a safe one (stop, brake,
neutral). :class:`StallWatchdog` adds that timeout to a shim;
:func:`~fleetgym.wrappers.make_robust_env`'s ``stall`` (a :class:`StallRule`) chooses
between the two (and, with the predictive compensation, whether the agent keeps
extrapolating through a stall).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym

from fleetgym.validation import check_choice, check_int, quote
from fleetgym.wrappers.network_shim import NetworkShimWrapper

__all__ = ["STALL_ACTIONS", "STALL_STEPS", "StallRule", "StallWatchdog"]

#: The choices of ``StallRule(action=...)``: ``"hold"`` (the env keeps the
#: last action that arrived; the agent's input stops moving), ``"safe"`` (the env applies
#: a safe action after ``stall_steps`` ticks without a fresh one) and ``"predict"`` (the
#: agent keeps predicting through the stall; predictive compensation only).
STALL_ACTIONS = ("hold", "safe", "predict")
#: Default stall length in ticks: the history cap (320 ms at a 20 ms period).
STALL_STEPS = 16
#: Largest ``stall_steps`` accepted.
MAX_STALL_STEPS = 100_000


@dataclass(frozen=True)
class StallRule:
    """What the loop does in a stall (``make_robust_env(stall=...)``).

    A stall is ``steps`` ticks in a row without a fresh action at the env (or a fresh
    observation at the agent).

    Args:
        action: ``"hold"`` (the env keeps applying the last action that arrived; the
            predictive compensation predicts at most ``steps`` ticks past its freshest
            observation), ``"safe"`` (the env applies ``safe_action`` after ``steps`` ticks
            without a fresh action: :class:`StallWatchdog`, an actuator's command timeout),
            ``"predict"`` (the env holds and the agent keeps predicting through the stall;
            the predictive and scheduled compensations only), or None: the compensation's
            default (``"predict"`` for those two, else ``"hold"``).
        steps: Ticks without a fresh packet that make a stall (>= 1; default 16, the
            history cap: 320 ms at a 20 ms period).
        safe_action: The env's action with ``action="safe"`` (default the shim's start
            action); None otherwise.

    Example:
        >>> StallRule("safe", steps=8, safe_action=0)
        StallRule(action='safe', steps=8, safe_action=0)

    Raises:
        TypeError, ValueError: For an unknown action, a bad ``steps``, or a
            ``safe_action`` without ``action="safe"``.
    """

    action: str | None = None
    steps: int = STALL_STEPS
    safe_action: Any = None

    def __post_init__(self) -> None:
        if self.action is not None:
            check_choice("action", self.action, STALL_ACTIONS)
        check_int("steps", self.steps, 1, MAX_STALL_STEPS)
        if self.safe_action is not None and self.action != "safe":
            raise ValueError(
                "safe_action: expected None unless action='safe', actual "
                f"{quote(self.safe_action)} with action={self.action!r}"
            )


def _find_shim(env: gym.Env[Any, Any]) -> NetworkShimWrapper | None:
    current: Any = env
    while current is not None:
        if isinstance(current, NetworkShimWrapper):
            return current
        current = getattr(current, "env", None)
    return None


class _CommandTimeout(gym.Wrapper[Any, Any, Any, Any]):
    """The env side of :class:`StallWatchdog`, between the shim and the env it wraps.

    It counts the shim's holds in a row (``network_stats()["action_holds"]`` grows at each
    env step where no newer action arrived) and, once they reach ``stall_steps``, applies
    ``safe_action`` in place of the held one. Left out of the spec: the
    :class:`StallWatchdog` above the shim puts it back when ``gym.make(env.spec)`` rebuilds
    the stack.
    """

    def __init__(
        self, env: gym.Env[Any, Any], shim: NetworkShimWrapper, stall_steps: int, safe: Any
    ) -> None:
        gym.Wrapper.__init__(self, env)
        self.shim = shim
        self.stall_steps = stall_steps
        self.safe_action = safe
        self.applied_safe = False
        self._streak = 0
        self._holds = 0

    @property
    def spec(self) -> gym.envs.registration.EnvSpec | None:  # type: ignore[override]
        return self.env.spec

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self._streak = 0
        self._holds = 0
        self.applied_safe = False
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        holds = int(self.shim.network_stats().get("action_holds", 0))
        self._streak = self._streak + 1 if holds > self._holds else 0
        self._holds = holds
        self.applied_safe = self._streak >= self.stall_steps
        if self.applied_safe:
            action = copy.deepcopy(self.safe_action)
        return self.env.step(action)


class StallWatchdog(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """A command timeout on the env side of a shim: the safe action in a stall.

    Put around a :class:`~fleetgym.wrappers.NetworkShimWrapper` (or a wrapper of one), it
    changes the shim's rule for a step at which no newer action has arrived: the env holds
    the last action that arrived until ``stall_steps`` such steps in a row, then applies
    ``safe_action`` until a fresh action arrives. ``info["safe_action"]`` says whether it
    did at this step (and with the shim's ``info="full"``, ``info["applied_action"]`` is
    what the env really applied). The agent's side is unchanged: what it sends, and the
    ages ``info`` reports (``action_age_steps`` is still that of the last action that
    arrived).

    Args:
        env: The networked env: a shim, or a stack that holds one.
        stall_steps: Steps in a row without a fresh action after which the safe action
            is applied (>= 1).
        safe_action: What the env applies then (default: the shim's start action, the
            action space's zero element unless ``start_action`` was given).

    Example:
        >>> import gymnasium as gym
        >>> from fleetgym.wrappers import FixedDelay, NetworkShimWrapper
        >>> shim = NetworkShimWrapper(gym.make("CartPole-v1"), uplink=FixedDelay(0),
        ...                           downlink=FixedDelay(1000))  # 50 ticks late
        >>> env = StallWatchdog(shim, stall_steps=3, safe_action=1)
        >>> _ = env.reset(seed=0)
        >>> [env.step(0)[-1]["safe_action"] for _ in range(4)]
        [False, False, True, True]

    Raises:
        ValueError: If ``env`` holds no shim, or ``safe_action`` is not an action.
        TypeError, ValueError: For a bad ``stall_steps``.
    """

    def __init__(
        self, env: gym.Env[Any, Any], stall_steps: int = STALL_STEPS, safe_action: Any = None
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, stall_steps=stall_steps, safe_action=safe_action
        )
        gym.Wrapper.__init__(self, env)
        self.stall_steps = check_int("stall_steps", stall_steps, 1, MAX_STALL_STEPS)
        shim = _find_shim(env)
        if shim is None:
            raise ValueError(
                "env: expected a NetworkShimWrapper or a stack holding one (the watchdog "
                f"acts on the env side of the network), actual {env}"
            )
        space = shim.action_space
        safe = shim.config.start_action if safe_action is None else safe_action
        if not space.contains(safe):
            raise ValueError(
                f"safe_action: expected an element of {space}, actual {quote(safe_action)}"
            )
        self.safe_action = safe
        inner = shim.env
        if isinstance(inner, _CommandTimeout):
            inner = inner.env
        self._timeout = _CommandTimeout(inner, shim, self.stall_steps, safe)
        shim.env = self._timeout

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        applied_safe = self._timeout.applied_safe
        info["safe_action"] = applied_safe
        if applied_safe and "applied_action" in info:
            info["applied_action"] = copy.deepcopy(self.safe_action)
        return obs, reward, terminated, truncated, info
