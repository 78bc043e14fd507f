"""Moved to :mod:`fleetgym.agents.learners.lag`; this old path re-exports it.

Kept so that imports written before the ``agents/`` rooms keep working; new code
imports from the new path.
"""

from __future__ import annotations

from fleetgym.agents.learners.lag import (
    CompensatedPPOLearner,
    LagUpdateStats,
    ObservedTrajectory,
    WeightRing,
    behaviour_versions,
)

__all__ = [
    "CompensatedPPOLearner",
    "LagUpdateStats",
    "ObservedTrajectory",
    "WeightRing",
    "behaviour_versions",
]
