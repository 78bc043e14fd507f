"""``fleetgym plan``: the pipeline at scale, by a simulation calibrated on this machine.

* :mod:`~fleetgym.experiments.plan.measure`: the measurements (env step, policy forward,
  update, server forward per batch size, GIL hand-over) that calibrate the simulation.
* :mod:`~fleetgym.experiments.plan.calibration`: a calibration as the simulation's parts
  (:mod:`fleetgym.agents.planning`), and the shipped one measured here.
* :mod:`~fleetgym.experiments.plan.validate`: predicted against measured runs of
  :mod:`fleetgym.experiments.async_compare`.
* :mod:`~fleetgym.experiments.plan.predict`: the grid from 8 to 1,000 actors and the
  AcceRL cluster shape, its table and PNG.
* :mod:`~fleetgym.experiments.plan.cli`: the subcommand.
"""
