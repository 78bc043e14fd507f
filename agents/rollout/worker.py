"""Actor-side rollout code: one actor slot's env + policy copy, and lockstep batching of slots.

:class:`RolloutWorker` is what every fleet backend runs per actor slot (in this process, in
a worker process, or in a Ray actor). Its environment persists between rounds, so episodes
continue across rollouts (see :mod:`fleetgym.agents.types`). :func:`rollout_many` steps
several workers' environments in lockstep with ONE policy forward per step for all of them;
each slot keeps its own env, its own sampling generator and its own episode bookkeeping, so
a slot's trajectory is the same whether it runs alone or batched (up to float rounding of
the batched forward pass). MLP policies step through a numpy snapshot of the round's weights
(:class:`~fleetgym.agents.policies.NumpyActorCritic`), CNN policies through torch in
inference mode.

Seeding: slot ``i`` of a fleet seeded ``s``, in its ``k``-th incarnation (restart), seeds its
env and its sampling generator from ``np.random.SeedSequence([s, i, k])``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from fleetgym.agents.policies import ActorCriticPolicy, NumpyActorCritic
from fleetgym.agents.types import FINAL_OBS_MAX_VALUES, Trajectory, Weights
from fleetgym.agents.workloads import Workload, get_workload
from fleetgym.validation import check_int


def slot_seeds(seed: int, actor_id: int, incarnation: int = 0) -> tuple[int, np.random.Generator]:
    """The env reset seed and the sampling generator of one actor slot incarnation.

    Both derive from ``np.random.SeedSequence([seed, actor_id, incarnation])`` (its two
    spawned children), so each slot and each restart of it gets independent streams.

    Args:
        seed: The fleet seed (an int >= 0).
        actor_id: The slot index (>= 0).
        incarnation: How many times the slot was restarted (0: its first start).

    Returns:
        ``(env_seed, rng)``: a uint32-range int for ``env.reset(seed=...)`` and the
        generator of the slot's action sampling.
    """
    sequence = np.random.SeedSequence([int(seed), int(actor_id), int(incarnation)])
    env_sequence, sampling_sequence = sequence.spawn(2)
    env_seed = int(env_sequence.generate_state(1, np.uint32)[0])
    return env_seed, np.random.default_rng(sampling_sequence)


#: Most env steps one rollout collects per slot (its arrays are allocated up front).
MAX_ROLLOUT_STEPS = 10_000_000
#: Largest seed, slot, incarnation and policy version (int64, as the fleets' and the
#: inference server's).
MAX_INT64 = 2**63 - 1


def _int64(name: str, value: object) -> int:
    """``value`` as an int in ``[0, 2**63 - 1]``."""
    value = check_int(name, value, low=0)
    if value > MAX_INT64:
        raise ValueError(f"{name}: expected an int >= 0 and <= 2**63 - 1, actual {value}")
    return value


@dataclass
class _Buffer:
    """Preallocated arrays of one slot's rollout."""

    obs: np.ndarray
    actions: np.ndarray
    log_probs: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    truncation_values: np.ndarray
    final_obs: np.ndarray | None


