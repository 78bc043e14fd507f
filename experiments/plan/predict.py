"""Predictions: the pipeline from 8 to 1,000 actors, and the AcceRL cluster shape.

The grid (:func:`grid_points`) is a cluster, not this machine: every actor on a core of
its own, acting through inference servers (one per :data:`ACTORS_PER_SERVER` actors,
``max_batch`` 256, a 5 ms wait: AcceRL's window), one learner, rollout nodes of
:data:`ACTORS_PER_NODE` actors on 10 Gbit/s links with 50 us latency, one update per
``n_actors`` trajectories (the asynchronous trainer's default). Compute times are this
machine's (one core per actor, one core for a server and for the learner) unless
``learner_speedup`` / ``server_speedup`` say the devices there are faster. Each point runs
synchronously (``max_policy_lag=0``: a barrier per round) and asynchronously
(``max_policy_lag=lag``), on the uniform workload and on the long-tail one (each actor's
per-step wait log-normal, ``delay_ms`` median, ``delay_sigma`` spread).

:func:`accerl_points` is AcceRL's deployment: 100 rollout nodes (10 actors each, 10
Gbit/s), 16 inference nodes (200 Gbit/s), 8 trainers all-reducing over 400 Gbit/s.
AcceRL's trainers and servers are GPUs, which this machine has not:
:func:`match_accerl` finds the device speed-up (trainers and servers alike, in times this
machine's core) at which the synchronous pipeline's learner utilisation is AcceRL's
synchronous 23 %, and reports the asynchronous pipeline there -- the comparison with
AcceRL's 23 % -> 86 % and 2.4x asks what asynchrony does *in AcceRL's regime*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fleetgym.agents.planning import PipelineShape, SimulationResult, simulate
from fleetgym.experiments.plan.calibration import (
    actor_times,
    learner_times,
    links,
    server_times,
)

__all__ = [
    "ACTORS_PER_NODE",
    "ACTORS_PER_SERVER",
    "DEFAULT_ACTORS",
    "Point",
    "accerl_points",
    "grid_points",
    "match_accerl",
    "run_point",
]

#: The grid's actor counts.
DEFAULT_ACTORS = (8, 16, 32, 64, 128, 256, 512, 1000)
#: Actors per inference server in the grid.
ACTORS_PER_SERVER = 64
#: Actors sharing a rollout node's link (AcceRL: 100 nodes for 1,000 actors).
ACTORS_PER_NODE = 10
#: 10 Gbit/s, 200 Gbit/s and 400 Gbit/s in bytes per second.
GBIT = 1.25e8
ROLLOUT_BPS, INFERENCE_BPS, TRAINER_BPS = 10 * GBIT, 200 * GBIT, 400 * GBIT
#: One-way latency of a hop in the cluster.
LATENCY_S = 50e-6


@dataclass(frozen=True)
class Point:
    """One predicted point: which workload, workload kind, shape, actors and mode, and its result.

    Example:
        >>> from fleetgym.agents.planning import ActorTimes, LearnerTimes, PipelineShape, simulate
        >>> result = simulate(PipelineShape(2, 10), ActorTimes(step_s=(0.001,)),
        ...                   LearnerTimes(0.01, 0.0), updates=3)
        >>> p = Point("CartPole-v1", "uniform", "grid", 2, "sync", result)
        >>> p.n_actors, round(p.result.env_steps_per_s)
        (2, 1000)
    """

    workload: str
    kind: str
    shape: str
    n_actors: int
    mode: str
    result: SimulationResult


def run_point(
    cal: dict[str, Any],
    *,
    n_actors: int,
    synchronous: bool,
    lag: int,
    delay_ms: float,
    delay_sigma: float,
    n_servers: int,
    n_trainers: int = 1,
    actors_per_node: int = ACTORS_PER_NODE,
    server_bps: float = ROLLOUT_BPS,
    learner_speedup: float = 1.0,
    server_speedup: float = 1.0,
    updates: int = 6,
    warmup: int = 2,
    seed: int = 0,
) -> SimulationResult:
    """Simulate one cluster point of one workload's calibration."""
    shape = PipelineShape(
        n_actors=n_actors,
        steps_per_actor=int(cal["rollout_steps"]),
        max_policy_lag=0 if synchronous else lag,
        inference="server",
    )
    actor = actor_times(cal, delay_s=delay_ms / 1000.0, delay_sigma=delay_sigma)
    server = server_times(cal, n_servers=n_servers, speedup=server_speedup)
    network = links(
        cal,
        latency_s=LATENCY_S,
        actor_bandwidth_Bps=ROLLOUT_BPS,
        learner_bandwidth_Bps=server_bps,
        trainer_bandwidth_Bps=TRAINER_BPS,
        actors_per_node=actors_per_node,
    )
    learner = learner_times(cal, n_trainers=n_trainers, speedup=learner_speedup)
    return simulate(shape, actor, learner, server, network, updates, warmup, seed)


