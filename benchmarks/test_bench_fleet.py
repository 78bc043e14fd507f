"""Fleet backends: throughput, elasticity and fault recovery, as ratios measured in one run.

* ``test_bench_process_vs_subproc``: env steps/s of :class:`ProcessFleet` (each worker runs
  a whole rollout with its policy copy) against SB3's ``SubprocVecEnv`` with the same
  number of workers, the same CartPole env and the same policy (one batched forward in
  the parent per step, one pipe round trip per step). Target: ratio >= 1.0. Also the
  same processes hosting 4 actors each (``actors_per_worker=4``, lockstep inside a
  worker): ``grouped_ratio``.
* ``test_bench_resize_warm_pool``: a warm pool resized P -> 4 -> P (P=32 in the full run),
  against the cold reference of the same resize when shrinking stops the extras
  (``stop_idle=True``: growing starts P-4 processes). Target: <= 50 ms.
* ``test_bench_replace_killed_actor``: SIGKILL one worker, then time until its
  replacement is ready, against one warm round of that actor. Target: <= 0.5 s.
* ``test_bench_ray_round_overhead``: the same warm round on the Ray backend and on the
  process backend; per backend, the round's time outside its slowest rollout (weights
  out, scheduling, trajectories back); the difference is Ray's per-round overhead.
* ``test_bench_rollout_finite_check``: env steps/s of a :class:`RolloutWorker` rollout
  with its check that the env emitted no NaN or inf
  (:func:`~fleetgym.agents.rollout.worker.check_rollout_finite`, once per rollout) over
  the same rollout with the check made a no-op, on CartPole (the cheapest env step, where
  the check weighs most). Target: >= 0.9x (asserted with ``--benchmark-enable`` only).

Sizes are small by default so CI (2 cores, ``--benchmark-disable``: everything once) is
quick. The full-size run:
``FLEETGYM_BENCH_POOL=32 FLEETGYM_BENCH_WORKERS=4 pytest benchmarks/test_bench_fleet.py
--benchmark-enable -s``. No absolute time is asserted; timings on a shared machine are
noisy, the ratios against references measured in the same run are what to read.
"""

from __future__ import annotations

import os
import signal
import statistics
import time

import numpy as np
import pytest

from fleetgym.agents.fleet import ProcessFleet
from fleetgym.agents.workloads import get_workload

WORKLOAD = "CartPole-v1"
#: Workers of the throughput comparison (both backends).
WORKERS = int(os.environ.get("FLEETGYM_BENCH_WORKERS", "2"))
#: Pool size of the resize benchmark (32 in the full run; 32 processes are heavy for CI).
POOL = int(os.environ.get("FLEETGYM_BENCH_POOL", "6"))
#: Actors per worker process in the grouped variant of the throughput comparison.
GROUP = 4
#: Steps per worker in the throughput comparison (default 1024, 128 under
#: ``--benchmark-disable``: SubprocVecEnv's pipe round trip per step can cost tens of
#: milliseconds on an overloaded CI machine).
STEPS = os.environ.get("FLEETGYM_BENCH_STEPS")


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One torch thread here too: the reference's policy runs in this process, and
    OpenMP threads spinning on a shared machine would slow it down, not the fleet."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def weights():
    return get_workload(WORKLOAD).make_policy().get_weights()


