"""Moved to :mod:`fleetgym.agents.learners.asynchronous.process_actor`; this old path re-exports it.

Kept so that imports written before the ``agents/`` rooms keep working; new code
imports from the new path.
"""

from __future__ import annotations

from fleetgym.agents.learners.asynchronous.process_actor import (
    ProcessActor,
)

__all__ = [
    "ProcessActor",
]
