"""Every Gymnasium ID fleetgym provides, in one table.

Entry points are strings so that registering costs nothing (no torch import) and so
that ``gym.make("fleetgym:fleetgym/NetShim-v0", ...)`` works in spawned worker
processes. :func:`register_envs` is idempotent.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

#: ID -> keyword arguments of :func:`gymnasium.register`.
ENV_SPECS: dict[str, dict[str, Any]] = {
    # Part A: the network shim around any registered env (kwargs env_id, profile, ...).
    "fleetgym/NetShim-v0": {
        "entry_point": "fleetgym.wrappers.network_shim:make_network_shim_env",
    },
    # Mode 3: an env served by `fleetgym serve-env` (kwargs address, profile, ...).
    "fleetgym/Remote-v0": {
        "entry_point": "fleetgym.wrappers.remote.client:RemoteEnv",
        "nondeterministic": True,
    },
    # Part B: one whole distributed training run as an MDP (kwargs workload, ...).
    "fleetgym/ActorScheduling-v0": {
        "entry_point": "fleetgym.meta_env.actor_scheduling:ActorSchedulingEnv",
        "nondeterministic": True,
    },
    "fleetgym/ActorScheduling-CartPole-v0": {
        "entry_point": "fleetgym.meta_env.actor_scheduling:ActorSchedulingEnv",
        "kwargs": {"workload": "CartPole-v1", "preset": "fast"},
        "nondeterministic": True,
    },
    # Modeled timing: an episode is exactly reproducible from its seed.
    "fleetgym/ActorScheduling-CartPole-Modeled-v0": {
        "entry_point": "fleetgym.meta_env.actor_scheduling:ActorSchedulingEnv",
        "kwargs": {"workload": "CartPole-v1", "preset": "fast", "timing": "modeled"},
    },
}


def register_envs() -> None:
    """Register every fleetgym ID with Gymnasium (safe to call more than once)."""
    for env_id, spec in ENV_SPECS.items():
        if env_id in gym.registry:
            continue
        gym.register(id=env_id, **spec)
