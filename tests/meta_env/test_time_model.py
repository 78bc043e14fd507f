"""The time model and the compute model: exact arithmetic, range checks, byte counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetgym.meta_env.time_model import (
    ComputeCostModel,
    TimeModel,
    trajectory_nbytes,
    weights_nbytes,
)


def test_time_model_actor_and_learner_time_exact():
    tm = TimeModel(
        cold_start_actor_s=0.3,
        cold_start_learner_s=1.5,
        bandwidth_bytes_per_s=1e6,
        latency_s=0.01,
        learner_speed_factor=4.0,
    )
    a = tm.actor_time(0.1, weight_bytes=2000, trajectory_bytes=3000)
    assert a.cold_start_s == 0.3
    assert a.transfer_s == pytest.approx(0.01 + 0.002 + 0.01 + 0.003)
    assert a.total_s == pytest.approx(0.3 + 0.025 + 0.1)
    assert tm.actor_time(0.1, weight_bytes=0, trajectory_bytes=0, warm=True).cold_start_s == 0.0
    lt = tm.learner_time(2.0)
    assert lt.update_s == 0.5 and lt.total_s == 2.0
    assert tm.learner_time(2.0, warm=True).total_s == 0.5
    assert tm.pool_size(32) == 0
    keep_alive = TimeModel(prewarm=True)
    assert keep_alive.keep_alive and keep_alive.pool_size(32, previous_actors=5) == 5
    assert keep_alive.pool_size(32, previous_actors=40) == 32
    assert not TimeModel(prewarm=True, warm_pool=4).keep_alive
    assert TimeModel(prewarm=True, warm_pool=4).pool_size(32) == 4
    assert TimeModel(prewarm=True, warm_pool=40).pool_size(32) == 32


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"cold_start_actor_s": -0.1}, "cold_start_actor_s"),
        ({"bandwidth_bytes_per_s": 0.0}, "bandwidth_bytes_per_s"),
        ({"learner_speed_factor": 0}, "learner_speed_factor"),
        ({"latency_s": math.nan}, "latency_s"),
        ({"warm_pool": -1}, "warm_pool"),
    ],
)
def test_time_model_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TimeModel(**kwargs)


def test_compute_model_is_exact_without_jitter_and_mean_one_with_it():
    cm = ComputeCostModel(
        actor_step_s=1e-3, actor_overhead_s=0.05, learner_sample_s=1e-4, learner_overhead_s=0.2
    )
    rng = np.random.default_rng(0)
    assert cm.actor_compute_s(100, rng, 3).tolist() == pytest.approx([0.15] * 3)
    assert cm.learner_update_s(1000) == pytest.approx(0.3)
    jittery = ComputeCostModel(1e-3, 0.0, 0.0, 0.0, actor_jitter_cv=0.2)
    draws = jittery.actor_compute_s(100, np.random.default_rng(1), 20_000) / 0.1
    # The slowdown is log-normal with mean 1 and CV 0.2: the sample mean of 20 000 draws has
    # standard error 0.2 / sqrt(20 000) = 0.0014, so 5 standard errors is 0.007.
    assert abs(draws.mean() - 1.0) < 0.007
    assert abs(draws.std() / draws.mean() - 0.2) < 0.01
    same = jittery.actor_compute_s(100, np.random.default_rng(1), 20_000) / 0.1
    np.testing.assert_array_equal(draws, same)
    with pytest.raises(ValueError, match="actor_step_s"):
        ComputeCostModel(-1.0, 0.0, 0.0, 0.0)


def test_byte_counts():
    from fleetgym.agents.types import Trajectory

    w = {"a": np.zeros((2, 3), np.float32), "b": np.zeros(4, np.float64)}
    assert weights_nbytes(w) == 24 + 32
    n = 5
    traj = Trajectory(
        obs=np.zeros((n, 4), np.float32),
        actions=np.zeros(n, np.int64),
        log_probs=np.zeros(n, np.float32),
        values=np.zeros(n, np.float32),
        rewards=np.zeros(n, np.float32),
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        truncation_values=np.zeros(n, np.float32),
        last_value=0.0,
        episode_returns=[],
        episode_lengths=[],
        actor_id=0,
        policy_version=0,
        seed=0,
    )
    assert trajectory_nbytes(traj) == 80 + 40 + 20 + 20 + 20 + 5 + 5 + 20


@pytest.mark.parametrize(
    ("value", "exc"),
    [(-1.0, ValueError), (math.nan, ValueError), (math.inf, ValueError), ("1", TypeError)],
)
def test_time_model_methods_refuse_negative_nan_and_infinite_inputs(value, exc):
    tm = TimeModel()
    calls = {
        "nbytes": lambda: tm.transfer_s(value),
        "compute_s": lambda: tm.actor_time(value, weight_bytes=0, trajectory_bytes=0),
        "weight_bytes": lambda: tm.actor_time(1.0, weight_bytes=value, trajectory_bytes=0),
        "trajectory_bytes": lambda: tm.actor_time(1.0, weight_bytes=0, trajectory_bytes=value),
        "update_s": lambda: tm.learner_time(value),
    }
    for name, call in calls.items():
        with pytest.raises(exc, match=rf"^{name}: expected a.*, actual "):
            call()


def test_time_and_compute_models_refuse_bad_counts():
    tm, rng = TimeModel(prewarm=True), np.random.default_rng(0)
    cm = ComputeCostModel(1e-3, 0.05, 1e-4, 0.2)
    cases = [
        (lambda: tm.pool_size(-1), ValueError, r"^max_actors: expected an int >= 0, actual -1"),
        (lambda: tm.pool_size(4, -3), ValueError, r"^previous_actors: expected an int >= 0"),
        (lambda: tm.learner_time(1.0, warm="no"), TypeError, r"^warm: expected a bool"),
        (lambda: cm.actor_compute_s(-100, rng, 2), ValueError, r"^steps: expected an int >= 0"),
        (lambda: cm.actor_compute_s(1.5, rng, 2), TypeError, r"^steps: expected an int, actual"),
        (lambda: cm.actor_compute_s(100, rng, -1), ValueError, r"^num_actors: expected an int"),
        (lambda: cm.actor_compute_s(100, 0, 2), TypeError, r"^rng: expected a numpy Generator"),
        (lambda: cm.learner_update_s(-5), ValueError, r"^num_samples: expected an int >= 0"),
        (lambda: cm.learner_update_s(math.nan), TypeError, r"^num_samples: expected an int"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
    assert tm.transfer_s(0) == tm.latency_s and cm.actor_compute_s(0, rng, 0).shape == (0,)
