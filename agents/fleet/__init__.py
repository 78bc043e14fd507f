"""The actor fleet: backends that run I actors per round (see :mod:`fleetgym.agents.types`)."""
