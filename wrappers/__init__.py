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

from fleetgym.wrappers.channels import (
    Channel,
    DelaySampler,
    FixedDelay,
    GaussianChannel,
    GilbertElliottChannel,
    TraceChannel,
)
from fleetgym.wrappers.compensation import (
    ObservationAgeFeatures,
    ObservationHistory,
    SentActionHistory,
    history_length_for_profile,
    make_robust_env,
)
from fleetgym.wrappers.network_shim import NetworkShimWrapper, make_network_shim_env
from fleetgym.wrappers.profiles import NetworkProfile, get_profile, list_profiles, register_profile
from fleetgym.wrappers.shim_config import (
    DELIVERY_MODES,
    ShimConfig,
    default_start_action,
    infer_step_ms,
)
from fleetgym.wrappers.vector import NetworkShimVectorWrapper

__all__ = [
    "DELIVERY_MODES",
    "Channel",
    "DelaySampler",
    "FixedDelay",
    "GaussianChannel",
    "GilbertElliottChannel",
    "NetworkProfile",
    "NetworkShimVectorWrapper",
    "NetworkShimWrapper",
    "ObservationAgeFeatures",
    "ObservationHistory",
    "SentActionHistory",
    "ShimConfig",
    "TraceChannel",
    "default_start_action",
    "get_profile",
    "history_length_for_profile",
    "infer_step_ms",
    "list_profiles",
    "make_network_shim_env",
    "make_robust_env",
    "register_profile",
]
