"""Rollouts record the observation each episode ended in (``Trajectory.final_obs``)."""

from __future__ import annotations

import numpy as np

from fleetgym.agents.rollout import RolloutWorker, rollout_many
from fleetgym.agents.world_model import TransitionBuffer

X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360  # CartPole's termination thresholds


def _ended(traj):
    return np.flatnonzero(traj.terminated | traj.truncated)


def test_final_obs_is_the_terminal_observation_not_the_next_reset():
    worker = RolloutWorker("CartPole-v1", actor_id=0, seed=3)
    traj = worker.rollout(worker.policy.get_weights(), steps=400, policy_version=0)
    worker.close()
    ends = _ended(traj)
    assert len(ends) >= 3  # a random policy drops the pole within 400 steps, several times
    final = traj.final_obs
    assert final is not None and final.shape == traj.obs.shape
    for t in ends:
        x, theta = final[t, 0], final[t, 2]
        # The terminal state is past a threshold; the reset state after it is not.
        assert abs(x) > X_LIMIT or abs(theta) > THETA_LIMIT, (t, final[t])
        if t + 1 < len(traj):
            assert abs(traj.obs[t + 1, 2]) < 0.05 and abs(traj.obs[t + 1, 0]) < 0.05
    rest = np.setdiff1d(np.arange(len(traj)), ends)
    assert np.isnan(final[rest]).all()


def test_lockstep_rollouts_record_final_obs_too():
    workers = [RolloutWorker("CartPole-v1", actor_id=i, seed=5) for i in range(2)]
    trajs = rollout_many(workers, workers[0].policy.get_weights(), 300, 0)
    for traj in trajs:
        for t in _ended(traj):
            assert abs(traj.final_obs[t, 0]) > X_LIMIT or abs(traj.final_obs[t, 2]) > THETA_LIMIT
    for w in workers:
        w.close()


def test_the_world_model_buffer_learns_terminal_transitions_from_a_real_rollout():
    worker = RolloutWorker("CartPole-v1", actor_id=0, seed=3)
    traj = worker.rollout(worker.policy.get_weights(), steps=400, policy_version=0)
    worker.close()
    with_final = TransitionBuffer(capacity=1000)
    with_final.add_trajectory(traj)
    traj.final_obs = None
    without = TransitionBuffer(capacity=1000)
    without.add_trajectory(traj)
    # Without the terminal observations the terminal rows have no next observation.
    assert len(with_final) == len(without)
    assert with_final.has_next.sum() > without.has_next.sum()
