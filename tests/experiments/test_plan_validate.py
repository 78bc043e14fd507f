"""The validation's predictions: the runs' own waits and a run's simulated twin."""

from __future__ import annotations

import pytest

from fleetgym.agents.rollout import RolloutWorker
from fleetgym.agents.workloads import get_workload
from fleetgym.experiments.plan.validate import measured_delays, predict_run, validation_rows

CAL = {
    "rollout_steps": 10,
    "step_s": [1e-3],
    "policy_s": 0.0,
    "update_fixed_s": 0.01,
    "update_per_sample_s": 0.0,
}
NO_CONTENTION = {"switch_s": 0.0}


def test_measured_delays_are_the_ones_the_actors_sleep():
    base = get_workload("CartPole-v1")
    delays = measured_delays(base, 3, seed=5, delay_ms=2.0, sigma=1.0)
    delayed = base.with_overrides(step_delay_s=0.002, step_delay_sigma=1.0)
    for actor_id, delay in enumerate(delays):
        worker = RolloutWorker(delayed, actor_id, 5)
        assert worker.env.delay_s == pytest.approx(delay)
        worker.close()


def test_predict_run_is_the_run_on_one_slot():
    # 2 actors x 10 steps of 1 ms on one slot, then a 10 ms update: 30 ms a round.
    sync = predict_run(CAL, NO_CONTENTION, "sync-threads", 2, 60, 4, None)
    assert sync.env_steps_per_s == pytest.approx(20 / 0.03)
    assert sync.updates == 3
    # One slot and no overlap: asynchrony cannot beat the total compute (20 + 10 ms a
    # round); the actors' work past the last update is wall time without a consumed step.
    asynchronous = predict_run(CAL, NO_CONTENTION, "async", 2, 60, 4, (0.0, 0.0))
    assert asynchronous.env_steps_per_s <= sync.env_steps_per_s + 1e-9


def test_validation_rows_compare_prediction_and_measurement():
    run = {
        "kind": "uniform",
        "actors": 2,
        "mode": "sync-threads",
        "seed": 0,
        "steps": 60,
        "lag": 4,
        "delays_s": None,
        "steps_per_s": 20 / 0.03,
        "learner_utilisation": 0.5,
    }
    (row,) = validation_rows([run], CAL, NO_CONTENTION)
    assert row["steps_error"] == pytest.approx(0.0, abs=1e-9)
    assert row["utilisation_error"] == pytest.approx((1 / 3) / 0.5 - 1)
    assert row["within"] is False
