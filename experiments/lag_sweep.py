"""``fleetgym lag-sweep``: final return against an injected policy lag, per loss and compensation.

Each run trains :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO` without threads
(``concurrent=False``) with ``lag_injection=k``: the actors act with the weights from ``k``
updates ago (early on, the oldest that exist), so every sample of update ``u`` has lag
``min(k, u)`` exactly and a run is deterministic for its seed. The lag is counted in
updates, so a run of ``U`` updates (``ceil(steps / samples per update)``) refuses lags
``>= U`` (the actors would act with the initial policy throughout). After the step budget,
the learner's own policy (not the stale behaviour policy) is scored over deterministic
evaluation episodes: their mean return and, where the env reports ``x_velocity`` (MuJoCo
locomotion), their mean forward velocity; on Hopper a run *hops* when both reach
:data:`~fleetgym.experiments.lag_sweep_results.HOP_RETURN` and
:data:`~fleetgym.experiments.lag_sweep_results.HOP_VELOCITY`. The grid: lags 0, 10, 50, 200, 1000 updates; PPO-clip, V-trace and
GIPO (sigma 0.5 and 0.8); with and without value recomputation and global advantage
normalisation (both on or both off); several seeds. Writes into ``--out``
``lag_sweep.md`` (a table, mean +- std over seeds), ``lag_sweep.csv`` (one row per run)
and ``lag_sweep.png``; a progress bar counts the runs (``--no-progress``: one line per
run on stderr instead). ``--set NAME=VALUE`` changes a training setting of every run (a
hyperparameter, the policy's initial log standard deviation, PPO's KL target); each run's
row records what was changed, and the tables keep differently set runs apart.
``--merge`` trains nothing: it reads the ``lag_sweep.csv`` of earlier sweeps (a grid run in
parts) and writes the combined table and figure.

Example::

    fleetgym lag-sweep --env CartPole-v1 --quick --out runs/lag
    fleetgym lag-sweep --merge runs/lag-ppo runs/lag-gipo --out runs/lag-all
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    non_negative_int,
    output_folder,
    positive_int,
    seed_range,
)
from fleetgym.experiments.lag_sweep_results import (
    ENVS,
    LOSSES,
    QUICK_LOSSES,
    SETTINGS,
    TUNABLE,
    VARIANTS,
    SweepRun,
    format_settings,
    merge,
    parse_settings,
    report,
    samples_per_update,
    title,
    updates_in,
)
from fleetgym.experiments.lag_sweep_train import (
    run_one,
)
from fleetgym.experiments.tables import write_csv

__all__ = ["check_run_shape", "configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments (imports nothing heavy)."""
    parser.add_argument("--env", choices=ENVS, default="CartPole-v1", help="workload")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"minutes on 2 cores: losses {', '.join(QUICK_LOSSES)}, compensated only, "
        "a short budget and the lags it holds",
    )
    parser.add_argument(
        "--seeds", type=positive_int, default=3, help="seeds per cell, FIRST..FIRST+N-1"
    )
    parser.add_argument(
        "--first-seed",
        type=non_negative_int,
        default=0,
        metavar="FIRST",
        help="the first seed: --seeds N runs FIRST..FIRST+N-1",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=Path("fleetgym-out/lag-sweep"),
        metavar="DIR",
        help="output folder: lag_sweep.md, lag_sweep.csv and lag_sweep.png",
    )
    parser.add_argument(
        "--lags",
        type=non_negative_int,
        nargs="+",
        default=None,
        help="lags in updates, each below the run's number of updates (default: "
        + "; ".join(
            f"{env} {' '.join(map(str, s['lags']))} (--quick {' '.join(map(str, s['quick_lags']))})"
            for env, s in SETTINGS.items()
        )
        + ")",
    )
    parser.add_argument(
        "--losses",
        nargs="+",
        choices=[label for label, _, _ in LOSSES],
        default=None,
        help="losses (default all; --quick: ppo gipo-0.8)",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=None,
        help="compensation switches (default: both; --quick: compensated)",
    )
    budgets = "; ".join(
        f"{env} {s['budget']} (--quick {s['quick_budget']})" for env, s in SETTINGS.items()
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help=f"env steps per run, at least one update's (default: {budgets})",
    )
    parser.add_argument(
        "--eval-episodes", type=positive_int, default=5, help="evaluation episodes per run"
    )
    parser.add_argument("--jobs", type=positive_int, default=1, help="worker processes")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        metavar="DIR",
        help="train nothing: combine the lag_sweep.csv of these earlier sweeps into one "
        "table and figure in --out",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (one line per finished run on stderr instead)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        type=_override,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"change one training setting of every run, NAME among {', '.join(TUNABLE)} "
        "(repeatable; the CSV's settings column records it)",
    )
    parser.add_argument("--shard", default=None, help=argparse.SUPPRESS)  # "i/n", internal


