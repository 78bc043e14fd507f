"""Tests of fleetgym.agents.workloads: the table, validation, env and policy construction."""

from __future__ import annotations

import json
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.agents.workloads import WORKLOADS, Workload, get_workload
from fleetgym.errors import UnknownWorkloadError, UnsupportedSpaceError

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


def test_unknown_name_lists_known_names_and_close_matches():
    with pytest.raises(
        UnknownWorkloadError, match=r"workload: expected .*CartPole-v1.*actual 'Pong'"
    ):
        get_workload("Pong")
    with pytest.raises(UnknownWorkloadError, match=r"close matches: 'Acrobot-v1'"):
        get_workload("Acrobat-v1")
    with pytest.raises(UnknownWorkloadError, match=r"module 'no_such_module_xyz' cannot be"):
        get_workload("no_such_module_xyz:Thing-v0")
    with pytest.raises(ValueError):  # UnknownWorkloadError is also a ValueError
        get_workload("nope")


def test_non_string_name_is_a_type_error():
    with pytest.raises(TypeError, match="workload: expected a name"):
        get_workload(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("kind", "board", "kind: expected one of"),
        ("network", "resnet", "network: expected"),
        ("activation", "gelu", "activation: expected"),
        ("reward_transform", "log", "reward_transform: expected"),
        ("rollout_steps", 0, r"rollout_steps: expected an int (>= 1|in \[1, )"),
        ("epochs", 2.5, r"epochs: expected an int (>= 1|in \[1, )"),
        ("gamma", 1.5, r"gamma: expected a float in \[0, 1\]"),
        ("lr", 0.0, r"lr: expected a (finite )?float > 0"),
        ("ent_coef", -0.1, r"ent_coef: expected a (finite )?float >= 0"),
        ("hidden_sizes", (), "hidden_sizes: expected"),
        ("lr", "fast", r"lr: expected a (finite )?float > 0, actual 'fast'"),
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


# ----------------------------------------------------------- any Gymnasium env is a workload
class TinyImageEnv(gym.Env):
    """uint8 (12, 10, 3) frames whose pixels count the steps; 3 actions; episodes of 6."""

    observation_space = gym.spaces.Box(0, 255, (12, 10, 3), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((12, 10, 3), np.uint8), {}

    def step(self, action):
        self.t += 1
        obs = np.full((12, 10, 3), 10 * self.t, np.uint8)
        return obs, float(action == 1), self.t >= 6, False, {}


class DictMultiDiscreteEnv(gym.Env):
    """Dict observations (a Box and a Discrete part), MultiDiscrete([2, 3]) actions."""

    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "mode": gym.spaces.Discrete(3)}
    )
    action_space = gym.spaces.MultiDiscrete([2, 3])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"pos": np.zeros(2, np.float32), "mode": 0}, {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action)), action
        self.t += 1
        obs = {"pos": np.full(2, 0.1 * self.t, np.float32), "mode": int(action[1])}
        return obs, float(action[0]), self.t >= 5, False, {}


class TextObservationEnv(gym.Env):
    observation_space = gym.spaces.Text(5)
    action_space = gym.spaces.Discrete(2)


class MatrixActionEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32)


def make_offset_discrete_env():
    """A module-level env factory: Acrobot with actions Discrete(3, start=-1)."""
    env = gym.make("Acrobot-v1")
    return gym.wrappers.TransformAction(env, lambda a: int(a) + 1, gym.spaces.Discrete(3, start=-1))


@pytest.fixture(scope="module")
def registered_test_envs():
    ids: dict[str, dict[str, Any]] = {
        "fleetgym-test/TinyImage-v0": dict(entry_point=TinyImageEnv, reward_threshold=5.0),
        "fleetgym-test/DictMulti-v0": dict(entry_point=DictMultiDiscreteEnv),
        "fleetgym-test/Text-v0": dict(entry_point=TextObservationEnv),
        "fleetgym-test/Matrix-v0": dict(entry_point=MatrixActionEnv),
    }
    for env_id, kwargs in ids.items():
        gym.register(env_id, **kwargs)
    yield ids
    for env_id in ids:
        gym.registry.pop(env_id, None)


