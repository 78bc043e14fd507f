"""Moved to :mod:`fleetgym.agents.schedulers.observation`; this old path re-exports it.

Kept so that imports written before the ``agents/`` rooms keep working; new code
imports from the new path.
"""

from __future__ import annotations

from fleetgym.agents.schedulers.observation import (
    KL_SCALE,
    OBS_ACTOR_TIME,
    OBS_BUDGET,
    OBS_CLIP,
    OBS_KL,
    OBS_LEARNER_TIME,
    OBS_LOSS,
    OBS_RETURN,
    OBS_ROUND,
    OBSERVATION_FIELDS,
    normalize_observation,
    raw_observation,
)

__all__ = [
    "KL_SCALE",
    "OBSERVATION_FIELDS",
    "OBS_ACTOR_TIME",
    "OBS_BUDGET",
    "OBS_CLIP",
    "OBS_KL",
    "OBS_LEARNER_TIME",
    "OBS_LOSS",
    "OBS_RETURN",
    "OBS_ROUND",
    "normalize_observation",
    "raw_observation",
]
