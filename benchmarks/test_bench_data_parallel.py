"""The data-parallel learner against one learner on the same batch, as a ratio measured in one run.

``test_bench_data_parallel_vs_one_learner``: seconds of one PPO update of
:class:`~fleetgym.agents.learners.PPOLearner` over seconds of one update of
:class:`~fleetgym.agents.learners.DataParallelPPO` (``world_size`` gloo ranks, spawned
processes) on the same CartPole batch (``SAMPLES`` samples, 4 epochs), with minibatches of
256 and with the whole batch as one minibatch. The ratio is the speed-up; the
data-parallel time is the front's: sending the shards, every rank's update with its
all-reduces, rank 0's weights back. Each rank runs one BLAS thread, as the one learner does.

Small by default (CI, ``--benchmark-disable``: one update each). The measured run of the
results page (``docs/results/data-parallel.md``)::

    FLEETGYM_BENCH_DP_SAMPLES=4096 FLEETGYM_BENCH_DP_WORLD="1 2 4" OMP_NUM_THREADS=1 \
        nice -n 10 pytest benchmarks/test_bench_data_parallel.py --benchmark-enable -s

No absolute time is asserted; the ratio is what to read.
"""

from __future__ import annotations

import os
import statistics
import time

import pytest

from fleetgym.agents.learners import DataParallelPPO, PPOLearner
from fleetgym.agents.rollout import RolloutWorker

WORKLOAD = "CartPole-v1"
SAMPLES = int(os.environ.get("FLEETGYM_BENCH_DP_SAMPLES", "1024"))
WORLD_SIZES = [int(n) for n in os.environ.get("FLEETGYM_BENCH_DP_WORLD", "2").split()]
TRAJECTORY = 128


def _batch():
    weights = PPOLearner(WORKLOAD, seed=0).get_weights()
    return [
        RolloutWorker(WORKLOAD, actor_id=i, seed=i).rollout(
            weights, steps=TRAJECTORY, policy_version=0
        )
        for i in range(max(SAMPLES // TRAJECTORY, 1))
    ]


def _median_update_s(update, batch, rounds: int) -> float:
    update(batch)  # warm-up (allocations, first all-reduces)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        update(batch)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("minibatch", [256, "whole"])
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_bench_data_parallel_vs_one_learner(benchmark, world_size, minibatch):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    batch = _batch()
    samples = sum(len(t) for t in batch)
    kwargs = dict(epochs=4, minibatch_size=samples if minibatch == "whole" else minibatch)
    rounds = 5 if benchmark.enabled else 1
    try:
        one_s = _median_update_s(PPOLearner(WORKLOAD, seed=0, **kwargs).update, batch, rounds)
        with DataParallelPPO(WORKLOAD, world_size=world_size, seed=0, **kwargs) as group:
            group.update(batch)  # warm-up
            benchmark.pedantic(group.update, args=(batch,), rounds=rounds, iterations=1)
            dp_s = _median_update_s(group.update, batch, rounds)
    finally:
        torch.set_num_threads(threads)
    ratio = one_s / dp_s
    benchmark.extra_info.update(
        world_size=world_size,
        minibatch=minibatch,
        samples=samples,
        one_learner_update_s=one_s,
        data_parallel_update_s=dp_s,
        speedup=ratio,
    )
    print(
        f"\n| {world_size} | {minibatch} | {samples} | {one_s * 1e3:.1f} | {dp_s * 1e3:.1f} | "
        f"{ratio:.2f} |"
    )
    assert ratio > 0.0
