"""Rollouts: the loop that steps an actor's environment with a policy.

* :class:`RolloutWorker` (one actor slot: its env, its policy copy, its seed stream) and
  :func:`rollout_many` (several slots in lockstep, one batched forward per step);
* :class:`TokenRolloutCollector`: ``N`` Box envs stepped by a token policy
  (:mod:`fleetgym.agents.tokens`), one batched decoding per decision of ``K`` actions.

What every fleet backend and the asynchronous trainer's actors run. Every name needs the
``agents`` extra (torch); the package imports without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgym.extras import lazy_exports

_EXPORTS = {
    "MAX_ROLLOUT_STEPS": "worker",
    "RolloutWorker": "worker",
    "check_rollout_finite": "worker",
    "check_worker_observation": "worker",
    "rollout_many": "worker",
    "slot_seeds": "worker",
    "TokenRollout": "token_rollout",
    "TokenRolloutCollector": "token_rollout",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from fleetgym.agents.rollout.token_rollout import TokenRollout, TokenRolloutCollector
    from fleetgym.agents.rollout.worker import (
        MAX_ROLLOUT_STEPS,
        RolloutWorker,
        check_rollout_finite,
        check_worker_observation,
        rollout_many,
        slot_seeds,
    )

__all__ = [
    "MAX_ROLLOUT_STEPS",
    "RolloutWorker",
    "TokenRollout",
    "TokenRolloutCollector",
    "check_rollout_finite",
    "check_worker_observation",
    "rollout_many",
    "slot_seeds",
]
