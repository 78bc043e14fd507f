"""Tests of fleetgym.agents.workloads: the table, validation, env and policy construction."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.agents.workloads import WORKLOADS, Workload, get_workload
from fleetgym.errors import UnknownWorkloadError

EXPECTED = {
    "CartPole-v1": "classic",
    "Hopper-v5": "mujoco",
    "HalfCheetah-v5": "mujoco",
    "Humanoid-v5": "mujoco",
    "QbertNoFrameskip-v4": "atari",
    "SpaceInvadersNoFrameskip-v4": "atari",
    "GravitarNoFrameskip-v4": "atari",
}


def test_table_holds_every_workload_with_family_defaults():
    assert set(WORKLOADS) == set(EXPECTED)
    for name, kind in EXPECTED.items():
        w = WORKLOADS[name]
        assert w.name == name and w.kind == kind
        assert w.target_return > 0 and w.rollout_steps >= 1
        if kind == "atari":
            assert (w.network, w.reward_transform) == ("nature_cnn", "sign")
        else:
            assert (w.network, w.hidden_sizes, w.activation) == ("mlp", (64, 64), "tanh")
        assert w.normalize_obs == (kind == "mujoco")
    assert WORKLOADS["CartPole-v1"].target_return == 475.0
    assert WORKLOADS["Hopper-v5"].target_return == 1000.0


def test_get_workload_by_name_and_passthrough():
    w = get_workload("Hopper-v5")
    assert w is WORKLOADS["Hopper-v5"]
    assert get_workload(w) is w


def test_unknown_name_lists_known_names():
    with pytest.raises(UnknownWorkloadError, match=r"expected one of .*CartPole-v1.*actual 'Pong'"):
        get_workload("Pong")
    with pytest.raises(ValueError):  # UnknownWorkloadError is also a ValueError
        get_workload("nope")


def test_non_string_name_is_a_type_error():
    with pytest.raises(TypeError, match="expected a name"):
        get_workload(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("kind", "board", "kind: expected one of"),
        ("network", "resnet", "network: expected"),
        ("activation", "gelu", "activation: expected"),
        ("reward_transform", "log", "reward_transform: expected"),
        ("rollout_steps", 0, "rollout_steps: expected an int >= 1"),
        ("epochs", 2.5, "epochs: expected an int >= 1"),
        ("gamma", 1.5, r"gamma: expected a float in \[0, 1\]"),
        ("lr", 0.0, "lr: expected a float > 0"),
        ("ent_coef", -0.1, "ent_coef: expected a float >= 0"),
        ("hidden_sizes", (), "hidden_sizes: expected"),
        ("lr", "fast", "lr: expected a float > 0, actual 'fast'"),
        ("gamma", None, r"gamma: expected a float in \[0, 1\], actual None"),
        ("hidden_sizes", ("wide",), "hidden_sizes: expected"),
    ],
)
def test_invalid_fields_are_rejected(field, value, match):
    with pytest.raises(ValueError, match=match):
        WORKLOADS["CartPole-v1"].with_overrides(**{field: value})


def test_with_overrides_unknown_field():
    with pytest.raises(TypeError, match="unknown.*'learning_rate'"):
        WORKLOADS["CartPole-v1"].with_overrides(learning_rate=1.0)
    w = WORKLOADS["CartPole-v1"].with_overrides(lr=0.01)
    assert w.lr == 0.01 and w.name == "CartPole-v1"


def test_workloads_pickle_by_value():
    for w in WORKLOADS.values():
        assert pickle.loads(pickle.dumps(w)) == w


def test_classic_and_mujoco_envs_build():
    env = get_workload("CartPole-v1").make_env(seed=1)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (4,) and isinstance(env.action_space, gym.spaces.Discrete)
    env.close()
    env = get_workload("Hopper-v5").make_env(seed=1)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (11,) and env.action_space.shape == (3,)
    env.close()


def test_atari_workload_builds_stacked_84x84_frames():
    env = get_workload("QbertNoFrameskip-v4").make_env(seed=0)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    obs, *_ = env.step(0)
    assert obs.shape == (4, 84, 84)
    env.close()


@pytest.mark.parametrize(
    ("name", "discrete", "obs_shape"),
    [
        ("CartPole-v1", True, (4,)),
        ("Hopper-v5", False, (11,)),
        ("SpaceInvadersNoFrameskip-v4", True, (4, 84, 84)),
    ],
)
def test_make_policy_matches_the_env(name, discrete, obs_shape):
    policy = get_workload(name).make_policy()
    assert policy.discrete == discrete and policy.obs_shape == obs_shape
    assert policy.config["workload"] == name


def test_custom_workload_is_a_plain_dataclass():
    w = Workload(
        name="mine", env_id="CartPole-v1", kind="classic", target_return=100.0, rollout_steps=8
    )
    assert w.make_policy().action_dim == 2
