"""Policy lag: measured per sample, bounded, injected on purpose, and compensated in the learner.

*Policy lag* of a sample = the learner's policy version when the sample is used in an
update minus the behaviour version that produced it (0 in synchronous PPO). This module
holds the pieces the asynchronous trainer
(:mod:`fleetgym.agents.learners.asynchronous.trainer`) and the lag
sweep share:

* :class:`CompensatedPPOLearner` -- a :class:`~fleetgym.agents.learners.ppo.PPOLearner` whose
  policy loss and compensations come from a :class:`~fleetgym.agents.learners.losses.LossConfig`
  (any registered loss: PPO-clip, GIPO, V-trace or your own; value/GAE recomputation with the newest parameters; global
  advantage normalisation). It records every sample's lag, drops (and counts) samples older
  than ``max_policy_lag`` and reports the lag distribution in :class:`LagUpdateStats`.
* :class:`WeightRing` -- the last ``k + 1`` published weights, so actors can act with the
  weights from ``k`` updates ago (the fixed-lag injector of the lag sweep).
* :class:`ObservedTrajectory` -- a trajectory that also keeps ``s_n``, the observation
  after its last step, so the newest critic can re-bootstrap it.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fleetgym.agents.learners.checks import MAX_VERSION, check_observation, check_version
from fleetgym.agents.learners.losses.config import LossConfig
from fleetgym.agents.learners.losses.functions import (
    effective_sample_size,
    kl_estimate,
    normalize,
)
from fleetgym.agents.learners.ppo import Batch, PPOLearner
from fleetgym.agents.types import Trajectory, UpdateStats, Weights
from fleetgym.agents.workloads import Workload
from fleetgym.validation import check_int, quote


@dataclass
class ObservedTrajectory(Trajectory):
    """A :class:`~fleetgym.agents.types.Trajectory` with ``next_obs``, the observation ``s_n``.

    Without it a learner cannot recompute ``V(s_n)`` with newer parameters and keeps the
    behaviour's ``last_value``. The fields before ``next_obs`` are the parent's.

    Args:
        obs: The observation before each of the ``n`` steps, shape ``(n, *obs_shape)``.
        actions: The action taken at each step (for a Box space the unclipped sample).
        log_probs: The behaviour policy's log-probability of each action, shape ``(n,)``.
        values: The behaviour critic's ``V(s_t)`` of each step, shape ``(n,)``.
        rewards: The reward of each step, shape ``(n,)``.
        terminated, truncated: Bool per step, shape ``(n,)``: the episode ended after step
            ``t`` by termination or by a time limit.
        truncation_values: ``V`` of the final observation where ``truncated[t]``, 0
            elsewhere, shape ``(n,)``.
        last_value: ``V(s_n)`` as the behaviour critic computed it.
        episode_returns, episode_lengths: Undiscounted return and length (steps) of each
            episode that ended in this trajectory, counted from the episode's start.
        actor_id: The actor slot that collected it (negative: an imagined trajectory).
        policy_version: The version of the weights the actor acted with.
        seed: The fleet seed the actor slot was started with.
        next_obs: ``s_n``, the observation after the last step (``None``: not known).
        final_obs: The observation each episode-ending step reached, before the reset
            (NaN on the other rows), or ``None`` when not recorded.
    """

    next_obs: np.ndarray | None = None


@dataclass
class LagUpdateStats(UpdateStats):
    """:class:`~fleetgym.agents.types.UpdateStats` plus the policy lag of the update's samples.

    Lags are counted in policy versions (updates). The fields before ``lag_mean`` are the
    parent's; if every sample was dropped they report no training (losses 0.0).

    Args:
        loss: Mean over the update's minibatch steps of the total loss (policy term +
            ``vf_coef`` * value loss - ``ent_coef`` * entropy).
        mean_return: Mean return of the last (up to) 100 completed episodes, those of
            dropped samples included; 0.0 before the first.
        kl: ``KL(pi_before || pi_after)`` averaged over the batch's samples.
        update_time_s: Wall seconds of the PPO update on the kept samples (0.0 if none).
        num_samples: Samples in the batch trained on (dropped ones excluded).
        policy_version: The learner's version after the update (unchanged if every
            sample was dropped).
        policy_loss, value_loss, entropy, clip_fraction: Means over the minibatch steps of
            the policy term, the value loss (0.5 * MSE), the entropy and the loss's
            fraction statistic (clipped, outside ``sigma`` or truncated ratios).
        episodes_completed: Episodes that ended in the update's trajectories, dropped
            ones included.
        lag_mean, lag_p50, lag_p99: Mean, median and 99th percentile of ``lags`` (0.0
            without samples).
        lag_max: The largest of ``lags`` (0 without samples).
        dropped_samples: Samples of this update dropped for a lag above ``max_policy_lag``.
        lags: int64 array, one lag per sample offered to the update (dropped ones
            included): the learner's version minus the sample's behaviour version.
        ess: Effective sample size of the importance weights ``w = pi_theta / mu`` of the
            kept samples, with ``pi_theta`` the learner's policy at the start of the
            update (the ratio the loss sees before its first step):
            ``(sum w)^2 / (n * sum w^2)``, in ``(0, 1]``. 1 means on-policy (every weight
            equal); near ``1 / n`` a few stale samples dominate the update. NaN when not
            measured (no kept samples, or a learner that does not measure it).
    """

    lag_mean: float = 0.0
    lag_p50: float = 0.0
    lag_p99: float = 0.0
    lag_max: int = 0
    dropped_samples: int = 0
    lags: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    ess: float = float("nan")

    def lag_histogram(self) -> dict[str, int]:
        """Sample counts per lag bin ``0``, ``1``, ``2-3``, ``4-7``, ... (powers of two).

        Example:
            >>> LagUpdateStats(0, 0, 0, 0, 5, 1, lags=np.array([0, 1, 2, 3, 9])).lag_histogram()
            {'0': 1, '1': 1, '2-3': 2, '8-15': 1}
        """
        out: dict[str, int] = {}
        for lag in np.sort(self.lags):
            lag = int(lag)
            if lag < 2:
                key = str(lag)
            else:
                low = 1 << (lag.bit_length() - 1)
                key = f"{low}-{2 * low - 1}"
            out[key] = out.get(key, 0) + 1
        return out


def behaviour_versions(trajectory: Trajectory, name: str = "trajectory") -> np.ndarray:
    """The behaviour policy version of each sample (a per-sample array if the trajectory has one).

    Args:
        trajectory: The trajectory. A ``policy_versions`` attribute (an integer array, one
            version per sample, as served actors record) overrides its ``policy_version``.
        name: How error messages name the trajectory (e.g. ``"trajectories[3]"``).

    Returns:
        An int64 array of one version per sample.

    Raises:
        TypeError: If a version is not an integer (``policy_version`` a float or a bool,
            ``policy_versions`` of another dtype).
        ValueError: If ``policy_versions`` has not one entry per sample, a version is
            negative or above ``2**63 - 1``, or the versions go backwards along the
            trajectory (the weights an actor acts with only ever get newer).
    """
    version = check_version(f"{name}.policy_version", trajectory.policy_version)
    per_sample = getattr(trajectory, "policy_versions", None)
    if per_sample is None:
        return np.full(len(trajectory), version, np.int64)
    where = f"{name}.policy_versions"
    if not isinstance(per_sample, np.ndarray) or per_sample.dtype.kind not in "iu":
        kind = per_sample.dtype if isinstance(per_sample, np.ndarray) else type(per_sample).__name__
        raise TypeError(f"{where}: expected an integer np.ndarray, actual {kind}")
    if per_sample.shape != (len(trajectory),):
        raise ValueError(
            f"{where}: expected shape ({len(trajectory)},) (one per sample), "
            f"actual {per_sample.shape}"
        )
    if len(per_sample):
        low, high = per_sample.min(), per_sample.max()
        if low < 0 or high > MAX_VERSION:
            raise ValueError(
                f"{where}: expected versions in [0, 2**63 - 1], actual [{low}, {high}]"
            )
        if len(per_sample) > 1 and (np.diff(per_sample.astype(np.int64)) < 0).any():
            raise ValueError(
                f"{where}: expected versions that never decrease, "
                f"actual {quote(per_sample[:16].tolist())}"
            )
    return per_sample.astype(np.int64)


def _tail(trajectory: Trajectory, start: int) -> Trajectory:
    """The trajectory from step ``start`` on (its completed episodes stay with it)."""
    changes: dict[str, Any] = {
        name: getattr(trajectory, name)[start:]
        for name in (
            "obs",
            "actions",
            "log_probs",
            "values",
            "rewards",
            "terminated",
            "truncated",
            "truncation_values",
        )
    }
    if trajectory.final_obs is not None:
        changes["final_obs"] = trajectory.final_obs[start:]
    per_sample = getattr(trajectory, "policy_versions", None)
    declared = {f.name for f in dataclasses.fields(trajectory)}
    if per_sample is not None and "policy_versions" in declared:
        changes["policy_versions"] = np.asarray(per_sample)[start:]
    tail = dataclasses.replace(trajectory, **changes)
    if per_sample is not None and "policy_versions" not in declared:
        tail.policy_versions = np.asarray(per_sample)[start:]  # type: ignore[attr-defined]
    next_obs = getattr(trajectory, "next_obs", None)
    if next_obs is not None and "next_obs" not in declared:
        tail.next_obs = next_obs  # type: ignore[attr-defined]
    return tail


#: Largest lag bound (a guard: far above any lag worth training with).
MAX_POLICY_LAG = 10_000_000
#: Most weights a :class:`WeightRing` keeps (the longest injected lag is one less).
MAX_RING = 10_001


class WeightRing:
    """The last ``capacity`` published weights by version: the fixed-lag injector.

    Models actors that act with stale weights on purpose: :meth:`lagged` returns the
    weights from ``k`` updates before the newest (or the oldest kept, early in training).

    Args:
        capacity: How many versions to keep (>= 1; ``k + 1`` for a lag of ``k``).

    Example:
        >>> ring = WeightRing(capacity=3)
        >>> for v in range(5):
        ...     ring.push(v, {"w": np.full(1, float(v))})
        >>> version, weights = ring.lagged(2)
        >>> version, float(weights["w"][0]), ring.versions()
        (2, 2.0, [2, 3, 4])

    Raises:
        ValueError: If ``capacity`` is not in ``[1, 10001]`` or ``k`` < 0.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = check_int("capacity", capacity, 1, MAX_RING)
        self._ring: collections.deque[tuple[int, Weights]] = collections.deque(maxlen=self.capacity)

    def push(self, version: int, weights: Weights) -> None:
        """Add the weights of a new version (the oldest falls out when full).

        Pushing the newest version again replaces its weights (an update that dropped
        every sample publishes the same version twice), so each version is kept once.

        Args:
            version: The policy version of ``weights``: an int in ``[0, 2**63 - 1]``, at
                least the newest version pushed.
            weights: The weights, a dict of arrays (kept by reference, not copied).

        Raises:
            TypeError: If ``version`` is not an int or ``weights`` not a dict.
            ValueError: If ``version`` is negative, above ``2**63 - 1`` or older than the
                newest one pushed.
        """
        version = check_version("version", version)
        if not isinstance(weights, dict):
            raise TypeError(f"weights: expected a dict of arrays, actual {type(weights).__name__}")
        if self._ring:
            newest = self._ring[-1][0]
            if version < newest:
                raise ValueError(
                    f"version: expected at least the newest version {newest}, actual {version}"
                )
            if version == newest:
                self._ring.pop()
        self._ring.append((version, weights))

    def versions(self) -> list[int]:
        """The versions kept, oldest first."""
        return [v for v, _ in self._ring]

    def lagged(self, k: int) -> tuple[int, Weights]:
        """``(version, weights)`` of ``k`` versions before the newest, or the oldest kept.

        Args:
            k: How many versions back from the newest, an int >= 0 (``0``: the newest).

        Raises:
            LookupError: If nothing was pushed yet.
        """
        k = check_int("k", k, low=0)
        if not self._ring:
            raise LookupError("WeightRing: expected pushed weights, actual none")
        return self._ring[max(0, len(self._ring) - 1 - k)]


