"""Moved to :mod:`fleetgym.agents.learners.training`; this old path re-exports it.

Kept so that imports written before the ``agents/`` rooms keep working; new code
imports from the new path.
"""

from __future__ import annotations

from fleetgym.agents.learners.training import (
    MAX_STEPS_PER_ACTOR,
    RoundRecord,
    TrainingHistory,
    evaluate_policy,
    train,
)

__all__ = [
    "MAX_STEPS_PER_ACTOR",
    "RoundRecord",
    "TrainingHistory",
    "evaluate_policy",
    "train",
]
