"""Tiny exact environments for the network-shim tests (not a test module itself)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class CounterEnv(gym.Env[np.ndarray, int]):
    """Observation = the tick index; records every action it applies; never terminates.

    ``horizon`` (optional) truncates the episode after that many steps.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, n_actions: int = 10_000, horizon: int | None = None) -> None:
        self.observation_space = spaces.Box(0.0, np.inf, shape=(1,), dtype=np.float64)
        self.action_space = spaces.Discrete(n_actions)
        self.horizon = horizon
        self.t = 0
        self.applied: list[int] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        self.applied = []
        return np.array([0.0]), {}

    def step(self, action: int):
        self.applied.append(int(action))
        self.t += 1
        truncated = self.horizon is not None and self.t >= self.horizon
        return np.array([float(self.t)]), 1.0, False, truncated, {}


class SpacesEnv(gym.Env[Any, Any]):
    """An env with the given spaces; random observations from its own np_random."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any):
        assert self.action_space.contains(action), action
        self.t += 1
        return self.observation_space.sample(), float(self.t), self.t >= 50, False, {}


class BufferReuseEnv(CounterEnv):
    """Like CounterEnv, but returns the same array object every step (edited in place)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.buf = np.array([0.0])
        return self.buf, {}

    def step(self, action: int):
        _, r, term, trunc, info = super().step(action)
        self.buf[0] = float(self.t)
        return self.buf, r, term, trunc, info


def _full_info_shim() -> type:
    from fleetgym.wrappers.network_shim import NetworkShimWrapper

    class FullInfoShim(NetworkShimWrapper):
        """The shim with ``info="full"``: every info key (these tests read ground truth)."""

        def __init__(self, env: gym.Env[Any, Any], *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("info", "full")
            super().__init__(env, *args, **kwargs)

    return FullInfoShim


FullInfoShim = _full_info_shim()
