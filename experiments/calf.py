"""``fleetgym calf``: not implemented yet."""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments."""


def run(args: argparse.Namespace) -> int:
    """Run the subcommand."""
    raise SystemExit("fleetgym calf: not implemented yet")
