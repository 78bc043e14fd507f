"""The agent side: fleets, learners, schedulers and what they share.

Each room is a package with its own public names: :mod:`fleetgym.agents.fleet`,
:mod:`~fleetgym.agents.inference`, :mod:`~fleetgym.agents.learners`,
:mod:`~fleetgym.agents.planning`, :mod:`~fleetgym.agents.policies`,
:mod:`~fleetgym.agents.rollout`, :mod:`~fleetgym.agents.schedulers`,
:mod:`~fleetgym.agents.tokens`, :mod:`~fleetgym.agents.workloads` and
:mod:`~fleetgym.agents.world_model`. This package holds the types they all share: a
trajectory, a round's result, the fleet and learner protocols.

Most rooms need the ``agents`` extra (torch); importing them does not.

Example:
    >>> from fleetgym.agents import RoundResult, Trajectory
    >>> RoundResult.__name__, Trajectory.__name__
    ('RoundResult', 'Trajectory')
"""

from __future__ import annotations

from fleetgym.agents.types import (
    ActorFailure,
    ActorFleet,
    ActorTiming,
    Learner,
    RoundResult,
    Trajectory,
    UpdateStats,
    Weights,
)

__all__ = [
    "ActorFailure",
    "ActorFleet",
    "ActorTiming",
    "Learner",
    "RoundResult",
    "Trajectory",
    "UpdateStats",
    "Weights",
]
