"""The ``fleetgym`` command (also ``python -m fleetgym``).

Each subcommand lives in a module of :mod:`fleetgym.experiments` that provides
``configure(parser)`` (adds its arguments, imports nothing heavy) and
``run(args) -> int``. The table below is the only place a subcommand is declared.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from collections.abc import Sequence

from fleetgym import __version__

#: subcommand -> (module implementing it, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "profiles": ("fleetgym.experiments.profiles", "list the named network profiles and traces"),
    "calf": (
        "fleetgym.experiments.calf.cli",
        "train under the network and measure the sim-to-real gap",
    ),
    "train": (
        "fleetgym.experiments.train",
        "train a workload with the actor fleet and PPO learner",
    ),
    "schedule": (
        "fleetgym.experiments.schedule.cli",
        "train, fine-tune and evaluate actor schedulers",
    ),
    "serve-env": (
        "fleetgym.experiments.serve_env",
        "serve a Gymnasium env to remote agents (Mode 3)",
    ),
    "reproduce": (
        "fleetgym.experiments.reproduce",
        "run the headline experiments and write a report",
    ),
    "lag-sweep": ("fleetgym.experiments.lag_sweep", "final return against an injected policy lag"),
    "calibrate": ("fleetgym.experiments.calibrate", "measure a workload's compute model (cached)"),
}


#: Exit status of a command that crashed (uncaught exception, traceback on stderr); 1 is
#: kept for "ran to the end without reaching its goal" and 2 for usage errors.
EXIT_CRASH = 3


def build_parser() -> argparse.ArgumentParser:
    """The whole argument parser (every subcommand configured)."""
    parser = argparse.ArgumentParser(prog="fleetgym", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fleetgym {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(sub_parser)
        sub_parser.set_defaults(_module=module_name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception:  # a crash: keep the traceback, but exit apart from "did not converge"
        traceback.print_exc()
        return EXIT_CRASH


if __name__ == "__main__":
    raise SystemExit(main())
