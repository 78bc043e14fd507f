"""The network between agent and environment: channels, profiles, the shim wrappers.

Example:
    >>> import gymnasium as gym
    >>> from fleetgym.wrappers import NetworkShimWrapper
    >>> env = NetworkShimWrapper(gym.make("CartPole-v1"), profile="ethernet")
    >>> obs, info = env.reset(seed=1)
    >>> obs, *_, info = env.step(0)
    >>> info["obs_age_steps"], info["action_age_steps"]
    (0, 0)
"""

from __future__ import annotations

from fleetgym.wrappers.channel_base import Channel, DelaySampler
from fleetgym.wrappers.channels import FixedDelay, GaussianChannel, GilbertElliottChannel
from fleetgym.wrappers.chunking import Schedule, ScheduledChunks, choose_schedule
from fleetgym.wrappers.compensation import make_robust_env
from fleetgym.wrappers.compensations import (
    COMPENSATION_REGISTRY,
    AugmentedCompensation,
    Compensation,
    HistoryCompensation,
    NetworkContext,
    PredictiveCompensation,
    ScheduledCompensation,
    register_compensation,
)
from fleetgym.wrappers.delay_features import (
    ObservationAgeFeatures,
    ObservationHistory,
    SentActionHistory,
)
from fleetgym.wrappers.dynamics import CartPoleDynamics, MujocoStateDynamics, PendulumDynamics
from fleetgym.wrappers.fitted_channels import EmpiricalChannel, LogNormalChannel
from fleetgym.wrappers.network_shim import NetworkShimWrapper
from fleetgym.wrappers.physics import PhysicsRandomizationWrapper
from fleetgym.wrappers.playout import (
    START_RULES,
    UNDERRUN_RULES,
    ActionPacket,
    Playout,
)
from fleetgym.wrappers.policy_graph import ENV_NODE, PolicyGraph, PolicyLink, PolicyNode
from fleetgym.wrappers.policy_graph_env import PolicyGraphEnv
from fleetgym.wrappers.predictive import PredictionError, PredictiveObservation, Predictor
from fleetgym.wrappers.profile_fit import ProfileFit, TraceFitError, fit_profile
from fleetgym.wrappers.profiles import (
    DEFAULT_PROFILE,
    NetworkProfile,
    ProfileFileError,
    cell_profile,
    get_profile,
    list_profiles,
    load_profile_file,
    register_profile,
    save_profile_file,
)
from fleetgym.wrappers.shim_config import (
    DELIVERY_MODES,
    STEP_INFO_KEYS,
    ShimConfig,
    control_period,
    default_start_action,
    infer_step_ms,
)
from fleetgym.wrappers.shim_env import make_network_shim_env
from fleetgym.wrappers.staleness import (
    HISTORY_CAP,
    action_delay_for_profile,
    history_length_for_profile,
)
from fleetgym.wrappers.stall import STALL_ACTIONS, StallRule, StallWatchdog
from fleetgym.wrappers.trace_channel import TraceChannel
from fleetgym.wrappers.vector import NetworkShimVectorWrapper

__all__ = [
    "COMPENSATION_REGISTRY",
    "DEFAULT_PROFILE",
    "DELIVERY_MODES",
    "ENV_NODE",
    "HISTORY_CAP",
    "STALL_ACTIONS",
    "START_RULES",
    "STEP_INFO_KEYS",
    "UNDERRUN_RULES",
    "ActionPacket",
    "AugmentedCompensation",
    "CartPoleDynamics",
    "Channel",
    "Compensation",
    "DelaySampler",
    "EmpiricalChannel",
    "FixedDelay",
    "GaussianChannel",
    "GilbertElliottChannel",
    "HistoryCompensation",
    "LogNormalChannel",
    "MujocoStateDynamics",
    "NetworkContext",
    "NetworkProfile",
    "NetworkShimVectorWrapper",
    "NetworkShimWrapper",
    "ObservationAgeFeatures",
    "ObservationHistory",
    "PendulumDynamics",
    "PhysicsRandomizationWrapper",
    "Playout",
    "PolicyGraph",
    "PolicyGraphEnv",
    "PolicyLink",
    "PolicyNode",
    "PredictionError",
    "PredictiveCompensation",
    "PredictiveObservation",
    "Predictor",
    "ProfileFileError",
    "ProfileFit",
    "Schedule",
    "ScheduledChunks",
    "ScheduledCompensation",
    "SentActionHistory",
    "ShimConfig",
    "StallRule",
    "StallWatchdog",
    "TraceChannel",
    "TraceFitError",
    "action_delay_for_profile",
    "choose_schedule",
    "control_period",
    "default_start_action",
    "fit_profile",
    "cell_profile",
    "get_profile",
    "history_length_for_profile",
    "infer_step_ms",
    "list_profiles",
    "load_profile_file",
    "make_network_shim_env",
    "make_robust_env",
    "register_compensation",
    "register_profile",
    "save_profile_file",
]
