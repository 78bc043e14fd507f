"""PPO learner for the fleet: clipped surrogate, value and entropy terms (torch), with GAE
(:func:`~fleetgym.agents.learners.gae.compute_gae`).

:class:`PPOLearner` implements the :class:`~fleetgym.agents.types.Learner` protocol. Each
:meth:`PPOLearner.update` consumes the trajectories of one round, from any number of actors,
and reports an :class:`~fleetgym.agents.types.UpdateStats`.

Extension points (hooks, so a lag-tolerant learner subclasses instead of copying the loop):

* :meth:`PPOLearner.policy_loss` -- the surrogate; receives new and behaviour
  log-probabilities and advantages, returns the loss and a clip fraction.
* :meth:`PPOLearner.compute_advantages` -- GAE per trajectory (e.g. recompute values with
  the newest parameters first).
* :meth:`PPOLearner.normalize_advantages` -- per-minibatch by default.
"""

from __future__ import annotations

import collections
import copy
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgym.agents.learners.checkpoint import learner_state, load_learner, save_learner
from fleetgym.agents.learners.checks import (
    check_seed,
    check_trajectory,
)
from fleetgym.agents.learners.gae import compute_gae
from fleetgym.agents.policies import ActorCriticPolicy
from fleetgym.agents.policies.running_stats import RunningMeanStd
from fleetgym.agents.types import Trajectory, UpdateStats, Weights
from fleetgym.agents.workloads import Workload, get_workload
from fleetgym.agents.world_model.config import ImaginationConfig
from fleetgym.agents.world_model.imagination import Imagination
from fleetgym.validation import check_float, quote

logger = logging.getLogger(__name__)

#: Hyperparameters a caller may override (names of :class:`Workload` fields).
HYPERPARAMETERS = (
    "lr",
    "epochs",
    "minibatch_size",
    "gamma",
    "gae_lambda",
    "clip_coef",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "reward_transform",
)
#: Completed episodes the reported mean return averages over.
RETURN_WINDOW = 100


@dataclass
class Batch:
    """One round's samples, flattened over actors and time, as tensors.

    Args:
        obs: The observations the actors recorded (unnormalised: the policy normalises
            them itself), shape ``(n, *obs_shape)``.
        actions: The actions taken: int64 ``(n,)`` for a discrete policy, float32
            ``(n, action_dim)`` otherwise (the unclipped samples).
        log_probs: float32 ``(n,)`` log-probabilities of the actions under the policy the
            ratios are taken to (the behaviour's; the proximal policy's with
            :class:`~fleetgym.agents.learners.losses.LossConfig`'s ``proximal_clip``).
        advantages: float32 ``(n,)`` advantage estimates, not yet normalised per minibatch.
        returns: float32 ``(n,)`` value targets the value loss regresses on (for GAE,
            the advantages plus the values they were computed from).
        values: float32 ``(n,)`` values the actors recorded with the samples.
    """

    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    values: torch.Tensor

    def __len__(self) -> int:
        return int(self.advantages.shape[0])


