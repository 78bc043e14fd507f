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
    fleetgym schedule evaluate --scheduler learned:runs/scheduler.zip --scheduler max
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from fleetgym.agents.fleet.base import MAX_ACTORS_LIMIT
from fleetgym.agents.scheduler_actions import ACTION_MODES
from fleetgym.errors import FleetgymError
from fleetgym.experiments.argtypes import (
    UsageError,
    check_input_file,
    check_output_dir,
    discount,
    env_kwarg,
    int_in,
    learning_rate,
    non_negative_float,
    non_negative_int,
    output_path,
    positive_float,
    positive_int,
)
from fleetgym.experiments.schedule.config import GENERAL_ENV_ID, SchedulerPPOConfig
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
from fleetgym.meta_env import scheduling_defaults

__all__ = ["configure", "env_config_from_args", "finetune", "run", "train"]


#: Most scheduler episodes ``--episodes`` asks for (a guard against typos).
MAX_EPISODES = 1_000_000


def add_env_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments that choose the scheduling env (shared by train and finetune)."""
    parser.add_argument(
        "--workload",
        default="CartPole-v1",
        help="workload the scheduled training runs train (default: CartPole-v1)",
    )
    parser.add_argument(
        "--timing",
        choices=("modeled", "measured"),
        default="modeled",
        help="modeled: deterministic per-step compute model (default, reproducible); "
        "measured: real measured compute times",
    )
    parser.add_argument(
        "--preset", choices=("fast", "paper"), default="fast", help="env defaults (fast)"
    )
    parser.add_argument(
        "--max-actors",
        type=int_in(1, MAX_ACTORS_LIMIT),
        default=32,
        help="most actors per round, I_max (default 32)",
    )
    parser.add_argument(
        "--env-id",
        default=None,
        help=f"scheduling env ID (default: {GENERAL_ENV_ID} with --workload, --preset, "
        "--timing and --max-actors)",
    )
    parser.add_argument(
        "--env-kwarg",
        action="append",
        default=[],
        type=env_kwarg,
        metavar="KEY=VALUE",
        help="extra env keyword argument (VALUE parsed as JSON if it can be), repeatable",
    )


def add_ppo_arguments(parser: argparse.ArgumentParser) -> None:
    """The scheduler's PPO hyperparameters."""
    d = SchedulerPPOConfig()
    parser.add_argument(
        "--lr", type=learning_rate, default=d.learning_rate, help="Adam learning rate"
    )
    parser.add_argument(
        "--n-steps", type=int_in(1, 1_000_000), default=d.n_steps, help="rounds per env per update"
    )
    parser.add_argument(
        "--batch-size", type=int_in(1, 10_000_000), default=d.batch_size, help="minibatch size"
    )
    parser.add_argument(
        "--n-epochs", type=int_in(1, 1_000), default=d.n_epochs, help="epochs per update"
    )
    parser.add_argument(
        "--n-envs", type=int_in(1, 256), default=d.n_envs, help="scheduling envs in parallel"
    )
    parser.add_argument("--gamma", type=discount, default=d.gamma, help="discount over rounds")
    parser.add_argument(
        "--ent-coef", type=non_negative_float, default=d.ent_coef, help="entropy bonus"
    )
    parser.add_argument(
        "--normalize-reward",
        action="store_true",
        help="scale rewards by a running std of the return (VecNormalize, rewards only)",
    )
    parser.add_argument(
        "--actions",
        choices=ACTION_MODES,
        default=d.actions,
        help="action parametrisation: pow2 (1, 2, 4, ..., max_actors), discrete "
        "(Discrete(max_actors), the paper's), log2 (one continuous action on a log scale) or "
        "step (halve, keep or double the current size; the size is added to the state)",
    )
    parser.add_argument(
        "--start-actors",
        type=int_in(1, 4096),
        default=d.start_actors,
        help="with --actions step: the fleet size an episode starts from, a power of two "
        "(default: the middle of 1..max_actors, 8 of 32)",
    )
    parser.add_argument(
        "--keep-prior",
        type=positive_float,
        default=d.keep_prior,
        help="with --actions step: the initial policy's probability of keeping the size, in (0, 1)",
    )
    parser.add_argument(
        "--sde",
        action="store_true",
        help="state-dependent exploration (with --actions log2)",
    )


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fleetgym schedule train``."""
    add_env_arguments(parser)
    add_ppo_arguments(parser)
    parser.add_argument(
        "--episodes", type=int_in(1, MAX_EPISODES), default=100, help="scheduler episodes (total)"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of PPO and the envs")
    parser.add_argument(
        "--out", type=output_path, default="fleetgym-out/scheduler", help="output directory"
    )
    parser.add_argument("--name", default="scheduler", help="file stem of the model")
    parser.add_argument(
        "--checkpoint-every",
        type=non_negative_int,
        default=10,
        help="save every N episodes (0: never)",
    )
    parser.add_argument("--resume", default=None, metavar="CHECKPOINT", help="continue from a zip")
    parser.add_argument("--no-tensorboard", action="store_true", help="do not write TB logs")
    parser.add_argument(
        "--eval-seeds",
        type=non_negative_int,
        default=0,
        help="after training, compare with every baseline over this many seeds (0: skip)",
    )


def add_finetune_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fleetgym schedule finetune``."""
    add_env_arguments(parser)
    parser.add_argument(
        "--from",
        dest="from_checkpoint",
        required=True,
        metavar="CHECKPOINT",
        help="trained scheduler zip to fine-tune",
    )
    parser.add_argument(
        "--episodes", type=int_in(1, MAX_EPISODES), default=10, help="fine-tuning episodes"
    )
    parser.add_argument(
        "--lr", type=learning_rate, default=None, help="new learning rate (default: keep)"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed")
    parser.add_argument(
        "--out", type=output_path, default="fleetgym-out/finetune", help="output directory"
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
        "--eval-seeds", type=positive_int, default=5, help="evaluation seeds of --compare"
    )
    parser.add_argument(
        "--baselines",
        default=None,
        help="comma-separated baselines of --compare (default: every heuristic and the "
        "Fixed(n) sweep)",
    )


def _split_names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def env_config_from_args(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The env ID and keyword arguments the CLI arguments select."""
    extra = dict(getattr(args, "env_kwarg", []) or [])
    if getattr(args, "env_id", None):
        return args.env_id, extra
    return GENERAL_ENV_ID, {
        "workload": args.workload,
        "preset": args.preset,
        "timing": args.timing,
        "max_actors": args.max_actors,
        **extra,
    }


def _configure_evaluate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", default="CartPole-v1", help="workload (default: CartPole-v1)")
    p.add_argument(
        "--scheduler",
        action="append",
        default=None,
        help="fixed:N, max, increase, decrease, adapt, server, all, learned:PATH "
        "(repeatable or comma-separated; default: all)",
    )
    p.add_argument("--seeds", type=positive_int, default=5, help="episodes per scheduler")
    p.add_argument(
        "--first-seed", type=non_negative_int, default=0, help="seeds are FIRST..FIRST+N-1"
    )
    p.add_argument(
        "--timing",
        choices=("modeled", "measured"),
        default="modeled",
        help="modeled (default): deterministic compute model; measured: this machine's",
    )
    p.add_argument("--preset", choices=("fast", "paper"), default="fast", help="env defaults")
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
        "--out", type=output_path, default="fleetgym-out/schedule-eval", help="output folder"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``evaluate``, ``train``, ``finetune`` and ``search`` (imports nothing heavy)."""
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


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fleetgym schedule search`` (the headroom of dynamic schedules)."""
    add_env_arguments(parser)
    parser.add_argument(
        "--cost-weight",
        type=non_negative_float,
        default=0.0,
        help="reward per dollar of round cost (0: time only, the paper's reward)",
    )
    parser.add_argument(
        "--seeds", type=positive_int, default=3, help="workload seeds per candidate"
    )
    parser.add_argument(
        "--first-seed", type=non_negative_int, default=1000, help="seeds are FIRST..FIRST+N-1"
    )
    parser.add_argument(
        "--confirm-seeds",
        type=non_negative_int,
        default=2,
        help="held-out seeds (after the search's) on which the best schedule and the best "
        "Fixed(n) are re-evaluated (0: skip)",
    )
    parser.add_argument(
        "--population", type=positive_int, default=9, help="schedules per iteration"
    )
    parser.add_argument(
        "--elite-frac",
        type=positive_float,
        default=0.33,
        help="share of a population the distribution is refitted to",
    )
    parser.add_argument("--iterations", type=positive_int, default=4, help="iterations at most")
    parser.add_argument(
        "--budget",
        type=positive_int,
        default=36,
        help="candidate evaluations at most (one schedule on every seed; repeats are free)",
    )
    parser.add_argument("--min-phases", type=positive_int, default=2, help="phases at least")
    parser.add_argument("--max-phases", type=positive_int, default=4, help="phases at most")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the search")
    parser.add_argument(
        "--out", type=output_path, default="fleetgym-out/schedule-search", help="output folder"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _usable_env(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Make the scheduling env once (cheap: no fleet starts before ``reset``), so a bad
    workload or env keyword argument is a usage error before any training starts."""
    import gymnasium as gym

    from fleetgym.experiments.schedule.config import validate_env_kwargs

    try:
        gym.make(env_id, **validate_env_kwargs(env_kwargs)).close()
    except (FleetgymError, ValueError, TypeError, gym.error.Error) as error:
        raise UsageError(f"--workload/--env-id/--env-kwarg: {error}") from None


def _ppo_config(args: argparse.Namespace) -> SchedulerPPOConfig:
    try:
        return SchedulerPPOConfig(
            learning_rate=args.lr,
            n_steps=args.n_steps,
            batch_size=args.batch_size,
            n_epochs=args.n_epochs,
            n_envs=args.n_envs,
            gamma=args.gamma,
            ent_coef=args.ent_coef,
            normalize_reward=args.normalize_reward,
            actions=args.actions,
            use_sde=args.sde,
            start_actors=args.start_actors,
            keep_prior=args.keep_prior,
        )
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None


def _setup_torch() -> None:
    import torch

    # The machines this runs on are small and shared; one thread is also the fastest for
    # networks of 64 units.
    torch.set_num_threads(1)


def train(args: argparse.Namespace) -> int:
    """``fleetgym schedule train``: train (or resume) the scheduler, optionally evaluate."""
    # Training pulls in SB3 and torch: imported only when a command trains.
    from fleetgym.experiments.schedule.compare import compare_schedulers
    from fleetgym.experiments.schedule.train import train_scheduler

    _setup_torch()
    env_id, env_kwargs = env_config_from_args(args)
    # Every usage error before any work: hyperparameters, files, the env.
    config = _ppo_config(args)
    if args.resume is not None:
        check_input_file("--resume", args.resume, ".zip")
    check_output_dir("--out", args.out)
    _usable_env(env_id, env_kwargs)
    result = train_scheduler(
        args.out,
        env_id=env_id,
        env_kwargs=env_kwargs,
        episodes=args.episodes,
        seed=args.seed,
        config=config,
        resume_from=args.resume,
        checkpoint_every=args.checkpoint_every,
        tensorboard=not args.no_tensorboard,
        name=args.name,
    )
    plot_training_curve(result.records, Path(args.out) / f"{args.name}_training.png")
    summary = result.summary()
    print(json.dumps(summary, indent=2))
    if args.eval_seeds > 0:
        comparison = compare_schedulers(
            Path(args.out) / "evaluation",
            learned={"learned": result.model_path},
            env_id=env_id,
            env_kwargs=env_kwargs,
            seeds=range(1000, 1000 + args.eval_seeds),
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

    _setup_torch()
    env_id, env_kwargs = env_config_from_args(args)
    check_input_file("--from", args.from_checkpoint, ".zip")
    if args.scratch is not None:
        check_input_file("--scratch", args.scratch, ".zip")
    check_output_dir("--out", args.out)
    _usable_env(env_id, env_kwargs)
    if args.compare or args.scratch:
        comparison = transfer_experiment(
            args.from_checkpoint,
            args.out,
            env_id=env_id,
            env_kwargs=env_kwargs,
            episodes=args.episodes,
            seed=args.seed,
            learning_rate=args.lr,
            scratch_checkpoint=args.scratch,
            eval_seeds=range(1000, 1000 + max(1, args.eval_seeds)),
            heuristics=None if args.baselines is None else _split_names(args.baselines),
            fixed_sweep=None if args.baselines is None else (),
            tensorboard=not args.no_tensorboard,
        )
        print(comparison["markdown"])
        return 0
    result = finetune_scheduler(
        args.from_checkpoint,
        args.out,
        env_id=env_id,
        env_kwargs=env_kwargs,
        episodes=args.episodes,
        seed=args.seed,
        learning_rate=args.lr,
        tensorboard=not args.no_tensorboard,
    )
    print(json.dumps(result.summary(), indent=2))
    return 0


def search(args: argparse.Namespace) -> int:
    """``fleetgym schedule search``: the best dynamic schedule against every Fixed(n)."""
    from fleetgym.experiments.schedule.search import search_schedules
    from fleetgym.experiments.schedule.search_report import search_summary

    _setup_torch()
    env_id, env_kwargs = env_config_from_args(args)
    env_kwargs["cost_weight"] = args.cost_weight
    if not args.min_phases <= args.max_phases <= 8 or not 0 < args.elite_frac <= 1:
        raise UsageError(
            "--min-phases/--max-phases/--elite-frac: expected 1 <= min <= max <= 8 and a "
            f"fraction in (0, 1], actual {args.min_phases}, {args.max_phases}, "
            f"{args.elite_frac}"
        )
    check_output_dir("--out", args.out)
    _usable_env(env_id, env_kwargs)
    first = args.first_seed
    result = search_schedules(
        args.out,
        env_id=env_id,
        env_kwargs=env_kwargs,
        seeds=range(first, first + args.seeds),
        confirm_seeds=range(first + args.seeds, first + args.seeds + args.confirm_seeds),
        population=args.population,
        elite_frac=args.elite_frac,
        iterations=args.iterations,
        budget=args.budget,
        min_phases=args.min_phases,
        max_phases=args.max_phases,
        seed=args.seed,
        progress=not args.no_progress,
        title=f"{env_kwargs.get('workload', env_id)}, cost_weight {args.cost_weight:g}",
    )
    print((Path(args.out) / "search.md").read_text())
    print(json.dumps(search_summary(result), indent=1, default=float))
    return 0


def _run_evaluate(args: argparse.Namespace) -> int:
    _setup_torch()
    check_output_dir("--out", args.out)
    env_kwargs: dict[str, Any] = {}
    if args.env_id == GENERAL_ENV_ID:
        env_kwargs.update(workload=args.workload, preset=args.preset, timing=args.timing)
    env_kwargs["max_actors"] = args.max_actors
    env_kwargs.update(dict(args.env_kwarg))
    _usable_env(args.env_id, env_kwargs)
    # Adapt reads R_bar/J from the normalised observation; raw observations need J.
    target = None
    if env_kwargs.get("normalize_obs") is False:
        target = (
            env_kwargs.get("target_return")
            or scheduling_defaults(
                env_kwargs.get("workload", args.workload), env_kwargs.get("preset", args.preset)
            ).target_return
        )
    schedulers = resolve_schedulers(
        args.scheduler or ["all"], max_actors=args.max_actors, target_return=target
    )
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    results: list[EpisodeResult] = []
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
    """Dispatch ``evaluate``, ``train``, ``finetune`` or ``search``."""
    command = getattr(args, "schedule_command", None)
    if command is None:
        print("usage: fleetgym schedule {evaluate,train,finetune,search} ...", file=sys.stderr)
        return 2
    if command == "evaluate":
        try:
            return _run_evaluate(args)
        except (FleetgymError, ValueError, TypeError, FileNotFoundError) as exc:
            # Bad names, paths or env arguments: a one-line message, not a traceback.
            print(f"fleetgym schedule evaluate: {exc}", file=sys.stderr)
            return 2
    if command == "search":
        return search(args)
    return train(args) if command == "train" else finetune(args)