class RolloutWorker:
    """One actor slot: a persistent environment and a private copy of the policy.

    Models a fleet actor. Each :meth:`rollout` loads the weights it is sent and runs exactly
    ``steps`` environment steps from wherever the previous rollout left the env, resetting
    when an episode ends. Gaussian actions are clipped to the action bounds when sent to the
    env; the trajectory stores the unclipped samples the log-probabilities refer to.

    Args:
        workload: A :class:`Workload` or its name.
        actor_id: The slot index (>= 0).
        seed: The fleet seed.
        incarnation: How many times this slot was restarted (0 for the first start).

    Example:
        >>> worker = RolloutWorker("CartPole-v1", actor_id=0, seed=0)
        >>> weights = worker.policy.get_weights()
        >>> traj = worker.rollout(weights, steps=16, policy_version=0)
        >>> traj.obs.shape, traj.actions.shape, len(traj)
        ((16, 4), (16,), 16)
        >>> worker.close()

    Raises:
        UnknownWorkloadError: If ``workload`` names no workload.
        TypeError: If ``actor_id``, ``seed`` or ``incarnation`` is not an int.
        ValueError: If one is negative or above ``2**63 - 1``.
    """

    def __init__(
        self, workload: Workload | str, actor_id: int, seed: int, incarnation: int = 0
    ) -> None:
        self.workload = get_workload(workload)
        self.actor_id = _int64("actor_id", actor_id)
        self.seed = _int64("seed", seed)
        self.incarnation = _int64("incarnation", incarnation)
        self.env_seed, self.rng = slot_seeds(self.seed, self.actor_id, self.incarnation)
        self.env = self.workload.make_env(seed=self.env_seed)
        self.policy = self.workload.make_policy()
        self.policy.eval()
        space = self.env.action_space
        self._clip: tuple[np.ndarray, np.ndarray] | None = (
            (space.low, space.high) if isinstance(space, gym.spaces.Box) else None
        )
        obs, _ = self.env.reset(seed=self.env_seed)
        self.obs: np.ndarray = np.asarray(obs)
        self.episode_return = 0.0
        self.episode_length = 0
        self.total_steps = 0

    def _new_buffer(self, steps: int) -> _Buffer:
        action_shape: tuple[int, ...] = () if self.policy.discrete else (self.policy.action_dim,)
        return _Buffer(
            obs=np.empty((steps, *self.obs.shape), dtype=self.obs.dtype),
            actions=np.empty(
                (steps, *action_shape), np.int64 if self.policy.discrete else np.float32
            ),
            log_probs=np.empty(steps, np.float32),
            values=np.empty(steps, np.float32),
            rewards=np.empty(steps, np.float32),
            terminated=np.zeros(steps, bool),
            truncated=np.zeros(steps, bool),
            truncation_values=np.zeros(steps, np.float32),
            final_obs=(
                np.full((steps, *self.obs.shape), np.nan, np.float32)
                if self.obs.size <= FINAL_OBS_MAX_VALUES and self.obs.dtype.kind in "fiub"
                else None
            ),
        )

    def _env_action(self, action: np.ndarray) -> np.ndarray | int:
        if self._clip is None:
            return int(action)
        return np.clip(action, self._clip[0], self._clip[1])

    def _step(
        self,
        buf: _Buffer,
        t: int,
        action: np.ndarray,
        log_prob: float,
        value: float,
        finished: tuple[list[float], list[int]],
        value_fn: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        """Record step ``t`` (obs, action, ...) and advance the env, resetting on episode end."""
        buf.obs[t] = self.obs
        buf.actions[t] = action
        buf.log_probs[t] = log_prob
        buf.values[t] = value
        obs, reward, terminated, truncated, _ = self.env.step(self._env_action(action))
        buf.rewards[t] = reward
        self.episode_return += float(reward)
        self.episode_length += 1
        self.total_steps += 1
        if terminated or truncated:
            buf.terminated[t] = bool(terminated)
            # A step that both terminates and truncates is a true terminal: no bootstrap.
            buf.truncated[t] = bool(truncated) and not terminated
            if buf.truncated[t]:
                buf.truncation_values[t] = float(value_fn(np.asarray(obs)[None])[0])
            if buf.final_obs is not None:
                buf.final_obs[t] = obs  # the observation the episode ended in
            finished[0].append(self.episode_return)
            finished[1].append(self.episode_length)
            self.episode_return = 0.0
            self.episode_length = 0
            obs, _ = self.env.reset()
        self.obs = np.asarray(obs)

    def _finish(
        self,
        buf: _Buffer,
        last_value: float,
        finished: tuple[list[float], list[int]],
        policy_version: int,
    ) -> Trajectory:
        check_rollout_finite(self, buf, last_value)
        return Trajectory(
            obs=buf.obs,
            actions=buf.actions,
            log_probs=buf.log_probs,
            values=buf.values,
            rewards=buf.rewards,
            terminated=buf.terminated,
            truncated=buf.truncated,
            truncation_values=buf.truncation_values,
            last_value=float(last_value),
            episode_returns=finished[0],
            episode_lengths=finished[1],
            actor_id=self.actor_id,
            policy_version=int(policy_version),
            seed=self.seed,
            final_obs=buf.final_obs,
        )

    def rollout(self, weights: Weights, steps: int, policy_version: int) -> Trajectory:
        """Run exactly ``steps`` env steps with ``weights``; the env state carries over.

        Args:
            weights: Policy weights (numpy state_dict, as from ``get_weights``) loaded into
                this worker's policy copy before stepping.
            steps: Env steps to collect (1 to 10,000,000); episodes that end are reset and
                continue within the rollout.
            policy_version: Version of ``weights``, recorded in the trajectory (an int in
                ``[0, 2**63 - 1]``).

        Raises:
            ValueError: If ``steps`` < 1, the weights do not fit the policy, or the env
                emitted a NaN or infinite observation or reward (see
                :func:`check_rollout_finite`).
        """
        return rollout_many([self], weights, steps, policy_version)[0]

    #: The keys of :meth:`get_state`.
    STATE_KEYS = (
        "actor_id",
        "seed",
        "incarnation",
        "env_seed",
        "env",
        "rng",
        "obs",
        "episode_return",
        "episode_length",
        "total_steps",
    )

    @property
    def state_saveable(self) -> bool:
        """Whether :meth:`get_state` captures the env's episode (a pickle of the env keeps it).

        ``False`` for an env anywhere in the wrapper chain that pickles as its constructor
        arguments (Gymnasium's ``EzPickle``: the MuJoCo and Atari envs), which a pickle
        would rebuild at its start, not where its episode is.
        """
        env: Any = self.env
        while env is not None:
            if isinstance(env, gym.utils.EzPickle):
                return False
            env = getattr(env, "env", None)
        return True

    def get_state(self) -> dict[str, Any]:
        """What the next rollout continues from, for a checkpoint (to pickle at once).

        The env object itself (its episode, time limit and random generator), the sampling
        generator, the current observation and the episode and step counters, with the
        slot's ids; not the policy copy, which every rollout reloads from the weights it is
        sent. The values are this worker's own objects, not copies.

        Returns:
            A dict with the keys :data:`STATE_KEYS`.
        """
        return {
            "actor_id": self.actor_id,
            "seed": self.seed,
            "incarnation": self.incarnation,
            "env_seed": self.env_seed,
            "env": self.env,
            "rng": self.rng,
            "obs": self.obs,
            "episode_return": self.episode_return,
            "episode_length": self.episode_length,
            "total_steps": self.total_steps,
        }

    def set_state(self, state: Any) -> None:
        """Continue from :meth:`get_state` of this slot's worker; the env replaced is closed.

        Everything is checked before anything is applied.

        Args:
            state: A dict as :meth:`get_state` returns it (read back from a pickle), of a
                worker with this one's ``actor_id``, ``seed`` and ``incarnation``.

        Raises:
            ValueError: If ``state`` is not such a dict (missing keys, another slot, seed
                or incarnation, an env that is not a ``gym.Env``, an observation of
                another shape than this env's).
        """
        where = f"actor {self.actor_id} state"
        if not isinstance(state, dict) or set(state) != set(self.STATE_KEYS):
            keys = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{where}: expected keys {list(self.STATE_KEYS)}, actual {keys}")
        for key in ("actor_id", "seed", "incarnation"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"{where}: {key}: expected {getattr(self, key)}, actual {state[key]!r}"
                )
        env, rng, obs = state["env"], state["rng"], state["obs"]
        if not isinstance(env, gym.Env):
            raise ValueError(f"{where}: env: expected a gym.Env, actual {type(env).__name__}")
        if not isinstance(rng, np.random.Generator):
            raise ValueError(
                f"{where}: rng: expected a numpy Generator, actual {type(rng).__name__}"
            )
        if not isinstance(obs, np.ndarray) or obs.shape != self.obs.shape:
            got = obs.shape if isinstance(obs, np.ndarray) else type(obs).__name__
            raise ValueError(f"{where}: obs: expected shape {self.obs.shape}, actual {got}")
        counts = {}
        for key in ("env_seed", "episode_length", "total_steps"):
            try:
                counts[key] = check_int(f"{where}: {key}", state[key], 0)
            except TypeError as exc:
                raise ValueError(str(exc)) from None
        episode_return = state["episode_return"]
        if isinstance(episode_return, bool) or not isinstance(episode_return, (int, float)):
            raise ValueError(
                f"{where}: episode_return: expected a number, actual {episode_return!r}"
            )
        old = self.env
        self.env, self.rng, self.obs = env, rng, obs
        self.env_seed = counts["env_seed"]
        self.episode_return = float(episode_return)
        self.episode_length = counts["episode_length"]
        self.total_steps = counts["total_steps"]
        if old is not env:
            old.close()

    def close(self) -> None:
        """Close the environment."""
        self.env.close()


def rollout_many(
    workers: Sequence[RolloutWorker],
    weights: Weights,
    steps: int,
    policy_version: int,
) -> list[Trajectory]:
    """Step several workers in lockstep, one batched policy forward per step for all of them.

    Every worker keeps its own env, episode bookkeeping and sampling generator, so the
    per-slot semantics are those of :meth:`RolloutWorker.rollout`. The first worker's policy
    copy does the batched forward (all workers must share the workload).

    Args:
        workers: The slots to run (at least one, same workload).
        weights: Policy weights (numpy state_dict) for this round.
        steps: Env steps per worker (>= 1).
        policy_version: Recorded in each trajectory.

    Returns:
        One :class:`Trajectory` per worker, in order.

    Raises:
        ValueError: On an empty worker list, mixed workloads, ``steps`` < 1, a policy
            version outside ``[0, 2**63 - 1]``, bad weights, or an env that emitted a NaN
            or infinite observation or reward (see :func:`check_rollout_finite`).
    """
    if not workers:
        raise ValueError("workers: expected at least one RolloutWorker, actual none")
    steps = check_int("steps", steps, 1, MAX_ROLLOUT_STEPS)
    policy_version = _int64("policy_version", policy_version)
    names = {w.workload for w in workers}
    if len(names) != 1:
        raise ValueError(f"workers: expected one workload, actual {sorted(w.name for w in names)}")
    policy = workers[0].policy
    policy.load_weights(weights)
    # An actor is one core (the machine's others run other actors); restored afterwards so
    # an in-process learner keeps its own thread count.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _lockstep(workers, policy, steps, policy_version)
    finally:
        torch.set_num_threads(threads)


def _lockstep(
    workers: Sequence[RolloutWorker],
    policy: ActorCriticPolicy,
    steps: int,
    policy_version: int,
) -> list[Trajectory]:
    buffers = [w._new_buffer(steps) for w in workers]
    finished: list[tuple[list[float], list[int]]] = [([], []) for _ in workers]
    obs_batch = np.empty((len(workers), *workers[0].obs.shape), dtype=workers[0].obs.dtype)
    # MLP policies step through a numpy snapshot: at one to a few envs per forward, torch's
    # per-call overhead would cost several times the matrix products themselves.
    fast = None if policy.shared else NumpyActorCritic(policy)
    value_fn: Callable[[np.ndarray], np.ndarray] = policy.value if fast is None else fast.value
    with torch.inference_mode():
        for t in range(steps):
            for i, w in enumerate(workers):
                obs_batch[i] = w.obs
            if policy.discrete:
                uniforms, normals = np.array([w.rng.random() for w in workers]), None
            else:
                uniforms, normals = (
                    None,
                    np.stack(
                        [
                            w.rng.standard_normal(policy.action_dim, dtype=np.float32)
                            for w in workers
                        ]
                    ),
                )
            if fast is not None:
                params, values = fast.forward(obs_batch)
                actions, log_probs = fast.sample(params, uniforms, normals)
            else:
                params_t, values_t = policy(torch.from_numpy(obs_batch))
                actions_t = policy.sample_from(params_t, uniforms, normals)
                log_probs = policy.log_prob(params_t, actions_t).numpy()
                actions, values = actions_t.numpy(), values_t.numpy()
            for i, w in enumerate(workers):
                w._step(buffers[i], t, actions[i], log_probs[i], values[i], finished[i], value_fn)
        for i, w in enumerate(workers):
            obs_batch[i] = w.obs
        last_values = value_fn(obs_batch)
    return [
        w._finish(buffers[i], float(last_values[i]), finished[i], policy_version)
        for i, w in enumerate(workers)
    ]


def check_rollout_finite(worker: RolloutWorker, buf: _Buffer, last_value: float) -> None:
    """Refuse a rollout whose env emitted NaN or infinity, naming the env and the step.

    Checked once per rollout on the stored arrays (observations, rewards, the values of
    time-limit final observations and of the observation after the last step), not per
    env step: the env-step path stays as cheap as without the check.

    Args:
        worker: The worker that collected the rollout (named in the error, with the env
            step derived from its ``total_steps``).
        buf: The rollout's filled arrays (the worker's internal buffer).
        last_value: The policy's value of the observation after the rollout's last step.

    Raises:
        ValueError: If one of them is not finite.
    """
    obs = buf.obs
    if (
        (obs.dtype.kind != "f" or np.isfinite(obs).all())
        and np.isfinite(buf.rewards).all()
        and np.isfinite(buf.truncation_values).all()
        and math.isfinite(last_value)
    ):
        return
    steps = len(buf.rewards)
    first = worker.total_steps - steps  # the env step of the rollout's step 0
    where = f"env {worker.workload.env_id} (actor {worker.actor_id})"
    problems = []
    if obs.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(obs.reshape(steps, -1)).all(axis=1))
        if len(bad):
            problems.append((int(bad[0]), "observation"))
    for name, values in (("reward", buf.rewards), ("final observation", buf.truncation_values)):
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            problems.append((int(bad[0]), name))
    if not problems:
        raise ValueError(
            f"{where}: expected a finite observation after the rollout's last step "
            f"(env step {first + steps}), actual NaN or inf (its value is {last_value})"
        )
    step, name = min(problems)
    raise ValueError(
        f"{where} at step {step} of the rollout (env step {first + step}): {name}: expected "
        "finite values, actual NaN or inf"
    )


def check_worker_observation(worker: RolloutWorker) -> None:
    """Refuse the worker's current observation if it is NaN or infinite, naming the env.

    For callers that send the observation elsewhere before a rollout ends (a served
    rollout, whose server refuses a NaN request without knowing the env).

    Args:
        worker: The worker whose current observation ``worker.obs`` is checked (integer
            observations always pass).

    Raises:
        ValueError: If ``worker.obs`` is a float array with NaN or inf.
    """
    obs = worker.obs
    if obs.dtype.kind == "f" and not np.isfinite(obs).all():
        raise ValueError(
            f"env {worker.workload.env_id} (actor {worker.actor_id}) at env step "
            f"{worker.total_steps}: observation: expected finite values, actual NaN or inf"
        )
