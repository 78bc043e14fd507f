"""MiniGridStateDynamics: the pose read back from the view, stepped with the env's own rules."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.wrappers.dynamics import true_dynamics
from fleetgym.wrappers.grid_dynamics import MiniGridStateDynamics
from fleetgym.wrappers.network_shim import NetworkShimWrapper

minigrid = pytest.importorskip("minigrid")


def flat_env(env_id: str = "MiniGrid-Empty-5x5-v0") -> gym.Env:
    from gymnasium.wrappers import FlattenObservation
    from minigrid.wrappers import ImgObsWrapper

    return FlattenObservation(ImgObsWrapper(gym.make(env_id)))


def test_every_unambiguous_pose_is_predicted_exactly():
    """From each pose whose view no other pose shares, three random actions in the model
    reach the view the real env shows after the same actions."""
    model = MiniGridStateDynamics("MiniGrid-Empty-5x5-v0")
    env = flat_env()
    base = env.unwrapped
    rng = np.random.default_rng(0)
    checked = 0
    for poses in model._poses.values():
        if len(poses) != 1:
            continue
        env.reset(seed=0)
        base.agent_pos, base.agent_dir = model._pose_list[poses[0]]
        obs = base.gen_obs()["image"].ravel()
        actions = rng.integers(0, 3, 3)
        for a in actions:
            base.step_count = 0
            nxt, *_ = env.step(int(a))
        np.testing.assert_array_equal(model(obs, actions, None), nxt)
        checked += 1
    assert checked >= 20
    assert model.unmatched == 0


def test_the_pose_table_matches_stepping_the_env_from_every_pose():
    """The tabulated step agrees with the env's own step from every pose a view allows,
    ambiguous ones included, for sequences of all seven actions (majority view)."""
    model = MiniGridStateDynamics("MiniGrid-Empty-5x5-v0")
    ref = gym.make("MiniGrid-Empty-5x5-v0").unwrapped
    ref.reset(seed=0)
    rng = np.random.default_rng(1)
    for key, poses in model._poses.items():
        actions = rng.integers(0, 7, rng.integers(1, 7))
        counts: dict[bytes, int] = {}
        for i in poses:
            ref.agent_pos, ref.agent_dir = model._pose_list[i]
            for a in actions:
                ref.step_count = 0
                ref.step(int(a))
            got = ref.gen_obs()["image"].ravel().tobytes()
            counts[got] = counts.get(got, 0) + 1
        want = np.frombuffer(max(counts, key=counts.__getitem__), dtype=np.uint8)
        view = np.frombuffer(key, dtype=np.uint8)
        np.testing.assert_array_equal(model(view, actions, None), want)


def test_true_dynamics_picks_it_through_the_shim():
    shim = NetworkShimWrapper(flat_env(), "perfect", step_ms=20.0, start_action=6)
    assert isinstance(true_dynamics(shim), MiniGridStateDynamics)


def test_an_unknown_view_is_returned_unchanged_and_counted():
    model = MiniGridStateDynamics("MiniGrid-Empty-5x5-v0")
    view = np.zeros(147, dtype=np.uint8)
    np.testing.assert_array_equal(model(view, np.array([2]), None), view)
    assert model.unmatched == 1


def test_tasks_it_cannot_model_are_refused():
    with pytest.raises(UnsupportedSpaceError, match="fixed layout"):
        MiniGridStateDynamics("MiniGrid-DoorKey-5x5-v0")
    from minigrid.wrappers import ImgObsWrapper

    with pytest.raises(UnsupportedSpaceError, match="flattened egocentric view"):
        MiniGridStateDynamics.from_env(ImgObsWrapper(gym.make("MiniGrid-Empty-5x5-v0")))
    with pytest.raises(UnsupportedSpaceError, match="expected a MiniGrid env"):
        MiniGridStateDynamics("CartPole-v1")
