"""ActorSchedulingEnv.step on CartPole with 32 actors (modeled timing), against the bare round.

The reference, measured in the same run on the same machine: the bare work of a round,
``fleet.run_round`` (32 actors, batched in-process fleet) + ``learner.update``, driven by
hand. The ratio env step / bare round is the env's overhead (accounting, byte counts,
the observation); it should be close to 1. No absolute time is asserted.

Run: ``pytest benchmarks/test_bench_scheduling.py --benchmark-enable -s``
"""

from __future__ import annotations

import statistics
import time

import gymnasium as gym
import pytest

import fleetgym  # noqa: F401  (registers the IDs)

ENV_ID = "fleetgym/ActorScheduling-CartPole-Modeled-v0"
# The target is out of reach so every step is a full round (no early termination).
KWARGS = {"max_actors": 32, "target_return": 1e9, "max_rounds": 10_000, "budget": None}


def _bare_round_times(repeats: int) -> tuple[list[float], list[float]]:
    """Per repeat: seconds of fleet.run_round alone, and of run_round + update."""
    from fleetgym.agents.fleet.inprocess import InProcessFleet
    from fleetgym.agents.learners.ppo import PPOLearner

    env = gym.make(ENV_ID, **KWARGS).unwrapped
    fleet = InProcessFleet("CartPole-v1", max_actors=32, seed=0, batched=True)
    learner = PPOLearner("CartPole-v1", seed=0, **env.learner_overrides)
    fleet_only, full = [], []
    for _ in range(repeats + 1):  # the first round builds the actors: not timed
        start = time.perf_counter()
        result = fleet.run_round(
            learner.get_weights(), 32, env.steps_per_actor, policy_version=learner.policy_version
        )
        mid = time.perf_counter()
        learner.update(result.trajectories)
        end = time.perf_counter()
        fleet_only.append(mid - start)
        full.append(end - start)
    fleet.close()
    return fleet_only[1:], full[1:]


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One torch thread, as in the tests: the machine's 2 cores are shared."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def env():
    env = gym.make(ENV_ID, **KWARGS)
    env.reset(seed=0)
    env.step(31)  # build the 32 actors outside the measurement
    yield env
    env.close()


def test_bench_env_step_32_actors_modeled(benchmark, env):
    durations: list[float] = []

    def step():
        start = time.perf_counter()
        env.step(31)
        durations.append(time.perf_counter() - start)

    # Under --benchmark-disable this runs once (the CI smoke run).
    benchmark.pedantic(step, rounds=5, iterations=1, warmup_rounds=0)
    env_s = statistics.median(durations)
    fleet_only, full = _bare_round_times(repeats=5 if benchmark.enabled else 1)
    bare_round = statistics.median(full)
    ratio = env_s / bare_round
    benchmark.extra_info.update(
        env_step_s=env_s,
        bare_round_s=bare_round,
        bare_fleet_s=statistics.median(fleet_only),
        env_over_bare_round=ratio,
    )
    print(
        f"\nActorSchedulingEnv.step (32 actors, modeled): {env_s * 1e3:.1f} ms; bare "
        f"run_round+update {bare_round * 1e3:.1f} ms (run_round alone "
        f"{statistics.median(fleet_only) * 1e3:.1f} ms); env/bare = {ratio:.3f}"
    )
    assert ratio > 0.0
