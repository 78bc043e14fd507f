"""Implementations of the ``fleetgym`` subcommands and their experiments.

This package sits at the top of the import ladder, beside :mod:`fleetgym.cli`: it may
import every other part of fleetgym, and nothing imports it except the CLI.
"""
