"""Learning check: PPO fed by an 8-actor fleet, several seeds, steps and wall time to target.

Trains a workload (CartPole-v1 by default; Hopper-v5 with ``--workload Hopper-v5``) with
:class:`~fleetgym.agents.learners.PPOLearner` and a fleet backend in synchronous rounds, once per
seed, and writes ``summary.md`` (steps and wall time to the target, mean +- std over seeds),
``curves.png`` (mean return against env steps and wall time, one line per seed), one CSV
per seed, and the best seed's learner and policy. The saved policy is reloaded from disk
and evaluated, to show the file round trip.

Run (from anywhere, with fleetgym installed)::

    nice -n 10 python examples/train_cartpole_fleet.py --seeds 0 1 2 --out fleetgym-out/cartpole
    nice -n 10 python examples/train_cartpole_fleet.py --workload Hopper-v5 --seeds 0 --max-minutes 25

Wall times depend on the machine and on what else runs on it; steps to target do not.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

import numpy as np
import torch

from fleetgym.agents.fleet import make_fleet
from fleetgym.agents.learners import PPOLearner, TrainingHistory, evaluate_policy, train
from fleetgym.agents.policies import ActorCriticPolicy
from fleetgym.agents.workloads import get_workload


def run_seed(args: argparse.Namespace, seed: int, out: Path) -> tuple[TrainingHistory, PPOLearner]:
    workload = get_workload(args.workload)
    learner = PPOLearner(workload, seed=seed)
    options = {"batched": True} if args.backend == "inprocess" else {}
    deadline = time.perf_counter() + args.max_minutes * 60
    with make_fleet(
        workload, backend=args.backend, max_actors=args.actors, seed=seed, **options
    ) as fleet:

        def report(record) -> bool:
            if record.round % 10 == 0:
                print(
                    f"  seed {seed} round {record.round:4d}: {record.total_steps:8d} steps, "
                    f"{record.wall_s:7.1f} s, mean return {record.stats.mean_return:8.1f}",
                    flush=True,
                )
            return time.perf_counter() > deadline

        history = train(
            workload,
            fleet,
            learner,
            args.actors,
            args.rounds or workload.max_rounds,
            callback=report,
        )
    with (out / f"seed{seed}.csv").open("w", newline="") as f:
        rows = [r.as_dict() for r in history.rounds]
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return history, learner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="CartPole-v1")
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--backend", default="inprocess", choices=("inprocess", "process", "ray"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=None, help="round budget per seed")
    parser.add_argument("--max-minutes", type=float, default=30.0, help="wall budget per seed")
    parser.add_argument("--out", type=Path, default=Path("fleetgym-out/learning-check"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    workload = get_workload(args.workload)

    results = []
    for seed in args.seeds:
        print(f"{workload.name}, seed {seed}:", flush=True)
        history, learner = run_seed(args, seed, args.out)
        results.append((seed, history, learner))
        print(
            f"  -> {history.stop_reason}: return {history.final_return:.1f}, "
            f"{history.total_steps} steps, {history.wall_s:.1f} s",
            flush=True,
        )

    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2, sharey=True)
    for seed, history, _ in results:
        returns = [r.stats.mean_return for r in history.rounds]
        axes[0].plot([r.total_steps for r in history.rounds], returns, label=f"seed {seed}")
        axes[1].plot([r.wall_s for r in history.rounds], returns, label=f"seed {seed}")
    for ax, label in zip(axes, ("env steps", "wall time (s)"), strict=True):
        ax.axhline(workload.target_return, color="grey", ls="--", lw=1)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean return (last 100 episodes)")
    axes[0].legend()
    fig.suptitle(f"{workload.name}: PPO, {args.actors} actors ({args.backend})")
    fig.tight_layout()
    fig.savefig(args.out / "curves.png", dpi=120)

    reached = [(s, h) for s, h, _ in results if h.reached_target]
    steps = np.array([h.total_steps for _, h in reached], float)
    walls = np.array([h.wall_s for _, h in reached], float)
    best_seed, best_history, best_learner = max(results, key=lambda r: r[1].final_return)
    policy_path = best_learner.save(args.out / f"{workload.name}.pt").with_name(
        f"{workload.name}.policy.pt"
    )
    evaluation = evaluate_policy(ActorCriticPolicy.load(policy_path), workload, 10, seed=1000)
    lines = [
        f"# Learning check: {workload.name}",
        "",
        f"PPO, {args.actors} actors x {workload.rollout_steps} steps per round, backend "
        f"{args.backend}, target {workload.target_return:g} (mean of the last 100 episodes).",
        "",
        "| seed | reached | env steps | wall s | final mean return |",
        "|---|---|---|---|---|",
    ]
    for seed, history, _ in results:
        lines.append(
            f"| {seed} | {history.reached_target} | {history.total_steps} | "
            f"{history.wall_s:.1f} | {history.final_return:.1f} |"
        )
    lines.append("")
    if len(reached):
        lines.append(
            f"Reached by {len(reached)}/{len(results)} seeds: {steps.mean():.0f} +- {steps.std():.0f} "
            f"env steps, {walls.mean():.1f} +- {walls.std():.1f} s wall (mean +- std)."
        )
    lines.append(
        f"Saved policy of seed {best_seed} reloaded from {policy_path.name}: deterministic return "
        f"{np.mean(evaluation):.1f} +- {np.std(evaluation):.1f} over 10 episodes."
    )
    if not math.isfinite(best_history.final_return):
        lines.append("(no episode completed)")
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
