"""Tests of fleetgym.wrappers.stall: the env side's safe action after a command timeout."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from fleetgym.wrappers import FixedDelay, NetworkShimWrapper, StallWatchdog

STEP_MS = 20.0


class RecordEnv(gym.Env[np.ndarray, int]):
    """Records every action it is given; never ends."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(4)
        self.applied: list[int] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.applied = []
        return np.zeros(1, np.float32), {}

    def step(self, action: int):
        self.applied.append(int(action))
        return np.zeros(1, np.float32), 0.0, False, False, {}


def shim(downlink: Any, **kwargs: Any) -> NetworkShimWrapper:
    return NetworkShimWrapper(
        RecordEnv(), uplink=FixedDelay(0), downlink=downlink, step_ms=STEP_MS, **kwargs
    )


def test_the_env_applies_the_safe_action_after_stall_steps_holds():
    base = shim(FixedDelay(3 * STEP_MS), info="full")
    env = StallWatchdog(base, stall_steps=2, safe_action=2)
    env.reset(seed=0)
    applied, flags = [], []
    for t in range(8):
        *_, info = env.step(1 if t % 2 else 3)
        flags.append(info["safe_action"])
        applied.append(info["applied_action"])
    # Actions arrive 3 ticks late: the start action 0 at tick 0, then 2 from the second
    # hold on, until a_0 = 3 arrives at tick 3.
    assert base.unwrapped.applied == [0, 2, 2, 3, 1, 3, 1, 3]
    assert applied == base.unwrapped.applied
    assert flags == [False, True, True, False, False, False, False, False]
    env.reset(seed=0)  # the count of holds starts again
    env.step(1)
    assert base.unwrapped.applied == [0]


def test_the_default_safe_action_is_the_shims_start_action():
    env = StallWatchdog(shim(FixedDelay(10 * STEP_MS), start_action=1), stall_steps=1)
    assert env.safe_action == 1
    env.reset(seed=0)
    for _ in range(3):
        env.step(3)
    assert env.unwrapped.applied == [1, 1, 1]


def test_gym_make_rebuilds_the_watchdog_from_the_spec():
    base = NetworkShimWrapper(gym.make("CartPole-v1"), profile="wifi-degraded", info="full")
    env = StallWatchdog(base, stall_steps=2, safe_action=1)
    again = gym.make(env.spec)
    flags = []
    for candidate in (env, again):
        candidate.reset(seed=3)
        steps = [candidate.step(0)[-1] for _ in range(8)]
        flags.append([(info["safe_action"], int(info["applied_action"])) for info in steps])
    assert flags[0] == flags[1]
    assert any(safe for safe, _ in flags[0])
    assert all(applied == 1 for safe, applied in flags[0] if safe)


def test_the_watchdog_is_silent_on_a_network_without_stalls():
    env = StallWatchdog(shim(FixedDelay(0)), stall_steps=1, safe_action=2)
    env.reset(seed=0)
    assert not any(env.step(t % 4)[-1]["safe_action"] for t in range(20))
    assert env.unwrapped.applied == [t % 4 for t in range(20)]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="expected a NetworkShimWrapper"):
        StallWatchdog(RecordEnv())
    with pytest.raises(ValueError, match="safe_action: expected an element of Discrete"):
        StallWatchdog(shim(FixedDelay(0)), safe_action=7)
    with pytest.raises(ValueError, match="stall_steps: expected an int in"):
        StallWatchdog(shim(FixedDelay(0)), stall_steps=0)
