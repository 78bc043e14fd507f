"""Policies: what an actor acts with and a learner trains.

* :mod:`~fleetgym.agents.policies.actor_critic`: :class:`ActorCriticPolicy`, the torch
  actor-critic (MLP or Nature CNN) the learners train.
* :mod:`~fleetgym.agents.policies.numpy_policy`: :class:`NumpyActorCritic`, its numpy
  snapshot for fast single-observation forwards in rollouts and the inference server.
* :mod:`~fleetgym.agents.policies.running_stats`: running moments (observation
  normalisation, reward scaling).

Depends on :mod:`fleetgym.agents.types` only. Importing it imports torch.
"""

from __future__ import annotations

from fleetgym.agents.policies.actor_critic import (
    MAX_WIDTH,
    ActorCriticPolicy,
)
from fleetgym.agents.policies.numpy_policy import (
    LOG_2PI,
    OBS_CLIP,
    NumpyActorCritic,
)
from fleetgym.agents.policies.running_stats import (
    RunningMeanStd,
    combine_moments,
)

__all__ = [
    "ActorCriticPolicy",
    "LOG_2PI",
    "MAX_WIDTH",
    "NumpyActorCritic",
    "OBS_CLIP",
    "RunningMeanStd",
    "combine_moments",
]