class CompensatedPPOLearner(PPOLearner):
    """PPO learner for lagged samples: a choice of policy loss, lag compensations and a lag bound.

    Models the learner of an asynchronous trainer. Each :meth:`update` measures every
    sample's lag (``policy_version`` now minus the sample's behaviour version), drops samples
    whose lag exceeds ``max_policy_lag`` (counted in the stats), computes advantages per the
    :class:`~fleetgym.agents.learners.losses.LossConfig` (GAE, or V-trace targets with the current
    policy as target, from recorded or recomputed values), normalises them globally or per
    minibatch and runs the PPO epochs with the chosen policy loss. Truncation bootstrap
    values stay the behaviour's (the final observation of a time-limit end is not kept).

    A loss with a proximal policy (``needs_proximal``: ``"decoupled"``) takes its ratio to
    this learner's own parameters ``config.proximal_offset`` updates back from the version
    the update produces: offset 1 is the parameters at the start of the update (AReaL's
    choice), offset ``k`` the ones ``k - 1`` updates before, kept in a :class:`WeightRing`
    of capacity ``k`` (early in a run the oldest kept). Each update also reports the
    effective sample size of ``pi_theta / mu`` at its start (:attr:`LagUpdateStats.ess`).

    Args:
        workload: A :class:`~fleetgym.agents.workloads.Workload` or its name.
        config: The loss and compensations (default: plain PPO-clip).
        max_policy_lag: Samples with a larger lag are dropped (``None``: keep all). With a
            proximal loss, ``config.proximal_offset`` may be at most ``max_policy_lag + 1``
            (the proximal policy no older than the oldest sample admitted).
        seed: Seeds the initial weights and the minibatch shuffling.
        **overrides: PPO hyperparameters (see
            :data:`fleetgym.agents.learners.ppo.HYPERPARAMETERS`), and ``imagination=`` as
            in :class:`~fleetgym.agents.learners.ppo.PPOLearner`.

    Example:
        >>> from fleetgym.agents.rollout import RolloutWorker
        >>> learner = CompensatedPPOLearner("CartPole-v1", LossConfig("gipo"), epochs=1)
        >>> traj = RolloutWorker("CartPole-v1", 0, seed=0).rollout(learner.get_weights(), 32, 0)
        >>> stats = learner.update([traj])
        >>> stats.num_samples, stats.lag_p99, stats.policy_version
        (32, 0.0, 1)

    Raises:
        TypeError: If ``config`` is not a :class:`LossConfig`.
        ValueError: If ``max_policy_lag`` is not in ``[0, 10000000]``, or a proximal
            loss's ``config.proximal_offset`` exceeds ``max_policy_lag + 1``.
    """

    def __init__(
        self,
        workload: Workload | str,
        config: LossConfig | None = None,
        max_policy_lag: int | None = None,
        seed: int = 0,
        **overrides: Any,
    ) -> None:
        super().__init__(workload, seed=seed, **overrides)
        config = LossConfig() if config is None else config
        if not isinstance(config, LossConfig):
            raise TypeError(f"config: expected a LossConfig, actual {type(config).__name__}")
        self.config = config
        self.max_policy_lag = (
            None
            if max_policy_lag is None
            else check_int("max_policy_lag", max_policy_lag, 0, MAX_POLICY_LAG)
        )
        self._proximal_ring: WeightRing | None = None
        self._proximal_policy: Any = None
        if config.policy_loss.needs_proximal:
            offset = config.proximal_offset
            if self.max_policy_lag is not None and offset > self.max_policy_lag + 1:
                raise ValueError(
                    f"proximal_offset: expected at most max_policy_lag + 1 = "
                    f"{self.max_policy_lag + 1} (a proximal policy no older than the oldest "
                    f"sample admitted), actual {offset}"
                )
            if offset > 1:
                self._proximal_ring = WeightRing(offset)
                self._proximal_policy = copy.deepcopy(self.policy)
        # ESS of pi_theta / mu at the start of the update in progress (NaN: not measured).
        self._ess = float("nan")
        self._ess_pending = False
        self.dropped_samples_total = 0
        # KL budget of the update in progress: the batch's KL(mu || pi) at its start, and
        # whether the budget is spent (then the update ends).
        self._start_kl = 0.0
        self._policy_stopped = False
        self.policy_stops = 0  # updates ended early on the KL budget

    # ----------------------------------------------------------------- hooks
    @torch.no_grad()
    def _current(self, trajectory: Trajectory) -> tuple[np.ndarray, np.ndarray, float]:
        """Values, log-probabilities of the taken actions and ``V(s_n)`` under the newest weights."""
        obs = torch.from_numpy(np.asarray(trajectory.obs))
        params, values = self.policy(obs)
        actions = torch.from_numpy(
            np.asarray(trajectory.actions).astype(np.int64 if self.policy.discrete else np.float32)
        )
        log_probs = self.policy.log_prob(params, actions)
        last_value = float(trajectory.last_value)
        next_obs = getattr(trajectory, "next_obs", None)
        if next_obs is not None and self.config.recompute_values:
            last_value = float(self.policy(torch.from_numpy(np.asarray(next_obs)[None]))[1][0])
        return values.numpy(), log_probs.numpy(), last_value

    def compute_advantages(
        self, trajectory: Trajectory, rewards: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The configured loss's advantages and value targets (GAE unless the loss has its own).

        Values come from the behaviour's record or, with ``config.recompute_values``, from
        the newest critic; a loss whose estimator needs the ratios (``needs_log_rhos``, as
        V-trace's) gets ``log pi_theta - log mu`` of the newest policy.

        Args:
            trajectory: The trajectory; with ``config.recompute_values`` its ``next_obs``
                (an :class:`ObservedTrajectory`'s), if any, gives the newest ``V(s_n)``.
            rewards: Its rewards after :meth:`transform_rewards`, shape
                ``(len(trajectory),)``.

        Returns:
            ``(advantages, value_targets)``, float32 arrays of the trajectory's length.
        """
        policy_loss = self.config.policy_loss
        values: np.ndarray = np.asarray(trajectory.values)
        last_value = float(trajectory.last_value)
        log_rhos = None
        if self.config.recompute_values or policy_loss.needs_log_rhos:
            current_values, log_probs, current_last = self._current(trajectory)
            if self.config.recompute_values:
                values, last_value = current_values, current_last
            if policy_loss.needs_log_rhos:
                log_rhos = log_probs - np.asarray(trajectory.log_probs, np.float64)
        return policy_loss.targets(
            rewards,
            values,
            trajectory.terminated,
            trajectory.truncated,
            trajectory.truncation_values,
            last_value,
            log_rhos,
            self.workload.gamma,
            self.workload.gae_lambda,
        )

    def build_batch(self, trajectories: list[Trajectory]) -> Batch:
        """The parent's batch, with advantages standardised over all of it if configured.

        With ``config.proximal_clip`` the batch's log-probabilities become the proximal
        policy's (this learner's before the update's first step) and each advantage is
        weighted by ``pi_prox / mu``: PPO-clip's ``min(r A, clip(r) A)`` with
        ``r = pi / pi_prox`` and ``A' = (pi_prox / mu) A`` is decoupled PPO's objective,
        because the weight is positive. With per-minibatch normalisation the weighted
        advantages are what each minibatch standardises (AsyncPPO normalises globally).

        With a loss that has a proximal policy (``needs_proximal``) the batch's
        ``log_probs`` has two columns, shape ``(n, 2)``: the proximal policy's
        (``config.proximal_offset`` updates back) and the behaviour's; the loss weights
        the advantages itself, after their normalisation.

        The first batch of an update also measures the effective sample size of
        ``pi_theta / mu`` (:attr:`LagUpdateStats.ess`).

        Args:
            trajectories: The trajectories the update trains on (after the lag bound), in
                order.
        """
        batch = super().build_batch(trajectories)
        if self.config.global_advantage_norm:
            batch.advantages = normalize(batch.advantages)
        with torch.no_grad():
            start_log_probs = self.policy.evaluate_actions(batch.obs, batch.actions)[0]
        if self._ess_pending:
            self._ess = effective_sample_size(start_log_probs - batch.log_probs)
            self._ess_pending = False
        if self.config.proximal_clip:
            batch.advantages = batch.advantages * torch.exp(start_log_probs - batch.log_probs)
            batch.log_probs = start_log_probs
        if self.config.policy_loss.needs_proximal:
            proximal = self._proximal_log_probs(batch, start_log_probs)
            batch.log_probs = torch.stack([proximal, batch.log_probs], dim=1)
        self._policy_stopped = False
        self._start_kl = 0.0
        if self.config.target_kl is not None:
            reference = batch.log_probs[:, 0] if batch.log_probs.ndim == 2 else batch.log_probs
            self._start_kl = float(kl_estimate(start_log_probs, reference))
        return batch

    @torch.no_grad()
    def _proximal_log_probs(self, batch: Batch, start_log_probs: torch.Tensor) -> torch.Tensor:
        """``log pi_prox`` of the batch: this learner ``proximal_offset`` updates back."""
        ring = self._proximal_ring
        if ring is None:  # offset 1: the parameters at the start of the update
            return start_log_probs
        ring.push(self.policy_version, self.get_weights())
        _, weights = ring.lagged(self.config.proximal_offset - 1)
        self._proximal_policy.load_weights(weights)
        self._proximal_policy.eval()
        return self._proximal_policy.evaluate_actions(batch.obs, batch.actions)[0]

    def normalize_advantages(self, advantages: torch.Tensor) -> torch.Tensor:
        """Per minibatch, unless the batch was already normalised globally.

        Args:
            advantages: One minibatch's advantages, shape ``(m,)``; returned unchanged
                with ``config.global_advantage_norm`` or fewer than two samples.
        """
        if self.config.global_advantage_norm:
            return advantages
        return normalize(advantages)

    def policy_loss(
        self, new_log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The configured loss's policy term (to minimise) and its clip-fraction analogue.

        With a KL budget (``config.target_kl``), once this minibatch's ``KL(mu || pi)``
        exceeds the update's starting value by more than the budget, the update ends
        before this minibatch's step (:meth:`stop_update`), as SB3's ``target_kl`` does.

        Args:
            new_log_probs: Log-probabilities of the minibatch's actions under the current
                parameters (differentiable), shape ``(m,)``.
            old_log_probs: The batch's log-probabilities: the behaviour's, or the proximal
                policy's with ``config.proximal_clip``; shape ``(m,)``. With a proximal
                loss, shape ``(m, 2)``: the proximal policy's and the behaviour's.
            advantages: The minibatch's advantages after :meth:`normalize_advantages`,
                shape ``(m,)``.
        """
        behaviour = None
        if old_log_probs.ndim == 2:  # a proximal loss: (proximal, behaviour) columns
            old_log_probs, behaviour = old_log_probs[:, 0], old_log_probs[:, 1]
        target_kl = self.config.target_kl
        if target_kl is not None and not self._policy_stopped:
            moved = float(kl_estimate(new_log_probs, old_log_probs)) - self._start_kl
            if moved > target_kl:
                self._policy_stopped = True
                self.policy_stops += 1
        settings = self.config.settings(clip=self.workload.clip_coef)
        policy_loss = self.config.policy_loss
        if behaviour is not None:
            return policy_loss.policy_term(  # type: ignore[call-arg]
                new_log_probs, old_log_probs, advantages, settings, behaviour_log_probs=behaviour
            )
        return policy_loss.policy_term(new_log_probs, old_log_probs, advantages, settings)

    def stop_update(self) -> bool:
        """``True`` once the update spent its KL budget (see :meth:`policy_loss`)."""
        return self._policy_stopped

    # ----------------------------------------------------------------- update
    def update(self, trajectories: Any) -> LagUpdateStats:
        """Measure lags, drop samples over the bound, then one update on the rest.

        If every sample is dropped, no gradient step is taken and the version stays.

        Args:
            trajectories: The trajectories (a list or any iterable, read once). Each
                sample's behaviour version is its ``policy_versions`` entry if the
                trajectory has one, else ``policy_version``; none may be newer than the
                learner's :attr:`policy_version`.

        Returns:
            The update's :class:`LagUpdateStats`.

        Raises:
            ValueError / TypeError: If ``trajectories`` is empty or malformed (see
                :meth:`~fleetgym.agents.learners.ppo.PPOLearner.update`), a behaviour
                version is not an int in ``[0, 2**63 - 1]``, ``policy_versions`` has not
                one entry per sample or decreases, a version is newer than the learner's
                (a negative lag), or ``next_obs`` is not a finite observation.
            ValueError: If the update diverged (the learner is rolled back).
        """
        trajectories = self._check(trajectories)
        for i, traj in enumerate(trajectories):
            next_obs = getattr(traj, "next_obs", None)
            if next_obs is not None:
                name = f"trajectories[{i}].next_obs"
                if not check_observation(name, next_obs, self.policy.obs_shape)[1]:
                    raise ValueError(
                        f"{name}: expected one observation of shape {self.policy.obs_shape}, "
                        f"actual shape {np.shape(next_obs)}"
                    )
        now = self.policy_version
        per_traj = [
            now - behaviour_versions(t, f"trajectories[{i}]") for i, t in enumerate(trajectories)
        ]
        for i, traj_lags in enumerate(per_traj):
            if len(traj_lags) and traj_lags.min() < 0:
                raise ValueError(
                    f"trajectories[{i}]: expected behaviour versions <= the learner's version "
                    f"{now}, actual {now - int(traj_lags.min())} (a future version: negative lag)"
                )
        lags = np.concatenate(per_traj)
        kept: list[Trajectory] = []
        dropped_episodes: list[float] = []
        for traj, traj_lags in zip(trajectories, per_traj, strict=True):
            if self.max_policy_lag is None or not len(traj):
                kept.append(traj)
                continue
            stale = traj_lags > self.max_policy_lag
            if not stale.any():
                kept.append(traj)
            elif stale.all():
                dropped_episodes.extend(traj.episode_returns)
            else:
                # Versions never decrease along a trajectory, so the stale samples are a
                # prefix; the rest keeps its own bootstrap and stays a valid trajectory.
                kept.append(_tail(traj, int(np.flatnonzero(~stale)[0])))
        dropped = int(len(lags) - sum(len(t) for t in kept))
        self.dropped_samples_total += dropped
        self._ess = float("nan")
        self._ess_pending = True
        if kept:
            try:
                base = super().update(kept)
            finally:
                self._ess_pending = False
        else:
            base = UpdateStats(0.0, self.mean_return, 0.0, 0.0, 0, self.policy_version)
        # Episodes of dropped samples did happen: they count in the reported return.
        self.recent_returns.extend(dropped_episodes)
        self.episodes_seen += len(dropped_episodes)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(UpdateStats)}
        fields["mean_return"] = self.mean_return
        fields["episodes_completed"] = base.episodes_completed + len(dropped_episodes)
        return LagUpdateStats(
            **fields,
            lag_mean=float(lags.mean()) if len(lags) else 0.0,
            lag_p50=float(np.percentile(lags, 50)) if len(lags) else 0.0,
            lag_p99=float(np.percentile(lags, 99)) if len(lags) else 0.0,
            lag_max=int(lags.max()) if len(lags) else 0,
            dropped_samples=dropped,
            lags=lags,
            ess=self._ess,
        )