def _best(fn, repeats: int) -> float:
    """Fastest of ``repeats`` timed calls (the least disturbed by other load)."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


def _report(benchmark, title: str, **figures: float) -> None:
    benchmark.extra_info.update(figures)
    print(f"\n{title}: " + ", ".join(f"{k}={v:.4g}" for k, v in figures.items()))


def test_bench_process_vs_subproc(benchmark, weights):
    import gymnasium as gym
    from stable_baselines3.common.vec_env import SubprocVecEnv

    repeats = 5 if benchmark.enabled else 1
    steps_per_actor = int(STEPS) if STEPS else (1024 if benchmark.enabled else 128)
    policy = get_workload(WORKLOAD).make_policy()
    policy.load_weights(weights)
    rng = np.random.default_rng(0)
    # "spawn": leaves Python's single forkserver to the fleet, which preloads torch in it
    # (the start method does not change SubprocVecEnv's per-step cost, measured here).
    venv = SubprocVecEnv([lambda: gym.make(WORKLOAD) for _ in range(WORKERS)], "spawn")
    venv.seed(0)
    state = {"obs": venv.reset()}

    def subproc_rollout(steps: int = steps_per_actor) -> None:
        obs = state["obs"]
        for _ in range(steps):
            actions, _, _ = policy.act(obs, rng=rng)
            obs, _, _, _ = venv.step(actions)
        state["obs"] = obs

    try:
        subproc_rollout(16)  # warm-up: first pickles, first allocations
        subproc_s = _best(subproc_rollout, repeats)
    finally:
        venv.close()

    with ProcessFleet(WORKLOAD, max_actors=WORKERS, seed=0) as fleet:
        fleet.prewarm(WORKERS)

        def fleet_round() -> None:
            result = fleet.run_round(weights, WORKERS, steps_per_actor)
            assert result.complete

        fleet_round()
        benchmark.pedantic(fleet_round, rounds=repeats, iterations=1)
        fleet_s = _best(fleet_round, repeats)
    # Same processes, GROUP actors each stepping in lockstep (one forward per step).
    actors = WORKERS * GROUP
    with ProcessFleet(WORKLOAD, max_actors=actors, seed=0, actors_per_worker=GROUP) as grouped:
        grouped.prewarm(actors)
        grouped_round = lambda: grouped.run_round(weights, actors, steps_per_actor)  # noqa: E731
        grouped_round()
        grouped_s = _best(grouped_round, repeats)
    steps = WORKERS * steps_per_actor
    _report(
        benchmark,
        f"process fleet vs SubprocVecEnv ({WORKERS} worker processes, "
        f"{steps_per_actor} steps/actor)",
        subproc_steps_per_s=steps / subproc_s,
        fleet_steps_per_s=steps / fleet_s,
        ratio=subproc_s / fleet_s,
        grouped_steps_per_s=actors * steps_per_actor / grouped_s,
        grouped_ratio=(actors * steps_per_actor / grouped_s) / (steps / subproc_s),
    )


def test_bench_resize_warm_pool(benchmark):
    small = min(4, POOL)
    repeats = 5 if benchmark.enabled else 1
    with ProcessFleet(WORKLOAD, max_actors=POOL, seed=0) as fleet:
        fleet.prewarm(POOL)

        def resize() -> None:
            fleet.resize(small)
            fleet.resize(POOL)

        benchmark.pedantic(resize, rounds=repeats, iterations=1)
        warm_s = _best(resize, repeats)
        assert fleet.incarnations == dict.fromkeys(range(POOL), 0)  # nothing was rebuilt
    with ProcessFleet(WORKLOAD, max_actors=POOL, seed=0, stop_idle=True) as cold:
        cold.prewarm(POOL)
        cold_s = _best(lambda: (cold.resize(small), cold.resize(POOL)), 1)
    _report(
        benchmark,
        f"resize {POOL} -> {small} -> {POOL}",
        warm_resize_ms=warm_s * 1e3,
        stop_and_restart_ms=cold_s * 1e3,
        ratio=warm_s / cold_s,
    )


def test_bench_replace_killed_actor(benchmark, weights):
    repeats = 5 if benchmark.enabled else 1
    with ProcessFleet(WORKLOAD, max_actors=2, seed=0) as fleet:
        fleet.prewarm(2)

        def kill() -> None:
            pid = fleet.worker_pids()[1]
            os.kill(pid, signal.SIGKILL)
            for _ in range(2000):  # until the kernel has it gone
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.001)

        def replace() -> None:
            fleet.resize(2)  # detects the dead slot, starts and waits for its successor

        benchmark.pedantic(replace, setup=kill, rounds=repeats, iterations=1)
        samples = []
        for _ in range(repeats):
            kill()
            samples.append(_best(replace, 1))
        replace_s = statistics.median(samples)
        round_s = _best(lambda: fleet.run_round(weights, 2, 128), repeats)
    _report(
        benchmark,
        "replace a killed actor",
        replace_ms=replace_s * 1e3,
        warm_round_ms=round_s * 1e3,
        ratio=replace_s / round_s,
    )


def _outside_rollouts(fleet, weights, steps: int, repeats: int) -> tuple[float, float]:
    """Best round wall time, and median time of a round spent outside the slowest rollout.

    The second figure (round wall - slowest actor's compute) is the backend's own
    per-round cost: sending weights, scheduling, collecting trajectories. It does not
    depend on how much CPU the actors got, which on a shared machine differs between
    process groups (Ray's workers run in their own session).
    """
    walls, outside = [], []
    for _ in range(repeats):
        result = fleet.run_round(weights, WORKERS, steps)
        assert result.complete
        walls.append(result.wall_s)
        outside.append(result.wall_s - max(t.compute_s for t in result.timings))
    return min(walls), statistics.median(outside)


@pytest.mark.ray
def test_bench_ray_round_overhead(benchmark, weights):
    pytest.importorskip("ray")
    import ray

    from fleetgym.agents.fleet.ray_actor import init_local_ray
    from fleetgym.agents.fleet.ray_backend import RayFleet

    repeats = 5 if benchmark.enabled else 2
    steps = 128
    started_ray = not ray.is_initialized()
    if started_ray:
        init_local_ray(num_cpus=WORKERS, object_store_memory=80 * 2**20, log_to_driver=False)
    try:
        with RayFleet(WORKLOAD, max_actors=WORKERS, seed=0) as fleet:
            fleet.prewarm(WORKERS)
            fleet.run_round(weights, WORKERS, steps)
            benchmark.pedantic(
                lambda: fleet.run_round(weights, WORKERS, steps), rounds=repeats, iterations=1
            )
            ray_s, ray_outside = _outside_rollouts(fleet, weights, steps, repeats)
    finally:
        if started_ray:
            ray.shutdown()
    with ProcessFleet(WORKLOAD, max_actors=WORKERS, seed=0) as pool:
        pool.prewarm(WORKERS)
        pool.run_round(weights, WORKERS, steps)
        process_s, process_outside = _outside_rollouts(pool, weights, steps, repeats)
    _report(
        benchmark,
        f"Ray vs process round ({WORKERS} actors x {steps} steps)",
        ray_round_ms=ray_s * 1e3,
        process_round_ms=process_s * 1e3,
        ray_outside_rollouts_ms=ray_outside * 1e3,
        process_outside_rollouts_ms=process_outside * 1e3,
        overhead_ms=(ray_outside - process_outside) * 1e3,
        ratio=ray_outside / process_outside,
    )


def test_bench_rollout_finite_check(benchmark, monkeypatch, weights):
    from fleetgym.agents.rollout import RolloutWorker
    from fleetgym.agents.rollout import worker as worker_module

    steps = 2048 if benchmark.enabled else 64
    repeats = 7 if benchmark.enabled else 1
    worker = RolloutWorker(WORKLOAD, 0, seed=0)
    try:
        worker.rollout(weights, 16, 0)  # warm-up: the numpy snapshot's first products
        checked, unchecked = [], []
        for _ in range(repeats):  # interleaved, so that load drift hits both alike
            checked.append(_best(lambda: worker.rollout(weights, steps, 0), 1))
            with monkeypatch.context() as patch:
                patch.setattr(worker_module, "check_rollout_finite", lambda *args: None)
                unchecked.append(_best(lambda: worker.rollout(weights, steps, 0), 1))
        benchmark.pedantic(lambda: worker.rollout(weights, steps, 0), rounds=1, iterations=1)
    finally:
        worker.close()
    checked_s, unchecked_s = statistics.median(checked), statistics.median(unchecked)
    ratio = unchecked_s / checked_s
    _report(
        benchmark,
        f"rollout with the NaN/inf check vs without ({WORKLOAD}, {steps} steps)",
        checked_steps_per_s=steps / checked_s,
        unchecked_steps_per_s=steps / unchecked_s,
        ratio=ratio,
    )
    if benchmark.enabled:
        assert ratio >= 0.9
