"""Workloads: which environment an actor steps, how it is preprocessed, and PPO defaults.

* :mod:`~fleetgym.agents.workloads.workload`: :class:`Workload`, the built-in
  :data:`WORKLOADS` and :func:`get_workload` (any Gymnasium ID, ``EnvSpec`` or callable).
* :mod:`~fleetgym.agents.workloads.spec`: what is inferred from an env's spaces (its
  preprocessing, its PPO defaults) and how it is built.

Depends on :mod:`fleetgym.agents.policies` (only when a policy is built). Importing it
imports no torch.
"""

from __future__ import annotations

from fleetgym.agents.workloads.fields import COUNT_LIMITS, KINDS, REWARD_TRANSFORMS
from fleetgym.agents.workloads.workload import (
    WORKLOADS,
    StepDelay,
    Workload,
    get_workload,
    workload_spaces,
)

__all__ = [
    "COUNT_LIMITS",
    "KINDS",
    "REWARD_TRANSFORMS",
    "StepDelay",
    "WORKLOADS",
    "Workload",
    "get_workload",
    "workload_spaces",
]