def _override(text: str) -> tuple[str, float]:
    """One ``--set NAME=VALUE`` (checked by :func:`check_setting`)."""
    try:
        parsed = parse_settings(text.replace(",", ";")) if text.strip() else {}
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--set: ")) from None
    if not parsed:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, actual {text!r}")
    ((name, value),) = parsed.items()
    return name, value


def _overrides(args: argparse.Namespace) -> dict[str, float]:
    """The ``--set`` overrides as one mapping; a name given twice is refused."""
    return parse_settings(",".join(f"{name}={value!r}" for name, value in args.overrides))


def _lags(args: argparse.Namespace) -> list[int]:
    if args.lags is not None:
        return list(args.lags)
    return list(SETTINGS[args.env]["quick_lags" if args.quick else "lags"])


def _budget(args: argparse.Namespace) -> int:
    setting = SETTINGS[args.env]
    return int(args.steps or (setting["quick_budget"] if args.quick else setting["budget"]))


def check_run_shape(env: str, steps: int, lags: list[int]) -> int:
    """The updates a run of ``steps`` env steps makes, after checking that the budget holds
    one update and every lag is below the run's number of updates.

    Raises:
        UsageError: ``--steps`` below one update's samples, or a lag ``>=`` the run's
            updates (the actors would act with the initial policy throughout); the
            message says how many updates the run has.
    """
    per_update = samples_per_update(env)
    setting = SETTINGS[env]
    if steps < per_update:
        raise UsageError(
            f"--steps: expected at least one update's env steps on {env}, {per_update} "
            f"({setting['actors']} actor(s) x {setting['steps']} steps), actual {steps}"
        )
    updates = updates_in(env, steps)
    too_long = sorted({lag for lag in lags if lag >= updates})
    if too_long:
        raise UsageError(
            f"--lags: expected lags below the run's {updates} updates ({steps} env steps, "
            f"{per_update} per update on {env}; at a lag >= {updates} the actors act with "
            f"the initial policy throughout: raise --steps to at least "
            f"{max(too_long) * per_update + 1}), actual {too_long}"
        )
    return updates


def _grid(args: argparse.Namespace) -> list[tuple[str, str, int, int]]:
    losses = args.losses or (list(QUICK_LOSSES) if args.quick else [x[0] for x in LOSSES])
    variants = args.variants or (["compensated"] if args.quick else list(VARIANTS))
    return [
        (loss, variant, lag, seed)
        for loss in losses
        for variant in variants
        for lag in _lags(args)
        for seed in range(args.first_seed, args.first_seed + args.seeds)
    ]


def _describe(done: SweepRun) -> str:
    speed = "" if math.isnan(done.velocity) else f", velocity {done.velocity:.2f} m/s"
    return (
        f"{done.loss} {done.variant} lag {done.lag} seed {done.seed}: final return "
        f"{done.final_return:.0f}{speed} ({done.wall_s:.0f} s)"
    )


def _run_shard(
    args: argparse.Namespace,
    steps: int,
    index: int,
    count: int,
    finished: Callable[[SweepRun], None],
) -> list[SweepRun]:
    """Run every ``count``-th cell of the grid from ``index``; ``finished(run)`` after each."""
    runs = []
    for i, (loss, variant, lag, seed) in enumerate(_grid(args)):
        if i % count == index:
            runs.append(
                run_one(
                    args.env,
                    loss,
                    variant,
                    lag,
                    seed,
                    steps,
                    args.eval_episodes,
                    _overrides(args),
                )  # fmt: skip
            )
            finished(runs[-1])
    return runs


