"""fleetgym.meta_env: environments made of agents.

:class:`ActorSchedulingEnv` turns a distributed on-policy training run into an MDP whose
action is the number of actors of the next round. Its parts, one module each:
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
from fleetgym.meta_env.time_model import ComputeCostModel, TimeModel

__all__ = [
    "PRESETS",
    "PRICING_PRESETS",
    "SCHEDULING_DEFAULTS",
    "ActorSchedulingEnv",
    "CalibrationError",
    "CalibrationResult",
    "ComputeCostModel",
    "PricingPreset",
    "RoundAccountant",
    "RoundBill",
    "RoundCost",
    "ServerClusterCostModel",
    "ServerlessCostModel",
    "SchedulingDefaults",
    "TimeModel",
    "calibrate",
    "get_pricing",
    "scheduling_defaults",
]
