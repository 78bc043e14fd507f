"""``fleetgym schedule``: evaluate, train and fine-tune actor schedulers.

``fleetgym schedule evaluate`` runs schedulers (the heuristic baselines of
:mod:`fleetgym.agents.schedulers` and trained SB3 models) on
:class:`~fleetgym.meta_env.ActorSchedulingEnv` over several seeds and writes, into
``--out``, a CSV of every episode, a CSV and a Markdown table of mean ± std per scheduler
(time, time to target, cost, success rate, rounds, total reward) and a PNG of actors and
mean return per round. ``train`` trains (or resumes) the learned scheduler, ``finetune``
continues it on another workload.

Example:
    fleetgym schedule evaluate --workload CartPole-v1 --scheduler adapt --seeds 5
    fleetgym schedule evaluate --scheduler all --seeds 3 --out fleetgym-out/baselines

Every argument (names, paths, the env's keyword arguments) is checked before any episode
runs: a bad one exits 2. An error during the work is a crash (exit 3, with its traceback).
    fleetgym schedule evaluate --scheduler learned:runs/scheduler.zip --scheduler max
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import zipfile
from pathlib import Path
from typing import Any

from fleetgym.agents.fleet.base import MAX_ACTORS_LIMIT
from fleetgym.errors import FleetgymError
from fleetgym.experiments.argtypes import (
    UsageError,
    check_input_file,
    check_output_dir,
    env_kwarg,
    int_in,
    learning_rate,
    non_negative_int,
    output_path,
    positive_float,
    positive_int,
    seed_range,
)
from fleetgym.experiments.schedule.cli_common import (
    MAX_EPISODES,
    add_env_arguments,
    add_ppo_arguments,
    checkpoint_meta,
    env_config_from_args,
    known_baselines,
    ppo_config,
    resume_checkpoint,
    setup_torch,
    usable_env,
)
from fleetgym.experiments.schedule.config import GENERAL_ENV_ID
from fleetgym.experiments.schedule.evaluate import (
    EpisodeResult,
    evaluate_scheduler,
    resolve_schedulers,
)
from fleetgym.experiments.schedule.report import (
    markdown_table,
    plot_training_curve,
    summarize,
    write_report,
)
from fleetgym.experiments.schedule.search_cli import add_search_arguments, search
from fleetgym.experiments.schedule.seeds_cli import add_seeds_arguments, seeds
from fleetgym.meta_env import scheduling_defaults

__all__ = ["configure", "finetune", "run", "train"]

logger = logging.getLogger(__name__)

#: First workload seed of the evaluations after training (held out from its seeds).
FIRST_EVAL_SEED = 1000


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fleetgym schedule train``."""
    add_env_arguments(parser)
    add_ppo_arguments(parser)
    parser.add_argument(
        "--episodes", type=int_in(1, MAX_EPISODES), default=100, help="scheduler episodes (total)"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of PPO and the envs")
    parser.add_argument(
        "--out",
        type=output_path,
        default="fleetgym-out/schedule/train",
        help="output folder: NAME.zip, NAME_episodes.csv, NAME_summary.json, "
        "NAME_training.png, checkpoints/, tb/ and (with --eval-seeds) evaluation/",
    )
    parser.add_argument("--name", default="scheduler", help="file stem of the model")
    parser.add_argument(
        "--checkpoint-every",
        type=non_negative_int,
        default=10,
        help="save a checkpoint into OUT/checkpoints/ every N episodes (0: no episode "
        "trigger) (default 10)",
    )
    parser.add_argument(
        "--checkpoint-minutes",
        type=positive_float,
        default=None,
        metavar="M",
        help="also save one at the end of the first episode once M minutes have passed "
        "since the last (default: no time trigger)",
    )
    parser.add_argument(
        "--keep",
        type=positive_int,
        default=3,
        metavar="K",
        help="keep the newest K checkpoints, delete older ones (default 3)",
    )
    parser.add_argument(
        "--resume",
        default=None,
        metavar="CHECKPOINT",
        help="continue from a scheduler zip, or from the newest checkpoint of a folder (a "
        "checkpoints/ folder or a run's --out); checked before any work",
    )
    parser.add_argument("--no-tensorboard", action="store_true", help="do not write TB logs")
    parser.add_argument(
        "--eval-seeds",
        type=non_negative_int,
        default=0,
        help="after training, compare with every baseline over this many workload seeds, "
        "FIRST..FIRST+N-1 (0: skip)",
    )
    _add_first_eval_seed(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _add_first_eval_seed(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--first-eval-seed",
        type=non_negative_int,
        default=FIRST_EVAL_SEED,
        metavar="FIRST",
        help="the first evaluation seed: --eval-seeds N runs FIRST..FIRST+N-1",
    )


def add_finetune_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fleetgym schedule finetune``."""
    add_env_arguments(parser)
    parser.add_argument(
        "--from",
        dest="from_checkpoint",
        required=True,
        metavar="CHECKPOINT",
        help="trained scheduler zip to fine-tune (or a folder: its newest checkpoint)",
    )
    parser.add_argument(
        "--episodes", type=int_in(1, MAX_EPISODES), default=10, help="fine-tuning episodes"
    )
    parser.add_argument(
        "--lr", type=learning_rate, default=None, help="new learning rate (default: keep)"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of PPO and the envs")
    parser.add_argument(
        "--out",
        type=output_path,
        default="fleetgym-out/schedule/finetune",
        help="output folder: finetuned.zip and its files (with --compare: finetuned/, "
        "scratch/, evaluation/, transfer.json)",
    )
    parser.add_argument("--no-tensorboard", action="store_true", help="do not write TB logs")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also train from scratch for the same episodes and evaluate both (and --scratch)",
    )
    parser.add_argument(
        "--scratch",
        default=None,
        metavar="CHECKPOINT",
        help="a scheduler trained from scratch on this workload (e.g. 100 episodes) to compare",
    )
    parser.add_argument(
        "--eval-seeds",
        type=positive_int,
        default=5,
        help="--compare: evaluation workload seeds, FIRST..FIRST+N-1",
    )
    _add_first_eval_seed(parser)
    parser.add_argument(
        "--baselines",
        default=None,
        help="comma-separated baselines of --compare (default: every heuristic and the "
        "Fixed(n) sweep)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _split_names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _configure_evaluate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", default="CartPole-v1", help="workload (default: CartPole-v1)")
    p.add_argument(
        "--scheduler",
        action="append",
        default=None,
        help="fixed:N, max, increase, decrease, adapt, server, all, learned:PATH, "
        "phase:16x9>8x5>16 (16 actors for 9 rounds, 8 for 5, then 16) (repeatable or "
        "comma-separated; default: all)",
    )
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=5,
        help="workload seeds FIRST..FIRST+N-1, one episode per scheduler each",
    )
    p.add_argument(
        "--first-seed",
        type=non_negative_int,
        default=0,
        metavar="FIRST",
        help="the first workload seed: --seeds N runs FIRST..FIRST+N-1",
    )
    p.add_argument(
        "--timing",
        choices=("modeled", "measured"),
        default="modeled",
        help="modeled: deterministic compute model; measured: this machine's",
    )
    p.add_argument(
        "--preset",
        choices=("fast", "paper"),
        default="fast",
        help="the env's per-workload settings (target, budget, rollout length)",
    )
    p.add_argument(
        "--max-actors",
        type=int_in(1, MAX_ACTORS_LIMIT),
        default=32,
        help="most actors per round, I_max",
    )
    p.add_argument("--env-id", default=GENERAL_ENV_ID, help="scheduling env ID")
    p.add_argument(
        "--env-kwarg",
        action="append",
        default=[],
        type=env_kwarg,
        metavar="KEY=VALUE",
        help="extra env keyword argument (VALUE parsed as JSON if it can be), repeatable",
    )
    p.add_argument(
        "--out",
        type=output_path,
        default="fleetgym-out/schedule/evaluate",
        help="output folder: episodes.csv, summary.csv, summary.md, schedules.png",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``evaluate``, ``train``, ``finetune``, ``search`` and ``seeds`` (imports nothing heavy)."""
    sub = parser.add_subparsers(dest="schedule_command", metavar="ACTION")
    _configure_evaluate(
        sub.add_parser("evaluate", help="run schedulers over seeds and tabulate time and cost")
    )
    add_train_arguments(sub.add_parser("train", help="train the learned (SB3 PPO) scheduler"))
    add_finetune_arguments(
        sub.add_parser("finetune", help="fine-tune a trained scheduler on a workload")
    )
    add_search_arguments(
        sub.add_parser(
            "search", help="cross-entropy search for the best dynamic schedule vs every Fixed(n)"
        )
    )
    add_seeds_arguments(
        sub.add_parser(
            "seeds",
            help="train the scheduler from several seeds (and trade-offs) and compare each "
            "with every Fixed(n)",
        )
    )


def train(args: argparse.Namespace) -> int:
    """``fleetgym schedule train``: train (or resume) the scheduler, optionally evaluate."""
    # Training pulls in SB3 and torch: imported only when a command trains.
    from fleetgym.experiments.schedule.compare import compare_schedulers
    from fleetgym.experiments.schedule.train import train_scheduler

    setup_torch()
    env_id, env_kwargs = env_config_from_args(args)
    # Every usage error before any work: hyperparameters, files, the env.
    config = ppo_config(args)
    if not args.name.strip():
        raise UsageError(f"--name: expected a non-empty file stem, actual {args.name!r}")
    resume = None
    if args.resume is not None:
        resume, stored = resume_checkpoint("--resume", args.resume)
        seen = int(stored.get("episodes", 0))
        if seen >= args.episodes:
            raise UsageError(
                f"--episodes: expected more than the {seen} episodes --resume {resume} has "
                f"seen, actual {args.episodes}"
            )
    eval_seeds = seed_range(args.first_eval_seed, args.eval_seeds, "--first-eval-seed/--eval-seeds")
    check_output_dir("--out", args.out)
    usable_env(env_id, env_kwargs, config)
    progress = not args.no_progress
    result = train_scheduler(
        args.out,
        env_id=env_id,
        env_kwargs=env_kwargs,
        episodes=args.episodes,
        seed=args.seed,
        config=config,
        resume_from=resume,
        checkpoint_every=args.checkpoint_every,
        checkpoint_minutes=args.checkpoint_minutes,
        keep=args.keep,
        tensorboard=not args.no_tensorboard,
        progress=progress,
        name=args.name,
    )
    curve = Path(args.out) / f"{args.name}_training.png"
    plot_training_curve(result.records, curve)
    logger.info("wrote %s", curve)
    summary = result.summary()
    print(json.dumps(summary, indent=2))
    if args.eval_seeds > 0:
        logger.info(
            "evaluating against every baseline on seeds %d..%d", eval_seeds[0], eval_seeds[-1]
        )
        comparison = compare_schedulers(
            Path(args.out) / "evaluation",
            learned={"learned": result.model_path},
            env_id=env_id,
            env_kwargs=env_kwargs,
            seeds=eval_seeds,
            progress=progress,
        )
        print(comparison["markdown"])
        print(json.dumps(comparison.get("ratios", {}), indent=1))
    print(
        f"model: {result.model_path}  (TensorBoard: tensorboard --logdir {Path(args.out) / 'tb'})"
    )
    return 0


def finetune(args: argparse.Namespace) -> int:
    """``fleetgym schedule finetune``: fine-tune a trained scheduler on a workload."""
    # Fine-tuning pulls in SB3 and torch: imported only when a command trains.
    from fleetgym.experiments.schedule.compare import transfer_experiment
    from fleetgym.experiments.schedule.train import finetune_scheduler

    setup_torch()
    env_id, env_kwargs = env_config_from_args(args)
    source, _ = resume_checkpoint("--from", args.from_checkpoint)
    scratch = None
    if args.scratch is not None:
        scratch = check_input_file("--scratch", args.scratch, ".zip")
        checkpoint_meta("--scratch", scratch)
    baselines = None if args.baselines is None else _split_names(args.baselines)
    if baselines is not None:
        known_baselines(
            "--baselines", baselines, int(env_kwargs.get("max_actors", args.max_actors))
        )
    eval_seeds = seed_range(args.first_eval_seed, args.eval_seeds, "--first-eval-seed/--eval-seeds")
    check_output_dir("--out", args.out)
    usable_env(env_id, env_kwargs)
    progress = not args.no_progress
    if args.compare or scratch is not None:
        comparison = transfer_experiment(
            source,
            args.out,
            env_id=env_id,
            env_kwargs=env_kwargs,
            episodes=args.episodes,
            seed=args.seed,
            learning_rate=args.lr,
            scratch_checkpoint=scratch,
            eval_seeds=eval_seeds,
            heuristics=baselines,
            fixed_sweep=None if baselines is None else (),
            tensorboard=not args.no_tensorboard,
            progress=progress,
        )
        print(comparison["markdown"])
        return 0
    result = finetune_scheduler(
        source,
        args.out,
        env_id=env_id,
        env_kwargs=env_kwargs,
        episodes=args.episodes,
        seed=args.seed,
        learning_rate=args.lr,
        tensorboard=not args.no_tensorboard,
        progress=progress,
    )
    print(json.dumps(result.summary(), indent=2))
    return 0


def _run_evaluate(args: argparse.Namespace) -> int:
    setup_torch()
    check_output_dir("--out", args.out)
    env_kwargs: dict[str, Any] = {}
    if args.env_id == GENERAL_ENV_ID:
        env_kwargs.update(workload=args.workload, preset=args.preset, timing=args.timing)
    env_kwargs["max_actors"] = args.max_actors
    env_kwargs.update(dict(args.env_kwarg))
    usable_env(args.env_id, env_kwargs)
    # Adapt reads R_bar/J from the normalised observation; raw observations need J.
    target = None
    if env_kwargs.get("normalize_obs") is False:
        target = (
            env_kwargs.get("target_return")
            or scheduling_defaults(
                env_kwargs.get("workload", args.workload), env_kwargs.get("preset", args.preset)
            ).target_return
        )
    try:
        schedulers = resolve_schedulers(
            args.scheduler or ["all"], max_actors=args.max_actors, target_return=target
        )
    except (FleetgymError, ValueError, TypeError, KeyError, OSError, zipfile.BadZipFile) as exc:
        # Bad names or checkpoints: a usage error, before any episode runs.
        raise UsageError(f"--scheduler: {exc}") from None
    seeds = list(seed_range(args.first_seed, args.seeds))
    results: list[EpisodeResult] = []
    from tqdm.auto import tqdm

    with tqdm(
        total=len(schedulers) * len(seeds),
        desc="schedule evaluate",
        unit="ep",
        disable=args.no_progress,
    ) as bar:
        for name, sched in schedulers.items():
            results.extend(
                evaluate_scheduler(
                    sched, env_kwargs, seeds, env_id=args.env_id, name=name, progress=bar
                )
            )
    title = f"{args.workload}, {args.timing} timing, seeds {seeds[0]}..{seeds[-1]}"
    files = write_report(results, args.out, title=title)
    print(markdown_table(summarize(results)))
    print("wrote " + ", ".join(str(p) for p in files.values()))
    return 0


def run(args: argparse.Namespace) -> int:
    """Dispatch ``evaluate``, ``train``, ``finetune``, ``search`` or ``seeds``.

    Raises:
        UsageError: A bad argument, found before any work starts (exit 2); an error
            during the work is not caught (a crash: exit 3 with its traceback).
    """
    command = getattr(args, "schedule_command", None)
    if command is None:
        print(
            "usage: fleetgym schedule {evaluate,train,finetune,search,seeds} ...", file=sys.stderr
        )
        return 2
    if command == "evaluate":
        return _run_evaluate(args)
    if command == "search":
        return search(args)
    if command == "seeds":
        return seeds(args)
    return train(args) if command == "train" else finetune(args)