@pytest.mark.parametrize(
    ("source", "fields", "obs_shape", "action_space"),
    [
        (
            "Acrobot-v1",
            dict(kind="classic", preprocessing="none", network="mlp", target_return=-100.0),
            (6,),
            gym.spaces.Discrete(3),
        ),
        (
            "Pendulum-v1",
            dict(preprocessing="none", normalize_obs=True, reward_transform="scale"),
            (3,),
            gym.spaces.Box(-2.0, 2.0, (1,), np.float32),
        ),
        (
            "MountainCarContinuous-v0",
            dict(target_return=90.0, normalize_obs=True, minibatch_size=64),
            (2,),
            gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
        ),
        (
            "FrozenLake-v1",  # Discrete observations: one-hot
            dict(preprocessing="flatten", target_return=0.7),
            (16,),
            gym.spaces.Discrete(4),
        ),
        (
            "fleetgym-test/TinyImage-v0",
            dict(kind="image", preprocessing="frames", network="nature_cnn", target_return=5.0),
            (4, 84, 84),
            gym.spaces.Discrete(3),
        ),
        (
            "fleetgym-test/DictMulti-v0",  # 2 + one-hot 3; joint actions 2 x 3
            dict(preprocessing="flatten", target_return=float("inf")),
            (5,),
            gym.spaces.Discrete(6),
        ),
    ],
)
def test_spaces_and_family_are_inferred(
    registered_test_envs, source, fields, obs_shape, action_space
):
    w = get_workload(source)
    for name, value in fields.items():
        assert getattr(w, name) == value, name
    assert get_workload(source) is w  # inferred once per process
    env = w.make_env(seed=0)
    obs, _ = env.reset(seed=0)
    assert obs.shape == obs_shape and env.observation_space.shape == obs_shape
    assert env.action_space == action_space
    obs, *_ = env.step(env.action_space.sample())
    assert obs.shape == obs_shape
    env.close()
    policy = w.make_policy()
    assert policy.obs_shape == obs_shape
    assert policy.discrete == isinstance(action_space, gym.spaces.Discrete)
    assert pickle.loads(pickle.dumps(w)) == w


def test_joint_discrete_action_maps_every_index_to_one_env_action(registered_test_envs):
    from fleetgym.agents.workloads.spaces import JointDiscreteAction

    env = JointDiscreteAction(gym.make("fleetgym-test/DictMulti-v0"))
    mapped = [tuple(env.action(i).tolist()) for i in range(6)]
    assert sorted(mapped) == [(a, b) for a in range(2) for b in range(3)]
    offset = get_workload(f"{__name__}:make_offset_discrete_env")
    env = offset.make_env(seed=0)
    assert env.action_space == gym.spaces.Discrete(3)
    assert env.action(0) == -1 and env.action(2) == 1  # start -1: index 0 is action -1


def test_module_id_envspec_and_callable_sources():
    w = get_workload("gymnasium.envs.classic_control:Acrobot-v1")
    assert w.env_id == "gymnasium.envs.classic_control:Acrobot-v1" and w.target_return == -100.0
    assert get_workload(gym.spec("Acrobot-v1")).env_id == "Acrobot-v1"
    w = Workload.from_env(make_offset_discrete_env, rollout_steps=16)
    assert w.env_id == w.entry_point == f"{__name__}:make_offset_discrete_env"
    assert w.rollout_steps == 16 and w.target_return == float("inf")
    with pytest.raises(ValueError, match="env: expected an importable callable"):
        Workload.from_env(lambda: gym.make("CartPole-v1"))
    with pytest.raises(TypeError, match="env_kwargs: expected a dict"):
        Workload.from_env("Acrobot-v1", env_kwargs=[1])


def test_env_kwargs_travel_as_json():
    w = Workload.from_env("FrozenLake-v1", env_kwargs={"map_name": "8x8"})
    assert json.loads(w.env_kwargs_json)["map_name"] == "8x8"
    assert w.make_env(seed=0).observation_space.shape == (64,)
    with pytest.raises(ValueError, match="env_kwargs: expected env kwargs of plain data"):
        Workload.from_env(f"{__name__}:make_offset_discrete_env", env_kwargs={"x": object()})


