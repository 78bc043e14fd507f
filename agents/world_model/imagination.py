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
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.agents.types import Trajectory
from fleetgym.agents.world_model.buffer import TransitionBuffer
from fleetgym.agents.world_model.imagined_env import ImaginedVectorEnv, check_horizon
from fleetgym.agents.world_model.model import ModelDivergedError, WorldModel
from fleetgym.agents.world_model.success import SuccessRewardModel
from fleetgym.validation import check_choice, check_float, check_int, quote

logger = logging.getLogger(__name__)

__all__ = [
    "ImaginationConfig",
    "ImaginationRecord",
    "Imagination",
    "ImaginedTrajectory",
    "imagination_scalars",
    "linear_schedule",
    "multistep_error",
    "parse_imagination_spec",
    "validation_schedule",
]

#: Most imagined samples per real sample in one update (share -> 1 is capped here).
MAX_IMAGINED_MULTIPLE = 20


def linear_schedule(start: float, end: float, first: int, last: int) -> Callable[[int, Any], int]:
    """A horizon (or any int) rising linearly from ``start`` at update ``first`` to ``end`` at ``last``.

    Example:
        >>> mbpo = linear_schedule(1, 15, 0, 100)  # MBPO's horizon 1 -> 15
        >>> mbpo(0, None), mbpo(50, None), mbpo(400, None)
        (1, 8, 15)
    """

    def schedule(update: int, _imagination: Any) -> int:
        frac = min(1.0, max(0.0, (update - first) / max(1, last - first)))
        return int(round(start + frac * (end - start)))

    return schedule


def validation_schedule(
    start: int = 5, end: int = 50, target: float = 1e-3
) -> Callable[[int, Any], int]:
    """AcceRL's horizon: ``start`` rising to ``end`` as the model's held-out loss falls.

    The horizon interpolates in log-loss between the first fit's observation loss (gives
    ``start``) and ``target`` (gives ``end``), using the newest fit's loss.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> sched = validation_schedule(5, 50, target=1e-3)
        >>> im = NS(history=[NS(validation={"obs": 1e-1})], last=NS(validation={"obs": 1e-2}))
        >>> sched(0, im)  # half-way down in log-loss: half-way up from 5 to 50
        27
    """
    start, end = check_horizon("start", start), check_horizon("end", end)
    target = check_float("target", target, 0.0, strict=True)

    def schedule(_update: int, imagination: Any) -> int:
        losses = [r.validation.get("obs") for r in imagination.history if r.validation]
        current = imagination.last.validation.get("obs") if imagination.last.validation else None
        first = losses[0] if losses else current
        if first is None or current is None or first <= target:
            return start if current is None or current > target else end
        frac = (math.log(first) - math.log(max(current, 1e-30))) / (
            math.log(first) - math.log(target)
        )
        return int(round(start + min(1.0, max(0.0, frac)) * (end - start)))

    return schedule


