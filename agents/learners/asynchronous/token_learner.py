"""The learner of a token policy under policy lag (:class:`TokenLagLearner`).

:class:`TokenLagLearner` is :class:`~fleetgym.agents.learners.token_ppo.TokenPPO`'s update
(advantages, the minibatch passes of
:func:`~fleetgym.agents.learners.losses.level_policy_loss` at the configured ratio level
and loss, the value head, the KL budget) fed with the whole trajectories of asynchronous
token actors (:class:`~fleetgym.agents.learners.asynchronous.token_actor.TokenTrajectory`)
instead of its own collector's rollout, with the lag accounting of
:class:`~fleetgym.agents.learners.lag.CompensatedPPOLearner`:

* every decision's lag is the learner's version minus the behaviour version that decoded
  it (per decision when served); a trajectory holding a decision older than
  ``max_policy_lag`` is dropped whole (its decisions counted in ``dropped_samples``, its
  episodes still in the reported return);
* the kept trajectories become the columns of one
  :class:`~fleetgym.agents.rollout.token_rollout.TokenRollout` (all of
  ``steps_per_actor`` decisions), so GAE or V-trace runs per trajectory with
  ``gamma^K`` between decisions; the ratios are to the behaviour log-probs the actors
  recorded, V-trace's truncated weights use the learner's current log-probs;
* reward scaling keeps one running discounted return per actor slot (the parent keeps
  one per env column);
* the observation statistics are the learner's: folded in from the raw observations of
  every trajectory after each update and published with the weights, keys under
  :data:`~fleetgym.agents.inference.token_model.OBS_STATS_PREFIX`.

Values are the behaviour's (recorded by the actors), not recomputed with the newest
critic (with ``value_input="actions"`` the value head reads the hidden states of the
sampled tokens, so a recomputed ``V(s_n)`` would need the tokens sampled at ``s_n``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from fleetgym.agents.inference.token_model import OBS_STATS_PREFIX, token_policy_weights
from fleetgym.agents.learners.asynchronous.token_actor import TokenTrajectory
from fleetgym.agents.learners.lag import LagUpdateStats, behaviour_versions
from fleetgym.agents.learners.token_config import TokenPPOConfig
from fleetgym.agents.learners.token_ppo import TokenPPO
from fleetgym.agents.rollout.token_rollout import TokenRollout
from fleetgym.agents.types import Weights
from fleetgym.agents.workloads import Workload
from fleetgym.validation import check_int, quote


def stack_trajectories(trajectories: list[TokenTrajectory]) -> TokenRollout:
    """Trajectories of ``T`` decisions each as the ``N`` columns of a ``(T, N)`` rollout.

    Raises:
        ValueError: If their lengths differ.
    """
    lengths = sorted({len(t) for t in trajectories})
    if len(lengths) != 1:
        raise ValueError(f"trajectories: expected one length, actual lengths {lengths}")

    def stack(name: str) -> np.ndarray:
        return np.stack([np.asarray(getattr(t, name)) for t in trajectories], axis=1)

    instructions = executed = None
    if trajectories[0].instructions is not None:
        instructions = stack("instructions")
    if all(t.executed is not None for t in trajectories):
        executed = stack("executed")
    return TokenRollout(
        obs=stack("obs"), steps=stack("steps").astype(np.float32), tokens=stack("actions"),
        log_probs=stack("log_probs").astype(np.float32), values=stack("values"),
        rewards=stack("rewards"), terminated=stack("terminated"), truncated=stack("truncated"),
        truncation_values=stack("truncation_values"),
        last_values=np.array([t.last_value for t in trajectories], np.float32),
        env_steps=sum(t.env_steps for t in trajectories),
        episode_returns=[r for t in trajectories for r in t.episode_returns],
        episode_lengths=[n for t in trajectories for n in t.episode_lengths],
        instructions=instructions, executed=executed,
    )  # fmt: skip


class TokenLagLearner(TokenPPO):
    """Token-level PPO on the lagged trajectories of asynchronous token actors.

    Models the learner of an asynchronous VLA trainer (AcceRL): it never steps an env for
    training, it takes whole trajectories from actors acting with older weights, drops
    those over the lag bound and runs one TokenPPO update on the rest.

    Args:
        workload: The workload (its env builds the learner's one env, used to read the
            spaces and by :meth:`predict` / :meth:`evaluate`).
        config: The token policy and PPO settings (``n_envs`` and ``n_steps`` unused).
        max_policy_lag: Trajectories with an older decision are dropped (``None``: none).
        seed: Seeds the weights and the minibatch order.
        device: Where the policy and the update run (``"cpu"``, ``"cuda[:N]"``).

    Example:
        >>> from fleetgym.agents.learners.asynchronous.token_actor import TokenActor
        >>> from fleetgym.agents.workloads import get_workload
        >>> cfg = TokenPPOConfig(hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=16,
        ...                      epochs=1, minibatch_size=16)
        >>> learner = TokenLagLearner(get_workload("CartPole-v1"), cfg, max_policy_lag=1)
        >>> actor = TokenActor(learner.workload, 0, 0, 0, config=cfg)
        >>> stats = learner.update([actor.rollout(learner.get_weights(), 16, 0)])
        >>> stats.num_samples, stats.policy_version, stats.lag_max
        (16, 1, 0)
        >>> actor.close()

    Raises:
        TypeError: If ``config`` is not a TokenPPOConfig.
        ValueError: If ``max_policy_lag`` is negative.
    """

    def __init__(
        self,
        workload: Workload,
        config: TokenPPOConfig,
        max_policy_lag: int | None = None,
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        if not isinstance(config, TokenPPOConfig):
            raise TypeError(f"config: expected a TokenPPOConfig, actual {quote(config)}")
        super().__init__(
            workload.make_env, seed, config=dataclasses.replace(config, n_envs=1), device=device
        )
        self.workload = workload
        self.max_policy_lag = (
            None if max_policy_lag is None else check_int("max_policy_lag", max_policy_lag, 0)
        )
        #: AsyncPPO reads these: no world model, the episodes seen, samples dropped.
        self.imagination = None
        self.episodes_seen = 0
        self.dropped_samples_total = 0
        self._received = 0
        self._columns: list[int] = []
        self._actor_returns: dict[int, float] = {}

    @property
    def env_steps(self) -> int:
        """Env steps of every trajectory received so far (dropped ones included)."""
        return self._received

    @property
    def policy_version(self) -> int:
        """Updates done (the version of :meth:`get_weights`)."""
        return self.num_updates

    @property
    def mean_return(self) -> float:
        """Mean return of the last completed episodes (0 before any)."""
        return float(np.mean(self.recent_returns)) if self.recent_returns else 0.0

    def get_weights(self) -> Weights:
        """The policy's numpy ``state_dict`` plus the observation statistics actors apply."""
        weights = token_policy_weights(self.policy)
        if self.config.normalize_obs:
            stats = self.collector.obs_stats
            weights[OBS_STATS_PREFIX + "mean"] = np.asarray(stats.mean, np.float64).copy()
            weights[OBS_STATS_PREFIX + "var"] = np.asarray(stats.var, np.float64).copy()
        return weights

    def _scaled_rewards(self, rollout: TokenRollout) -> np.ndarray:
        """The parent's scaling with each column's running return taken from its actor."""
        self._discounted = np.array([self._actor_returns.get(a, 0.0) for a in self._columns])
        scaled = super()._scaled_rewards(rollout)
        self._actor_returns.update(zip(self._columns, self._discounted.tolist(), strict=True))
        return scaled

    def update(self, trajectories: Any) -> LagUpdateStats:  # type: ignore[override]
        """Measure lags, drop trajectories over the bound, one TokenPPO update on the rest.

        If every trajectory is dropped, no step is taken and the version stays.

        Raises:
            TypeError: If ``trajectories`` is not a non-empty list of TokenTrajectory.
            ValueError: For a behaviour version newer than the learner's, bad versions (see
                :func:`~fleetgym.agents.learners.lag.behaviour_versions`) or trajectories of
                different lengths.
        """
        if not isinstance(trajectories, list | tuple) or not trajectories:
            raise TypeError(
                f"trajectories: expected a non-empty list of TokenTrajectory, actual "
                f"{quote(trajectories)}"
            )
        for i, traj in enumerate(trajectories):
            if not isinstance(traj, TokenTrajectory):
                raise TypeError(
                    f"trajectories[{i}]: expected a TokenTrajectory, actual {type(traj).__name__}"
                )
        started, now = time.perf_counter(), self.policy_version
        per_traj = [
            now - behaviour_versions(t, f"trajectories[{i}]") for i, t in enumerate(trajectories)
        ]
        for i, lag in enumerate(per_traj):
            if len(lag) and lag.min() < 0:
                raise ValueError(
                    f"trajectories[{i}]: expected behaviour versions <= the learner's version "
                    f"{now}, actual {now - int(lag.min())} (a future version: negative lag)"
                )
        bound = self.max_policy_lag
        keep = [bound is None or not len(lag) or lag.max() <= bound for lag in per_traj]
        kept = [t for t, k in zip(trajectories, keep, strict=True) if k]
        self._received += sum(t.env_steps for t in trajectories)
        lags = np.concatenate(per_traj)
        dropped = int(sum(len(t) for t, k in zip(trajectories, keep, strict=True) if not k))
        self.dropped_samples_total += dropped
        policy_loss = value_loss = entropy = clip = kl = 0.0
        if kept:
            self._columns = [t.actor_id for t in kept]
            base = super().update(stack_trajectories(kept), started)
            policy_loss, value_loss, entropy = base.policy_loss, base.value_loss, base.entropy
            clip, kl = base.clip_fraction, base.kl
        for t, k in zip(trajectories, keep, strict=True):
            if not k:  # the parent counted the kept episodes; dropped episodes did happen too
                self.recent_returns.extend(t.episode_returns)
        episodes = sum(len(t.episode_returns) for t in trajectories)
        self.episodes_seen += episodes
        if self.config.normalize_obs:
            self.collector.obs_stats.update(np.concatenate([t.raw_obs for t in trajectories]))
        return LagUpdateStats(
            loss=policy_loss + self.config.vf_coef * value_loss - self.config.ent_coef * entropy,
            mean_return=self.mean_return, kl=kl, update_time_s=time.perf_counter() - started,
            num_samples=int(sum(len(t) for t in kept)), policy_version=self.policy_version,
            policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
            clip_fraction=clip, episodes_completed=episodes,
            lag_mean=float(lags.mean()), lag_p50=float(np.percentile(lags, 50)),
            lag_p99=float(np.percentile(lags, 99)), lag_max=int(lags.max()),
            dropped_samples=dropped, lags=lags,
        )  # fmt: skip


__all__ = ["TokenLagLearner", "stack_trajectories"]
