"""Tests of fleetgym.wrappers.shim_config: the shared shim configuration and action checks."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st
from shim_envs import CounterEnv, SpacesEnv

from fleetgym.errors import InvalidActionError
from fleetgym.wrappers.action_check import ActionCheck
from fleetgym.wrappers.channels import FixedDelay, GaussianChannel
from fleetgym.wrappers.delay_features import SentActionHistory
from fleetgym.wrappers.network_shim import NetworkShimWrapper
from fleetgym.wrappers.shim_config import (
    EPISODE_INFO_KEYS,
    STEP_INFO_KEYS,
    TRAIN_INFO_KEYS,
    ShimConfig,
    default_start_action,
)
from fleetgym.wrappers.vector import NetworkShimVectorWrapper

P = 20.0


def test_config_is_frozen_and_validated():
    config = ShimConfig.create(spaces.Discrete(3, start=1), profile="ethernet", step_ms=P)
    assert (config.step_ms, config.delivery, config.block_size, config.fifo) == (
        20.0,
        "fifo",
        512,
        True,
    )
    assert int(config.start_action) == 1
    with pytest.raises(AttributeError):
        config.step_ms = 5.0  # type: ignore[misc]
    with pytest.raises(TypeError, match="profiles: expected a non-empty sequence"):
        ShimConfig((), P)
    with pytest.raises(TypeError, match="delivery: expected one of"):
        ShimConfig(config.profiles, P, delivery=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="block_size: expected an int"):
        ShimConfig(config.profiles, P, block_size=2.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("level", "keys"),
    # "train" adds the episode keys on an episode's last step only (this one is not)
    [("full", STEP_INFO_KEYS + EPISODE_INFO_KEYS), ("train", TRAIN_INFO_KEYS)],
)
def test_scalar_and_vector_shims_share_the_config_and_the_info_keys(level, keys):
    shim = NetworkShimWrapper(CounterEnv(), "wifi-normal", step_ms=P, info=level)
    vec = NetworkShimVectorWrapper(
        SyncVectorEnv([CounterEnv] * 2), "wifi-normal", step_ms=P, info=level
    )
    assert shim.config == vec.config
    shim.reset(seed=0)
    vec.reset(seed=0)
    info = shim.step(1)[-1]
    assert tuple(info) == keys
    vinfo = vec.step(np.ones(2, np.int64))[-1]
    assert [k for k in vinfo if not k.startswith("_")] == list(keys)


def test_the_info_level_is_checked_and_train_is_the_default():
    assert NetworkShimWrapper(CounterEnv(), "wifi-normal", step_ms=P).info_level == "train"
    with pytest.raises(ValueError, match="info: expected one of"):
        NetworkShimWrapper(CounterEnv(), "wifi-normal", step_ms=P, info="all")
    with pytest.raises(TypeError, match="info: expected one of"):
        NetworkShimVectorWrapper(SyncVectorEnv([CounterEnv]), "wifi-normal", step_ms=P, info=2)


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(1.0, 2.0, (2,)),
        spaces.Discrete(3, start=-1),
        spaces.MultiDiscrete([2, 3], start=[1, 0]),
        spaces.MultiBinary(3),
        spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(-1, 1, (1,))}),
        spaces.Tuple((spaces.Discrete(2, start=5), spaces.MultiBinary(2))),
    ],
)
def test_default_start_action_is_in_the_space_and_passes_the_check(space):
    action = default_start_action(space)
    assert space.contains(action)
    ActionCheck(space)(action, step=0)


BAD = [
    (spaces.Discrete(2), 0.7),
    (spaces.Discrete(2), 1.0),
    (spaces.Discrete(2), 2),
    (spaces.Discrete(2), np.int64(-1)),
    (spaces.Discrete(2), "1"),
    (spaces.Discrete(2), np.array([1])),
    (spaces.Box(-1.0, 1.0, (1,)), np.array([np.nan])),
    (spaces.Box(-1.0, 1.0, (1,)), np.array([np.inf])),
    (spaces.Box(-1.0, 1.0, (1,)), 0.5),
    (spaces.Box(-1.0, 1.0, (1,)), np.array(["a"])),
    (spaces.Box(-np.inf, np.inf, (1,)), np.array([np.nan])),
    (spaces.MultiDiscrete([2, 3]), np.array([1, 3])),
    (spaces.MultiDiscrete([2, 3]), np.array([1.0, 1.0])),
    (spaces.MultiBinary(2), np.array([0, 2])),
    (spaces.Dict({"a": spaces.Discrete(2)}), {"a": 5}),
    (spaces.Dict({"a": spaces.Discrete(2)}), 1),
]


@pytest.mark.parametrize(("space", "action"), BAD)
def test_invalid_actions_are_rejected_naming_the_step(space, action):
    with pytest.raises(InvalidActionError, match="action at step 7: expected an element of"):
        ActionCheck(space)(action, step=7)


@pytest.mark.parametrize(
    ("space", "action"),
    [
        (spaces.Discrete(2), 1),
        (spaces.Discrete(2), np.int64(0)),
        (spaces.Discrete(2), np.array(1)),
        (spaces.Box(-1.0, 1.0, (1,)), np.array([0.5])),
        (spaces.Box(-1.0, 1.0, (1,), dtype=np.float32), np.array([0.5], dtype=np.float64)),
        (spaces.Box(-1.0, 1.0, (1,)), [0.5]),
        (spaces.Box(-1.0, 1.0, (1,)), np.array([1.5])),  # finite: the env clips it
        (spaces.MultiDiscrete([2, 3]), np.array([1, 2])),
        (spaces.MultiBinary(2), np.array([0, 1], np.int8)),
    ],
)
def test_valid_actions_pass(space, action):
    ActionCheck(space)(action, step=0)


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.floats(), st.integers(-10, 10), st.text(max_size=3), st.none()))
def test_discrete_check_agrees_with_gymnasium_on_any_scalar(value: Any):
    space = spaces.Discrete(3)
    valid = isinstance(value, int) and 0 <= value < 3
    if valid:
        ActionCheck(space)(value, step=0)
    else:
        with pytest.raises(InvalidActionError):
            ActionCheck(space)(value, step=0)


@settings(max_examples=60, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_box_check_rejects_exactly_the_non_finite_values(value: float):
    space = spaces.Box(-2.0, 2.0, (1,), dtype=np.float64)
    if math.isfinite(value):
        ActionCheck(space)(np.array([value]), step=0)
    else:
        with pytest.raises(InvalidActionError):
            ActionCheck(space)(np.array([value]), step=0)


def test_scalar_shim_rejects_an_invalid_action_when_it_is_sent_even_if_lost():
    lossy = NetworkShimWrapper(
        CounterEnv(4), uplink=FixedDelay(0), downlink=GaussianChannel(0.0, 0.0, 1.0), step_ms=P
    )
    lossy.reset(seed=0)
    lossy.step(1)
    with pytest.raises(InvalidActionError, match="action at step 1"):
        lossy.step(0.7)
    pendulum = NetworkShimWrapper(gym.make("Pendulum-v1"), "wifi-normal")
    pendulum.reset(seed=0)
    with pytest.raises(InvalidActionError, match="action at step 0"):
        pendulum.step(np.array([np.nan], np.float32))
    pendulum.close()


def test_vector_shim_rejects_fractions_and_broadcast_scalars():
    vec = NetworkShimVectorWrapper(SyncVectorEnv([CounterEnv] * 3), "perfect", step_ms=P)
    vec.reset(seed=0)
    vec.step(np.array([0, 1, 2]))
    for bad in (np.array([0.7, 1.0, 1.9]), 1, np.array([0, 1]), np.array([0, 1, -1])):
        with pytest.raises(InvalidActionError, match="action at step 1: expected a batch of 3"):
            vec.step(bad)
    # A rejected step changes nothing: the next valid step is step 1.
    info = vec.step(np.array([0, 1, 2]))[-1]
    assert info["obs_age_steps"].tolist() == [0, 0, 0]


def test_sent_action_history_checks_actions_and_flattens_dict_and_tuple_spaces():
    space = spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(-1.0, 1.0, (2,))})
    env = SentActionHistory(SpacesEnv(spaces.Box(-1.0, 1.0, (1,)), space), 2)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (1 + 2 * 4,) and obs[1:].tolist() == [0.0] * 8
    obs, *_ = env.step({"a": 1, "b": np.array([0.5, -0.25], np.float32)})
    assert obs[1:].tolist() == [0.0] * 4 + [0.0, 1.0, 0.5, -0.25]
    with pytest.raises(InvalidActionError, match="action at step 1"):
        env.step({"a": 2, "b": np.zeros(2, np.float32)})
    tup = SentActionHistory(
        SpacesEnv(
            spaces.Box(-1.0, 1.0, (1,)), spaces.Tuple((spaces.Discrete(3), spaces.MultiBinary(2)))
        ),
        1,
    )
    tup.reset(seed=0)
    obs, *_ = tup.step((2, np.array([1, 0], np.int8)))
    assert obs[1:].tolist() == [0.0, 0.0, 1.0, 1.0, 0.0]
