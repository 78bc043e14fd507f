"""The CALF experiment: train under a network, evaluate under many, measure the gap.

Modules, one seam each, imported in this order (each only from those before it):

- :mod:`~fleetgym.experiments.calf.conditions`: network conditions and training regimes;
- :mod:`~fleetgym.experiments.calf.setup`: the task, its network shim and the policy's input;
- :mod:`~fleetgym.experiments.calf.train`: one policy per (regime, seed);
- :mod:`~fleetgym.experiments.calf.evaluate`: returns per condition, aggregated over seeds;
- :mod:`~fleetgym.experiments.calf.report`: Markdown, CSV and the bar chart;
- :mod:`~fleetgym.experiments.calf.experiment`: :func:`run_calf`, the whole experiment;
- :mod:`~fleetgym.experiments.calf.cli`: ``fleetgym calf``.
"""