def _kinds(delay_ms: float) -> tuple[tuple[str, float], ...]:
    return (("uniform", 0.0), ("long-tail", delay_ms))


def grid_points(
    cals: dict[str, dict[str, Any]],
    actors: tuple[int, ...] = DEFAULT_ACTORS,
    lag: int = 4,
    delay_ms: float = 1.0,
    delay_sigma: float = 1.0,
    learner_speedup: float = 1.0,
    server_speedup: float = 1.0,
    updates: int = 6,
    seed: int = 0,
    progress: Any = None,
) -> list[Point]:
    """Every workload x workload kind x actor count x mode of the grid."""
    points = []
    for name, cal in cals.items():
        for kind, delay in _kinds(delay_ms):
            for n in actors:
                for mode in ("sync", "async"):
                    result = run_point(
                        cal,
                        n_actors=n,
                        synchronous=mode == "sync",
                        lag=lag,
                        delay_ms=delay,
                        delay_sigma=delay_sigma if delay else 0.0,
                        n_servers=max(1, math.ceil(n / ACTORS_PER_SERVER)),
                        learner_speedup=learner_speedup,
                        server_speedup=server_speedup,
                        updates=updates,
                        seed=seed,
                    )
                    points.append(Point(name, kind, "grid", n, mode, result))
                    if progress is not None:
                        progress(points[-1])
    return points


def accerl_points(
    cals: dict[str, dict[str, Any]],
    lag: int = 4,
    delay_ms: float = 1.0,
    delay_sigma: float = 1.0,
    learner_speedup: float = 1.0,
    server_speedup: float = 1.0,
    updates: int = 6,
    seed: int = 0,
    progress: Any = None,
) -> list[Point]:
    """AcceRL's cluster: 100 rollout nodes x 10 actors, 16 servers, 8 trainers."""
    points = []
    for name, cal in cals.items():
        for kind, delay in _kinds(delay_ms):
            for mode in ("sync", "async"):
                result = run_point(
                    cal,
                    n_actors=100 * ACTORS_PER_NODE,
                    synchronous=mode == "sync",
                    lag=lag,
                    delay_ms=delay,
                    delay_sigma=delay_sigma if delay else 0.0,
                    n_servers=16,
                    n_trainers=8,
                    server_bps=INFERENCE_BPS,
                    learner_speedup=learner_speedup,
                    server_speedup=server_speedup,
                    updates=updates,
                    seed=seed,
                )
                points.append(Point(name, kind, "AcceRL", 100 * ACTORS_PER_NODE, mode, result))
                if progress is not None:
                    progress(points[-1])
    return points


def match_accerl(
    cals: dict[str, dict[str, Any]],
    target: float = 0.23,
    kind: str = "long-tail",
    lag: int = 4,
    delay_ms: float = 1.0,
    delay_sigma: float = 1.0,
    updates: int = 6,
    seed: int = 0,
    iterations: int = 10,
    progress: Any = None,
) -> list[Point]:
    """AcceRL's shape at the device speed-up where synchronous utilisation is ``target``.

    Utilisation falls as the devices get faster (the update shrinks, the rollout does
    not), so a bisection on the speed-up's logarithm in [1e-2, 1e5] finds it.
    """
    delay = delay_ms if kind == "long-tail" else 0.0

    def point(cal: dict[str, Any], synchronous: bool, speedup: float) -> SimulationResult:
        return run_point(
            cal,
            n_actors=100 * ACTORS_PER_NODE,
            synchronous=synchronous,
            lag=lag,
            delay_ms=delay,
            delay_sigma=delay_sigma if delay else 0.0,
            n_servers=16,
            n_trainers=8,
            server_bps=INFERENCE_BPS,
            learner_speedup=speedup,
            server_speedup=speedup,
            updates=updates,
            seed=seed,
        )

    points = []
    for name, cal in cals.items():
        low, high = -2.0, 5.0
        for _ in range(iterations):
            middle = (low + high) / 2.0
            if point(cal, True, 10.0**middle).learner_utilisation > target:
                low = middle
            else:
                high = middle
        speedup = 10.0 ** ((low + high) / 2.0)
        label = f"AcceRL, devices {speedup:.3g}x"
        for mode in ("sync", "async"):
            result = point(cal, mode == "sync", speedup)
            points.append(Point(name, kind, label, 100 * ACTORS_PER_NODE, mode, result))
            if progress is not None:
                progress(points[-1])
    return points
