"""Tests of fleetgym.agents.rollout on small exact environments."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.agents.rollout import RolloutWorker, rollout_many, slot_seeds
from fleetgym.agents.workloads import Workload


class CounterEnv(gym.Env):
    """obs = (step in episode, episode index); reward = step in episode (1-based).

    Even episodes terminate after 3 steps; odd ones run until the TimeLimit truncates
    them after 4 steps. So an episode's return is 1+2+3 = 6 (terminated) or 10 (truncated).
    """

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.episode = -1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.episode += 1
        return self._obs(), {}

    def _obs(self):
        return np.array([self.t, self.episode], np.float32)

    def step(self, action):
        self.t += 1
        terminated = self.episode % 2 == 0 and self.t == 3
        return self._obs(), float(self.t), terminated, False, {}


class BoxEchoEnv(gym.Env):
    """obs = the action the env actually applied (to check clipping); never ends."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.asarray(action, np.float32), 0.0, False, False, {}


gym.register("FleetgymTest/Counter-v0", entry_point=CounterEnv, max_episode_steps=4)
gym.register("FleetgymTest/BoxEcho-v0", entry_point=BoxEchoEnv)

COUNTER = Workload(
    name="counter",
    env_id="FleetgymTest/Counter-v0",
    kind="classic",
    target_return=1.0,
    rollout_steps=8,
)
BOX_ECHO = Workload(
    name="box-echo",
    env_id="FleetgymTest/BoxEcho-v0",
    kind="classic",
    target_return=1.0,
    rollout_steps=8,
    log_std_init=1.5,  # std ~ 4.5: most samples fall outside the [-1, 1] bounds
)


