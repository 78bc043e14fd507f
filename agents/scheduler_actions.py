"""Moved to :mod:`fleetgym.agents.schedulers.actions`; this old path re-exports it.

Kept so that imports written before the ``agents/`` rooms keep working; new code
imports from the new path.
"""

from __future__ import annotations

from fleetgym.agents.schedulers.actions import (
    ACTION_MODES,
    STEP_DOWN,
    STEP_KEEP,
    STEP_UP,
    MappedScheduler,
    SchedulerActionWrapper,
    action_space_for,
    fleet_sizes,
    num_actors_for,
    start_index,
    step_index,
    with_size_feature,
)

__all__ = [
    "ACTION_MODES",
    "MappedScheduler",
    "STEP_DOWN",
    "STEP_KEEP",
    "STEP_UP",
    "SchedulerActionWrapper",
    "action_space_for",
    "fleet_sizes",
    "num_actors_for",
    "start_index",
    "step_index",
    "with_size_feature",
]