@dataclass(frozen=True)
class ImaginationConfig:
    """How a learner imagines. Every field is checked when the config is built.

    Attributes:
        share: Imagined share of each update's samples, in ``[0, 1]`` (``1``: the policy
            learns from imagined samples only, at most 20 per real one); ``"auto"``:
            ``max_share * min(1, error_tolerance / e(1))``, ``e(1)`` the measured one-step
            error; or a callable ``(update, imagination) -> share``.
        max_share: The ceiling of ``"auto"``.
        horizon: Steps per imagined episode: an int, ``"auto"`` (the longest ``h`` in
            ``[min_horizon, max_horizon]`` with measured ``e(h) <= error_tolerance``), or a
            callable ``(update, imagination) -> int`` (e.g. :func:`linear_schedule`, MBPO's,
            or :func:`validation_schedule`, AcceRL's).
        min_horizon, max_horizon: The range of ``"auto"``.
        error_tolerance: Normalised mean squared ``h``-step error (per observation
            dimension, in units of its variance in B_real) the automatic rules accept.
        model_every: Fit the model every N updates.
        warmup: Real transitions in B_real before the first fit (no imagination before).
        ensemble_size, elites, hidden_sizes, model_lr: The world model (the defaults
            are what docs/imagination.md measured on CartPole; MBPO's are 7, 5 and four
            layers of 200).
        max_fit_updates: Gradient steps per fit (warm-started; ``None``: until the
            held-out loss stalls).
        max_uncertainty: Truncate an imagined episode where the ensemble disagreement
            exceeds it (``None``: never).
        reward: ``"regression"`` (the model's reward head) or ``"success"`` (AcceRL's
            success classifier: ``r = M(o') - M(o)``, for sparse success tasks).
        capacity: Most transitions B_real keeps.
        recent_starts: Draw start states from the newest N transitions (``None``: all).
        sample: Imagined steps sample the member's Gaussian (``False``: its mean).
        updates_per_round: Passes of the PPO epochs per learner update: the first on the
            mixed real + imagined batch, each further one on freshly imagined samples only
            (as many as the first pass had), so a round of real data buys several policy
            improvements (MBPO and ME-TRPO take many policy steps per real step). One
            update is still one policy version.
        seed: Seeds the model, the start states and the member draws.
    """

    share: float | str | Callable[[int, Any], float] = 0.75
    max_share: float = 0.9
    horizon: int | str | Callable[[int, Any], int] = "auto"
    min_horizon: int = 1
    max_horizon: int = 30
    error_tolerance: float = 0.05
    model_every: int = 1
    warmup: int = 500
    ensemble_size: int = 5
    elites: int = 3
    hidden_sizes: tuple[int, ...] = (128, 128)
    model_lr: float = 1e-3
    max_fit_updates: int | None = 200
    max_uncertainty: float | None = None
    reward: str = "regression"
    capacity: int = 1_000_000
    recent_starts: int | None = None
    sample: bool = True
    updates_per_round: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.share, str) and self.share != "auto":
            raise ValueError(
                f"share: expected a number in [0, 1], 'auto' or a callable, actual {quote(self.share)}"
            )
        if isinstance(self.share, str):
            pass
        elif not callable(self.share):
            check_float("share", self.share, 0.0, 1.0)
        check_float("max_share", self.max_share, 0.0, 1.0)
        if isinstance(self.horizon, str) and self.horizon != "auto":
            raise ValueError(
                f"horizon: expected an int in [1, 100000], 'auto' or a callable, actual "
                f"{quote(self.horizon)}"
            )
        if isinstance(self.horizon, str):
            pass
        elif not callable(self.horizon):
            check_horizon("horizon", self.horizon)
        low = check_horizon("min_horizon", self.min_horizon)
        high = check_horizon("max_horizon", self.max_horizon)
        if low > high:
            raise ValueError(f"min_horizon: expected at most max_horizon={high}, actual {low}")
        check_float("error_tolerance", self.error_tolerance, 0.0, strict=True)
        check_int("model_every", self.model_every, 1)
        check_int("warmup", self.warmup, 10)
        check_int("ensemble_size", self.ensemble_size, 1, 64)
        check_int("elites", self.elites, 1, self.ensemble_size)
        check_float("model_lr", self.model_lr, 0.0, strict=True)
        if self.max_fit_updates is not None:
            check_int("max_fit_updates", self.max_fit_updates, 1)
        if self.max_uncertainty is not None:
            check_float("max_uncertainty", self.max_uncertainty, 0.0)
        check_choice("reward", self.reward, ("regression", "success"))
        check_int("capacity", self.capacity, 10)
        if self.recent_starts is not None:
            check_int("recent_starts", self.recent_starts, 1)
        check_int("updates_per_round", self.updates_per_round, 1, 100)
        check_int("seed", self.seed, 0, 2**63 - 1)

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON values (a callable share or horizon is written as ``"auto"``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("share", "horizon"):
            if callable(out[name]):
                out[name] = "auto"
        out["hidden_sizes"] = list(out["hidden_sizes"])
        return out

    @classmethod
    def from_value(cls, value: Any, seed: int = 0) -> ImaginationConfig | None:
        """A config from ``None``, a config, ``True``, or a dict of its fields.

        Raises:
            TypeError: For another type or an unknown field.
        """
        if value is None or value is False:
            return None
        if isinstance(value, ImaginationConfig):
            return value
        if value is True:
            return cls(seed=seed)
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise TypeError(
                    f"imagination: expected fields among {sorted(known)}, actual {unknown}"
                )
            if "hidden_sizes" in value:
                value = {**value, "hidden_sizes": tuple(value["hidden_sizes"])}
            return cls(**{"seed": seed, **value})
        raise TypeError(
            "imagination: expected None, True, an ImaginationConfig or a dict of its fields, "
            f"actual {quote(value)}"
        )


def _spec_value(name: str, text: str) -> Any:
    """A spec item's value: ints, floats, None, booleans, ``AxB`` widths, else the text."""
    if name == "hidden_sizes":
        return tuple(int(part) for part in text.replace("x", ",").split(",") if part)
    if text in ("None", "none"):
        return None
    if text in ("true", "True", "false", "False"):
        return text in ("true", "True")
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text  # a name ("auto", "success"): the config checks it


def parse_imagination_spec(text: str, seed: int = 0) -> ImaginationConfig:
    """An :class:`ImaginationConfig` from ``"share=0.75,horizon=auto,hidden_sizes=128x128"``.

    An empty string gives the defaults.

    Example:
        >>> parse_imagination_spec("share=0.5,horizon=8").horizon
        8

    Raises:
        ValueError: For an item that is not ``name=value``, an unknown name or a bad value.
    """
    values: dict[str, Any] = {}
    known = {f.name for f in fields(ImaginationConfig)}
    for item in filter(None, (part.strip() for part in str(text).split(","))):
        if "=" not in item:
            raise ValueError(f"imagination: expected name=value items, actual {quote(item)}")
        name, raw = (part.strip() for part in item.split("=", 1))
        if name not in known:
            raise ValueError(
                f"imagination: expected names among {sorted(known)}, actual {quote(name)}"
            )
        try:
            values[name] = _spec_value(name, raw)
        except ValueError:
            raise ValueError(
                f"imagination: {name}: expected a number, actual {quote(raw)}"
            ) from None
    try:
        return ImaginationConfig(**{"seed": seed, **values})
    except TypeError as error:
        raise ValueError(f"imagination: {error}") from None


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
    ``uncertainty[t]`` its ensemble disagreement at that step.
    """

    model_versions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    uncertainty: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))


@dataclass
class ImaginationRecord:
    """What imagination did in one update (the learner's TensorBoard scalars)."""

    update: int = 0
    active: bool = False
    model_version: int = 0
    real_samples: int = 0
    imagined_samples: int = 0
    horizon: int = 0
    share: float = 0.0
    #: Measured normalised h-step error on this round's new real data, h = 1, 2, ...
    error: list[float] = field(default_factory=list)
    validation: dict[str, float] = field(default_factory=dict)
    uncertainty_mean: float = 0.0
    truncated_by_uncertainty: int = 0
    #: Fits between the model that imagined a sample and the newest model (mean).
    imagination_lag: float = 0.0
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
    divided by ``scale**2`` (B_real's per-dimension variance, floored at 1e-3 of its mean). A horizon no run is long
    enough for is left out (the list is shorter).
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
        self.model = WorldModel(
            observation_space,
            action_space,
            ensemble_size=config.ensemble_size,
            elites=config.elites,
            hidden_sizes=config.hidden_sizes,
            lr=config.model_lr,
            seed=config.seed,
        )
        self.buffer = TransitionBuffer(config.capacity)
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

    # ----------------------------------------------------------------- choices
    def _horizon(self, error: list[float]) -> int:
        choice = self.config.horizon
        if callable(choice):
            return check_horizon("horizon(update)", choice(self.updates, self))
        if choice != "auto":
            return int(choice)
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
        """Measure the model on new real trajectories, then add them to B_real."""
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
        record.error = self.observe(trajectories)
        self.fit()
        record.real_samples = sum(len(t) for t in trajectories)
        record.real_transitions = self.buffer.total_added
        record.model_version = self.model.version
        imagined: list[Trajectory] = []
        if self.enabled and self.model.version > 0:
            record.horizon = self._horizon(record.error)
            record.share = self._share(record.error)
            s = record.share
            multiple = (
                MAX_IMAGINED_MULTIPLE if s >= 1.0 else min(MAX_IMAGINED_MULTIPLE, s / (1.0 - s))
            )
            n = int(round(record.real_samples * multiple))
            if n > 0:
                started = time.perf_counter()
                imagined = self.imagine(policy, n, record.horizon, policy_version)
                record.imagine_wall_s = time.perf_counter() - started
        record.active = bool(imagined)
        record.imagined_samples = sum(len(t) for t in imagined)
        if imagined:
            unc = np.concatenate([t.uncertainty for t in imagined])  # type: ignore[attr-defined]
            versions = np.concatenate([t.model_versions for t in imagined])  # type: ignore[attr-defined]
            record.uncertainty_mean = float(unc.mean())
            record.imagination_lag = float((self.model.version - versions).mean())
        self.history.append(record)
        self.updates += 1
        return imagined

    def imagine(
        self, policy: Any, samples: int, horizon: int, policy_version: int
    ) -> list[Trajectory]:
        """About ``samples`` imagined steps of ``policy``: ``B`` episodes in parallel, ``T`` steps each."""
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