def test_user_registered_id_builds_where_it_is_not_registered():
    # A worker process never ran the user's gym.register: the workload carries the entry
    # point and kwargs as data.
    gym.register(
        "fleetgym-test/UserAcrobot-v0",
        entry_point="gymnasium.envs.classic_control.acrobot:AcrobotEnv",
        max_episode_steps=7,
        reward_threshold=-50.0,
    )
    try:
        w = get_workload("fleetgym-test/UserAcrobot-v0")
    finally:
        gym.registry.pop("fleetgym-test/UserAcrobot-v0")
    assert w.target_return == -50.0 and w.max_episode_steps == 7
    env = w.make_env(seed=0)
    env.reset(seed=0)
    steps = 0
    truncated = terminated = False
    while not (terminated or truncated):
        _, _, terminated, truncated, _ = env.step(0)
        steps += 1
    assert steps == 7  # the registration's time limit came along


@pytest.mark.parametrize(
    ("env_id", "match"),
    [
        ("fleetgym-test/Text-v0", "observation_space: expected a Box, Discrete"),
        ("fleetgym-test/Matrix-v0", "action_space: expected a 1-D Box"),
    ],
)
def test_spaces_no_policy_fits_are_refused(registered_test_envs, env_id, match):
    with pytest.raises(UnsupportedSpaceError, match=match):
        get_workload(env_id)


def test_too_many_joint_actions_are_refused():
    from fleetgym.agents.workloads.spaces import check_action_space

    with pytest.raises(UnsupportedSpaceError, match="action_space: expected at most 4096"):
        check_action_space(gym.spaces.MultiDiscrete([100, 100]))


def test_invalid_new_fields_are_rejected():
    base = WORKLOADS["CartPole-v1"]
    with pytest.raises(ValueError, match="preprocessing: expected one of"):
        base.with_overrides(preprocessing="crop")
    with pytest.raises(ValueError, match="env_kwargs_json: expected a JSON object"):
        base.with_overrides(env_kwargs_json="[1]")
    with pytest.raises(ValueError, match="max_episode_steps: expected an int >= 1"):
        base.with_overrides(max_episode_steps=0)
    with pytest.raises(ValueError, match="target_return: expected a number"):
        base.with_overrides(target_return=float("nan"))


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("source", "backend"),
    [
        ("Acrobot-v1", "inprocess"),
        ("Pendulum-v1", "inprocess"),
        ("fleetgym-test/TinyImage-v0", "inprocess"),
        ("fleetgym-test/DictMulti-v0", "inprocess"),
        ("MountainCarContinuous-v0", "inprocess"),
        ("fleetgym-test/UserPendulum-v0", "process"),
    ],
)
def test_any_env_trains_with_a_tiny_budget(registered_test_envs, source, backend):
    from fleetgym.agents.fleet import make_fleet
    from fleetgym.agents.learners.ppo import PPOLearner
    from fleetgym.agents.learners.training import train

    if source == "fleetgym-test/UserPendulum-v0":
        # Registered here only for the inference, so the worker processes (and this one)
        # build it from the entry point the workload carries as data.
        gym.register(
            source,
            entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv",
            kwargs={"g": 9.0},
        )
        try:
            w = Workload.from_env(source)
        finally:
            gym.registry.pop(source)
        assert json.loads(w.env_kwargs_json) == {"g": 9.0}
    else:
        w = get_workload(source)
    w = w.with_overrides(minibatch_size=16, epochs=1)
    learner = PPOLearner(w, seed=0)
    fleet = make_fleet(w, backend=backend, max_actors=2, seed=0)
    try:
        history = train(w, fleet, learner, 2, 2, steps_per_actor=8, target=float("inf"))
    finally:
        fleet.close()
    assert len(history) == 2 and history.total_steps == 2 * 2 * 8
    assert all(r.stats.num_samples == 16 for r in history.rounds)
