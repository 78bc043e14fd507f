"""The measurements that calibrate the pipeline simulation, taken on this machine.

For one workload, a few seconds each (:func:`measure_workload`):

* **env step** -- wall seconds of single env steps with random actions (resets included,
  as an actor pays them), kept as 200 quantiles (the simulation draws from them);
* **policy forward** -- what an actor acting with its own copy adds per step: a
  :class:`~fleetgym.agents.rollout.RolloutWorker`'s rollout time per step minus the mean
  env step;
* **update** -- :meth:`~fleetgym.agents.learners.ppo.PPOLearner.update` on real
  trajectories at two batch sizes (median of repeats), the line through them giving
  ``fixed_s`` and ``per_sample_s``;
* **server forward** -- :class:`~fleetgym.agents.inference.ActorCriticModel`'s forward
  pass per batch size (median of repeats), the inference server's work per batch;
* **contention** (:func:`measure_contention`, threads on one machine) -- how much longer
  an update takes while actor threads step beside it than alone, per actor step: the
  GIL hand-over of threads that wait at every step.

Every figure is wall time on one torch thread; the machine's load average is recorded
with it, since other work on a shared machine stretches every figure.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

import numpy as np

__all__ = [
    "measure_contention",
    "measure_trainer_update",
    "measure_workload",
    "trainer_update",
    "trajectories",
]

#: Quantiles of the env step time kept in a calibration.
QUANTILES = 200


def _load() -> float:
    try:
        return float(os.getloadavg()[0])
    except OSError:  # pragma: no cover - platforms without a load average
        return float("nan")


def _median_time(fn: Any, repeats: int, estimator: str = "median") -> float:
    """The median (or the fastest, ``estimator="min"``) wall time of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times) if estimator == "min" else statistics.median(times)


def trajectories(workload: Any, n: int, seed: int = 0) -> list[Any]:
    """``n`` real rollouts of ``rollout_steps`` from as many workers (fresh policies)."""
    from fleetgym.agents.rollout import RolloutWorker

    workers = [RolloutWorker(workload, i, seed) for i in range(n)]
    weights = workers[0].policy.get_weights()
    out = [w.rollout(weights, workload.rollout_steps, 0) for w in workers]
    for w in workers:
        w.close()
    return out


def _env_steps(workload: Any, steps: int, seed: int) -> np.ndarray:
    env = workload.make_env(seed=seed)
    env.reset(seed=seed)
    times = np.empty(steps)
    for i in range(steps):
        action = env.action_space.sample()
        started = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
        times[i] = time.perf_counter() - started
    env.close()
    return times


def measure_workload(
    name: str,
    env_steps: int = 2000,
    update_trajectories: tuple[int, int] = (4, 16),
    update_repeats: int = 3,
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
    seed: int = 0,
    estimator: str = "median",
) -> dict[str, Any]:
    """The calibration of workload ``name`` (JSON-ready; see the module docstring).

    ``estimator="median"`` keeps the machine's load in the figures (to predict a run
    taken beside them); ``"min"`` takes the fastest repeat of each (the machine's own
    speed, robust to other work on it: for a calibration that is shipped).

    Raises:
        UnknownWorkloadError: For an unknown workload.
    """
    import torch

    from fleetgym.agents.inference import ActorCriticModel
    from fleetgym.agents.learners.ppo import PPOLearner
    from fleetgym.agents.rollout import RolloutWorker
    from fleetgym.agents.workloads import get_workload

    torch.set_num_threads(1)
    workload = get_workload(name)
    load_before = _load()
    step = _env_steps(workload, env_steps, seed)
    quantiles = np.quantile(step, (np.arange(QUANTILES) + 0.5) / QUANTILES)
    worker = RolloutWorker(workload, 0, seed)
    weights = worker.policy.get_weights()
    steps = workload.rollout_steps
    worker.rollout(weights, steps, 0)  # warm caches
    rollout_s = _median_time(lambda: worker.rollout(weights, steps, 0), 5, estimator)
    policy_s = max(rollout_s / steps - float(step.mean()), 0.0)
    obs = np.asarray(worker.obs)
    policy = worker.policy
    worker.close()

    points = []
    for n in update_trajectories:
        batch = trajectories(workload, n, seed)
        learner = PPOLearner(workload, seed=seed)
        learner.update(batch)  # warm-up (allocations, normaliser)
        seconds = _median_time(lambda b=batch, lr=learner: lr.update(b), update_repeats, estimator)
        points.append((n * steps, seconds))
    (s1, t1), (s2, t2) = points
    per_sample = max((t2 - t1) / (s2 - s1), 0.0)
    fixed = max(t1 - per_sample * s1, 0.0)

    model = ActorCriticModel(policy)
    noise_width = 1 if policy.discrete else policy.action_dim
    forward = []
    for b in batch_sizes:
        obs_b = np.repeat(obs[None], b, axis=0)
        noise = np.full((b, noise_width), 0.5)
        model.forward(obs_b, noise)
        repeats = max(3, min(50, int(2000 / b)))
        forward.append(
            _median_time(lambda o=obs_b, z=noise: model.forward(o, z), repeats, estimator)
        )
    weight_bytes = sum(int(np.asarray(v).nbytes) for v in policy.get_weights().values())
    obs_bytes = int(obs.nbytes)
    return {
        "workload": workload.name,
        "rollout_steps": steps,
        "step_s": [float(q) for q in quantiles],
        "step_mean_s": float(step.mean()),
        "policy_s": policy_s,
        "update_points": [[s, t] for s, t in points],
        "update_fixed_s": fixed,
        "update_per_sample_s": per_sample,
        "server_batch_sizes": list(batch_sizes),
        "server_forward_s": forward,
        "weight_bytes": weight_bytes,
        "obs_bytes": obs_bytes,
        # obs, action, log-prob, value, reward and flags travel with each step
        "step_bytes": obs_bytes + 4 * (noise_width + 4),
        "load_average": [load_before, _load()],
        "estimator": estimator,
    }


