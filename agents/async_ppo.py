"""Moved to :mod:`fleetgym.agents.learners.asynchronous.trainer`; this old path re-exports it.

Kept so that imports written before the ``agents/`` rooms keep working; new code
imports from the new path.
"""

from __future__ import annotations

from fleetgym.agents.learners.asynchronous.trainer import (
    INFERENCE_MODES,
    ActorFactory,
    AsyncPPO,
    UpdateRecord,
)

__all__ = [
    "ActorFactory",
    "AsyncPPO",
    "INFERENCE_MODES",
    "UpdateRecord",
]
