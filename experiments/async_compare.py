"""Asynchronous against synchronous training: env steps/s, wall time to target, learner utilisation.

Four trainers with the same actors (``--actors`` slots of ``rollout_steps`` env steps,
one update per ``--actors`` trajectories, the workload's PPO hyperparameters) and the same
cores:

* ``sync-default`` -- what ``fleetgym train`` runs by default:
  :func:`fleetgym.agents.learners.training.train` on the in-process fleet, every slot
  stepped in lockstep with one batched policy forward per step
  (:class:`~fleetgym.agents.learners.ppo.PPOLearner`);
* ``sync-fleet`` -- the same loop on a process fleet (one worker process per actor);
* ``sync-threads`` -- :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO` with
  ``max_policy_lag=0`` (actor threads wait for every update: synchronous PPO on the
  asynchronous trainer's own machinery);
* ``async`` -- :class:`AsyncPPO` with ``--loss`` (PPO-clip by default), value recomputation,
  global normalisation and ``max_policy_lag=--lag``.

``--backends inprocess process ray`` runs the ``AsyncPPO`` trainers once with actor
threads, once with a worker process per actor slot (``backend="process"``; the table labels
those rows ``(process actors)``) and once with a Ray actor per slot on a local Ray cluster
(``backend="ray"``, ``(Ray actors)``). ``--actor-counts 8 16 32 64`` repeats everything at
each number of actor slots (``--actors`` is the single count otherwise). ``--inference server`` makes the ``AsyncPPO`` actors act
through the trainer's inference server (in-process for threads, a loopback socket with
observations in shared memory for processes; rows labelled ``served``).

Workloads: ``uniform`` (the plain env) and ``heterogeneous`` (each actor's env steps cost
an extra log-normal delay, ``--delay-ms`` median and ``--delay-sigma`` spread: a long tail
of slow actors). Each run stops at the workload's target return or after ``--steps`` env
steps. Every run records its env steps/s, its wall time (the time to the target when it
got there), the learner's busy share of it and the CPU seconds of this process and its
descendants (worker processes, a local Ray cluster) over the run. Prints Markdown tables
(:mod:`~fleetgym.experiments.overlap_report`: the runs, and the paired per-seed ratios
against the synchronous trainers); ``--out`` also writes them with a JSON of the runs and
a PNG against the number of actors.

Example::

    python -m fleetgym.experiments.async_compare --steps 20000 --seeds 1 --out runs/compare
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

from fleetgym.agents.backends import BACKENDS
from fleetgym.experiments.overlap_report import MODES, figure, ratio_table, table

__all__ = ["WORKLOADS", "main", "run_mode", "tree_cpu_seconds"]
WORKLOADS = ("uniform", "heterogeneous")


def tree_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its live descendants (Linux /proc).

    Covers actor worker processes and the processes of a local Ray cluster this process
    started (the raylet's workers are its descendants); returns NaN where /proc is missing.
    """
    proc = Path("/proc")
    if not (proc / "self" / "stat").is_file():
        return math.nan
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # the process ended meanwhile
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def _workload(name: str, kind: str, delay_ms: float, sigma: float) -> Any:
    from fleetgym.agents.workloads import get_workload

    base = get_workload(name)
    if kind == "uniform":
        return base
    return base.with_overrides(step_delay_s=delay_ms / 1000.0, step_delay_sigma=sigma)