class PPOLearner:
    """Proximal Policy Optimisation on the trajectories of a round of fleet actors.

    Models the learner of a synchronous on-policy fleet: it owns the current policy (what
    :meth:`get_weights` ships to the actors), a version counter incremented by every
    update, an Adam optimiser and a window of the last 100 completed episode returns.
    One :meth:`update` = GAE per trajectory (bootstrapping time-limit truncations), then
    ``epochs`` passes of shuffled minibatches of the clipped-surrogate + value + entropy
    loss with gradient-norm clipping. Observation statistics (if the workload normalises
    observations) are folded in after the gradient steps, so actors and learner always
    agree on the normalisation that produced the behaviour log-probabilities.

    Args:
        workload: A :class:`Workload` or its name (defaults for every hyperparameter).
        seed: Seeds the initial weights and the minibatch shuffling, in
            ``[0, 2**63 - 1]``.
        imagination: A world model that adds imagined trajectories to each update: an
            :class:`~fleetgym.agents.world_model.ImaginationConfig`, a dict of its fields or
            ``True`` (its defaults; both take ``seed`` unless the dict sets one);
            ``None`` or ``False`` (the default): real samples only.
        **overrides: Any of :data:`HYPERPARAMETERS`, replacing the workload's default.

    Example:
        >>> from fleetgym.agents.rollout import RolloutWorker
        >>> learner = PPOLearner("CartPole-v1", seed=0, epochs=1)
        >>> worker = RolloutWorker("CartPole-v1", actor_id=0, seed=0)
        >>> traj = worker.rollout(learner.get_weights(), steps=64, policy_version=0)
        >>> stats = learner.update([traj])
        >>> stats.num_samples, stats.policy_version, stats.kl >= 0.0
        (64, 1, True)

    Raises:
        TypeError: For an unknown hyperparameter name, or an ``imagination`` of another
            type or with an unknown field.
        ValueError: For an out-of-range hyperparameter or seed.
    """

    def __init__(
        self,
        workload: Workload | str,
        seed: int = 0,
        *,
        imagination: ImaginationConfig | dict[str, Any] | bool | None = None,
        **overrides: Any,
    ) -> None:
        base = get_workload(workload)
        unknown = sorted(set(overrides) - set(HYPERPARAMETERS))
        if unknown:
            raise TypeError(
                f"PPOLearner: expected hyperparameters among {list(HYPERPARAMETERS)}, actual {unknown}"
            )
        seed = check_seed("seed", seed)
        self.workload = base.with_overrides(**overrides) if overrides else base
        self.seed = int(seed)
        # Seed the initial weights without touching the caller's global torch RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.policy: ActorCriticPolicy = self.workload.make_policy()
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.workload.lr, eps=1e-5)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.policy_version = 0
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=RETURN_WINDOW)
        self.episodes_seen = 0
        self.samples_seen = 0
        self.return_stats = RunningMeanStd()
        # Per actor slot, the running discounted return of its current episode: episodes
        # continue across rounds, so reward scaling follows each slot's stream.
        self._discounted: dict[int, float] = {}
        config = ImaginationConfig.from_value(imagination, seed=self.seed)
        #: The imagination buffer and world model (``None`` without ``imagination=``).
        self.imagination: Imagination | None = (
            None
            if config is None
            else Imagination(config, self.policy.observation_space, self.policy.action_space)
        )

    # ----------------------------------------------------------------- protocol
    def get_weights(self) -> Weights:
        """Current policy weights (numpy copies)."""
        return self.policy.get_weights()

    def set_learning_rate(self, lr: float) -> None:
        """Change the optimiser's learning rate (e.g. an annealing schedule).

        Args:
            lr: The Adam learning rate from the next gradient step on, a finite number
                > 0 (the workload's ``lr`` is left as it was).

        Raises:
            TypeError / ValueError: If ``lr`` is not a finite number > 0.
        """
        lr = check_float("lr", lr, 0.0, strict=True)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # ----------------------------------------------------------------- hooks
    def transform_rewards(self, trajectory: Trajectory) -> np.ndarray:
        """Rewards the advantages are computed from (the workload's ``reward_transform``).

        ``"sign"`` takes each reward's sign; ``"scale"`` divides by the running standard
        deviation of the discounted return, and updates that statistic.

        Args:
            trajectory: The trajectory whose ``rewards`` to transform. With ``"scale"`` its
                ``actor_id`` names the stream whose discounted return continues across
                rounds; a negative id (an imagined trajectory) is scaled without updating
                the statistics.
        """
        rewards = np.asarray(trajectory.rewards, np.float64)
        mode = self.workload.reward_transform
        if mode == "sign":
            return np.sign(rewards)
        if mode == "scale" and trajectory.actor_id < 0:
            # Imagined samples are scaled like the real ones, without moving the scale.
            return rewards / math.sqrt(float(self.return_stats.var) + 1e-8)
        if mode == "scale":
            done = np.asarray(trajectory.terminated) | np.asarray(trajectory.truncated)
            running = self._discounted.get(trajectory.actor_id, 0.0)
            discounted = np.empty_like(rewards)
            for t, r in enumerate(rewards):
                running = running * self.workload.gamma + r
                discounted[t] = running
                if done[t]:
                    running = 0.0
            self._discounted[trajectory.actor_id] = running
            self.return_stats.update(discounted)
            return rewards / math.sqrt(float(self.return_stats.var) + 1e-8)
        return rewards

    def compute_advantages(
        self, trajectory: Trajectory, rewards: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """GAE advantages and value targets of one trajectory (behaviour values).

        Args:
            trajectory: The trajectory; its recorded values, episode ends, truncation
                values and ``last_value`` are used.
            rewards: Its rewards after :meth:`transform_rewards`, shape
                ``(len(trajectory),)``.

        Returns:
            ``(advantages, returns)``, float32 arrays of the trajectory's length.
        """
        return compute_gae(
            rewards,
            trajectory.values,
            trajectory.terminated,
            trajectory.truncated,
            trajectory.truncation_values,
            trajectory.last_value,
            self.workload.gamma,
            self.workload.gae_lambda,
        )

    def normalize_advantages(self, advantages: torch.Tensor) -> torch.Tensor:
        """Per-minibatch standardisation (SB3/CleanRL default).

        Args:
            advantages: One minibatch's advantages, shape ``(m,)``; fewer than two are
                returned unchanged.
        """
        if advantages.numel() < 2:
            return advantages
        return (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    def policy_loss(
        self, new_log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The clipped surrogate loss (to minimise) and the fraction of clipped ratios.

        Args:
            new_log_probs: Log-probabilities of the minibatch's actions under the current
                parameters (differentiable), shape ``(m,)``.
            old_log_probs: Their log-probabilities in the batch (:attr:`Batch.log_probs`,
                the behaviour's), shape ``(m,)``.
            advantages: The minibatch's advantages after :meth:`normalize_advantages`,
                shape ``(m,)``.
        """
        ratio = torch.exp(new_log_probs - old_log_probs)
        clip = self.workload.clip_coef
        surrogate = torch.min(
            ratio * advantages, torch.clamp(ratio, 1 - clip, 1 + clip) * advantages
        )
        clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
        return -surrogate.mean(), clip_fraction

    def stop_update(self) -> bool:
        """Hook: ``True`` ends the update before this minibatch's step (default: never).

        Asked after :meth:`policy_loss` of each minibatch, e.g. for a KL budget.
        """
        return False

    def value_loss(self, values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
        """Squared error of the value head against the GAE returns (0.5 * MSE).

        Args:
            values: The value head's outputs for the minibatch (differentiable), shape
                ``(m,)``.
            returns: Their targets (:attr:`Batch.returns`), shape ``(m,)``.
        """
        return 0.5 * (values - returns).square().mean()

    # ----------------------------------------------------------------- update
    def _check(self, trajectories: Iterable[Trajectory]) -> list[Trajectory]:
        """The trajectories as a list (an iterable is read once), each checked.

        Every array must be of its field's length, every number finite and every action
        one the policy can take (see :func:`~fleetgym.agents.learners.checks.check_trajectory`).
        """
        given = trajectories
        if isinstance(given, Iterable) and not isinstance(given, (str, bytes, dict)):
            trajectories = list(given)
        if not isinstance(trajectories, list) or not trajectories:
            raise ValueError(
                f"trajectories: expected a non-empty list of Trajectory, actual {quote(given)}"
            )
        policy = self.policy
        for i, traj in enumerate(trajectories):
            if not isinstance(traj, Trajectory):
                raise TypeError(
                    f"trajectories[{i}]: expected Trajectory items, actual {type(traj).__name__}"
                )
            check_trajectory(
                f"trajectories[{i}]", traj, policy.obs_shape, policy.discrete, policy.action_dim
            )
        if not sum(len(t) for t in trajectories):
            raise ValueError("trajectories: expected at least one step, actual 0")
        return trajectories

    def build_batch(self, trajectories: list[Trajectory]) -> Batch:
        """Advantages per trajectory, then everything flattened into one :class:`Batch`.

        Args:
            trajectories: The checked trajectories of the update, in order (rewards are
                transformed in this order, which matters for ``reward_transform="scale"``).
        """
        advantages, returns = [], []
        for traj in trajectories:
            adv, ret = self.compute_advantages(traj, self.transform_rewards(traj))
            advantages.append(adv)
            returns.append(ret)
        actions = np.concatenate([t.actions for t in trajectories])
        return Batch(
            obs=torch.from_numpy(np.concatenate([t.obs for t in trajectories])),
            actions=torch.from_numpy(
                actions.astype(np.int64 if self.policy.discrete else np.float32)
            ),
            log_probs=torch.from_numpy(
                np.concatenate([t.log_probs for t in trajectories]).astype(np.float32)
            ),
            advantages=torch.from_numpy(np.concatenate(advantages)),
            returns=torch.from_numpy(np.concatenate(returns)),
            values=torch.from_numpy(
                np.concatenate([t.values for t in trajectories]).astype(np.float32)
            ),
        )

    @torch.no_grad()
    def _distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        chunks = [self.policy(obs[i : i + 4096])[0] for i in range(0, obs.shape[0], 4096)]
        log_std = None if self.policy.discrete else self.policy.log_std.detach().clone()
        return torch.cat(chunks), log_std

    def update(self, trajectories: Iterable[Trajectory]) -> UpdateStats:
        """One PPO update from one round's trajectories; increments :attr:`policy_version`.

        Args:
            trajectories: The round's :class:`~fleetgym.agents.types.Trajectory` objects,
                from any number of actors (a list or any iterable, read once; at least one
                step in all).

        Returns:
            The update's :class:`~fleetgym.agents.types.UpdateStats` (losses averaged over
            the minibatch steps, KL between the policy before and after).

        Raises:
            ValueError / TypeError: If ``trajectories`` is empty or malformed (a length
                mismatch, NaN or infinity, an impossible action).
            ValueError: If the update diverged (a parameter became NaN or infinite, or a
                gradient step overflowed, e.g. ``lr=1e300``); the learner is rolled back
                to its parameters and optimiser state from before the update.
        """
        trajectories = self._check(trajectories)
        start = time.perf_counter()
        real = trajectories
        if self.imagination is not None:
            imagined = self.imagination.step(self.policy, real, self.policy_version)
            if imagined:
                share = self.imagination.last.share
                trajectories = (real if share < 1.0 else []) + imagined
        self.policy.train()
        batch = self.build_batch(trajectories)
        before, log_std_before = self._distribution(batch.obs)
        # Kept to roll back an update that diverges (a few parameter tensors: cheap).
        saved = copy.deepcopy((self.policy.state_dict(), self.optimizer.state_dict()))
        try:
            totals, count = self._epochs(batch)
            for extra in self._imagined_passes():
                more, n = self._epochs(self.build_batch(extra))
                for key, value in more.items():
                    totals[key] += value
                count += n
        except RuntimeError as exc:
            self._rollback(saved)
            if "overflow" not in str(exc):
                raise
            # Adam's step raises once lr / (1 - beta1^t) leaves float32: a divergence too.
            self._diverged(f"a gradient step that overflowed ({exc})")
        self._check_finite_update(saved)
        # Observation statistics follow the real env only (imagined states would drift them).
        self.policy.update_obs_stats(
            batch.obs.numpy()
            if trajectories is real
            else np.concatenate([np.asarray(t.obs) for t in real])
        )
        after, log_std_after = self._distribution(batch.obs)
        kl = float(
            self.policy.kl_divergence(before, after, log_std_before, log_std_after)
            .mean()
            .clamp_min(0.0)
        )
        self.policy.eval()

        n = len(batch)
        episodes = [r for t in real for r in t.episode_returns]
        self.recent_returns.extend(float(r) for r in episodes)
        self.episodes_seen += len(episodes)
        self.samples_seen += sum(len(t) for t in real)
        self.policy_version += 1
        count = max(count, 1)
        stats = UpdateStats(
            loss=totals["loss"] / count,
            mean_return=self.mean_return,
            kl=kl,
            update_time_s=time.perf_counter() - start,
            num_samples=n,
            policy_version=self.policy_version,
            policy_loss=totals["pg"] / count,
            value_loss=totals["v"] / count,
            entropy=totals["ent"] / count,
            clip_fraction=totals["clip"] / count,
            episodes_completed=len(episodes),
        )
        logger.debug("update %d: %s", self.policy_version, stats)
        return stats

    def _epochs(self, batch: Batch) -> tuple[collections.defaultdict[str, float], int]:
        """The update's gradient steps: ``epochs`` passes of shuffled minibatches."""
        n = len(batch)
        mb = min(self.workload.minibatch_size, n)
        totals: collections.defaultdict[str, float] = collections.defaultdict(float)
        count = 0
        for _ in range(self.workload.epochs):
            order = torch.randperm(n, generator=self.generator)
            for lo in range(0, n, mb):
                idx = order[lo : lo + mb]
                if idx.numel() < 2 and n >= 2:
                    continue  # a 1-sample tail minibatch has no advantage std
                new_log_probs, entropy, values = self.policy.evaluate_actions(
                    batch.obs[idx], batch.actions[idx]
                )
                adv = self.normalize_advantages(batch.advantages[idx])
                pg_loss, clip_fraction = self.policy_loss(new_log_probs, batch.log_probs[idx], adv)
                if self.stop_update():
                    return totals, count
                v_loss = self.value_loss(values, batch.returns[idx])
                ent = entropy.mean()
                loss = pg_loss + self.workload.vf_coef * v_loss - self.workload.ent_coef * ent
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(
                    self.policy.parameters(), self.workload.max_grad_norm
                )
                self.optimizer.step()
                totals["loss"] += float(loss.detach())
                totals["pg"] += float(pg_loss.detach())
                totals["v"] += float(v_loss.detach())
                totals["ent"] += float(ent.detach())
                totals["clip"] += float(clip_fraction)
                count += 1
        return totals, count

    def _imagined_passes(self) -> Iterable[list[Trajectory]]:
        """Fresh imagined trajectories for each extra pass of this update (see
        :attr:`~fleetgym.agents.world_model.ImaginationConfig.updates_per_round`)."""
        imagination = self.imagination
        if imagination is None or not imagination.last.active:
            return
        record = imagination.last
        for _ in range(imagination.config.updates_per_round - 1):
            yield imagination.imagine(
                self.policy, record.imagined_samples, record.horizon, self.policy_version
            )

    def _rollback(self, saved: tuple[dict[str, Any], dict[str, Any]]) -> None:
        self.policy.load_state_dict(saved[0])
        self.optimizer.load_state_dict(saved[1])
        self.policy.eval()

    def _diverged(self, detail: str) -> None:
        raise ValueError(
            f"update {self.policy_version + 1}: expected finite parameters, actual {detail} "
            "(diverged: lower lr, ent_coef or vf_coef); the learner keeps its parameters "
            "from before this update"
        )

    def _check_finite_update(self, saved: tuple[dict[str, Any], dict[str, Any]]) -> None:
        """Roll back and raise if the update left a non-finite parameter (never saved)."""
        bad = [
            name
            for name, value in self.policy.state_dict().items()
            if value.is_floating_point() and not bool(torch.isfinite(value).all())
        ]
        if bad:
            self._rollback(saved)
            self._diverged(f"NaN or inf in {bad[:5]}")

    @property
    def mean_return(self) -> float:
        """Mean of the last (up to) 100 completed episode returns; 0.0 before the first."""
        return float(np.mean(self.recent_returns)) if self.recent_returns else 0.0

    # ----------------------------------------------------------------- files
    def state(self) -> dict[str, Any]:
        """Everything :meth:`save` writes, as tensors and plain Python values."""
        return learner_state(self, HYPERPARAMETERS)

    def save(self, path: str | Path) -> Path:
        """Write the learner (policy, optimiser, version, return window) with ``torch.save``.

        Also writes the policy alone next to it (``<stem>.policy.pt`` + JSON), loadable with
        :meth:`ActorCriticPolicy.load`.

        Args:
            path: The file to write (``str`` or ``os.PathLike``; missing parent folders are
                created). A learner with imagination also writes ``<stem>.world_model.pt``.

        Returns:
            ``path`` as a :class:`~pathlib.Path`.

        Raises:
            TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
            ValueError: If it is empty or a folder.
        """
        return save_learner(self, path)

    def load(self, path: str | Path) -> None:
        """Restore a learner written by :meth:`save` (``torch.load(weights_only=True)``).

        Everything is checked before anything is applied, so a refused file leaves the
        learner as it was.

        Args:
            path: A file :meth:`save` wrote, for this learner's workload and policy (``str``
                or ``os.PathLike``); with imagination ``<stem>.world_model.pt`` is read too.

        Raises:
            TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
            FileNotFoundError: If ``path`` does not exist.
            ValueError: Naming the file, if it is not a fleetgym learner checkpoint (random
                bytes, a pickle of objects, another class's file, missing keys), is for
                another workload or policy, or holds an impossible value (a negative
                version or count, NaN weights).
        """
        load_learner(self, path)
