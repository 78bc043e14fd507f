"""The imagination buffer: B_real trains the model, B_img trains the policy beside B_real.

:class:`Imagination` is what a learner holds when it is built with
``imagination=ImaginationConfig(...)``. Each update it

1. measures the model's open-loop error against horizon on the round's *new* real
   trajectories (data the model has not been fitted on yet),
2. adds them to B_real (:class:`~fleetgym.agents.world_model.TransitionBuffer`),
3. fits the model every ``model_every`` updates (warm-started, bounded in gradient steps),
4. chooses the horizon and the imagined share, and
5. rolls the current policy out in an
   :class:`~fleetgym.agents.world_model.ImaginedVectorEnv` started from B_real states,
   returning the imagined trajectories (B_img) the update mixes in.

The horizon and share come from measured error rather than a fixed schedule (with
``"auto"``): the horizon is the longest ``h`` whose normalised ``h``-step error stays below
``error_tolerance``, and the share shrinks as the one-step error grows past it. A fixed int
or a callable ``(update, imagination) -> value`` gives any schedule (MBPO's linear 1 -> 15,
AcceRL's 5 -> 50). A fit whose loss is not finite stops imagination with a warning;
training continues on real data.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.agents.types import Trajectory
from fleetgym.agents.world_model.buffer import TransitionBuffer
from fleetgym.agents.world_model.config import (
    MAX_IMAGINED_MULTIPLE,
    ImaginationConfig,
    linear_schedule,
    validation_schedule,
)
from fleetgym.agents.world_model.imagined_env import ImaginedVectorEnv, check_horizon
from fleetgym.agents.world_model.model import ModelDivergedError, WorldModel
from fleetgym.agents.world_model.success import SuccessRewardModel
from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import check_float

logger = logging.getLogger(__name__)

__all__ = [
    "ImaginationRecord",
    "Imagination",
    "ImaginedTrajectory",
    "imagination_scalars",
    "multistep_error",
]


def imagination_scalars(record: ImaginationRecord) -> dict[str, float]:
    """One update's imagination as TensorBoard scalars (``imagination/...``)."""
    out = {
        "imagination/active": float(record.active),
        "imagination/model_version": float(record.model_version),
        "imagination/horizon": float(record.horizon),
        "imagination/share": record.imagined_share,
        "imagination/imagined_samples": float(record.imagined_samples),
        "imagination/uncertainty": record.uncertainty_mean,
        "imagination/lag": record.imagination_lag,
        "imagination/reused_samples": float(record.reused_samples),
        "imagination/fit_wall_s": record.fit_wall_s,
        "imagination/imagine_wall_s": record.imagine_wall_s,
    }
    for head, value in record.validation.items():
        out[f"imagination/validation_{head}"] = value
    if record.error:
        out["imagination/error_h1"] = record.error[0]
        out["imagination/error_h_max"] = record.error[-1]
    return out


@dataclass
class ImaginedTrajectory(Trajectory):
    """A :class:`~fleetgym.agents.types.Trajectory` imagined in a model.

    ``model_versions[t]`` is the fit count of the model that produced sample ``t``;
    ``uncertainty[t]`` its ensemble disagreement at that step. One trajectory is one
    imagined sub-env's ``n`` steps; its episodes restart from real states inside it.

    Attributes:
        obs: The flat observations the policy acted on, float32 ``(n, obs_dim)``.
        actions: The policy's actions (Gaussian ones unclipped; the model stepped the
            clipped ones).
        log_probs, values: The acting policy's log-probability of each action and its
            value of each observation, float32 ``(n,)``.
        rewards: The model's predicted reward (or the success model's ``M(o') - M(o)``).
        terminated, truncated: Bool ``(n,)``: the model predicted a termination; the
            imagined episode reached the horizon, the uncertainty bound or a non-finite
            prediction.
        truncation_values: The policy's value of the final observation where
            ``truncated``, 0 elsewhere.
        last_value: The policy's value of the observation after the last step.
        episode_returns, episode_lengths: Empty (imagined episodes are not reported).
        actor_id: ``-1 - b`` for the ``b``-th imagined sub-env (negative: not a real slot).
        policy_version: The learner's policy version that acted.
        seed: The imagination config's ``seed``.
        final_obs: None (imagined terminal observations are not kept).
        model_versions: Int64 ``(n,)``: the model version that produced each step.
        uncertainty: Float32 ``(n,)``: the elites' disagreement at each step (normalised
            units).
    """

    model_versions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    uncertainty: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))


