"""Moved to :mod:`fleetgym.agents.learners.ppo`; this old path re-exports it.

Kept so that imports written before the ``agents/`` rooms keep working; new code
imports from the new path.
"""

from __future__ import annotations

from fleetgym.agents.learners.ppo import (
    HYPERPARAMETERS,
    RETURN_WINDOW,
    Batch,
    PPOLearner,
    compute_gae,
)

__all__ = [
    "Batch",
    "HYPERPARAMETERS",
    "PPOLearner",
    "RETURN_WINDOW",
    "compute_gae",
]