def run_mode(
    mode: str,
    workload: Any,
    actors: int,
    seed: int,
    steps: int,
    lag: int,
    loss: str = "ppo",
    save_dir: Path | None = None,
    eval_episodes: int = 10,
    backend: str = "inprocess",
    inference: str = "local",
    proximal_clip: bool = False,
) -> dict[str, Any]:
    """One training run; returns steps, wall time, steps/s, utilisation and the return.

    ``proximal_clip`` (``loss="ppo"``, ``async`` mode only) clips around the learner's
    policy at each update's start (decoupled PPO, see ``LossConfig``).

    ``backend`` places an :class:`AsyncPPO` run's actors (``"inprocess"``: threads,
    ``"process"`` or ``"ray"``: a local Ray cluster, started before and shut down after the
    timed part);
    ``sync-fleet`` always runs a process fleet, ``sync-default`` the in-process one.

    With ``save_dir`` an :class:`AsyncPPO` run is also saved, reloaded with
    :meth:`AsyncPPO.load`, and both policies are scored over ``eval_episodes``
    deterministic episodes on the same seeds (``eval_return``, ``reloaded_return``).
    """
    from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO

    target = workload.target_return
    extra: dict[str, Any] = {}
    if mode in ("sync-fleet", "sync-default"):
        from fleetgym.agents.fleet import make_fleet
        from fleetgym.agents.learners.ppo import PPOLearner
        from fleetgym.agents.learners.training import train

        learner = PPOLearner(workload, seed=seed)
        rounds = -(-steps // (actors * workload.rollout_steps))
        fleet: Any = make_fleet(
            workload,
            backend="process" if mode == "sync-fleet" else "inprocess",
            max_actors=actors,
            seed=seed,
        )
        with fleet:
            fleet.prewarm(actors)  # envs built (and worker processes up), as AsyncPPO's
            cpu = tree_cpu_seconds()
            started = time.perf_counter()
            history = train(workload, fleet, learner, actors, rounds, target=target)
            wall = time.perf_counter() - started
            cpu = tree_cpu_seconds() - cpu
        busy = sum(r.stats.update_time_s for r in history.rounds)
        done, final = history.total_steps, history.final_return
        reached = history.reached_target
    else:
        synchronous = mode == "sync-threads"
        model = AsyncPPO(
            workload,
            algo=AsyncPPOConfig(
                loss="ppo" if synchronous else loss,
                max_policy_lag=0 if synchronous else lag,
                recompute_values=not synchronous,
                global_advantage_norm=not synchronous,
                proximal_clip=proximal_clip and not synchronous,
            ),
            topology=AsyncTopology(n_actors=actors, backend=backend, inference=inference),
            seed=seed,
        )
        model.prewarm()  # the actors (worker processes, Ray actors) are up, as for sync-fleet
        cpu = tree_cpu_seconds()
        model.learn(steps, target=target)
        cpu = tree_cpu_seconds() - cpu
        model.close()
        last = model.history[-1]
        wall, busy = last.wall_s, last.learner_busy_s
        done, final = model.num_timesteps, model.learner.mean_return
        reached = final >= target
        extra["loss"] = model.config.label
        if save_dir is not None:
            name = mode if backend == "inprocess" else f"{mode}-{backend}"
            name += "-served" if inference == "server" else ""
            extra.update(_save_reload_score(model, save_dir / f"{name}-{seed}.pt", eval_episodes))
    return {
        "mode": mode,
        "backend": {"sync-fleet": "process", "sync-default": "inprocess"}.get(mode, backend),
        "inference": "local" if mode in ("sync-fleet", "sync-default") else inference,
        "actors": actors,
        "seed": seed,
        "steps": done,
        "wall_s": wall,
        "steps_per_s": done / wall,
        "learner_utilisation": busy / wall,
        "cpu_s": cpu,
        "final_return": final,
        "reached_target": bool(reached),
        **extra,
    }


def _save_reload_score(model: Any, path: Path, episodes: int) -> dict[str, float]:
    """Save ``model``, load it back, and score both over the same deterministic episodes."""
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
    from fleetgym.agents.learners.training import evaluate_policy

    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    reloaded = AsyncPPO.load(path)
    seed = 10_000 + model.seed
    scores = {
        name: statistics.fmean(evaluate_policy(m.learner.policy, m.workload, episodes, seed=seed))
        for name, m in (("eval_return", model), ("reloaded_return", reloaded))
    }
    reloaded.close()
    return scores


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print (and optionally write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="CartPole-v1")
    parser.add_argument("--kinds", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument(
        "--actor-counts",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="run everything at each of these numbers of actor slots (e.g. 8 16 32 64; "
        "default: --actors)",
    )
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="run seeds first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument("--lag", type=int, default=4)
    parser.add_argument("--loss", choices=("gipo", "ppo", "vtrace"), default="ppo")
    parser.add_argument(
        "--proximal-clip",
        action="store_true",
        help="async with --loss ppo: clip around the learner's policy at the update's start, "
        "advantages weighted by its ratio to the behaviour policy (decoupled PPO)",
    )
    parser.add_argument("--delay-ms", type=float, default=1.0)
    parser.add_argument("--delay-sigma", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--save-dir",
        type=Path,
        default=None,
        help="save each AsyncPPO run here, reload it and score both (deterministic episodes)",
    )
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        metavar="DIR",
        help="train nothing: combine the async_compare.json of these earlier runs (e.g. a "
        "sweep run in parts) into one set of tables and one figure in --out",
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        choices=BACKENDS,
        default=["inprocess"],
        help="where AsyncPPO's actors run: threads (inprocess), a worker process each, a Ray "
        "actor each (a local Ray cluster), or several of them (default inprocess)",
    )
    parser.add_argument(
        "--sync-backends",
        nargs="+",
        choices=BACKENDS,
        default=None,
        help="where sync-threads' actors run (default: every --backends); e.g. "
        "'--backends inprocess ray --sync-backends inprocess' runs the synchronous reference "
        "once per seed",
    )
    parser.add_argument(
        "--inference",
        choices=("local", "server"),
        default="local",
        help="AsyncPPO's actors act with their own policy copy (local) or through the "
        "trainer's inference server (default local)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar over the runs (stderr)"
    )
    args = parser.parse_args(argv)
    if args.proximal_clip and args.loss != "ppo":
        parser.error(f"--proximal-clip: expected --loss ppo, actual {args.loss}")
    if args.merge:
        if args.out is None:
            parser.error("--merge: expected --out DIR for the combined tables and figure")
        return _write(merge(args.merge), args.out, args.workload)
    counts = args.actor_counts or [args.actors]
    sync_backends = args.sync_backends or args.backends
    if min(counts) < 1:
        parser.error(f"--actors / --actor-counts: expected counts >= 1, actual {counts}")

    import sys

    import torch
    from tqdm import tqdm

    torch.set_num_threads(1)
    results: dict[str, list[dict[str, Any]]] = {}
    cells = [
        (n, seed, mode, backend)
        for n in counts
        for seed in range(args.first_seed, args.first_seed + args.seeds)
        for mode in args.modes
        for backend in args.backends
        # the synchronous fleets place their actors themselves: run them once
        if not (mode in ("sync-fleet", "sync-default") and backend != args.backends[0])
        and not (mode == "sync-threads" and backend not in sync_backends)
    ]
    bar = tqdm(
        total=len(args.kinds) * len(cells),
        desc="async compare",
        unit="run",
        disable=args.no_progress,
        file=sys.stderr,
    )
    for kind in args.kinds:
        workload = _workload(args.workload, kind, args.delay_ms, args.delay_sigma)
        for n, seed, mode, backend in cells:
            bar.set_postfix_str(f"{kind} {mode} {backend} {n} actors seed {seed}")
            run = run_mode(
                mode,
                workload,
                n,
                seed,
                args.steps,
                args.lag,
                args.loss,
                None if args.save_dir is None else args.save_dir / kind,
                args.eval_episodes,
                backend,
                args.inference,
                args.proximal_clip,
            )
            results.setdefault(kind, []).append(run)
            bar.write(json.dumps({"workload": kind, **run}), file=sys.stdout)
            sys.stdout.flush()
            bar.update(1)
    bar.close()
    return _write(results, args.out, args.workload)


def merge(folders: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """The runs of several earlier comparisons (their ``async_compare.json``), by workload.

    Raises:
        FileNotFoundError: If a folder has no ``async_compare.json``.
    """
    merged: dict[str, list[dict[str, Any]]] = {}
    for folder in folders:
        path = folder / "async_compare.json"
        if not path.is_file():
            raise FileNotFoundError(f"--merge: expected {path}, actual no such file")
        for kind, runs in json.loads(path.read_text()).items():
            merged.setdefault(kind, []).extend(runs)
    return merged


def _write(results: dict[str, list[dict[str, Any]]], out: Path | None, workload: str) -> int:
    """Print the tables; with ``out``, also write them, the runs (JSON) and the figure."""
    lines = table(results)
    ratios = ratio_table(results)
    if ratios:
        lines += ["", *ratios]
    print("\n".join(lines))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "async_compare.md").write_text("\n".join(lines) + "\n")
        (out / "async_compare.json").write_text(json.dumps(results, indent=1))
        figure(results, out / "async_compare.png", workload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