@dataclass
class ImaginationRecord:
    """What imagination did in one update (the learner's TensorBoard scalars).

    Attributes:
        update: The learner update, counted from 0 by :class:`Imagination`.
        active: Whether the update received imagined (or replayed) samples.
        model_version: The model's fits so far, after this update's fit.
        real_samples: Real env steps in the update's trajectories.
        imagined_samples: Imagined (or, with ``source="replay"``, replayed) samples
            returned to the update.
        horizon: Steps per imagined episode chosen this update (0: none chosen).
        share: The imagined share chosen, in [0, 1] (:attr:`imagined_share` is the share
            the samples actually reached).
        error: Measured normalised ``h``-step error on this round's new real data, ``h``
            = 1, 2, ... (empty before the first fit and with ``source="replay"``).
        validation: Held-out losses per head of this update's fit (empty without a fit).
        uncertainty_mean: Mean ensemble disagreement over the imagined samples.
        truncated_by_uncertainty: Imagined episodes truncated by ``max_uncertainty``.
        imagination_lag: Fits between the model that imagined a sample and the newest,
            mean over the update's imagined samples (kept ones included).
        reused_samples: Imagined samples of this update kept in B_img from earlier ones.
        fit_wall_s: Wall-clock seconds of this update's fit (0 without one).
        imagine_wall_s: Wall-clock seconds spent imagining (or drawing replayed samples).
        real_transitions: Real transitions ever added to B_real, this update's included.
    """

    update: int = 0
    active: bool = False
    model_version: int = 0
    real_samples: int = 0
    imagined_samples: int = 0
    horizon: int = 0
    share: float = 0.0
    # Measured normalised h-step error on this round's new real data, h = 1, 2, ...
    error: list[float] = field(default_factory=list)
    validation: dict[str, float] = field(default_factory=dict)
    uncertainty_mean: float = 0.0
    truncated_by_uncertainty: int = 0
    # Fits between the model that imagined a sample and the newest model (mean over the
    # update's imagined samples, kept ones included).
    imagination_lag: float = 0.0
    # Imagined samples of this update kept in B_img from earlier updates.
    reused_samples: int = 0
    fit_wall_s: float = 0.0
    imagine_wall_s: float = 0.0
    real_transitions: int = 0

    @property
    def imagined_share(self) -> float:
        total = self.real_samples + self.imagined_samples
        return self.imagined_samples / total if total else 0.0


def _runs(trajectory: Trajectory) -> list[tuple[np.ndarray, np.ndarray]]:
    """Runs of consecutive in-episode steps: (obs (L+1, d), actions (L,))."""
    obs = np.asarray(trajectory.obs, np.float32).reshape(len(trajectory), -1)
    done = np.asarray(trajectory.terminated) | np.asarray(trajectory.truncated)
    after = getattr(trajectory, "next_obs", None)
    if after is not None:
        obs = np.concatenate([obs, np.asarray(after, np.float32).reshape(1, -1)])
    runs, start = [], 0
    for t in range(len(trajectory)):
        if done[t]:
            if t > start:
                runs.append((obs[start : t + 1], np.asarray(trajectory.actions)[start:t]))
            start = t + 1
    end = len(obs) - 1
    if end > start:
        runs.append((obs[start : end + 1], np.asarray(trajectory.actions)[start:end]))
    return runs


