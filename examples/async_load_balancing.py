"""Load balancing of env instances on the long tail: static assignment against work stealing.

:class:`~fleetgym.agents.learners.AsyncPPO` with ``--envs-per-actor`` env instances on each
actor, collecting in rounds (one rollout per instance each), with and without
``load_balancing``. The workload is the long tail: CartPole-v1 whose env steps each sleep a
delay drawn once per env instance, log-normal with median ``--delay-ms`` and spread
``--delay-sigma`` (a slow simulator, a robot: waiting, not CPU). Two parts:

* ``sweep``: for each actor count in ``--actor-counts``, ``--rounds`` updates (one round
  each) per seed and mode: env steps/s and the migrations.
* ``target``: at ``--target-actors`` actors, training until CartPole's target (475, mean
  return of the last 100 episodes) or ``--steps``: wall time to the target.

Runs are paired by seed (the same instance delays in both modes); ratios balanced/static
are given per seed with their geometric mean. ``results.json`` in ``--out`` holds every
run.

Run::

    nice -n 10 python examples/async_load_balancing.py --seeds 3 --first-seed 0 \\
        --actor-counts 8 16 32 64 --target-actors 8 --out fleetgym-out/load_balancing
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from fleetgym.agents.learners import AsyncPPO, AsyncPPOConfig, AsyncTopology
from fleetgym.agents.workloads import get_workload

MODES = {"static": False, "balanced": True}


def run(
    workload: Any, actors: int, envs: int, balancing: bool, seed: int, steps: int, args: Any
) -> dict[str, Any]:
    model = AsyncPPO(
        workload,
        algo=AsyncPPOConfig(max_policy_lag=args.lag),
        topology=AsyncTopology(
            n_actors=actors,
            envs_per_actor=envs,
            load_balancing=balancing,
            steps_per_actor=args.steps_per_actor,
        ),
        seed=seed,
    )
    model.prewarm()  # every instance's env and policy built before the clock starts
    cpu = time.process_time()
    target = workload.target_return if args.part == "target" else None
    model.learn(steps, target=target)
    cpu = time.process_time() - cpu
    model.close()
    last = model.history[-1]
    scheduler = model.slots.scheduler
    return {
        "actors": actors,
        "envs_per_actor": envs,
        "mode": "balanced" if balancing else "static",
        "seed": seed,
        "steps": model.num_timesteps,
        "wall_s": last.wall_s,
        "steps_per_s": model.num_timesteps / last.wall_s,
        "cpu_s": cpu,
        "updates": model.updates,
        "final_return": model.learner.mean_return,
        "reached_target": bool(model.learner.mean_return >= workload.target_return),
        "migrations": scheduler.migrations if scheduler is not None else 0,
        "instances_per_actor": sorted(
            scheduler.home.count(a) for a in range(actors)
        ) if scheduler is not None else [],
    }  # fmt: skip


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("sweep", "target", "both"), default="both")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--actor-counts", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--envs-per-actor", type=int, default=4)
    parser.add_argument("--steps-per-actor", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=6, help="sweep: updates per run")
    parser.add_argument("--target-actors", type=int, default=8)
    parser.add_argument("--steps", type=int, default=150_000, help="target: env-step budget")
    parser.add_argument("--lag", type=int, default=4, help="max_policy_lag")
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--delay-sigma", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=Path("fleetgym-out/load_balancing"))
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    for name in ("seeds", "envs_per_actor", "steps_per_actor", "rounds", "target_actors", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected >= 1, actual {getattr(args, name)}")
    if args.delay_ms < 0 or args.delay_sigma < 0:
        parser.error("--delay-ms, --delay-sigma: expected >= 0")
    torch.set_num_threads(1)
    workload = get_workload("CartPole-v1").with_overrides(
        step_delay_s=args.delay_ms / 1000.0, step_delay_sigma=args.delay_sigma
    )
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs: list[tuple[str, int, int, int]] = []  # part, actors, seed, steps
    if args.part in ("sweep", "both"):
        for actors in args.actor_counts:
            per_round = actors * args.envs_per_actor * args.steps_per_actor
            jobs += [("sweep", actors, s, args.rounds * per_round) for s in seeds]
    if args.part in ("target", "both"):
        jobs += [("target", args.target_actors, s, args.steps) for s in seeds]
    # The commit measured: HEAD when the runs start.
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    rows: list[dict[str, Any]] = []
    wall, cpu = time.perf_counter(), time.process_time()
    bar = tqdm(total=2 * len(jobs), disable=args.no_progress, desc="runs")
    for part, actors, seed, steps in jobs:
        for mode, balancing in MODES.items():
            ns = argparse.Namespace(**{**vars(args), "part": part})
            row = run(workload, actors, args.envs_per_actor, balancing, seed, steps, ns)
            rows.append({"part": part, **row})
            bar.update(1)
            bar.set_postfix(part=part, actors=actors, mode=mode, sps=f"{row['steps_per_s']:.0f}")
    bar.close()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    meta = {
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "args": {k: v for k, v in vars(args).items() if k != "out"},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))
    for part, key in (("sweep", "steps_per_s"), ("target", "wall_s")):
        counts = sorted({r["actors"] for r in rows if r["part"] == part})
        for actors in counts:
            pick = {
                m: {
                    r["seed"]: r
                    for r in rows
                    if (r["part"], r["actors"], r["mode"]) == (part, actors, m)
                }
                for m in MODES
            }
            ratios = [pick["balanced"][s][key] / pick["static"][s][key] for s in seeds]
            cells = []
            for m in MODES:
                vals = [pick[m][s][key] for s in seeds]
                mean = sum(vals) / len(vals)
                sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / max(1, len(vals) - 1))
                reached = sum(pick[m][s]["reached_target"] for s in seeds)
                extra = f", target {reached}/{len(vals)}" if part == "target" else ""
                migr = sum(pick[m][s]["migrations"] for s in seeds) / len(vals)
                cells.append(f"{m} {mean:8.1f} ± {sd:6.1f} (migrations {migr:.0f}{extra})")
            print(
                f"{part:6s} {actors:3d} actors {key}: " + "  ".join(cells)
                + f"  balanced/static {geomean(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            )  # fmt: skip
    print(f"commit {commit}, wall {wall:.0f} s, CPU {cpu:.0f} s -> {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
