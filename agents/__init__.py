"""fleetgym.agents."""