def multistep_error(
    model: WorldModel,
    runs: list[tuple[np.ndarray, np.ndarray]],
    max_horizon: int,
    scale: np.ndarray,
    rng: np.random.Generator,
    starts: int = 256,
) -> list[float]:
    """Normalised open-loop error of the elite mean after ``h = 1 .. max_horizon`` steps.

    From up to ``starts`` random points of the real ``runs``, the model is rolled forward
    with the real actions; ``e(h)`` is the mean over dimensions of the squared error
    divided by ``scale**2`` (B_real's per-dimension variance, floored at 1e-3 of its
    mean). A horizon no run is long enough for is left out (the list is shorter).

    Args:
        model: The fitted world model (its elite mean predicts, :meth:`WorldModel.predict`).
        runs: Real runs of consecutive in-episode steps, each ``(obs (L + 1, obs_dim),
            actions (L,))``: the observations before and after the ``L`` actions.
        max_horizon: Longest ``h`` measured, in steps.
        scale: Per-dimension standard deviation of the observations, ``(obs_dim,)``
            (B_real's): the error's unit.
        rng: Generator choosing the start points.
        starts: Most start points (drawn without replacement); each is followed while its
            run lasts, so ``e(h)`` averages over the points whose run has ``h`` more steps.

    Returns:
        ``[e(1), e(2), ...]``, ``math.inf`` for a non-finite error; empty without runs.
    """
    candidates = [(i, t) for i, (_, acts) in enumerate(runs) for t in range(len(acts))]
    if not candidates:
        return []
    picks = [candidates[j] for j in rng.permutation(len(candidates))[:starts]]
    out: list[float] = []
    obs = np.stack([runs[i][0][t] for i, t in picks])
    alive = np.ones(len(picks), bool)
    var = scale.astype(np.float64) ** 2
    # A dimension B_real never saw move (a wall cell of a grid) would turn any error into
    # a huge one: each variance is floored at 1e-3 of the mean variance.
    var = np.maximum(var, max(1e-3 * float(var.mean()), 1e-12))
    for h in range(1, max_horizon + 1):
        alive &= np.array([t + h <= len(runs[i][1]) for i, t in picks])
        if not alive.any():
            break
        idx = np.flatnonzero(alive)
        acts = np.stack([runs[picks[j][0]][1][picks[j][1] + h - 1] for j in idx])
        obs[idx] = model.predict(obs[idx], acts).next_obs
        truth = np.stack([runs[picks[j][0]][0][picks[j][1] + h] for j in idx])
        err = ((obs[idx].astype(np.float64) - truth) ** 2 / var).mean()
        out.append(float(err) if np.isfinite(err) else math.inf)
    return out


