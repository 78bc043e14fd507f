"""The imagination study: real env steps to a target with and without a world model.

- :mod:`~fleetgym.experiments.imagination.study`: the envs, arms and one run;
- :mod:`~fleetgym.experiments.imagination.cli`: ``fleetgym imagination`` (seeds, tables,
  figures).
"""
