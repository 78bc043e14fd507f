"""``fleetgym soak``: a long asynchronous training run under injected faults, sampled for
leaks (:mod:`~fleetgym.experiments.soak.cli`)."""
