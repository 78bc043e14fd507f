"""The actor-scheduling experiments: baselines, the learned scheduler, and transfer.

Modules, one seam each, imported in this order (each only from those before it):

- :mod:`~fleetgym.experiments.schedule.config`: env IDs and the scheduler's PPO settings;
- :mod:`~fleetgym.experiments.schedule.checkpoint`: saving and loading a scheduler zip;
- :mod:`~fleetgym.experiments.schedule.evaluate`: one recorded episode per seed;
- :mod:`~fleetgym.experiments.schedule.report`: tables and plots;
- :mod:`~fleetgym.experiments.schedule.callbacks`: the SB3 callback of training;
- :mod:`~fleetgym.experiments.schedule.paired`, :mod:`~fleetgym.experiments.schedule.start`
  and :mod:`~fleetgym.experiments.schedule.moves`: training on paired workload seeds, the
  race for the start size before training, the check of the moves after it;
- :mod:`~fleetgym.experiments.schedule.train`: train, resume, fine-tune;
- :mod:`~fleetgym.experiments.schedule.compare`: learned against baselines, transfer,
  and the part of ``fleetgym reproduce``;
- :mod:`~fleetgym.experiments.schedule.search_report` and
  :mod:`~fleetgym.experiments.schedule.search`: the headroom of dynamic schedules
  (cross-entropy search over piecewise-constant fleets against every Fixed(n));
- :mod:`~fleetgym.experiments.schedule.cli`: ``fleetgym schedule``.

The package also ships ``learned_scheduler_cartpole.zip``, a small scheduler trained on
the deterministic CartPole scheduling env (training seed 0 with the current defaults).
"""
