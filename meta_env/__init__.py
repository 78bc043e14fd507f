"""fleetgym.meta_env: environments made of agents.

:class:`ActorSchedulingEnv` turns a distributed on-policy training run into an MDP whose
action is the number of actors of the next round; its configs
(:mod:`~fleetgym.meta_env.scheduling_config`: :class:`TrainingConfig`, :class:`FleetConfig`,
:class:`CostConfig`, :class:`EpisodeConfig`) group its arguments, and
:func:`make_actor_scheduling_env` (``gym.make``'s entry point) builds them from flat keyword
arguments. Its parts, one module each:
:mod:`~fleetgym.meta_env.presets` (per-workload defaults and their calibration),
:mod:`~fleetgym.meta_env.pricing` (pricing presets), :mod:`~fleetgym.meta_env.time_model`
(cold starts, transfers, modelled compute) and :mod:`~fleetgym.meta_env.cost_model`
(billing and the round accountant).
"""

from fleetgym.meta_env.actor_scheduling import ActorSchedulingEnv
from fleetgym.meta_env.calibration import CalibrationError, CalibrationResult, calibrate
from fleetgym.meta_env.cost_model import (
    RoundAccountant,
    RoundBill,
    RoundCost,
    ServerClusterCostModel,
    ServerlessCostModel,
)
from fleetgym.meta_env.presets import (
    PRESETS,
    SCHEDULING_DEFAULTS,
    SchedulingDefaults,
    scheduling_defaults,
)
from fleetgym.meta_env.pricing import PRICING_PRESETS, PricingPreset, get_pricing
from fleetgym.meta_env.scheduling_config import (
    CostConfig,
    EpisodeConfig,
    FleetConfig,
    TrainingConfig,
)
from fleetgym.meta_env.scheduling_kwargs import make_actor_scheduling_env
from fleetgym.meta_env.time_model import ComputeCostModel, TimeModel

__all__ = [
    "PRESETS",
    "PRICING_PRESETS",
    "SCHEDULING_DEFAULTS",
    "ActorSchedulingEnv",
    "CalibrationError",
    "CalibrationResult",
    "ComputeCostModel",
    "CostConfig",
    "EpisodeConfig",
    "FleetConfig",
    "PricingPreset",
    "RoundAccountant",
    "RoundBill",
    "RoundCost",
    "ServerClusterCostModel",
    "ServerlessCostModel",
    "SchedulingDefaults",
    "TimeModel",
    "TrainingConfig",
    "calibrate",
    "get_pricing",
    "make_actor_scheduling_env",
    "scheduling_defaults",
]