class Imagination:
    """B_real, the world model, and the imagined samples a learner mixes into each update.

    Args:
        config: The :class:`ImaginationConfig`.
        observation_space: The policy's observation space (flat).
        action_space: The policy's action space (Discrete or a 1-D Box).
    """

    def __init__(
        self, config: ImaginationConfig, observation_space: gym.Space, action_space: gym.Space
    ) -> None:
        self.config = config
        try:
            self.model = WorldModel(
                observation_space,
                action_space,
                ensemble_size=config.ensemble_size,
                elites=config.elites,
                hidden_sizes=config.hidden_sizes,
                lr=config.model_lr,
                seed=config.seed,
            )
        except UnsupportedSpaceError as error:
            raise UnsupportedSpaceError(
                f"imagination: the env's {error} (train without imagination=)"
            ) from None
        self.buffer = TransitionBuffer(
            config.capacity, success_share=config.success_share, seed=config.seed
        )
        self.reward_model = (
            SuccessRewardModel(self.model.obs_dim, seed=config.seed)
            if config.reward == "success"
            else None
        )
        self.rng = np.random.default_rng([config.seed, 0x1A6])
        self.updates = 0
        self.enabled = True
        self.disabled_reason = ""
        self.last = ImaginationRecord()
        self.history: list[ImaginationRecord] = []
        self._last_fit_update = -1
        #: B_img: imagined (or, with ``source="replay"``, earlier real) trajectories kept
        #: between updates; imagined ones record the model version of every sample.
        self.imagined: list[Trajectory] = []
        low, high = config.min_horizon, config.max_horizon
        self._auto_schedule = (
            validation_schedule(low, high, config.validation_target)
            if config.schedule == "validation"
            else linear_schedule(low, high, 0, config.schedule_updates)
            if config.schedule == "linear"
            else None
        )

    # ----------------------------------------------------------------- choices
    def _horizon(self, error: list[float]) -> int:
        choice = self.config.horizon
        if callable(choice):
            return check_horizon("horizon(update)", choice(self.updates, self))
        if choice != "auto":
            return int(choice)
        if self._auto_schedule is not None:
            return check_horizon("horizon(update)", self._auto_schedule(self.updates, self))
        low, high = self.config.min_horizon, self.config.max_horizon
        h = low
        for k, e in enumerate(error[:high], start=1):
            if e > self.config.error_tolerance:
                break
            h = max(h, k)
        return min(max(h, low), high)

    def _share(self, error: list[float]) -> float:
        choice = self.config.share
        if callable(choice):
            return check_float("share(update)", choice(self.updates, self), 0.0, 1.0)
        if choice != "auto":
            return float(choice)
        if not error:
            return 0.0
        e1 = error[0]
        return self.config.max_share * (
            1.0 if e1 <= self.config.error_tolerance else self.config.error_tolerance / e1
        )

    # ----------------------------------------------------------------- the update
    def observe(self, trajectories: list[Trajectory]) -> list[float]:
        """Measure the model on new real trajectories, then add them to B_real.

        Args:
            trajectories: The round's real trajectories, not yet in B_real (the error is
                measured only once the model was fitted and B_real is not empty).

        Returns:
            The measured ``[e(1), e(2), ...]`` (:func:`multistep_error`), or ``[]``.
        """
        error: list[float] = []
        if self.model.version > 0 and len(self.buffer):
            runs = [r for t in trajectories for r in _runs(t)]
            scale = self.buffer.obs.std(axis=0)
            error = multistep_error(self.model, runs, self.config.max_horizon, scale, self.rng)
        for t in trajectories:
            self.buffer.add_trajectory(t)
        return error

    def fit(self) -> None:
        """Fit the model (and the success classifier) on B_real if one is due."""
        due = self.updates - self._last_fit_update >= self.config.model_every
        if not (self.enabled and due and len(self.buffer) >= self.config.warmup):
            return
        started = time.perf_counter()
        try:
            report = self.model.fit(self.buffer, max_updates=self.config.max_fit_updates)
        except ModelDivergedError as error:
            self.enabled = False
            self.disabled_reason = str(error)
            warnings.warn(
                f"imagination stopped: {error}; training continues on real data only",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        if self.reward_model is not None:
            self.reward_model.fit(self.buffer, epochs=5)
        self._last_fit_update = self.updates
        self.last.validation = dict(report.validation)
        self.last.fit_wall_s = time.perf_counter() - started

    def step(
        self, policy: Any, trajectories: list[Trajectory], policy_version: int
    ) -> list[Trajectory]:
        """Everything one learner update does with imagination; returns B_img's samples.

        Args:
            policy: The learner's current policy (``act`` and ``value`` on raw batches).
            trajectories: The update's real trajectories (already checked).
            policy_version: The learner's version (imagined samples are on-policy).
        """
        record = ImaginationRecord(update=self.updates)
        self.last = record
        replay = self.config.source == "replay"
        record.error = [] if replay else self.observe(trajectories)
        if replay:
            for t in trajectories:
                self.buffer.add_trajectory(t)
        else:
            self.fit()
        record.real_samples = sum(len(t) for t in trajectories)
        record.real_transitions = self.buffer.total_added
        record.model_version = self.model.version
        imagined: list[Trajectory] = []
        ready = (
            bool(self.imagined) and self.buffer.total_added >= self.config.warmup
            if replay
            else self.enabled and self.model.version > 0
        )
        if ready:
            record.horizon = 0 if replay else self._horizon(record.error)
            record.share = self._share(record.error)
            s = record.share
            multiple = (
                MAX_IMAGINED_MULTIPLE if s >= 1.0 else min(MAX_IMAGINED_MULTIPLE, s / (1.0 - s))
            )
            n = int(round(record.real_samples * multiple))
            if n > 0:
                started = time.perf_counter()
                imagined = (
                    self._replay(n)
                    if replay
                    else self._from_b_img(policy, n, record.horizon, policy_version)
                )
                record.imagine_wall_s = time.perf_counter() - started
        if replay:
            self._keep_real(trajectories)
        record.active = bool(imagined)
        record.imagined_samples = sum(len(t) for t in imagined)
        if imagined and not replay:
            unc = np.concatenate([t.uncertainty for t in imagined])  # type: ignore[attr-defined]
            versions = np.concatenate([t.model_versions for t in imagined])  # type: ignore[attr-defined]
            record.uncertainty_mean = float(unc.mean())
            record.imagination_lag = float((self.model.version - versions).mean())
        self.history.append(record)
        self.updates += 1
        return imagined

    def _from_b_img(
        self, policy: Any, samples: int, horizon: int, policy_version: int
    ) -> list[Trajectory]:
        """The update's ``samples`` imagined samples: B_img's kept ones first, newest first,
        then freshly imagined ones for the shortfall; B_img keeps what this update used.

        A trajectory is dropped from B_img once the model that imagined it is more than
        ``max_imagination_lag`` fits behind the newest (``None``: all are, every update).
        """
        version = self.model.version
        limit = self.config.max_imagination_lag
        if limit is None:  # B_img is not kept: imagine afresh
            self.imagined = self.imagine(policy, samples, horizon, policy_version)
            return list(self.imagined)
        alive = [
            t
            for t in self.imagined
            if len(t) and version - int(np.max(t.model_versions)) <= limit  # type: ignore[attr-defined]
        ]
        kept: list[Trajectory] = []
        have = 0
        for t in reversed(alive):
            if have >= samples:
                break
            kept.append(t)
            have += len(t)
        kept.reverse()
        fresh = (
            self.imagine(policy, samples - have, horizon, policy_version) if have < samples else []
        )
        self.last.reused_samples = have
        self.imagined = kept + fresh
        return kept + fresh

    def _keep_real(self, trajectories: list[Trajectory]) -> None:
        """``source="replay"``: keep the round's real trajectories to replay later (the
        newest ``capacity`` samples)."""
        self.imagined.extend(trajectories)
        total = sum(len(t) for t in self.imagined)
        while self.imagined and total - len(self.imagined[0]) >= self.config.capacity:
            total -= len(self.imagined.pop(0))

    def _replay(self, samples: int) -> list[Trajectory]:
        """About ``samples`` samples of earlier real trajectories, drawn uniformly without
        replacement (passes over a shuffled store repeat while it holds fewer samples)."""
        out: list[Trajectory] = []
        have = 0
        while have < samples and any(len(t) for t in self.imagined):
            for i in self.rng.permutation(len(self.imagined)):
                if have >= samples:
                    break
                out.append(self.imagined[int(i)])
                have += len(self.imagined[int(i)])
        return out

    def imagine(
        self, policy: Any, samples: int, horizon: int, policy_version: int
    ) -> list[Trajectory]:
        """About ``samples`` imagined steps of ``policy``: ``B`` episodes in parallel, ``T`` steps each.

        With ``source="replay"``: about ``samples`` samples of earlier real trajectories.

        Args:
            policy: The policy to imagine with: ``act(obs, rng=...)`` returning ``(actions,
                log_probs, values)``, ``value(obs)`` and ``discrete``, on raw batches.
            samples: Imagined steps wanted (>= 1); ``B = ceil(samples / horizon)`` sub-envs
                each run ``T = ceil(samples / B)`` steps, so slightly more may come back.
            horizon: Steps per imagined episode before it is truncated (1 to 100,000).
            policy_version: Recorded in each trajectory (the version of ``policy``).
        """
        if self.config.source == "replay":
            return self._replay(samples)
        horizon = check_horizon("horizon", horizon)
        envs = max(1, math.ceil(samples / horizon))
        steps = math.ceil(samples / envs)
        starts = (
            self.buffer.obs
            if self.config.recent_starts is None
            else self.buffer.obs[-self.config.recent_starts :]
        )
        venv = ImaginedVectorEnv(
            self.model,
            starts,
            envs,
            horizon,
            max_uncertainty=self.config.max_uncertainty,
            sample=self.config.sample,
            reward_model=self.reward_model,
        )
        obs, _ = venv.reset(seed=int(self.rng.integers(0, 2**63 - 1)))
        d = self.model.obs_dim
        cols: dict[str, list[np.ndarray]] = {
            k: []
            for k in ("obs", "act", "logp", "val", "rew", "term", "trunc", "tval", "unc", "ver")
        }
        over = 0
        for _ in range(steps):
            actions, logp, values = policy.act(obs, rng=self.rng)
            env_actions = actions
            if not policy.discrete:
                space = self.model.action_space
                assert isinstance(space, gym.spaces.Box)  # a Gaussian policy acts in a Box
                env_actions = np.clip(actions, space.low, space.high)
            nxt, reward, term, trunc, info = venv.step(env_actions)
            tval = np.zeros(envs, np.float32)
            if trunc.any():
                finals = np.stack([info["final_obs"][i] for i in np.flatnonzero(trunc)]).astype(
                    np.float32
                )
                tval[trunc] = policy.value(finals).reshape(-1)
                if self.config.max_uncertainty is not None:
                    over += int((trunc & (info["uncertainty"] > self.config.max_uncertainty)).sum())
            for key, value in (
                ("obs", obs),
                ("act", actions),
                ("logp", logp),
                ("val", values),
                ("rew", reward),
                ("term", term),
                ("trunc", trunc),
                ("tval", tval),
                ("unc", info["uncertainty"]),
                ("ver", info["model_version"]),
            ):
                cols[key].append(np.asarray(value))
            obs = nxt
        last_values = policy.value(obs).reshape(-1)
        self.last.truncated_by_uncertainty = over
        out: list[Trajectory] = []
        stack = {k: np.stack(v, axis=1) for k, v in cols.items()}  # (envs, steps, ...)
        for b in range(envs):
            out.append(
                ImaginedTrajectory(
                    obs=stack["obs"][b].reshape(steps, d).astype(np.float32),
                    actions=stack["act"][b],
                    log_probs=stack["logp"][b].reshape(steps).astype(np.float32),
                    values=stack["val"][b].reshape(steps).astype(np.float32),
                    rewards=stack["rew"][b].astype(np.float32),
                    terminated=stack["term"][b].astype(bool),
                    truncated=stack["trunc"][b].astype(bool),
                    truncation_values=stack["tval"][b].astype(np.float32),
                    last_value=float(last_values[b]),
                    episode_returns=[],
                    episode_lengths=[],
                    actor_id=-1 - b,
                    policy_version=int(policy_version),
                    seed=self.config.seed,
                    model_versions=stack["ver"][b].astype(np.int64),
                    uncertainty=stack["unc"][b].astype(np.float32),
                )
            )
        return out
