"""``fleetgym calibrate``: measure a workload's compute model and cache it.

A few seconds of real stepping and updating on this machine
(:func:`fleetgym.meta_env.calibration.calibrate`) give the per-step actor time, the
per-sample learner time and their overheads, the model the scheduling env uses with
``timing="modeled"`` for a workload that has no shipped table entry. The result is cached
(the path is printed) and reused until the workload or a package version changes;
``--force`` measures again. For a workload with a shipped table entry the command prints
that model next to the measured one.

Example::

    fleetgym calibrate --workload Acrobot-v1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict
from typing import Any

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    env_kwarg,
    non_negative_int,
    output_folder,
)

__all__ = ["configure", "run"]


def _budget(text: str) -> float:
    """CPU seconds in [0.01, 3600] (the range :func:`calibrate` takes)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.01 <= value <= 3600.0:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds in [0.01, 3600], actual {text!r}"
        )
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments (imports nothing heavy)."""
    parser.add_argument(
        "--workload",
        required=True,
        metavar="ID",
        help="a built-in workload or any registered Gymnasium ID ('module:ID' imports module)",
    )
    parser.add_argument(
        "--preset",
        choices=("fast", "paper"),
        default="fast",
        help="scheduling preset whose learner overrides apply (default fast)",
    )
    parser.add_argument(
        "--learner-override",
        action="append",
        default=[],
        type=env_kwarg,
        metavar="KEY=VALUE",
        help="PPO hyperparameter replacing the workload's (repeatable)",
    )
    parser.add_argument("--force", action="store_true", help="measure even if cached")
    parser.add_argument(
        "--budget", type=_budget, default=3.0, help="CPU seconds of rollouts (default 3.0)"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed (default 0)")
    parser.add_argument(
        "--cache-dir",
        type=output_folder,
        default=None,
        help="cache folder (default $FLEETGYM_CACHE_DIR, else the user cache folder)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _table_model(name: str, preset: str) -> tuple[Any, dict[str, Any]]:
    """The shipped model and learner overrides of ``name`` under ``preset`` (None if none)."""
    from fleetgym.meta_env.presets import SCHEDULING_DEFAULTS

    entry = SCHEDULING_DEFAULTS.get(name, {}).get(preset)
    if entry is None:
        return None, {}
    return entry.compute, dict(entry.learner_overrides)


def run(args: argparse.Namespace) -> int:
    """Calibrate (or read the cache) and print the model.

    Raises:
        UsageError: A bad workload or learner override, or a cache folder that cannot be
            written (checked before measuring). An error while measuring is a crash
            (exit 3, with its traceback).
    """
    from fleetgym.agents.workloads import get_workload
    from fleetgym.errors import FleetgymError
    from fleetgym.meta_env.calibration import (
        CACHE_ENV_VAR,
        cache_path,
        calibrate,
        check_learner_overrides,
    )

    try:
        workload = get_workload(args.workload)
        table, overrides = _table_model(workload.name, args.preset)
        overrides.update(dict(args.learner_override))
        check_learner_overrides(workload, overrides)
        path = cache_path(workload, overrides, args.cache_dir)
    except (FleetgymError, ValueError, TypeError) as error:
        raise UsageError(str(error)) from None
    if args.force or not path.is_file():
        # The result is written there after the measurement: checked before it.
        given = args.cache_dir is not None or not os.environ.get(CACHE_ENV_VAR)
        check_output_dir("--cache-dir" if given else f"${CACHE_ENV_VAR}", path.parent)
        # No bar: the measurement is one call; say what the wait is for.
        print(
            f"measuring {workload.name} on this machine (about {args.budget:g} CPU seconds "
            "of rollouts, then the updates) ...",
            file=sys.stderr,
            flush=True,
        )
    result = calibrate(
        workload,
        learner_overrides=overrides,
        force=args.force,
        budget_s=args.budget,
        seed=args.seed,
        folder=args.cache_dir,
    )
    model = asdict(result.model)
    if args.json:
        out = {
            "workload": result.workload,
            "model": model,
            "table": None if table is None else asdict(table),
            "learner_overrides": overrides,
            "cache": str(result.path) if result.stored else None,
            "cached": result.cached,
            "details": dict(result.details),
        }
        print(json.dumps(out, indent=2, default=str))
        return 0
    source = "cached" if result.cached else "measured now"
    print(f"{result.workload}: compute model ({source}; learner overrides {overrides or 'none'})")
    for key, value in model.items():
        shipped = "" if table is None else f"   (table: {getattr(table, key):.3g})"
        print(f"  {key:20s} {value:.3g}{shipped}")
    if result.stored:
        print(f"cache: {result.path}")
    else:
        print(f"cache: none (writing {result.path} failed; see the warning)")
    return 0
