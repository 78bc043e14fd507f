"""The observation of the actor scheduling problem: its fields, their indices, its scaling.

A scheduler decides the next round's fleet size from a 7-dim state ``s_k`` (MinionsRL's).
This module defines that vector once, for the environment that builds it
(:class:`fleetgym.meta_env.ActorSchedulingEnv`) and the schedulers that read it
(:mod:`fleetgym.agents.schedulers`): the names in order (:data:`OBSERVATION_FIELDS`), one
index constant per field, and the normalisation. It imports numpy only.

After round ``k`` (all zeros but the budget before the first round):

====================  =====================  ============================================
 index                raw                    normalised (:func:`normalize_observation`)
====================  =====================  ============================================
 ``OBS_ROUND``        k (rounds done)        ``k / K``
 ``OBS_LOSS``         learner loss L         ``sign(L) * log1p(|L|)``
 ``OBS_RETURN``       mean return R_bar      ``R_bar / |J|`` (1.0 = target reached)
 ``OBS_KL``           KL(pi_k-1 || pi_k)     ``log1p(KL / KL_SCALE)``
 ``OBS_LEARNER_TIME`` learner time P^l       ``P^l / t_l`` (t_l: a reference time)
 ``OBS_ACTOR_TIME``   mean actor time P^a    ``P^a / t_a`` (t_a: a reference time)
 ``OBS_BUDGET``       budget left b          ``b / budget`` (1.0 with no budget)
====================  =====================  ============================================

each entry clipped to ``[-OBS_CLIP, OBS_CLIP]``.

Example:
    >>> raw = np.zeros(len(OBSERVATION_FIELDS))
    >>> raw[OBS_ROUND], raw[OBS_RETURN], raw[OBS_BUDGET] = 5, 50.0, 0.5
    >>> obs = normalize_observation(raw, max_rounds=10, target_return=100.0,
    ...                             learner_time_s=1.0, actor_time_s=1.0, budget=1.0)
    >>> [round(float(obs[i]), 2) for i in (OBS_ROUND, OBS_RETURN, OBS_BUDGET)]
    [0.5, 0.5, 0.5]
"""

from __future__ import annotations

import math

import numpy as np

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

#: The observation, in order (MinionsRL's s_k).
OBSERVATION_FIELDS: tuple[str, ...] = (
    "round",  # k
    "loss",  # L_{k-1}
    "mean_return",  # R_bar_{k-1}
    "kl",  # D_KL between theta_k and theta_{k-1}
    "learner_time",  # P^l_{k-1}
    "actor_time",  # mean_i P^a_{k-1,i}
    "budget_left",  # b_k
)
#: The index of each field of :data:`OBSERVATION_FIELDS` in the observation vector.
OBS_ROUND, OBS_LOSS, OBS_RETURN, OBS_KL, OBS_LEARNER_TIME, OBS_ACTOR_TIME, OBS_BUDGET = range(7)

#: KL that maps to log1p(1) in the normalised observation (a typical PPO update's KL).
KL_SCALE = 0.01
#: Bound of every normalised observation entry.
OBS_CLIP = 10.0
# The raw observation is a float32 vector: saturate rather than overflow to infinity.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def normalize_observation(
    raw: np.ndarray,
    *,
    max_rounds: int,
    target_return: float,
    learner_time_s: float,
    actor_time_s: float,
    budget: float | None,
) -> np.ndarray:
    """The normalised float32 observation of the raw state ``raw`` (see the table above).

    Args:
        raw: the raw state, indexed by the ``OBS_*`` constants.
        max_rounds: K.
        target_return: J (0: returns are not scaled).
        learner_time_s: the learner's reference time (0: not scaled).
        actor_time_s: the actors' reference time (0: not scaled).
        budget: the run's budget (None or 0: the budget entry is 1.0).
    """
    obs = np.empty(len(OBSERVATION_FIELDS))
    obs[OBS_ROUND] = raw[OBS_ROUND] / max_rounds
    obs[OBS_LOSS] = math.copysign(math.log1p(abs(raw[OBS_LOSS])), raw[OBS_LOSS])
    obs[OBS_RETURN] = raw[OBS_RETURN] / (abs(target_return) or 1.0)
    obs[OBS_KL] = math.log1p(max(raw[OBS_KL], 0.0) / KL_SCALE)
    obs[OBS_LEARNER_TIME] = raw[OBS_LEARNER_TIME] / (learner_time_s or 1.0)
    obs[OBS_ACTOR_TIME] = raw[OBS_ACTOR_TIME] / (actor_time_s or 1.0)
    obs[OBS_BUDGET] = raw[OBS_BUDGET] / budget if budget else 1.0
    return np.clip(obs, -OBS_CLIP, OBS_CLIP).astype(np.float32)


def raw_observation(raw: np.ndarray, *, budget: float | None) -> np.ndarray:
    """The unnormalised float32 observation: ``raw`` with a finite budget entry.

    With no budget (None) the budget entry, infinite in ``raw``, reads 0.0; every entry
    saturates at float32's largest magnitude instead of overflowing.

    Args:
        raw: The raw state, indexed by the ``OBS_*`` constants (not modified).
        budget: The run's budget in $ (the env's ``budget``); None (unlimited) sets the
            budget entry to 0.0, any number leaves it as in ``raw``.
    """
    out = np.array(raw, dtype=np.float64, copy=True)
    if budget is None:
        out[OBS_BUDGET] = 0.0
    return np.clip(out, -_FLOAT32_MAX, _FLOAT32_MAX).astype(np.float32)
