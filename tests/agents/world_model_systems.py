"""The world model tests' linear system, whose every transition is exact.

A module rather than conftest.py: several conftest modules share that name, so a test
cannot import from one.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

#: o' = A o + B a, r = C . o - 0.5 a (A a contraction, so imagined rollouts stay bounded).
LINEAR_A = np.array([[0.9, 0.1], [-0.1, 0.9]], np.float32)
LINEAR_B = np.array([0.0, 0.5], np.float32)
LINEAR_C = np.array([1.0, 0.0], np.float32)


def linear_truth(obs: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact next observations and rewards of :class:`LinearEnv` for a batch."""
    a = np.clip(np.asarray(actions, np.float32).reshape(-1), -1, 1)
    next_obs = (obs @ LINEAR_A.T + a[:, None] * LINEAR_B).astype(np.float32)
    return next_obs, (obs @ LINEAR_C - 0.5 * a).astype(np.float32)


class LinearEnv(gym.Env):  # type: ignore[type-arg]
    """Starts uniform in [-1, 1]^2, steps o' = A o + B a exactly, truncates after 5 steps."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self._t = 0
        return self._obs.copy(), {}

    def step(self, action):
        next_obs, reward = linear_truth(self._obs[None], np.asarray(action)[None])
        self._obs, self._t = next_obs[0], self._t + 1
        return self._obs.copy(), float(reward[0]), False, self._t >= 5, {}
