"""Lag bookkeeping refuses impossible versions: the weight ring, per-sample versions, lags."""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest

from fleetgym.agents.learners.lag import (
    CompensatedPPOLearner,
    ObservedTrajectory,
    WeightRing,
    behaviour_versions,
)
from fleetgym.agents.learners.losses import LossConfig
from fleetgym.agents.rollout import RolloutWorker
from fleetgym.agents.types import Trajectory


@functools.cache
def _trajectory() -> Trajectory:
    worker = RolloutWorker("CartPole-v1", 0, seed=0)
    try:
        return worker.rollout(worker.policy.get_weights(), 8, 0)
    finally:
        worker.close()


def trajectory(version: int = 0) -> Trajectory:
    traj = copy.copy(_trajectory())
    traj.policy_version = version
    return traj


def test_weight_ring_versions_only_move_forward():
    ring = WeightRing(3)
    ring.push(0, {"w": np.zeros(1)})
    ring.push(1, {"w": np.ones(1)})
    with pytest.raises(
        ValueError, match="version: expected at least the newest version 1, actual 0"
    ):
        ring.push(0, {"w": np.zeros(1)})
    # the same version again (an update that dropped every sample) replaces, never duplicates
    ring.push(1, {"w": np.full(1, 2.0)})
    assert ring.versions() == [0, 1]
    assert float(ring.lagged(0)[1]["w"][0]) == 2.0
    assert ring.lagged(1)[0] == 0


@pytest.mark.parametrize(
    ("version", "weights", "error", "match"),
    [
        (1.0, {}, TypeError, "version: expected an int, actual float 1.0"),
        (True, {}, TypeError, "version: expected an int"),
        (-1, {}, ValueError, "version: expected an int >= 0"),
        (2**63, {}, ValueError, "version: expected an int >= 0 and <= 2\\*\\*63 - 1"),
        (0, [np.zeros(1)], TypeError, "weights: expected a dict"),
    ],
)
def test_weight_ring_refuses_impossible_pushes(version, weights, error, match):
    ring = WeightRing(2)
    with pytest.raises(error, match=match):
        ring.push(version, weights)
    assert ring.versions() == []


def test_weight_ring_capacity_is_bounded():
    with pytest.raises(ValueError, match="capacity: expected an int in \\[1, 10001\\]"):
        WeightRing(10**9)


def test_behaviour_versions_check_the_per_sample_array():
    traj = trajectory(3)
    assert behaviour_versions(traj).tolist() == [3] * 8
    traj.policy_versions = np.array([1, 1, 2, 2, 2, 3, 3, 3])  # type: ignore[attr-defined]
    assert behaviour_versions(traj).tolist() == [1, 1, 2, 2, 2, 3, 3, 3]
    traj.policy_versions = np.arange(7)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="policy_versions: expected shape \\(8,\\)"):
        behaviour_versions(traj)
    traj.policy_versions = np.array([2, 2, 1, 1, 3, 3, 3, 3])  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="expected versions that never decrease"):
        behaviour_versions(traj)
    traj.policy_versions = np.full(8, 1.0)  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="expected an integer np.ndarray, actual float64"):
        behaviour_versions(traj)


def test_a_trajectory_from_a_future_version_is_refused():
    learner = CompensatedPPOLearner("CartPole-v1", LossConfig("gipo"), max_policy_lag=2, epochs=1)
    with pytest.raises(ValueError, match="trajectories\\[1\\]: .* actual 5 \\(a future version"):
        learner.update([trajectory(0), trajectory(5)])
    assert learner.policy_version == 0 and learner.dropped_samples_total == 0


def test_per_sample_versions_of_the_wrong_length_never_give_negative_drops():
    learner = CompensatedPPOLearner("CartPole-v1", max_policy_lag=0, epochs=1)
    learner.policy_version = 3
    traj = trajectory(0)
    traj.policy_versions = np.zeros(4, np.int64)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="trajectories\\[0\\].policy_versions: expected shape"):
        learner.update([traj])
    assert learner.dropped_samples_total == 0
    traj.policy_versions = np.array([0, 0, 0, 0, 3, 3, 3, 3])  # type: ignore[attr-defined]
    stats = learner.update([traj])
    assert stats.dropped_samples == 4 and stats.num_samples == 4


@pytest.mark.parametrize(
    ("next_obs", "match"),
    [
        (np.full(4, np.nan, np.float32), "next_obs: expected finite values"),
        (np.zeros(5, np.float32), "next_obs: expected shape"),
        (np.zeros((2, 4), np.float32), "next_obs: expected one observation"),
    ],
)
def test_a_bad_next_observation_is_refused(next_obs, match):
    learner = CompensatedPPOLearner("CartPole-v1", LossConfig(recompute_values=True), epochs=1)
    fields = {name: getattr(_trajectory(), name) for name in Trajectory.__dataclass_fields__}
    traj = ObservedTrajectory(**fields, next_obs=next_obs)
    with pytest.raises(ValueError, match=match):
        learner.update([traj])


@pytest.mark.parametrize(
    ("field", "value", "error", "match"),
    [
        (
            "rewards",
            np.array([np.nan] + [0.0] * 7, np.float32),
            ValueError,
            "rewards: expected finite",
        ),
        ("values", np.zeros(7, np.float32), ValueError, "values: expected shape \\(8,\\)"),
        ("actions", np.full(8, 2), ValueError, "actions: expected actions in \\[0, 2\\)"),
        ("actions", np.zeros(8, np.float32), TypeError, "actions: expected integer actions"),
        ("log_probs", [0.0] * 8, TypeError, "log_probs: expected an np.ndarray"),
        ("obs", np.zeros((8, 4), object), TypeError, "obs: expected an np.ndarray of numbers"),
        ("last_value", float("inf"), ValueError, "last_value: expected a finite number"),
    ],
)
def test_the_learner_refuses_malformed_trajectories(field, value, error, match):
    learner = CompensatedPPOLearner("CartPole-v1", epochs=1)
    traj = trajectory(0)
    setattr(traj, field, value)
    with pytest.raises(error, match=f"trajectories\\[0\\].{match}"):
        learner.update([traj])
    assert learner.policy_version == 0
