"""The ``fleetgym`` command (also ``python -m fleetgym``).

Each subcommand lives in a module of :mod:`fleetgym.experiments` that provides
``configure(parser)`` (adds its arguments, imports nothing heavy) and
``run(args) -> int``. The table below is the only place a subcommand is declared.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
import textwrap
import traceback
from collections.abc import Sequence
from typing import NoReturn

from fleetgym import __version__
from fleetgym.experiments.argtypes import UsageError
from fleetgym.extras import missing_extra

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
    "imagination": (
        "fleetgym.experiments.imagination.cli",
        "real env steps to a target with and without a world model",
    ),
    "calibrate": ("fleetgym.experiments.calibrate", "measure a workload's compute model (cached)"),
    "plan": ("fleetgym.experiments.plan.cli", "simulate the pipeline at scale (calibrated)"),
    "docs": ("fleetgym.experiments.docs", "build the documentation site from a checkout"),
    "soak": (
        "fleetgym.experiments.soak.cli",
        "train for a set time under injected faults and check what leaks",
    ),
}


#: Exit status of a command that crashed (uncaught exception, traceback on stderr); 1 is
#: kept for "ran to the end without reaching its goal" and 2 for usage errors.
EXIT_CRASH = 3


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2);
    its subcommands' parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


#: The exit statuses of every subcommand (shown by ``fleetgym --help``).
EXIT_CODES = """exit codes:
  0    done (a training command: its target was reached)
  1    ran to the end without reaching its target (train: --rounds / --max-steps spent)
  2    usage error: a bad argument, name or path, a command without its action, or a
       command whose optional extra is not installed (the message names it)
  3    crashed (an unexpected error; its traceback is on stderr)
  130  interrupted (Ctrl-C)"""

_RST_ROLE = re.compile(r":[\w:]+:`~?([^`<]+?)(?:\s*<[^>]*>)?`")
_RST_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(text: str) -> str:
    """reStructuredText inline markup as plain text, for ``--help``.

    Example:
        >>> plain_text("The ``fleetgym`` command, see :mod:`fleetgym.cli`.")
        'The fleetgym command, see fleetgym.cli.'
    """
    return _RST_LITERAL.sub(r"\1", _RST_ROLE.sub(r"\1", text))


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's formatter that shows each option's default, unless its help already
    states one or there is none to show (``None``, a flag's ``False``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "default" in text or default is None or default is False or default == argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # Paths and options (fleetgym-out/train, --steps-per-actor) stay whole on one line.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """:class:`HelpFormatter` that keeps the line breaks of the description and epilog."""


def _explain(parser: argparse.ArgumentParser, help_text: str | None) -> None:
    """Give ``parser`` and its nested subcommands a description and the defaults formatter."""
    if parser.description is None:
        parser.description = help_text
    if parser.description:
        parser.description = plain_text(parser.description)
    formatter = parser.formatter_class
    raw = isinstance(formatter, type) and issubclass(
        formatter, argparse.RawDescriptionHelpFormatter
    )
    parser.formatter_class = RawDescriptionHelpFormatter if raw else HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                _explain(child, helps.get(name))


def _missing_action(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """Print the help of a command given without its action (``fleetgym schedule``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and args.command in action.choices:
            command = action.choices[args.command]
            for nested in command._actions:
                if isinstance(nested, argparse._SubParsersAction):
                    if getattr(args, nested.dest, None) is None:
                        command.print_help()
                        return True
    return False


def _command_prog(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The ``prog`` of the (nested) subcommand ``args`` selects: ``fleetgym schedule evaluate``."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = None if sub is None else getattr(args, sub.dest, None)
        if sub is None or name not in sub.choices:
            return parser.prog
        parser = sub.choices[name]


def build_parser() -> argparse.ArgumentParser:
    """The whole argument parser (every subcommand configured)."""
    parser = _Parser(
        prog="fleetgym",
        description=plain_text(__doc__.splitlines()[0]),
        epilog=EXIT_CODES,
        formatter_class=RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fleetgym {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(sub_parser)
        sub_parser.set_defaults(_module=module_name)
        _explain(sub_parser, help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.command is None or _missing_action(parser, args):
        if args.command is None:
            parser.print_help()
        return 2
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except UsageError as error:
        # A value found unusable before any work started: one line, like argparse.
        print(f"{_command_prog(parser, args)}: error: {error}", file=sys.stderr)
        return 2
    except ImportError as error:
        missing = missing_extra(error, f"fleetgym {args.command}")
        if missing is None:
            traceback.print_exc()
            return EXIT_CRASH
        # An optional dependency this command needs is not installed: name the extra.
        print(f"{_command_prog(parser, args)}: error: {missing}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception:  # a crash: keep the traceback, but exit apart from "did not converge"
        traceback.print_exc()
        return EXIT_CRASH


if __name__ == "__main__":
    raise SystemExit(main())
