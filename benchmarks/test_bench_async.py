"""Asynchronous against synchronous PPO on the same actor threads, as a ratio measured in one run.

``test_bench_async_vs_sync``: env steps/s of
:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`
(PPO-clip, ``max_policy_lag=4``) over the same trainer with ``max_policy_lag=0`` (actors wait
for every update: synchronous PPO), the same actors, batch and hyperparameters, on the
uniform CartPole workload and on the heterogeneous one (each actor's env steps cost an
extra log-normal delay, median 1 ms, sigma 1: a long tail of slow actors). Targets:
ratio >= 1.5 on the heterogeneous workload, >= 1.0 on the uniform one. Also reported:
learner utilisation (share of wall time in updates) of both.

Small by default (CI, ``--benchmark-disable``: everything once). The full-size run:
``FLEETGYM_BENCH_ASYNC_STEPS=20480 pytest benchmarks/test_bench_async.py --benchmark-enable -s``.
No absolute time is asserted; the ratios are what to read.
"""

from __future__ import annotations

import os

import pytest

from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.workloads import get_workload

ACTORS = 8
STEPS = os.environ.get("FLEETGYM_BENCH_ASYNC_STEPS")


def _throughput(workload, lag: int, steps: int) -> tuple[float, float]:
    synchronous = lag == 0
    with AsyncPPO(
        workload,
        algo=AsyncPPOConfig(
            loss="ppo",  # the same loss on both sides: the same learner work per sample
            max_policy_lag=lag,
            recompute_values=not synchronous,
            global_advantage_norm=not synchronous,
            hyperparameters={"epochs": 4},
        ),
        topology=AsyncTopology(n_actors=ACTORS, steps_per_actor=64),
        seed=0,
    ) as model:
        model.learn(steps)
        last = model.history[-1]
    return model.num_timesteps / last.wall_s, last.learner_utilisation


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["uniform", "heterogeneous"])
def test_bench_async_vs_sync(benchmark, kind):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    steps = int(STEPS) if STEPS else (8192 if benchmark.enabled else 1024)
    workload = get_workload("CartPole-v1")
    if kind == "heterogeneous":
        workload = workload.with_overrides(step_delay_s=0.001, step_delay_sigma=1.0)
    try:
        sync_sps, sync_util = _throughput(workload, 0, steps)
        result: dict[str, float] = {}

        def run_async() -> None:
            result["sps"], result["util"] = _throughput(workload, 4, steps)

        benchmark.pedantic(run_async, rounds=1, iterations=1)
    finally:
        torch.set_num_threads(threads)
    ratio = result["sps"] / sync_sps
    benchmark.extra_info.update(
        workload=kind,
        sync_steps_per_s=sync_sps,
        async_steps_per_s=result["sps"],
        ratio=ratio,
        sync_learner_utilisation=sync_util,
        async_learner_utilisation=result["util"],
    )
    print(
        f"\n{kind}: async {result['sps']:.0f} steps/s vs sync {sync_sps:.0f} "
        f"(ratio {ratio:.2f}); learner utilisation {result['util']:.2f} vs {sync_util:.2f}"
    )
    assert ratio > 0.0
