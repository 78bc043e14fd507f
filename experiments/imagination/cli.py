"""``fleetgym imagination``: real env steps to a target with and without imagination.

Runs every arm of an env (see :mod:`fleetgym.experiments.imagination.study`) for each
seed, writes ``results.json`` (every run, appended as it finishes), ``summary.md`` (steps
to target per arm and seed, the paired ratio against plain PPO, wall and CPU time, the
model's share of it), and three PNGs: evaluation return against real steps, the model's
measured error against horizon, and the horizon and imagined share the rules chose.

Example::

    fleetgym imagination --env CartPole-v1 --seeds 5 --out runs/imagination

With ``--mbpo`` it runs MBPO (:class:`fleetgym.agents.world_model.MBPO`) against SAC at
the same updates per real step instead (:mod:`fleetgym.experiments.imagination.mbpo`)::

    fleetgym imagination --mbpo --env InvertedPendulum-v5 --seeds 5 --jobs 2

Every argument is checked before the first run (a bad one exits 2); an error during a run
is a crash (exit 3, with its traceback).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    int_in,
    non_negative_int,
    output_folder,
    positive_int,
    seed_range,
    unit_interval,
)
from fleetgym.experiments.imagination.report import fmt_steps, plot, summarise

__all__ = ["ENV_NAMES", "MBPO_ENV_NAMES", "MBPO_FLAGS", "configure", "rollout_length", "run"]

ENV_NAMES = ("CartPole-v1", "Hopper-v5", "MiniGrid-DoorKey-5x5-v0")
#: Envs of --mbpo (flat continuous spaces).
MBPO_ENV_NAMES = ("Hopper-v5", "InvertedPendulum-v5", "Pendulum-v1")
#: --mbpo's own options (refused without it): flag -> (dest, setup field).
MBPO_FLAGS = {
    "--updates-per-step": "updates_per_step",
    "--real-ratio": "real_ratio",
    "--rollout-length": "rollout_length",
    "--ensemble-size": "ensemble_size",
    "--eval-every": "eval_every",
    "--learning-starts": "learning_starts",
}


def rollout_length(text: str) -> int | str:
    """``linear``, ``error`` or a positive int (an argparse type)."""
    if text in ("linear", "error"):
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected linear, error or an int >= 1, actual {text!r}"
        ) from None


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments (imports nothing heavy)."""
    parser.add_argument(
        "--env",
        choices=(*ENV_NAMES, *(e for e in MBPO_ENV_NAMES if e not in ENV_NAMES)),
        default="CartPole-v1",
        help="env (default CartPole-v1; --mbpo: Hopper-v5, InvertedPendulum-v5 or Pendulum-v1)",
    )
    parser.add_argument(
        "--seeds", type=int_in(1, 100), default=5, help="seeds FIRST..FIRST+N-1 (default 5)"
    )
    parser.add_argument(
        "--first-seed",
        type=non_negative_int,
        default=0,
        metavar="FIRST",
        help="the first seed: --seeds N runs FIRST..FIRST+N-1 (default 0)",
    )
    parser.add_argument(
        "--arms", default=None, help="comma-separated arms to run (default: all of the env's)"
    )
    parser.add_argument(
        "--budget",
        type=positive_int,
        default=None,
        help="real env-step budget per run (default: the env's)",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=Path("fleetgym-out/imagination"),
        metavar="DIR",
        help="output folder: results_ENV.json (runs already there are kept and rerun ones "
        "replaced), summary_ENV.md and the figures (default fleetgym-out/imagination)",
    )
    parser.add_argument(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="instead: AsyncPPO with and without imagination on the long-tail CartPole "
        "workload (policy lag, real env steps/s, learner utilisation)",
    )
    parser.add_argument(
        "--async-steps",
        type=positive_int,
        default=20_000,
        help="--async: real env steps per run (default 20000)",
    )
    parser.add_argument(
        "--mbpo",
        action="store_true",
        help="instead: MBPO (SAC on short model rollouts) against SAC with the same "
        "updates per real step (arms mbpo, sac), return and forward velocity",
    )
    parser.add_argument(
        "--updates-per-step",
        type=positive_int,
        default=None,
        help="--mbpo: SAC gradient steps per real step, both arms (default 10)",
    )
    parser.add_argument(
        "--real-ratio",
        type=unit_interval,
        default=None,
        help="--mbpo: share of real data in each batch, in [0, 1] (default 0.05)",
    )
    parser.add_argument(
        "--rollout-length",
        type=rollout_length,
        default=None,
        help="--mbpo: rollout length k: linear (MBPO's schedule), error (the measured "
        "error's) or an int (default linear)",
    )
    parser.add_argument(
        "--ensemble-size",
        type=int_in(1, 64),
        default=None,
        help="--mbpo: world-model members, 5 of 7 of them elites (default 7)",
    )
    parser.add_argument(
        "--eval-every",
        type=positive_int,
        default=None,
        help="--mbpo: real steps between evaluations (default: the env's, Hopper 5000)",
    )
    parser.add_argument(
        "--learning-starts",
        type=positive_int,
        default=None,
        help="--mbpo: random real steps before any update, both arms (default: the env's, "
        "Hopper 5000)",
    )
    parser.add_argument(
        "--jobs",
        type=int_in(1, 64),
        default=None,
        help="--mbpo: runs side by side, each in its own process on one torch thread (default 1)",
    )
    parser.add_argument(
        "--epochs",
        type=positive_int,
        default=None,
        help="the ppo+epochs arm's PPO epochs, run as arm ppo+epochs-N (default: matched "
        "to ppo+imagination's gradient steps per real step)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _progress(bar: Any, done: list[int], arm: str, seed: int) -> Any:
    def progress(result: Any) -> None:
        bar.update(result.real_steps - done[0])
        done[0] = result.real_steps
        score = f"{result.curve[-1][1]:.0f}" if result.curve else "-"
        bar.set_postfix(arm=arm, seed=seed, ret=score, refresh=False)

    return progress


def _run_async(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from fleetgym.experiments.imagination.asynchronous import async_runs, async_table

    out: Path = args.out
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    with tqdm(
        total=2 * len(seeds), desc="imagination --async", unit="run", disable=args.no_progress
    ) as bar:

        def progress(run: dict[str, Any]) -> None:
            bar.update(1)
            arm = "with imagination" if run["imagination"] else "without imagination"
            bar.write(
                f"seed {run['seed']} {arm}: {run['steps_per_s']:.0f} real env steps/s, "
                f"evaluation return {run['eval_return']:.0f} ({run['wall_s']:.0f} s)"
            )

        runs = async_runs(seeds, args.async_steps, progress=progress)
    (out / "results_async.json").write_text(json.dumps(runs, indent=1))
    table = async_table(runs, 2.0, 1.0)
    (out / "summary_async.md").write_text(table)
    print(table)
    return 0


def _run_mbpo(args: argparse.Namespace) -> int:
    """MBPO and matched SAC per seed; 0 when every run asked for reached the target."""
    import dataclasses

    from tqdm import tqdm

    from fleetgym.experiments.imagination.mbpo import (
        MBPO_ARMS,
        MBPO_ENVS,
        mbpo_figure,
        mbpo_table,
        run_mbpo_arm,
        trivial_scores,
    )

    if args.env not in MBPO_ENVS:
        raise UsageError(f"--env: expected one of {list(MBPO_ENVS)} with --mbpo")
    setup = MBPO_ENVS[args.env]
    changes = {dest: getattr(args, dest) for dest in MBPO_FLAGS.values()}
    if args.budget is not None:
        changes["budget"] = args.budget
    setup = dataclasses.replace(setup, **{k: v for k, v in changes.items() if v is not None})
    arms = list(MBPO_ARMS)
    if args.arms is not None:
        wanted = [a.strip() for a in args.arms.split(",") if a.strip()]
        unknown = [w for w in wanted if w not in MBPO_ARMS]
        if unknown or not wanted:
            raise UsageError(f"--arms: expected names among {list(MBPO_ARMS)}, actual {unknown}")
        arms = [a for a in MBPO_ARMS if a in wanted]
    out: Path = check_output_dir("--out", args.out)
    path = out / f"results_mbpo_{args.env}.json"
    results = _earlier_results(path)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(seed, arm) for seed in seeds for arm in arms]

    def keep(result: dict[str, Any]) -> None:
        nonlocal results
        results = [
            r for r in results if not (r["arm"] == result["arm"] and r["seed"] == result["seed"])
        ]
        results.append(result)
        path.write_text(json.dumps(results, indent=1))
        bar.write(
            f"{args.env} {result['arm']} seed {result['seed']}: final return "
            f"{result['final_return']:.0f}, target at {fmt_steps(result['steps_to_target'])} "
            f"real steps ({result['cpu_s']:.0f} s CPU, {result['wall_s']:.0f} s wall)"
        )

    if (args.jobs or 1) > 1:
        import concurrent.futures
        import multiprocessing

        bar = tqdm(total=len(jobs), unit="run", disable=args.no_progress, dynamic_ncols=True)
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
            futures = [pool.submit(run_mbpo_arm, args.env, setup, arm, seed) for seed, arm in jobs]
            for future in concurrent.futures.as_completed(futures):
                keep(future.result())
                bar.update(1)
    else:
        bar = tqdm(
            total=len(jobs) * setup.budget, unit="step", disable=args.no_progress,
            dynamic_ncols=True,
        )  # fmt: skip
        for seed, arm in jobs:
            done = [0]

            def progress(
                steps: int, score: float, arm: str = arm, seed: int = seed, done: Any = done
            ) -> None:
                bar.update(steps - done[0])
                done[0] = steps
                bar.set_postfix(arm=arm, seed=seed, ret=f"{score:.0f}", refresh=False)

            keep(run_mbpo_arm(args.env, setup, arm, seed, progress))
            bar.update(setup.budget - done[0])
    bar.close()
    trivial = trivial_scores(args.env, 10, 0)
    table = mbpo_table(results, args.env, setup.target, trivial, setup.budget)
    (out / f"summary_mbpo_{args.env}.md").write_text(table)
    print(table)
    figure = mbpo_figure(results, args.env, setup.target, out)
    if figure is not None:
        print(f"wrote {figure}")
    ran = [r for r in results if r["arm"] in arms and r["seed"] in seeds]
    return 0 if ran and all(r["steps_to_target"] is not None for r in ran) else 1


def _earlier_results(path: Path) -> list[dict[str, Any]]:
    """The runs an earlier study left in ``path`` (kept), checked before any run.

    Raises:
        UsageError: The file is not a list of run records.
    """
    if not path.is_file():
        return []
    try:
        results = json.loads(path.read_text())
        if not isinstance(results, list) or not all(
            isinstance(r, dict) and {"arm", "seed"} <= set(r) for r in results
        ):
            raise ValueError("expected a list of runs with their arm and seed")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UsageError(
            f"--out: {path} holds no earlier runs that can be read ({error})"
        ) from None
    return results


def run(args: argparse.Namespace) -> int:
    """Run the arms for every seed; 0 when every run of the arms asked for (``--arms``,
    default all of the env's) reached the target, else 1.

    Raises:
        UsageError: A bad argument, found before the first run.
    """
    from tqdm import tqdm

    from fleetgym.experiments.imagination.study import ENVS, random_score, run_arm

    seed_range(args.first_seed, args.seeds)
    if args.epochs is not None and (args.mbpo or args.asynchronous):
        raise UsageError("--epochs: expected neither --mbpo nor --async with --epochs")
    if not args.mbpo:
        for flag, dest in (*MBPO_FLAGS.items(), ("--jobs", "jobs")):
            if getattr(args, dest) is not None:
                raise UsageError(f"{flag}: expected --mbpo with {flag}")
        if args.env not in ENV_NAMES:
            raise UsageError(f"--env: expected one of {list(ENV_NAMES)} without --mbpo")
    elif args.asynchronous:
        raise UsageError("--mbpo: expected no --async with --mbpo (one study at a time)")
    else:
        return _run_mbpo(args)
    if args.asynchronous:
        for flag, value in (("--arms", args.arms), ("--budget", args.budget)):
            if value is not None:
                raise UsageError(f"{flag}: expected no {flag} with --async (it runs its own arms)")
        check_output_dir("--out", args.out)
        return _run_async(args)
    setup = ENVS[args.env]
    if args.budget is not None:
        import dataclasses

        setup = dataclasses.replace(setup, budget=args.budget)
    arms = setup.arms
    if args.arms is not None:
        wanted = [a.strip() for a in args.arms.split(",") if a.strip()]
        names = [a.name for a in arms]
        unknown = [w for w in wanted if w not in names]
        if unknown or not wanted:
            raise UsageError(f"--arms: expected names among {names}, actual {unknown}")
        arms = tuple(a for a in arms if a.name in wanted)
    if args.epochs is not None:
        import dataclasses

        if "ppo+epochs" not in [a.name for a in arms]:
            raise UsageError("--epochs: expected the ppo+epochs arm among the arms run")
        arms = tuple(
            dataclasses.replace(
                a, name=f"ppo+epochs-{args.epochs}", overrides={"epochs": args.epochs}
            )
            if a.name == "ppo+epochs"
            else a
            for a in arms
        )
    out: Path = check_output_dir("--out", args.out)
    path = out / f"results_{args.env}.json"
    results = _earlier_results(path)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    bar = tqdm(
        total=len(arms) * len(seeds) * setup.budget,
        unit="step",
        disable=args.no_progress,
        dynamic_ncols=True,
    )
    for seed in seeds:
        for arm in arms:
            done = [0]
            progress = _progress(bar, done, arm.name, seed)
            result = run_arm(args.env, setup, arm, seed, progress)
            bar.update(setup.budget - done[0])
            results = [r for r in results if not (r["arm"] == arm.name and r["seed"] == seed)]
            results.append(result.as_dict())
            path.write_text(json.dumps(results, indent=1))
            bar.write(
                f"{args.env} {arm.name} seed {seed}: target at {fmt_steps(result.steps_to_target)} real steps "
                f"({result.wall_s:.0f} s wall, {result.cpu_s:.0f} s CPU)"
            )
    bar.close()
    trivial = random_score(setup, 20, 0)
    summary = summarise(results, args.env, setup.target, trivial)
    (out / f"summary_{args.env}.md").write_text(summary)
    print(summary)
    for p in plot(results, args.env, setup.target, out):
        print(f"wrote {p}")
    asked = {a.name for a in arms}
    ran = [r for r in results if r["arm"] in asked and r["seed"] in seeds]
    return 0 if ran and all(r["steps_to_target"] is not None for r in ran) else 1
