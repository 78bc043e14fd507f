"""fleetgym.meta_env: environments made of agents.

:class:`ActorSchedulingEnv` turns a distributed on-policy training run into an MDP whose
action is the number of actors of the next round; :mod:`fleetgym.meta_env.cost_model`
holds its pricing presets and its time and billing models.
"""

from fleetgym.meta_env.actor_scheduling import ActorSchedulingEnv, scheduling_defaults
from fleetgym.meta_env.cost_model import (
    PRICING_PRESETS,
    ComputeCostModel,
    PricingPreset,
    ServerClusterCostModel,
    ServerlessCostModel,
    TimeModel,
    get_pricing,
)

__all__ = [
    "PRICING_PRESETS",
    "ActorSchedulingEnv",
    "ComputeCostModel",
    "PricingPreset",
    "ServerClusterCostModel",
    "ServerlessCostModel",
    "TimeModel",
    "get_pricing",
    "scheduling_defaults",
]
