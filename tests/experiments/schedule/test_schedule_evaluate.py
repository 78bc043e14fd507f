"""Running schedulers for one recorded episode per seed; scheduler names."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgym.agents.schedulers import AdaptScheduler, FixedScheduler, ServerBasedScheduler
from fleetgym.experiments.schedule import evaluate

TINY = {
    "workload": "CartPole-v1",
    "timing": "modeled",
    "max_actors": 4,
    "steps_per_actor": 16,
    "max_rounds": 2,
}


def test_evaluate_scheduler_records_and_determinism():
    first = evaluate.evaluate_scheduler(FixedScheduler(3, 4), TINY, [5, 6])
    again = evaluate.evaluate_scheduler(FixedScheduler(3, 4), TINY, [5])
    assert [r.seed for r in first] == [5, 6]
    r = first[0]
    assert r.num_actors == [3, 3] and r.rounds == 2 and r.mean_actors == 3.0
    assert not r.success and np.isnan(r.time_to_target_s)  # 2 rounds never reach J
    assert r.time_s > 0 and r.cost > 0 and r.total_reward < 0
    # Modeled timing: the same seed gives the same episode, whatever else ran before.
    assert (again[0].time_s, again[0].cost, again[0].total_reward, again[0].mean_return) == (
        r.time_s,
        r.cost,
        r.total_reward,
        r.mean_return,
    )


def test_server_baseline_is_billed_as_the_cluster():
    cold = {**TINY, "prewarm": False}
    serverless = evaluate.evaluate_scheduler(FixedScheduler(4, 4), cold, [0])[0]
    server = evaluate.evaluate_scheduler(ServerBasedScheduler(4, 4), cold, [0])[0]
    assert server.num_actors == serverless.num_actors
    assert server.cost != serverless.cost
    assert server.time_s < serverless.time_s  # VMs are up: no container cold starts


def test_learned_scheduler_from_an_sb3_zip(tmp_path):
    import gymnasium as gym
    from stable_baselines3 import PPO

    env = gym.make("fleetgym/ActorScheduling-v0", **TINY)
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=8, seed=0, device="cpu")
    model.save(tmp_path / "sched.zip")
    env.close()
    table = evaluate.resolve_schedulers([f"learned:{tmp_path / 'sched.zip'}", "max"], max_actors=4)
    assert list(table) == ["learned", "max"]
    records = evaluate.evaluate_scheduler(table["learned"], TINY, [0], name="learned")
    assert records[0].scheduler == "learned" and records[0].rounds == 2
    assert all(1 <= n <= 4 for n in records[0].num_actors)


def test_resolve_phase_schedules_plays_them_round_by_round():
    table = evaluate.resolve_schedulers("fixed:4,phase:4x2>1x1>2")
    assert list(table) == ["fixed:4", "4x2>1x1>2"]
    (episode,) = evaluate.evaluate_scheduler(table["4x2>1x1>2"], TINY, [0])
    assert episode.num_actors == [4, 4, 1, 2, 2][: episode.rounds]


def test_resolve_all_and_errors():
    table = evaluate.resolve_schedulers("all")
    assert list(table) == [
        "fixed:1",
        "fixed:4",
        "fixed:8",
        "fixed:16",
        "max",
        "increase",
        "decrease",
        "adapt",
        "server",
    ]
    raw = evaluate.resolve_schedulers("adapt", target_return=200.0)["adapt"]
    assert isinstance(raw, AdaptScheduler) and raw.target_return == 200.0
    with pytest.raises(ValueError, match="expected one of"):
        evaluate.resolve_schedulers("random")
    with pytest.raises(FileNotFoundError, match="no file"):
        evaluate.resolve_schedulers("learned:/nonexistent/sched.zip")
    for bad in ("phase:16x9", "phase:16x9x2>8", "phase:16>8", "phase:0x3>8", "phase:"):
        with pytest.raises(ValueError, match="expected phases like 16x9>8x5>16"):
            evaluate.resolve_schedulers(bad)
    with pytest.raises(TypeError, match="predict"):
        evaluate.evaluate_scheduler(object(), TINY, [0])
    with pytest.raises(ValueError, match="at least one seed"):
        evaluate.evaluate_scheduler(FixedScheduler(1), TINY, [])