def _read_lines(path: Path) -> list[SweepRun]:
    """The runs a shard has appended to ``path`` so far (complete lines only)."""
    if not path.is_file():
        return []
    text = path.read_text()
    return [
        SweepRun(**json.loads(line))
        for line in text.splitlines(keepends=True)
        if line.endswith("\n")
    ]


def _run_parallel(
    args: argparse.Namespace, steps: int, finished: Callable[[SweepRun], None]
) -> list[SweepRun]:
    """The grid split over ``--jobs`` child processes; each appends its runs to a JSON-lines
    file as they finish, which this process reads for its progress."""
    shard_dir = args.out / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    files = [shard_dir / f"shard_{i}.jsonl" for i in range(args.jobs)]
    for path in files:
        path.unlink(missing_ok=True)
    base = [sys.executable, "-m", "fleetgym", "lag-sweep", "--env", args.env]
    base += ["--seeds", str(args.seeds), "--first-seed", str(args.first_seed)]
    base += ["--steps", str(steps), "--out", str(shard_dir)]
    base += ["--eval-episodes", str(args.eval_episodes), "--lags", *map(str, _lags(args))]
    if args.quick:
        base.append("--quick")
    if args.losses:
        base += ["--losses", *args.losses]
    if args.variants:
        base += ["--variants", *args.variants]
    for name, value in _overrides(args).items():
        base += ["--set", f"{name}={value!r}"]
    children = [subprocess.Popen([*base, "--shard", f"{i}/{args.jobs}"]) for i in range(args.jobs)]
    seen = [0] * args.jobs

    def poll() -> None:
        for i, path in enumerate(files):
            runs = _read_lines(path)
            for run in runs[seen[i] :]:
                finished(run)
            seen[i] = len(runs)

    try:
        while any(child.poll() is None for child in children):
            poll()
            time.sleep(0.5)
        poll()
        codes = [child.wait() for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    if any(codes):
        raise RuntimeError(f"lag-sweep shards: expected exit status 0, actual {codes}")
    return [run for path in files for run in _read_lines(path)]


def _shard(text: str) -> tuple[int, int]:
    """The internal ``--shard i/n`` (this child runs every n-th cell from i)."""
    index, sep, count = text.partition("/")
    if not (sep and index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise UsageError(f"--shard: expected i/n with 0 <= i < n, actual {text!r}")
    return int(index), int(count)


def run(args: argparse.Namespace) -> int:
    """Run the sweep and write its table, CSV and figure; returns 0."""
    if args.merge:
        return merge(args.merge, args.out)
    seed_range(args.first_seed, args.seeds)
    shard = None if args.shard is None else _shard(args.shard)
    steps = _budget(args)
    updates = check_run_shape(args.env, steps, _lags(args))
    changed = _overrides(args)
    check_output_dir("--out", args.out)
    import torch

    torch.set_num_threads(1)
    if shard is not None:
        # A child of --jobs: silent, each run appended to its JSON-lines file at once.
        index, count = shard
        path = args.out / f"shard_{index}.jsonl"
        path.unlink(missing_ok=True)

        def append(done: SweepRun) -> None:
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(asdict(done)) + "\n")

        _run_shard(args, steps, index, count, append)
        return 0
    from tqdm import tqdm

    grid = _grid(args)
    print(
        f"lag sweep on {args.env}: {len(grid)} runs of {steps} env steps ({updates} updates of "
        f"{samples_per_update(args.env)}), {args.jobs} job(s)"
        + (f", settings {format_settings(changed)}" if changed else "")
    )
    started = time.perf_counter()
    with tqdm(total=len(grid), desc="lag sweep", unit="run", disable=args.no_progress) as bar:

        def finished(done: SweepRun) -> None:
            if args.no_progress:
                print(_describe(done), file=sys.stderr, flush=True)
            else:
                bar.write(_describe(done), file=sys.stderr)
            bar.update(1)

        if args.jobs > 1:
            runs = _run_parallel(args, steps, finished)
        else:
            runs = _run_shard(args, steps, 0, 1, finished)
    write_csv(args.out / "lag_sweep.csv", runs)
    md, png = report(runs, args.out, title(args.env))
    print(md.read_text())
    print(
        f"wrote {md}, {png} and {args.out / 'lag_sweep.csv'} in {time.perf_counter() - started:.0f} s"
    )
    return 0
