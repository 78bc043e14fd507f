"""fleetgym.meta_env."""
