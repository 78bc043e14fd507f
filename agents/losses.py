"""Moved to :mod:`fleetgym.agents.learners.losses`; this old path re-exports it.

Kept so that imports written before the ``agents/`` rooms keep working; new code
imports from the new path.
"""

from __future__ import annotations

from fleetgym.agents.learners.losses import (
    DEFAULT_SIGMA,
    DEFAULT_TARGET_KL,
    LOSSES,
    LossConfig,
    gaussian_weight,
    gipo_loss,
    kl_estimate,
    normalize,
    ppo_clip_loss,
    vtrace,
    vtrace_policy_loss,
)

__all__ = [
    "DEFAULT_SIGMA",
    "DEFAULT_TARGET_KL",
    "LOSSES",
    "LossConfig",
    "gaussian_weight",
    "gipo_loss",
    "kl_estimate",
    "normalize",
    "ppo_clip_loss",
    "vtrace",
    "vtrace_policy_loss",
]
