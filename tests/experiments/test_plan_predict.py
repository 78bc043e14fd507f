"""The prediction grid, AcceRL's shape and the search for its synchronous 23 %."""

from __future__ import annotations

import pytest

from fleetgym.experiments.plan.predict import (
    ACTORS_PER_SERVER,
    accerl_points,
    grid_points,
    match_accerl,
    run_point,
)

CAL = {
    "rollout_steps": 2,
    "step_s": [1e-4],
    "policy_s": 0.0,
    "update_fixed_s": 1e-3,
    "update_per_sample_s": 1e-5,
    "server_batch_sizes": [1, 64],
    "server_forward_s": [1e-4, 2e-4],
    "weight_bytes": 1000,
    "obs_bytes": 16,
    "step_bytes": 40,
}


def test_grid_points_cover_kinds_actors_and_modes():
    points = grid_points({"w": CAL}, actors=(4, 2 * ACTORS_PER_SERVER), updates=3)
    keys = {(p.kind, p.n_actors, p.mode) for p in points}
    assert len(points) == len(keys) == 2 * 2 * 2
    for p in points:
        assert 0.0 <= p.result.learner_utilisation <= 1.0 and p.shape == "grid"
    big = [p for p in points if p.n_actors == 128 and p.kind == "uniform" and p.mode == "sync"]
    assert big[0].result.mean_server_batch == pytest.approx(ACTORS_PER_SERVER)


def test_accerl_points_are_a_thousand_actors_on_sixteen_servers():
    points = accerl_points({"w": CAL}, updates=3)
    assert {p.n_actors for p in points} == {1000} and len(points) == 4
    uniform = [p for p in points if p.kind == "uniform" and p.mode == "sync"][0]
    assert uniform.result.mean_server_batch == pytest.approx(1000 / 16)


def test_faster_devices_lower_the_synchronous_utilisation():
    common = dict(
        n_actors=16, synchronous=True, lag=4, delay_ms=1.0, delay_sigma=1.0, n_servers=1, updates=4
    )
    slow = run_point(CAL, learner_speedup=1.0, **common)
    fast = run_point(CAL, learner_speedup=100.0, **common)
    assert fast.learner_utilisation < slow.learner_utilisation


def test_match_accerl_finds_the_synchronous_target():
    points = match_accerl({"w": CAL}, target=0.23, updates=4, iterations=14)
    sync = [p for p in points if p.mode == "sync"][0]
    assert sync.shape.startswith("AcceRL, devices ")
    assert sync.result.learner_utilisation == pytest.approx(0.23, abs=0.02)
    assert len(points) == 2
