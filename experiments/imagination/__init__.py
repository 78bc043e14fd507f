"""The imagination study: real env steps to a target with and without a world model.

- :mod:`~fleetgym.experiments.imagination.study`: the envs, arms and one run;
- :mod:`~fleetgym.experiments.imagination.cli`: ``fleetgym imagination`` (its arguments,
  the seeds, the results file);
- :mod:`~fleetgym.experiments.imagination.report`: the summary table and figures;
- :mod:`~fleetgym.experiments.imagination.mbpo` and
  :mod:`~fleetgym.experiments.imagination.asynchronous`: the ``--mbpo`` and ``--async``
  studies.
"""
