"""The data that crosses the fleet <-> learner boundary, and the interfaces on each side.

This module is the contract between the actor fleet (:mod:`fleetgym.agents.fleet`),
the on-policy learner (:mod:`fleetgym.agents.learners.ppo`) and the environments built on them
(:mod:`fleetgym.meta_env`). It imports numpy only.

Semantics every backend follows:

* An *actor slot* ``i`` (0 <= i < max_actors) owns one environment that persists
  between rounds, so episodes longer than one rollout complete across rounds. A slot that
  is (re)started begins a fresh environment seeded from ``(fleet seed, slot, incarnation)``.
* Weights travel as ``dict[str, np.ndarray]`` (a torch ``state_dict`` converted to numpy):
  plain arrays, no code on the wire.
* A round with ``num_actors = I`` runs slots ``0..I-1``, each for exactly
  ``steps_per_actor`` environment steps with the weights it was sent, and returns one
  :class:`Trajectory` and one :class:`ActorTiming` per slot that finished, plus an
  :class:`ActorFailure` per fault (a slot that failed and was re-run reports both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

#: A policy's weights: parameter name -> array (a torch ``state_dict`` converted to numpy).
Weights = dict[str, np.ndarray]

#: Largest observation (in numbers) whose final observations a rollout records.
FINAL_OBS_MAX_VALUES = 4096


@dataclass
class Trajectory:
    """One actor's rollout of ``n`` consecutive steps, time-major.

    ``terminated[t]``/``truncated[t]`` say the episode ended *after* step ``t``.
    ``truncation_values[t]`` holds V(final observation) where ``truncated[t]`` (for
    bootstrapping time-limit ends), 0 elsewhere. ``last_value`` is V(s_n), the value of
    the observation after the last step, and ``last_done`` says whether s_n starts a new
    episode. ``final_obs[t]`` is the observation an ending step ``t`` reached (before the
    env was reset; NaN on the other rows), which a world model learns terminal transitions
    and success labels from; rollout workers record it for observations of at most
    ``FINAL_OBS_MAX_VALUES`` numbers, else it is ``None``.
    """

    obs: np.ndarray
    actions: np.ndarray
    log_probs: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    truncation_values: np.ndarray
    last_value: float
    episode_returns: list[float]
    episode_lengths: list[int]
    actor_id: int
    policy_version: int
    seed: int
    final_obs: np.ndarray | None = field(default=None, kw_only=True)

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def last_done(self) -> bool:
        """Whether the episode ended at the last step, so s_n starts a new episode."""
        return bool(len(self) and (self.terminated[-1] or self.truncated[-1]))


@dataclass
class ActorTiming:
    """Where one actor's time went in one round (seconds, measured on this machine)."""

    actor_id: int
    startup_s: float
    compute_s: float
    transfer_s: float
    cold_start: bool
    num_steps: int
    #: CPU seconds the rollout used (process time). Where actors share cores, the wall
    #: ``compute_s`` exceeds it; it is what the rollout costs on a core of its own.
    cpu_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.startup_s + self.compute_s + self.transfer_s


@dataclass
class ActorFailure:
    """A fault seen during a round: which slot, what happened, and what was done."""

    actor_id: int
    kind: str  # "crash" | "timeout" | "error"
    message: str
    restarted: bool
    rerun: bool  # the slot's rollout was run again and its trajectory is in the result


@dataclass
class RoundResult:
    """Everything one round returned."""

    num_actors: int
    steps_per_actor: int
    policy_version: int
    trajectories: list[Trajectory]
    timings: list[ActorTiming]
    failures: list[ActorFailure] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def complete(self) -> bool:
        """Every requested actor returned a trajectory."""
        return len(self.trajectories) == self.num_actors


@dataclass
class UpdateStats:
    """What one learner update reports."""

    loss: float
    mean_return: float  # mean final return of the last (up to) 100 completed episodes
    kl: float  # KL(pi_before || pi_after) averaged over the update's samples
    update_time_s: float
    num_samples: int
    policy_version: int
    policy_loss: float = 0.0
    value_loss: float = 0.0
    entropy: float = 0.0
    clip_fraction: float = 0.0
    episodes_completed: int = 0


@runtime_checkable
class ActorFleet(Protocol):
    """A fleet backend: runs one round at a time."""

    max_actors: int

    def run_round(
        self,
        weights: Weights,
        num_actors: int,
        steps_per_actor: int,
        *,
        policy_version: int = 0,
    ) -> RoundResult:
        """Send ``weights`` to actors ``0..num_actors-1`` and collect their rollouts."""
        ...

    def close(self) -> None:
        """Release every worker."""
        ...


@runtime_checkable
class Learner(Protocol):
    """An on-policy learner fed by a fleet."""

    policy_version: int

    def get_weights(self) -> Weights:
        """Current policy weights as numpy arrays."""
        ...

    def update(self, trajectories: list[Trajectory]) -> UpdateStats:
        """One update from the trajectories of one round."""
        ...
