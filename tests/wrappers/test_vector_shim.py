"""Tests of fleetgym.wrappers.vector: equal, tick by tick, to the scalar shim in a vector env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from shim_envs import CounterEnv, SpacesEnv

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.wrappers import (
    FixedDelay,
    GaussianChannel,
    GilbertElliottChannel,
    NetworkProfile,
    NetworkShimWrapper,
)
from fleetgym.wrappers.vector import NetworkShimVectorWrapper

N = 5
KEYS = (
    "obs_age_steps", "obs_age_ms", "action_age_steps", "uplink_lost", "downlink_lost",
    "action_held", "applied_action", "reordered_packets", "stale_packets", "lost_packets",
    "action_holds",
)  # fmt: skip


def counters(horizons):
    return [lambda h=h: CounterEnv(horizon=h) for h in horizons]


MIXED = [
    NetworkProfile("a", GaussianChannel(30, 15, 0.1), GaussianChannel(50, 20, 0.05), ""),
    NetworkProfile(
        "b",
        GilbertElliottChannel.from_loss_and_burst(0.2, 3, mean_ms=25, std_ms=25),
        FixedDelay(45),
        "",
    ),
    "perfect",
]


@pytest.mark.parametrize(
    ("timing", "uplink_share"), [("loop", 0.5), ("loop", 0.2), ("per-direction", 0.5)]
)
@pytest.mark.parametrize("delivery", ["fifo", "latest"])
@pytest.mark.parametrize("profile", ["wifi-degraded", "mixed"])
def test_vector_shim_equals_scalar_shims_in_a_vector_env(delivery, profile, timing, uplink_share):
    profile_arg = MIXED if profile == "mixed" else profile
    horizons = [7, 11, 13, 40, 3]
    kwargs = dict(
        info="full",
        step_ms=20.0,
        delivery=delivery,
        block_size=16,
        start_action=9999,
        timing=timing,
        uplink_share=uplink_share,
    )
    scalar = SyncVectorEnv(
        [
            lambda h=h: NetworkShimWrapper(CounterEnv(horizon=h), profile_arg, **kwargs)
            for h in horizons
        ]
    )
    vector = NetworkShimVectorWrapper(SyncVectorEnv(counters(horizons)), profile_arg, **kwargs)
    rng = np.random.default_rng(0)
    obs_s, _ = scalar.reset(seed=10)
    obs_v, _ = vector.reset(seed=10)
    assert np.array_equal(obs_s, obs_v)
    for step in range(300):
        actions = rng.integers(0, 9000, N)
        out_s, out_v = scalar.step(actions), vector.step(actions)
        for a, b in zip(out_s[:4], out_v[:4], strict=True):
            assert np.array_equal(a, b), step
        info_s, info_v = out_s[4], out_v[4]
        for key in KEYS:
            if key not in info_s:  # every sub-env was restarting this step
                continue
            mask = info_s["_" + key]
            assert np.array_equal(info_s[key][mask], info_v[key][mask]), (step, key)
    applied_s = [e.unwrapped.applied for e in scalar.envs]
    applied_v = [e.unwrapped.applied for e in vector.unwrapped.envs]
    assert applied_s == applied_v


def test_perfect_vector_shim_is_identical_to_the_bare_vector_env():
    bare = gym.make_vec("CartPole-v1", num_envs=N, vectorization_mode="sync")
    shim = NetworkShimVectorWrapper(
        gym.make_vec("CartPole-v1", num_envs=N, vectorization_mode="sync"), "perfect"
    )
    assert shim.step_ms == pytest.approx(20.0)
    ob, _ = bare.reset(seed=4)
    os_, _ = shim.reset(seed=4)
    assert np.array_equal(ob, os_)
    rng = np.random.default_rng(1)
    for _ in range(400):
        a = rng.integers(0, 2, N)
        rb, rs = bare.step(a), shim.step(a)
        for x, y in zip(rb[:4], rs[:4], strict=True):
            assert np.array_equal(x, y)


def test_ethernet_no_staleness_and_same_seed_same_schedule():
    def ages(seed):
        env = NetworkShimVectorWrapper(
            gym.make_vec("CartPole-v1", num_envs=N, vectorization_mode="sync"), "wifi-degraded"
        )
        env.reset(seed=seed)
        return np.stack([env.step(np.ones(N, np.int64))[4]["obs_age_steps"] for _ in range(100)])

    assert np.array_equal(ages(1), ages(1)) and not np.array_equal(ages(1), ages(2))
    eth = NetworkShimVectorWrapper(
        gym.make_vec("CartPole-v1", num_envs=N, vectorization_mode="sync"), "ethernet"
    )
    eth.reset(seed=0)
    for _ in range(200):
        info = eth.step(np.ones(N, np.int64))[4]
        assert not info["obs_age_steps"].any() and not info["action_age_steps"].any()


def test_packets_beyond_the_horizon_are_counted_as_lost():
    env = NetworkShimVectorWrapper(
        SyncVectorEnv(counters([None] * 2)),
        uplink=FixedDelay(200),
        step_ms=20.0,
        max_delay_steps=5,
        info="full",
    )
    env.reset(seed=0)
    for _ in range(20):
        obs, _, _, _, info = env.step(np.zeros(2, np.int64))
    assert np.all(obs == 0) and np.all(info["lost_packets"] == 20)
    ok = NetworkShimVectorWrapper(
        SyncVectorEnv(counters([None] * 2)),
        uplink=FixedDelay(200),
        step_ms=20.0,
        max_delay_steps=11,
    )
    ok.reset(seed=0)
    for _ in range(20):
        obs, _, _, _, info = ok.step(np.zeros(2, np.int64))
    assert np.all(obs[:, 0] == 10) and np.all(info["obs_age_steps"] == 10)


def test_async_vector_env_and_bad_input():
    env = NetworkShimVectorWrapper(
        gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async"), "wifi-normal"
    )
    try:
        assert env.step_ms == pytest.approx(20.0)
        env.reset(seed=0)
        assert env.step(np.array([0, 1]))[0].shape == (2, 4)
    finally:
        env.close()
    sync = SyncVectorEnv(counters([None] * 2))
    with pytest.raises(TypeError, match="env: expected a gymnasium VectorEnv"):
        NetworkShimVectorWrapper(CounterEnv(), "perfect", step_ms=20)
    with pytest.raises(ValueError, match="step_ms: expected"):
        NetworkShimVectorWrapper(sync, "perfect")
    with pytest.raises(ValueError, match="max_delay_steps: expected an int in"):
        NetworkShimVectorWrapper(sync, "perfect", step_ms=20, max_delay_steps=0)
    with pytest.raises(ValueError, match="delivery: expected one of"):
        NetworkShimVectorWrapper(sync, "perfect", step_ms=20, delivery="x")
    with pytest.raises(ValueError, match="start_action: expected"):
        NetworkShimVectorWrapper(sync, "perfect", step_ms=20, start_action=-3)
    same_step = SyncVectorEnv(counters([None] * 2), autoreset_mode=AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError, match="autoreset_mode NEXT_STEP"):
        NetworkShimVectorWrapper(same_step, "perfect", step_ms=20)
    dict_env = SyncVectorEnv(
        [lambda: SpacesEnv(spaces.Dict({"a": spaces.Discrete(2)}), spaces.Discrete(2))] * 2
    )
    with pytest.raises(UnsupportedSpaceError, match="expected an array observation space"):
        NetworkShimVectorWrapper(dict_env, "perfect", step_ms=20)
    shim = NetworkShimVectorWrapper(sync, "perfect", step_ms=20)
    with pytest.raises(gym.error.ResetNeeded):
        shim.step(np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="seed: expected None, an int or 2 ints"):
        shim.reset(seed=[1, 2, 3])
    with pytest.raises(TypeError, match="seed: expected None, an int or 2 ints"):
        shim.reset(seed="ab")
    with pytest.raises(ValueError, match=r"seed\[1\]: expected an int >= 0"):
        shim.reset(seed=[1, -2])
