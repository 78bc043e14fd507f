"""Predicted against measured: the simulation beside real runs of the asynchronous trainer.

Each measured point is one :func:`fleetgym.experiments.async_compare.run_mode` run
(``sync-threads``: :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO` with
``max_policy_lag=0``; ``async``: ``max_policy_lag=lag``), actor threads, local inference,
on the uniform workload or the long-tail one (each actor's per-step wait log-normal,
``--delay-ms`` median, ``--delay-sigma`` spread). Its prediction simulates the same shape
on one machine: every compute job queues for one slot (actor threads under Python's GIL),
the learner's update in 1 ms pieces, an actor step that woke from its wait and found the
slot taken paying the measured hand-over; the actors' waits are the very ones the run drew (from its slot seeds), and the
window is the run's whole wall time, as ``run_mode`` measures it.
"""

from __future__ import annotations

import math
from typing import Any

from fleetgym.agents.planning import LearnerTimes, PipelineShape, SimulationResult, simulate
from fleetgym.experiments.plan.calibration import actor_times, learner_times

__all__ = [
    "TOLERANCE",
    "measure_and_validate",
    "measured_delays",
    "predict_run",
    "run_point",
    "validation_rows",
]

#: The largest relative error the issue accepts at a measured point.
TOLERANCE = 0.20
#: The piece of an update that queues at once for the GIL (torch releases it per op).
QUANTUM_S = 0.001


def measured_delays(
    workload: Any, n_actors: int, seed: int, delay_ms: float, sigma: float
) -> tuple[float, ...]:
    """The per-step waits the actors of a long-tail run draw (first incarnations)."""
    from fleetgym.agents.rollout.worker import slot_seeds

    delayed = workload.with_overrides(step_delay_s=delay_ms / 1000.0, step_delay_sigma=sigma)
    return tuple(delayed.actor_step_delay(slot_seeds(seed, a, 0)[0]) for a in range(n_actors))


def predict_run(
    cal: dict[str, Any],
    contention: dict[str, Any],
    mode: str,
    n_actors: int,
    steps: int,
    lag: int,
    delays_s: tuple[float, ...] | None,
    seed: int = 0,
) -> SimulationResult:
    """The simulation of one measured run (threads on this machine, the run's window)."""
    rollout = int(cal["rollout_steps"])
    shape = PipelineShape(
        n_actors=n_actors,
        steps_per_actor=rollout,
        max_policy_lag=0 if mode == "sync-threads" else lag,
        cpu_slots=1,
        quantum_s=QUANTUM_S,
        switch_s=contention["switch_s"],
    )
    updates = max(1, math.ceil(steps / (n_actors * rollout)))
    learner = learner_times(cal)
    if f"update_{mode}_s" in cal:  # the trainer's own learner, timed at this very batch
        learner = LearnerTimes(fixed_s=cal[f"update_{mode}_s"], per_sample_s=0.0)
    return simulate(
        shape,
        actor_times(cal, delays_s=delays_s),
        learner,
        updates=updates,
        warmup_updates=0,
        seed=seed,
    )


def run_point(
    kind: str,
    mode: str,
    n_actors: int,
    seed: int,
    steps: int,
    lag: int,
    delay_ms: float,
    sigma: float,
) -> dict[str, Any]:
    """One measured run of ``async_compare`` (CartPole, threads, local inference)."""
    from fleetgym.agents.workloads import get_workload
    from fleetgym.experiments.async_compare import run_mode

    base = get_workload("CartPole-v1")
    workload = (
        base
        if kind == "uniform"
        else base.with_overrides(step_delay_s=delay_ms / 1000.0, step_delay_sigma=sigma)
    )
    run = run_mode(mode, workload, n_actors, seed, steps, lag)
    delays = None if kind == "uniform" else measured_delays(base, n_actors, seed, delay_ms, sigma)
    return {"kind": kind, "actors": n_actors, "lag": lag, "delays_s": delays, **run}


