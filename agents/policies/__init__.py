"""Policies: what an actor acts with and a learner trains.

* :class:`ActorCriticPolicy`, the torch actor-critic (MLP or Nature CNN) the learners
  train (needs the ``agents`` extra);
* :class:`NumpyActorCritic`, its numpy snapshot for fast single-observation forwards in
  rollouts and the inference server;
* running moments (:class:`RunningMeanStd`, :func:`combine_moments`) for observation
  normalisation and reward scaling.

Depends on :mod:`fleetgym.agents` (the shared types) only. Importing it does not import
torch; :class:`ActorCriticPolicy` does, on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgym.agents.policies.numpy_policy import LOG_2PI, OBS_CLIP, NumpyActorCritic
from fleetgym.agents.policies.running_stats import RunningMeanStd, combine_moments
from fleetgym.extras import lazy_exports

_LAZY = {"ActorCriticPolicy": "actor_critic", "MAX_WIDTH": "actor_critic"}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

if TYPE_CHECKING:
    from fleetgym.agents.policies.actor_critic import MAX_WIDTH, ActorCriticPolicy

__all__ = [
    "ActorCriticPolicy",
    "LOG_2PI",
    "MAX_WIDTH",
    "NumpyActorCritic",
    "OBS_CLIP",
    "RunningMeanStd",
    "combine_moments",
]
