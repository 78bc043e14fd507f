"""``fleetgym schedule search``: the cross-entropy search for the best dynamic schedule.

The search itself is :mod:`fleetgym.experiments.schedule.search`; this module is its
command line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    non_negative_float,
    non_negative_int,
    output_path,
    positive_float,
    positive_int,
    seed_range,
)
from fleetgym.experiments.schedule.cli_common import (
    add_env_arguments,
    env_config_from_args,
    setup_torch,
    usable_env,
)

__all__ = ["add_search_arguments", "search"]


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
        "--seeds",
        type=positive_int,
        default=3,
        help="workload seeds per candidate, FIRST..FIRST+N-1",
    )
    parser.add_argument(
        "--first-seed",
        type=non_negative_int,
        default=1000,
        metavar="FIRST",
        help="the first workload seed: --seeds N runs FIRST..FIRST+N-1",
    )
    parser.add_argument(
        "--confirm-seeds",
        type=non_negative_int,
        default=2,
        help="held-out seeds right after the search's (FIRST+N..) on which the best "
        "schedule and the best Fixed(n) are re-evaluated (0: skip)",
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
        "--out",
        type=output_path,
        default="fleetgym-out/schedule/search",
        help="output folder: search.md, the CSVs and the figures",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def search(args: argparse.Namespace) -> int:
    """``fleetgym schedule search``: the best dynamic schedule against every Fixed(n)."""
    from fleetgym.experiments.schedule.search import search_schedules
    from fleetgym.experiments.schedule.search_report import search_summary

    setup_torch()
    env_id, env_kwargs = env_config_from_args(args)
    env_kwargs["cost_weight"] = args.cost_weight
    if not args.min_phases <= args.max_phases <= 8 or not 0 < args.elite_frac <= 1:
        raise UsageError(
            "--min-phases/--max-phases/--elite-frac: expected 1 <= min <= max <= 8 and a "
            f"fraction in (0, 1], actual {args.min_phases}, {args.max_phases}, "
            f"{args.elite_frac}"
        )
    every = seed_range(
        args.first_seed,
        args.seeds + args.confirm_seeds,
        "--first-seed, --seeds and --confirm-seeds",
    )
    check_output_dir("--out", args.out)
    usable_env(env_id, env_kwargs)
    result = search_schedules(
        args.out,
        env_id=env_id,
        env_kwargs=env_kwargs,
        seeds=every[: args.seeds],
        confirm_seeds=every[args.seeds :],
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