def test_trajectory_fields_on_the_counter_env():
    worker = RolloutWorker(COUNTER, actor_id=0, seed=0)
    traj = worker.rollout(worker.policy.get_weights(), steps=9, policy_version=5)
    # episodes: 0 terminates after 3 steps, 1 is truncated after 4, 2 runs 2 steps so far
    np.testing.assert_array_equal(traj.obs[:, 0], [0, 1, 2, 0, 1, 2, 3, 0, 1])
    np.testing.assert_array_equal(traj.obs[:, 1], [0, 0, 0, 1, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(traj.rewards, [1, 2, 3, 1, 2, 3, 4, 1, 2])
    np.testing.assert_array_equal(traj.terminated, [0, 0, 1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(traj.truncated, [0, 0, 0, 0, 0, 0, 1, 0, 0])
    assert traj.episode_returns == [6.0, 10.0] and traj.episode_lengths == [3, 4]
    # the truncation bootstraps from the final (pre-reset) observation of episode 1
    final_obs = np.array([[4, 1]], np.float32)
    # The rollout's value and this one come from two float32 forward passes whose sums may
    # round in another order (CPU-dependent): allow a few ulps of the hidden layers' sums.
    expected = float(worker.policy.value(final_obs)[0])
    assert traj.truncation_values[6] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert np.count_nonzero(traj.truncation_values) == 1
    # last_value is V of the observation after the last step
    assert traj.last_value == pytest.approx(
        float(worker.policy.value(np.array([[2, 2]], np.float32))[0]), rel=1e-5, abs=1e-6
    )
    np.testing.assert_allclose(traj.values, worker.policy.value(traj.obs), rtol=1e-5, atol=1e-6)
    assert (traj.actor_id, traj.policy_version, traj.seed, len(traj)) == (0, 5, 0, 9)
    worker.close()


def test_episodes_continue_across_rollouts():
    worker = RolloutWorker(COUNTER, actor_id=1, seed=0)
    weights = worker.policy.get_weights()
    first = worker.rollout(weights, 2, 0)
    second = worker.rollout(weights, 2, 1)
    np.testing.assert_array_equal(first.obs[:, 0], [0, 1])
    np.testing.assert_array_equal(second.obs[:, 0], [2, 0])  # episode 0 ends in round 2
    assert first.episode_returns == [] and second.episode_returns == [6.0]
    assert second.terminated.tolist() == [True, False]


def test_same_seed_reproduces_and_slots_differ():
    weights = RolloutWorker(COUNTER, 0, 0).policy.get_weights()
    a = RolloutWorker(COUNTER, 0, 0).rollout(weights, 64, 0)
    b = RolloutWorker(COUNTER, 0, 0).rollout(weights, 64, 0)
    c = RolloutWorker(COUNTER, 1, 0).rollout(weights, 64, 0)
    d = RolloutWorker(COUNTER, 0, 0, incarnation=1).rollout(weights, 64, 0)
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.log_probs, b.log_probs)
    # 64 fair-ish coin flips: two independent streams agree everywhere with prob ~2^-64
    assert not np.array_equal(a.actions, c.actions)
    assert not np.array_equal(a.actions, d.actions)


def test_slot_seeds_are_distinct_per_slot_and_incarnation():
    seeds = {slot_seeds(0, i, k)[0] for i in range(8) for k in range(3)}
    assert len(seeds) == 24


def test_batched_rollout_equals_one_slot_at_a_time():
    weights = RolloutWorker(COUNTER, 0, 3).policy.get_weights()
    alone = [RolloutWorker(COUNTER, i, 3) for i in range(3)]
    together = [RolloutWorker(COUNTER, i, 3) for i in range(3)]
    for _ in range(2):  # two rounds: the persistent state must agree too
        single = [w.rollout(weights, 7, 0) for w in alone]
        batched = rollout_many(together, weights, 7, 0)
        for s, b in zip(single, batched, strict=True):
            assert s.actor_id == b.actor_id
            np.testing.assert_array_equal(s.obs, b.obs)
            np.testing.assert_array_equal(s.actions, b.actions)
            # float32 batched vs single matmuls differ by rounding (~1e-7 absolute)
            np.testing.assert_allclose(s.log_probs, b.log_probs, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(s.values, b.values, rtol=1e-5, atol=1e-6)
            assert s.episode_returns == b.episode_returns
            assert s.last_value == pytest.approx(b.last_value, rel=1e-5, abs=1e-6)


def test_gaussian_actions_are_clipped_for_the_env_only():
    worker = RolloutWorker(BOX_ECHO, 0, 0)
    traj = worker.rollout(worker.policy.get_weights(), 50, 0)
    applied = traj.obs[1:]  # obs[t+1] echoes the action applied at step t
    np.testing.assert_array_equal(applied, np.clip(traj.actions[:-1], -1.0, 1.0))
    assert np.abs(traj.actions).max() > 1.0  # the learner sees the unclipped sample
    assert traj.actions.dtype == np.float32


def test_rollout_uses_the_weights_it_is_sent():
    worker = RolloutWorker(COUNTER, 0, 0)
    weights = worker.policy.get_weights()
    weights["value_head.bias"] = np.array([42.0], np.float32)
    weights["value_head.weight"] = np.zeros_like(weights["value_head.weight"])
    traj = worker.rollout(weights, 3, 0)
    np.testing.assert_allclose(traj.values, 42.0)
    assert traj.last_value == pytest.approx(42.0)


def test_real_cartpole_rollout():
    workers = [RolloutWorker("CartPole-v1", i, 0) for i in range(4)]
    trajs = rollout_many(workers, workers[0].policy.get_weights(), 32, 0)
    assert [t.actor_id for t in trajs] == [0, 1, 2, 3]
    assert all(t.obs.shape == (32, 4) for t in trajs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"actor_id": -1}, "actor_id: expected an int >= 0"),
        ({"seed": 1.5}, "seed: expected an int, actual float 1.5"),
        ({"incarnation": -2}, "incarnation: expected an int >= 0"),
    ],
)
def test_invalid_worker_arguments(kwargs, match):
    args = {"actor_id": 0, "seed": 0, **kwargs}
    error = TypeError if isinstance(kwargs.get("seed"), float) else ValueError
    with pytest.raises(error, match=match):
        RolloutWorker(COUNTER, **args)


def test_invalid_rollout_arguments():
    worker = RolloutWorker(COUNTER, 0, 0)
    weights = worker.policy.get_weights()
    with pytest.raises(ValueError, match=r"steps: expected an int in \[1, 10000000\]"):
        worker.rollout(weights, 0, 0)
    with pytest.raises(ValueError, match=r"steps: expected an int in \[1, 10000000\]"):
        worker.rollout(weights, 10**12, 0)
    with pytest.raises(ValueError, match="workers: expected at least one"):
        rollout_many([], weights, 3, 0)
    with pytest.raises(ValueError, match="workers: expected one workload"):
        rollout_many([worker, RolloutWorker("CartPole-v1", 1, 0)], weights, 3, 0)
    with pytest.raises(ValueError, match="weights: expected keys"):
        worker.rollout({"x": np.zeros(1)}, 3, 0)
