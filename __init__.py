"""fleetgym: Gymnasium environments and wrappers for realistic, cheaper distributed RL.

Importing the package registers every environment ID (see :mod:`fleetgym.registration`)
and stays light: torch, Stable-Baselines3 and Ray are imported only by the modules that
need them.

Example:
    >>> import gymnasium as gym
    >>> import fleetgym
    >>> "fleetgym/NetShim-v0" in gym.registry
    True
"""

from __future__ import annotations

from fleetgym.extras import guard_imports
from fleetgym.registration import register_envs, register_shim_env

__version__ = "2.0.0"

guard_imports()  # a module whose optional package is missing names its extra
register_envs()

__all__ = ["__version__", "register_envs", "register_shim_env"]
