"""The measurements that calibrate the simulation, on tiny budgets (their shape, not speed)."""

from __future__ import annotations

from fleetgym.experiments.plan.calibration import REQUIRED_KEYS, actor_times, learner_times
from fleetgym.experiments.plan.measure import QUANTILES, measure_contention, measure_workload


def test_measure_workload_gives_every_key_and_positive_times():
    cal = measure_workload(
        "CartPole-v1",
        env_steps=50,
        update_trajectories=(1, 2),
        update_repeats=1,
        batch_sizes=(1, 4),
    )
    assert set(REQUIRED_KEYS) <= set(cal)
    assert len(cal["step_s"]) == QUANTILES and cal["step_s"] == sorted(cal["step_s"])
    assert cal["rollout_steps"] == 128 and cal["obs_bytes"] == 16
    assert [s for s, _ in cal["update_points"]] == [128, 256]
    assert cal["update_fixed_s"] >= 0 and cal["update_per_sample_s"] >= 0
    assert len(cal["server_forward_s"]) == 2 and min(cal["server_forward_s"]) > 0
    # The calibration becomes the simulation's parts.
    assert actor_times(cal).mean_step_s > 0
    assert learner_times(cal).update_s(256) > 0


def test_measure_contention_reports_a_cost_per_step():
    waiting = measure_contention("CartPole-v1", delays_s=(0.001, 0.002), repeats=1)
    assert waiting["switch_s"] >= 0.0 and waiting["cost_per_step_s"] >= 0.0
    assert waiting["actor_steps_during_update"] >= 0
    running = measure_contention("CartPole-v1", delays_s=(0.0,), repeats=1)
    assert running["switch_s"] == 0.0
