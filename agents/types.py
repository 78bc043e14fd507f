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
    """One actor's rollout of ``n`` consecutive steps, time-major (row ``t`` is step ``t``).

    The shapes and dtypes below are those a :class:`~fleetgym.agents.rollout.RolloutWorker`
    records; subclasses (token, imagined or served trajectories) document their own.

    Attributes:
        obs: The observations ``s_0..s_{n-1}`` the policy acted on, ``(n, *obs_shape)`` in
            the env's dtype.
        actions: The actions taken: int64 ``(n,)`` for a discrete space, float32
            ``(n, action_dim)`` for a continuous one (the unclipped Gaussian samples).
        log_probs: Log-probability of each action under the policy that took it, ``(n,)``.
        values: The critic's value V(s_t) of each observation, ``(n,)``.
        rewards: The env's reward of each step, ``(n,)``, untransformed (a learner applies
            the workload's ``reward_transform``).
        terminated, truncated: Bool ``(n,)``: the episode ended *after* step ``t`` in a
            terminal state, or at a time limit (a step that does both is terminated only).
        truncation_values: V(final observation) where ``truncated[t]`` (for bootstrapping
            time-limit ends), 0 elsewhere.
        last_value: V(s_n), the value of the observation after the last step;
            :attr:`last_done` says whether s_n starts a new episode.
        episode_returns, episode_lengths: Undiscounted return and length (env steps) of
            each episode that ended during this rollout, counted from the episode's start
            (which may lie in an earlier round).
        actor_id: The slot that ran the rollout (negative for imagined trajectories).
        policy_version: The ``policy_version`` the weights were sent with.
        seed: The fleet seed; the slot's env and sampling stream derive from
            ``(seed, actor_id, incarnation)``.
        final_obs: Keyword-only. ``final_obs[t]`` is the observation an ending step ``t``
            reached (before the env was reset; NaN on the other rows), which a world model
            learns terminal transitions and success labels from; rollout workers record it
            for observations of at most ``FINAL_OBS_MAX_VALUES`` numbers, else it is
            ``None`` (the default).
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
    """Where one actor's time went in one round (seconds, measured on this machine).

    Attributes:
        actor_id: The slot these timings are of.
        startup_s: Seconds spent starting the slot's actor this round (process start or
            Ray placement to a built actor); 0.0 for a warm slot.
        compute_s: Wall seconds of the rollout itself (env steps and policy forwards).
        transfer_s: Seconds spent moving weights and the trajectory between the driver and
            the actor (publishing, shared memory, object store); 0.0 in-process.
        cold_start: True if the slot's actor was (re)started for this round rather than
            ready beforehand.
        num_steps: Env steps the rollout ran (the round's ``steps_per_actor``).
        cpu_s: CPU seconds the rollout used (process time). Where actors share cores, the
            wall ``compute_s`` exceeds it; it is what the rollout costs on a core of its
            own. 0.0 where a backend does not measure it.
    """

    actor_id: int
    startup_s: float
    compute_s: float
    transfer_s: float
    cold_start: bool
    num_steps: int
    # CPU seconds (process time): described under Attributes above.
    cpu_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.startup_s + self.compute_s + self.transfer_s


@dataclass
class ActorFailure:
    """A fault seen during a round: which slot, what happened, and what was done.

    Attributes:
        actor_id: The slot that faulted.
        kind: ``"crash"`` (the actor died), ``"timeout"`` (it missed ``actor_timeout`` or
            ``startup_timeout`` and was killed) or ``"error"`` (its rollout raised).
        message: What happened: the exception's traceback tail or the exit status (at
            most 2,000 characters).
        restarted: True if the slot's actor was replaced by a fresh incarnation (a retry
            was left); False if the round gave up on the slot.
        rerun: True if the slot's rollout was run again and its trajectory is in the
            result.
    """

    actor_id: int
    kind: str  # "crash" | "timeout" | "error"
    message: str
    restarted: bool
    rerun: bool  # the slot's rollout was run again and its trajectory is in the result


@dataclass
class RoundResult:
    """Everything one round returned.

    Attributes:
        num_actors: The fleet size the round asked for (slots ``0..num_actors-1``).
        steps_per_actor: Env steps each slot ran.
        policy_version: The version the round's weights were sent with.
        trajectories: One :class:`Trajectory` per slot that delivered, ordered by actor id
            (fewer than ``num_actors`` when a slot failed after its retries).
        timings: One :class:`ActorTiming` per delivered slot, in the same order.
        failures: One :class:`ActorFailure` per fault seen, ordered by actor id; empty
            (the default) in a round without faults.
        wall_s: Wall seconds from dispatching the round's rollouts to assembling the
            result (restarts and re-runs included); 0.0 if not measured.
    """

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
    """What one learner update reports.

    The values below are those of the PPO learner (:mod:`fleetgym.agents.learners.ppo`);
    the losses are averaged over the update's gradient steps (minibatches).

    Attributes:
        loss: Total loss ``policy_loss + vf_coef * value_loss - ent_coef * entropy``.
        mean_return: Mean return of the last (up to) 100 completed episodes; 0.0 before
            the first one.
        kl: KL(pi_before || pi_after) averaged over the update's samples.
        update_time_s: Wall seconds the update took.
        num_samples: Samples in the update's batch (env steps; imagined ones included where
            a world model adds them).
        policy_version: The learner's policy version after the update.
        policy_loss: The clipped PPO surrogate loss.
        value_loss: The critic's loss, 0.5 * MSE against the GAE returns.
        entropy: Mean entropy of the policy's action distribution.
        clip_fraction: Fraction of samples whose probability ratio left
            ``[1 - clip_coef, 1 + clip_coef]``.
        episodes_completed: Episodes that ended in the round's (real) trajectories.
    """

    loss: float
    mean_return: float
    kl: float
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
    """A fleet backend: runs one round at a time.

    A structural type: any object with these members is a fleet (``isinstance`` checks
    it); the backends of :mod:`fleetgym.agents.fleet` are.

    Attributes:
        max_actors: The largest ``num_actors`` a round accepts (slots
            ``0..max_actors-1``).
    """

    max_actors: int

    def run_round(
        self,
        weights: Weights,
        num_actors: int,
        steps_per_actor: int,
        *,
        policy_version: int = 0,
    ) -> RoundResult:
        """Send ``weights`` to actors ``0..num_actors-1`` and collect their rollouts.

        Args:
            weights: The policy weights every actor loads for this round (parameter name
                -> numpy array).
            num_actors: How many slots run, ``1..max_actors``.
            steps_per_actor: Env steps each slot runs (>= 1).
            policy_version: Keyword-only version number (>= 0) recorded in each
                trajectory and the result; 0 by default.
        """
        ...

    def close(self) -> None:
        """Release every worker."""
        ...


@runtime_checkable
class Learner(Protocol):
    """An on-policy learner fed by a fleet.

    A structural type: any object with these members is a learner (``isinstance`` checks
    it), e.g. :class:`~fleetgym.agents.learners.PPOLearner`.

    Attributes:
        policy_version: The current policy's version (PPO: the number of updates so far),
            sent with the next round's weights.
    """

    policy_version: int

    def get_weights(self) -> Weights:
        """Current policy weights as numpy arrays."""
        ...

    def update(self, trajectories: list[Trajectory]) -> UpdateStats:
        """One update from the trajectories of one round.

        Args:
            trajectories: The round's trajectories (``RoundResult.trajectories``), at
                least one.
        """
        ...