def trainer_update(
    name: str, mode: str, n_actors: int, lag: int = 4, seed: int = 0
) -> tuple[Any, Any]:
    """One update of the learner ``async_compare``'s ``mode`` trains with, as a callable.

    ``"sync-threads"``: :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`'s
    learner with ``max_policy_lag=0``, plain PPO; ``"async"``: ``max_policy_lag=lag``,
    value recomputation and global advantage normalisation (an extra forward pass over the
    batch). One batch of ``n_actors`` real trajectories (with their next observations, as
    the trainer's actors hand them over), stamped with the learner's version before each
    update so that no sample counts as stale. Returns ``(update, close)``.
    """
    import dataclasses

    import torch

    from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
    from fleetgym.agents.learners.asynchronous.pipeline import with_next_obs
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
    from fleetgym.agents.rollout import RolloutWorker
    from fleetgym.agents.workloads import get_workload

    torch.set_num_threads(1)
    workload = get_workload(name)
    synchronous = mode == "sync-threads"
    model = AsyncPPO(
        workload,
        algo=AsyncPPOConfig(
            loss="ppo",
            max_policy_lag=0 if synchronous else lag,
            recompute_values=not synchronous,
            global_advantage_norm=not synchronous,
        ),
        topology=AsyncTopology(n_actors=n_actors),
        seed=seed,
    )
    workers = [RolloutWorker(workload, i, seed) for i in range(n_actors)]
    weights = workers[0].policy.get_weights()
    batch = [with_next_obs(w.rollout(weights, workload.rollout_steps, 0), w.obs) for w in workers]
    for w in workers:
        w.close()
    learner = model.learner

    def update() -> None:
        version = learner.policy_version
        learner.update([dataclasses.replace(t, policy_version=version) for t in batch])

    update()  # warm-up
    return update, model.close


def measure_trainer_update(
    name: str, mode: str, n_actors: int, lag: int = 4, repeats: int = 3, seed: int = 0
) -> float:
    """Median seconds of one update of :func:`trainer_update`'s learner."""
    update, close = trainer_update(name, mode, n_actors, lag, seed)
    seconds = _median_time(update, repeats)
    close()
    return seconds


def measure_contention(
    name: str = "CartPole-v1",
    delays_s: tuple[float, ...] = (0.001,) * 8,
    repeats: int = 3,
    lag: int = 4,
) -> dict[str, Any]:
    """What actor threads stepping beside an update cost it, per actor step (the GIL).

    One actor thread per entry of ``delays_s`` steps a worker's env and policy, sleeping
    that many seconds per step (the long-tail workload's wait; 0: CPU-bound, no wait),
    while the asynchronous trainer's learner (:func:`trainer_update`, ``"async"``)
    updates on ``len(delays_s)`` trajectories. The update's extra time
    over the same update alone, per actor step that ran during it, is ``cost_per_step_s``;
    less the step's own compute it is ``switch_s``, what taking the GIL back after a wait
    costs (0 without waits: threads that run on are counted by their compute alone).
    """
    from fleetgym.agents.rollout import RolloutWorker
    from fleetgym.agents.workloads import get_workload

    workload = get_workload(name)
    threads = len(delays_s)
    update, close = trainer_update(name, "async", threads, lag)
    alone = _median_time(update, repeats)
    solo = RolloutWorker(workload, threads, 1)
    weights = solo.policy.get_weights()
    solo.rollout(weights, workload.rollout_steps, 0)
    started = time.perf_counter()
    solo.rollout(weights, 4 * workload.rollout_steps, 0)
    step_compute = (time.perf_counter() - started) / (4 * workload.rollout_steps)
    solo.close()
    workers = [
        RolloutWorker(
            workload.with_overrides(step_delay_s=d, step_delay_sigma=0.0) if d > 0 else workload,
            i,
            1,
        )
        for i, d in enumerate(delays_s)
    ]
    stop = threading.Event()

    def act(worker: Any) -> None:
        while not stop.is_set():
            worker.rollout(weights, workload.rollout_steps, 0)

    results = []
    for _ in range(repeats):
        stop.clear()
        pool = [threading.Thread(target=act, args=(w,), daemon=True) for w in workers]
        for t in pool:
            t.start()
        time.sleep(0.1)
        before = sum(w.total_steps for w in workers)
        began = time.perf_counter()
        update()
        took = time.perf_counter() - began
        done = sum(w.total_steps for w in workers) - before
        stop.set()
        for t in pool:
            t.join()
        results.append((took, done))
    for w in workers:
        w.close()
    close()
    took = statistics.median(r[0] for r in results)
    steps = statistics.median(r[1] for r in results)
    cost = max(took - alone, 0.0) / max(steps, 1)
    waiting = any(d > 0 for d in delays_s)
    return {
        "workload": workload.name,
        "delays_s": list(delays_s),
        "update_alone_s": alone,
        "update_with_actors_s": took,
        "actor_steps_during_update": steps,
        "step_compute_s": step_compute,
        "cost_per_step_s": cost,
        "switch_s": max(cost - step_compute, 0.0) if waiting else 0.0,
        "load_average": _load(),
    }