def _average(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The mean of two measurements (numbers and lists of numbers; the rest from ``a``)."""
    out = dict(a)
    for key, value in a.items():
        other = b.get(key)
        if isinstance(value, float) and isinstance(other, (int, float)):
            out[key] = (value + other) / 2.0
        elif isinstance(value, list) and isinstance(other, list) and len(value) == len(other):
            if all(isinstance(v, float) for v in value + other):
                out[key] = [(v + w) / 2.0 for v, w in zip(value, other, strict=True)]
    return out


def measure_and_validate(
    actors: tuple[int, ...],
    kinds: tuple[str, ...],
    seeds: int,
    steps: int,
    lag: int,
    delay_ms: float,
    sigma: float,
    log: Any = None,
    repeats: int = 1,
    first_seed: int = 0,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Measured runs and their predictions, each run calibrated just before and after it.

    A shared machine's load moves every figure, so the env step, policy forward and
    update (:func:`~fleetgym.experiments.plan.measure.measure_trainer_update`: the
    trainer's own learner for each mode, at the run's batch) are measured again (a few
    seconds) around every run, with the contention of
    as many actor threads with the run's own waits
    (:func:`~fleetgym.experiments.plan.measure.measure_contention`): calibration, the
    synchronous run, calibration, the asynchronous run, calibration. Each prediction uses
    the mean of the calibrations on either side of its run. ``repeats`` runs every point
    that many times. ``seeds`` workload seeds ``first_seed .. first_seed + seeds - 1``
    run each point. Returns the runs (with their calibrations) and the rows of
    :func:`validation_rows` (one per run); ``log(row)`` is called after each run.
    """
    from fleetgym.agents.workloads import get_workload
    from fleetgym.experiments.plan.measure import (
        measure_contention,
        measure_trainer_update,
        measure_workload,
    )

    base = get_workload("CartPole-v1")
    runs, rows = [], []
    for n_actors in actors:
        for kind in kinds:
            for seed in range(first_seed, first_seed + seeds):
                waits = (
                    (0.0,) * n_actors
                    if kind == "uniform"
                    else measured_delays(base, n_actors, seed, delay_ms, sigma)
                )

                def calibrate(n: int = n_actors, w: tuple[float, ...] = waits) -> tuple[Any, Any]:
                    cal = measure_workload(
                        "CartPole-v1",
                        env_steps=1000,
                        update_trajectories=(max(1, n // 2), n),
                        update_repeats=2,
                        batch_sizes=(1, 2),
                    )
                    for m in ("sync-threads", "async"):
                        cal[f"update_{m}_s"] = measure_trainer_update("CartPole-v1", m, n, lag, 2)
                    if not any(w):  # no waits: no hand-over to measure
                        return cal, {"switch_s": 0.0}
                    return cal, measure_contention("CartPole-v1", w, repeats=2, lag=lag)

                for repeat in range(repeats):
                    before = calibrate()
                    for mode in ("sync-threads", "async"):
                        run = run_point(kind, mode, n_actors, seed, steps, lag, delay_ms, sigma)
                        after = calibrate()
                        cal = _average(before[0], after[0])
                        contention = _average(before[1], after[1])
                        run.update(repeat=repeat, calibration=cal, contention=contention)
                        runs.append(run)
                        row = validation_rows([run], cal, contention)[0]
                        row["load_average"] = cal["load_average"][0]
                        rows.append(row)
                        if log is not None:
                            log(row)
                        before = after
    return runs, rows


def _err(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured > 0 else math.inf


def validation_rows(
    runs: list[dict[str, Any]], cal: dict[str, Any], contention: dict[str, Any]
) -> list[dict[str, Any]]:
    """Predicted beside measured, one row per run (errors relative to the measurement)."""
    rows = []
    for run in runs:
        delays = run.get("delays_s")
        sim = predict_run(
            cal,
            contention,
            run["mode"],
            run["actors"],
            run["steps"],
            run["lag"],
            None if delays is None else tuple(delays),
            seed=run["seed"],
        )
        steps_err = _err(sim.env_steps_per_s, run["steps_per_s"])
        util_err = _err(sim.learner_utilisation, run["learner_utilisation"])
        rows.append(
            {
                "kind": run["kind"],
                "actors": run["actors"],
                "mode": run["mode"],
                "seed": run["seed"],
                "measured_steps_per_s": run["steps_per_s"],
                "predicted_steps_per_s": sim.env_steps_per_s,
                "steps_error": steps_err,
                "measured_utilisation": run["learner_utilisation"],
                "predicted_utilisation": sim.learner_utilisation,
                "utilisation_error": util_err,
                "within": abs(steps_err) <= TOLERANCE and abs(util_err) <= TOLERANCE,
            }
        )
    return rows
