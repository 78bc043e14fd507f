"""Schedulers: who decides how many actors each round runs.

* :mod:`~fleetgym.agents.schedulers.baselines`: the baseline schedulers (Fixed, Max,
  Increase, Decrease, Adapt, ServerBased) and :func:`make_baseline`.
* :mod:`~fleetgym.agents.schedulers.actions`: the learned scheduler's action spaces
  (``ACTION_MODES``) and the wrapper that maps them to fleet sizes.
* :mod:`~fleetgym.agents.schedulers.observation`: the 7-dim observation layout that
  :class:`fleetgym.meta_env.ActorSchedulingEnv` emits and the schedulers read.

Depends on :mod:`fleetgym.agents.fleet` (its size limit) only.
"""

from __future__ import annotations

from fleetgym.agents.schedulers.actions import (
    ACTION_MODES,
    MappedScheduler,
    SchedulerActionWrapper,
    action_space_for,
    fleet_sizes,
    num_actors_for,
)
from fleetgym.agents.schedulers.baselines import (
    BASELINE_NAMES,
    MAX_WINDOW,
    AdaptScheduler,
    BaseScheduler,
    DecreaseScheduler,
    FixedScheduler,
    IncreaseScheduler,
    MaxScheduler,
    ServerBasedScheduler,
    make_baseline,
)
from fleetgym.agents.schedulers.observation import (
    OBS_ACTOR_TIME,
    OBS_BUDGET,
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
    "ACTION_MODES",
    "MappedScheduler",
    "SchedulerActionWrapper",
    "action_space_for",
    "fleet_sizes",
    "normalize_observation",
    "num_actors_for",
    "raw_observation",
    "AdaptScheduler",
    "BASELINE_NAMES",
    "BaseScheduler",
    "DecreaseScheduler",
    "FixedScheduler",
    "IncreaseScheduler",
    "MAX_WINDOW",
    "MaxScheduler",
    "OBSERVATION_FIELDS",
    "OBS_ACTOR_TIME",
    "OBS_BUDGET",
    "OBS_KL",
    "OBS_LEARNER_TIME",
    "OBS_LOSS",
    "OBS_RETURN",
    "OBS_ROUND",
    "ServerBasedScheduler",
    "make_baseline",
]
