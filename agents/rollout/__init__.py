"""Rollouts: the loop that steps an actor's environment with a policy.

* :mod:`~fleetgym.agents.rollout.worker`: :class:`RolloutWorker` (one actor slot: its env,
  its policy copy, its seed stream) and :func:`rollout_many` (several slots in lockstep,
  one batched forward per step).
* :mod:`~fleetgym.agents.rollout.token_rollout`: :class:`TokenRolloutCollector`, ``N`` Box
  envs stepped by a token policy (:mod:`fleetgym.agents.tokens`), one batched decoding per
  decision of ``K`` actions (imported by path).

What every fleet backend and the asynchronous trainer's actors run; the served variant
(acting through the inference server) is :mod:`fleetgym.agents.inference.rollout`.
Depends on :mod:`fleetgym.agents.workloads`, :mod:`fleetgym.agents.tokens` and
:mod:`fleetgym.agents.policies`.
"""

from __future__ import annotations

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
    "check_rollout_finite",
    "check_worker_observation",
    "rollout_many",
    "slot_seeds",
]
