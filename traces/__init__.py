"""fleetgym.traces."""
