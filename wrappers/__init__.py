"""fleetgym.wrappers."""
