"""``fleetgym schedule seeds``: the learned scheduler from every training seed, vs Fixed(n).

The study is :func:`fleetgym.experiments.schedule.seeds.seed_study`; this module is its
command line. Examples::

    fleetgym schedule seeds --workload CartPole-v1 --train-seeds 5 --out runs/study
    fleetgym schedule seeds --workload CartPole-v1 --train-seeds 1 \\
        --cost-weights 0 200 2000 --out runs/frontier
    fleetgym schedule seeds --workload Hopper-v5 --train-seeds 5 --episodes 10 \\
        --finetune-from runs/study/cw0/seed{seed}/scheduler.zip --out runs/transfer
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    int_in,
    non_negative_float,
    non_negative_int,
    output_path,
    positive_int,
    seed_range,
)
from fleetgym.experiments.schedule.cli_common import (
    MAX_EPISODES,
    add_env_arguments,
    add_ppo_arguments,
    env_config_from_args,
    ppo_config,
    setup_torch,
    usable_env,
)

__all__ = ["add_seeds_arguments", "seeds"]


def add_seeds_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fleetgym schedule seeds``."""
    add_env_arguments(parser)
    add_ppo_arguments(parser)
    parser.add_argument(
        "--train-seeds",
        type=int_in(1, 1000),
        default=5,
        help="scheduler training seeds FIRST..FIRST+N-1",
    )
    parser.add_argument(
        "--first-train-seed",
        type=non_negative_int,
        default=0,
        metavar="FIRST",
        help="the first training seed: --train-seeds N trains FIRST..FIRST+N-1",
    )
    parser.add_argument(
        "--cost-weights",
        type=non_negative_float,
        nargs="+",
        default=[0.0],
        help="trade-offs to train a scheduler for (reward per dollar; 0: time only)",
    )
    parser.add_argument(
        "--episodes",
        type=int_in(1, MAX_EPISODES),
        default=100,
        help="training (or fine-tuning) episodes per run",
    )
    parser.add_argument(
        "--eval-seeds",
        type=positive_int,
        default=5,
        help="workload seeds of the evaluation, FIRST..FIRST+N-1",
    )
    parser.add_argument(
        "--first-eval-seed",
        type=non_negative_int,
        default=1000,
        metavar="FIRST",
        help="the first evaluation seed: --eval-seeds N runs FIRST..FIRST+N-1 (held out "
        "from training)",
    )
    parser.add_argument(
        "--fixed",
        type=positive_int,
        nargs="+",
        default=None,
        help="the Fixed(n) to compare with (default: 1, 2, 4, ..., max_actors)",
    )
    parser.add_argument(
        "--finetune-from",
        default=None,
        metavar="CHECKPOINT",
        help="fine-tune this scheduler zip for --episodes instead of training from scratch "
        "('{seed}' in the path is replaced by the training seed)",
    )
    parser.add_argument(
        "--scratch-checkpoint",
        default=None,
        metavar="RELPATH",
        help="evaluate RELPATH (e.g. checkpoints/ep10.zip) inside each seed's run folder "
        "instead of its final model; trains nothing",
    )
    parser.add_argument(
        "--out",
        type=output_path,
        default="fleetgym-out/schedule/seeds",
        help="output folder: seeds.md, the CSVs, the figures and one folder per run",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def seeds(args: argparse.Namespace) -> int:
    """Run ``fleetgym schedule seeds``; print the table and the summary."""
    from fleetgym.experiments.schedule.seeds import seed_study

    setup_torch()
    env_id, env_kwargs = env_config_from_args(args)
    if "cost_weight" in env_kwargs:
        raise UsageError("--env-kwarg cost_weight: expected --cost-weights instead")
    train_seeds = seed_range(
        args.first_train_seed, args.train_seeds, "--first-train-seed/--train-seeds"
    )
    eval_seeds = seed_range(args.first_eval_seed, args.eval_seeds, "--first-eval-seed/--eval-seeds")
    check_output_dir("--out", args.out)
    config = ppo_config(args)
    usable_env(env_id, env_kwargs, config)
    source = args.finetune_from
    if source is not None:
        # Every run's checkpoint, before the first run trains.
        for seed in train_seeds:
            path = source.replace("{seed}", str(seed))
            if not Path(path).is_file():
                raise UsageError(f"--finetune-from: expected an existing file, actual {path!r}")
    if args.scratch_checkpoint is not None:
        for w in args.cost_weights:
            for seed in train_seeds:
                path = Path(args.out) / f"cw{w:g}" / f"seed{seed}" / args.scratch_checkpoint
                if not path.is_file():
                    raise UsageError(
                        f"--scratch-checkpoint: expected an existing file, actual {str(path)!r}"
                    )
    study = seed_study(
        args.out,
        env_id=env_id,
        env_kwargs=env_kwargs,
        train_seeds=train_seeds,
        eval_seeds=eval_seeds,
        cost_weights=args.cost_weights,
        episodes=args.episodes,
        config=config,
        fixed_sizes=args.fixed,
        finetune_from=(lambda s: source.replace("{seed}", str(s))) if source else None,
        scratch_checkpoint=args.scratch_checkpoint,
        progress=not args.no_progress,
    )
    print((Path(args.out) / "seeds.md").read_text())
    print(json.dumps(study.summary(), indent=1, default=float))
    return 0
