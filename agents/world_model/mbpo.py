"""MBPO: SB3's SAC trained mostly on short model rollouts branched from real states.

:class:`MBPO` is a :class:`stable_baselines3.SAC` (``learn``, ``predict``, ``save``,
``load``, callbacks and the progress bar work as in SB3) that, once ``learning_starts``
real steps are in its replay buffer:

* refits the :class:`~fleetgym.agents.world_model.WorldModel` ensemble on every real
  transition every ``model_every`` real steps (warm-started, a fixed held-out split);
* every ``rollout_every`` real steps, branches ``rollout_batch`` rollouts of length ``k``
  from real start states with the current policy, each rollout following one elite
  member, into a model buffer that keeps the newest ``model_buffer_size`` transitions;
* takes ``updates_per_step`` SAC gradient steps per real step on batches holding
  ``real_ratio`` real transitions and the rest imagined ones.

``k`` follows MBPO's linear schedule (``rollout_length="linear"``: ``min_rollout_length``
at real step ``rollout_schedule_steps[0]`` rising to ``max_rollout_length`` at
``rollout_schedule_steps[1]``), the project's error-driven one (``"error"``: the longest
``h`` whose measured open-loop error on the real steps since the previous fit, before
the model sees them, is at most ``error_tolerance``), or is fixed (an int).

A fit or a rollout that diverges (a non-finite loss or prediction) stops imagination with
a :class:`RuntimeWarning`; SAC then trains on real data only.

The matched model-free baseline is SB3's ``SAC`` with ``gradient_steps=updates_per_step``
and the same ``learning_starts`` and batch size.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import SAC

from fleetgym.agents.world_model.buffer import TransitionBuffer
from fleetgym.agents.world_model.config import linear_schedule
from fleetgym.agents.world_model.imagination import multistep_error
from fleetgym.agents.world_model.model import ModelDivergedError, WorldModel
from fleetgym.agents.world_model.replay import MixedReplay, ModelReplay, real_rows
from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import check_choice, check_float, check_int, quote

__all__ = ["MBPO", "check_mbpo_env"]

ROLLOUT_SCHEDULES = ("linear", "error")
#: Longest rollout accepted.
MAX_ROLLOUT = 1000
#: Real transitions needed before a fit.
MIN_FIT_ROWS = 100
#: Attributes rebuilt by ``_setup_model`` rather than saved (the world model is refit from
#: real data when learning resumes).
_NOT_SAVED = ("world_model", "real_transitions", "model_replay", "mixed_replay", "_wm_rng")


def check_mbpo_env(observation_space: Any, action_space: Any) -> None:
    """Refuse spaces MBPO cannot take: it needs 1-D ``Box`` observations and actions.

    Raises:
        fleetgym.errors.UnsupportedSpaceError: Naming ``env`` and the space.
    """
    for what, space in (("observation", observation_space), ("action", action_space)):
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise UnsupportedSpaceError(
                f"env: expected a 1-D Box {what} space (MBPO's world model and SAC take "
                f"flat continuous vectors), actual {space!r}"
            )


def _rollout_length(value: Any) -> int | str:
    if isinstance(value, str):
        return check_choice("rollout_length", value, ROLLOUT_SCHEDULES)
    return check_int("rollout_length", value, 1, MAX_ROLLOUT)


class MBPO(SAC):
    """SAC on a mix of real and model-imagined transitions (Janner et al., 2019).

    Example:
        >>> agent = MBPO("MlpPolicy", "Pendulum-v1", learning_starts=200, model_every=100,
        ...              rollout_batch=50, updates_per_step=2, ensemble_size=2, elites=1,
        ...              model_hidden_sizes=(32, 32), seed=0)
        >>> agent = agent.learn(300)
        >>> agent.model_version >= 1, len(agent.model_replay) > 0
        (True, True)

    Args:
        policy: SB3's policy (``"MlpPolicy"``).
        env: A Gymnasium env or ID with 1-D ``Box`` observation and action spaces.
        updates_per_step: SAC gradient steps per real step (MBPO: 20; ``>= 1``).
        real_ratio: Share of each batch that is real data, in ``[0, 1]`` (MBPO: 0.05).
        model_every: Real steps between fits of the world model.
        rollout_every: Real steps between rollouts (default ``model_every``).
        rollout_batch: Rollouts branched from real states each time.
        rollout_length: ``"linear"`` (MBPO), ``"error"`` (measured error) or an int.
        min_rollout_length: The shortest ``k`` of the schedules.
        max_rollout_length: The longest ``k`` of the schedules (MBPO Hopper: 15).
        rollout_schedule_steps: Real steps where ``"linear"`` leaves its minimum and
            reaches its maximum (MBPO Hopper: 20k and 100k).
        error_tolerance: The normalised open-loop error ``"error"`` accepts.
        model_buffer_size: Imagined transitions kept (default: four rollouts' worth
            at the longest ``k``).
        ensemble_size / elites / model_hidden_sizes / model_lr: The world model's.
        model_max_epochs: Bound on the epochs of one fit (early stopping on the
            held-out loss before it).
        model_max_updates: Bound on the gradient steps of one fit (``None``: none).
        learn_termination: Learn the termination head (``False`` for envs that do not end).
        learning_starts / batch_size / seed / ...: SB3 SAC's (``sac_kwargs``);
            ``gradient_steps`` and ``train_freq`` are set from ``updates_per_step``.

    Raises:
        TypeError / ValueError: For a bad argument, naming it.
        fleetgym.errors.UnsupportedSpaceError: For an env whose spaces are not 1-D Boxes.
    """

    def __init__(
        self,
        policy: Any = "MlpPolicy",
        env: Any = None,
        *,
        updates_per_step: int = 20,
        real_ratio: float = 0.05,
        model_every: int = 250,
        rollout_every: int | None = None,
        rollout_batch: int = 400,
        rollout_length: int | str = "linear",
        min_rollout_length: int = 1,
        max_rollout_length: int = 15,
        rollout_schedule_steps: Sequence[int] = (20_000, 100_000),
        error_tolerance: float = 0.05,
        model_buffer_size: int | None = None,
        ensemble_size: int = 7,
        elites: int = 5,
        model_hidden_sizes: Sequence[int] = (200, 200, 200, 200),
        model_lr: float = 1e-3,
        model_max_epochs: int = 20,
        model_max_updates: int | None = None,
        learn_termination: bool = True,
        learning_starts: int = 5000,
        _init_setup_model: bool = True,
        **sac_kwargs: Any,
    ) -> None:
        self.updates_per_step = check_int("updates_per_step", updates_per_step, 1, 10_000)
        self.real_ratio = check_float("real_ratio", real_ratio, 0.0, 1.0)
        self.model_every = check_int("model_every", model_every, 1)
        self.rollout_every = check_int(
            "rollout_every", model_every if rollout_every is None else rollout_every, 1
        )
        self.rollout_batch = check_int("rollout_batch", rollout_batch, 1, 10_000_000)
        self.rollout_length = _rollout_length(rollout_length)
        self.min_rollout_length = check_int(
            "min_rollout_length", min_rollout_length, 1, MAX_ROLLOUT
        )
        self.max_rollout_length = check_int(
            "max_rollout_length", max_rollout_length, self.min_rollout_length, MAX_ROLLOUT
        )
        steps = list(rollout_schedule_steps)
        if len(steps) != 2:
            raise ValueError(
                f"rollout_schedule_steps: expected (first, last), actual {quote(steps)}"
            )
        first = check_int("rollout_schedule_steps[0]", steps[0], 0)
        self.rollout_schedule_steps = (
            first,
            check_int("rollout_schedule_steps[1]", steps[1], first),
        )
        self.error_tolerance = check_float("error_tolerance", error_tolerance, 0.0, strict=True)
        longest = (
            self.rollout_length if isinstance(self.rollout_length, int) else self.max_rollout_length
        )
        self.model_buffer_size = check_int(
            "model_buffer_size",
            4 * self.rollout_batch * longest if model_buffer_size is None else model_buffer_size,
            1,
            100_000_000,
        )
        self.model_kwargs: dict[str, Any] = {
            "ensemble_size": check_int("ensemble_size", ensemble_size, 1, 64),
            "elites": check_int("elites", elites, 1, ensemble_size),
            "hidden_sizes": [
                check_int(f"model_hidden_sizes[{i}]", h, 1, 4096)
                for i, h in enumerate(model_hidden_sizes)
            ],
            "lr": check_float("model_lr", model_lr, 0.0, strict=True),
            "learn_termination": bool(learn_termination),
        }
        self.model_max_epochs = check_int("model_max_epochs", model_max_epochs, 1, 10_000)
        self.model_max_updates = (
            None
            if model_max_updates is None
            else check_int("model_max_updates", model_max_updates, 1)
        )
        for fixed in ("gradient_steps", "train_freq"):
            if fixed in sac_kwargs:
                raise TypeError(
                    f"{fixed}: expected no {fixed} (MBPO takes updates_per_step gradient "
                    "steps after every real step)"
                )
        if isinstance(env, str):
            env = gym.make(env)
        if env is not None:
            check_mbpo_env(env.observation_space, env.action_space)
        #: Imagination runs (a divergence sets it False, with the reason).
        self.imagination_enabled = True
        self.disabled_reason = ""
        #: One record per fit (real step, model version, held-out losses, rollout length,
        #: model-buffer size, wall seconds of the fit and of the rollouts since).
        self.mbpo_log: list[dict[str, Any]] = []
        self.model_fit_s = 0.0
        self.imagine_s = 0.0
        self._last_fit = -1
        self._last_rollout = -1
        self._synced = 0
        self._errors: list[float] = []
        super().__init__(
            policy,
            env,
            learning_starts=learning_starts,
            gradient_steps=self.updates_per_step,
            train_freq=1,
            _init_setup_model=_init_setup_model,
            **sac_kwargs,
        )

    # ----------------------------------------------------------------- setup
    def _setup_model(self) -> None:
        super()._setup_model()
        check_mbpo_env(self.observation_space, self.action_space)
        seed = 0 if self.seed is None else int(self.seed)
        dim = int(np.prod(self.action_space.shape or (1,)))
        # The replay buffer holds SAC's actions rescaled to [-1, 1]; the model takes those.
        scaled = gym.spaces.Box(-1.0, 1.0, (dim,), np.float32)
        self.world_model = WorldModel(
            self.observation_space, scaled, seed=seed, **self.model_kwargs
        )
        self.real_transitions = TransitionBuffer(max(10, int(self.buffer_size)), seed=seed)
        self.model_replay = ModelReplay(self.model_buffer_size, self.world_model.obs_dim, dim)
        self._wm_rng = np.random.default_rng([seed, 0x3B0])
        self.mixed_replay = MixedReplay(
            self.replay_buffer, self.model_replay, self.real_ratio, self._wm_rng, self.device
        )
        self._last_fit = self._last_rollout = -1
        self._synced = self.num_timesteps

    def _setup_learn(self, total_timesteps: int, *args: Any, **kwargs: Any) -> Any:
        out = super()._setup_learn(total_timesteps, *args, **kwargs)
        if self.num_timesteps < self._synced:  # learn(reset_num_timesteps=True) again
            self._synced = self.num_timesteps
            self._last_fit = self._last_rollout = -1
        return out

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), *_NOT_SAVED]

    # ----------------------------------------------------------------- state
    @property
    def model_version(self) -> int:
        """Fits of the world model so far."""
        return int(self.world_model.version)

    def current_rollout_length(self) -> int:
        """The rollout length ``k`` the schedule gives now."""
        if isinstance(self.rollout_length, int):
            return self.rollout_length
        low, high = self.min_rollout_length, self.max_rollout_length
        if self.rollout_length == "linear":
            first, last = self.rollout_schedule_steps
            return int(linear_schedule(low, high, first, last)(self.num_timesteps, None))
        k = low
        for h, e in enumerate(self._errors[:high], start=1):
            if not e <= self.error_tolerance:
                break
            k = max(k, h)
        return min(max(k, low), high)

    def _stop_imagination(self, reason: str) -> None:
        self.imagination_enabled = False
        self.disabled_reason = reason
        self.model_replay.clear()
        warnings.warn(
            f"MBPO: imagination stopped at real step {self.num_timesteps}: {reason}; SAC "
            "continues on real data only",
            RuntimeWarning,
            stacklevel=3,
        )

    # ----------------------------------------------------------------- model
    def _sync_real(self) -> dict[str, np.ndarray] | None:
        """Move the real transitions added since the last fit into B_real."""
        rows = real_rows(self.replay_buffer, self.num_timesteps - self._synced)
        self._synced = self.num_timesteps
        if not len(rows["rewards"]):
            return None
        segments = np.concatenate([[0], np.cumsum(rows["done"][:-1])])
        self.real_transitions.add(
            rows["obs"],
            rows["actions"],
            rows["rewards"],
            rows["next_obs"],
            rows["terminated"],
            segments=segments,
        )
        return rows

    def _measure_error(self, rows: dict[str, np.ndarray]) -> None:
        """Open-loop error of the current model on real steps it has not trained on."""
        runs = []
        ends = np.flatnonzero(rows["done"])
        start = 0
        for end in [*ends.tolist(), len(rows["done"]) - 1]:
            if end >= start:
                obs = np.concatenate(
                    [rows["obs"][start : end + 1], rows["next_obs"][end : end + 1]]
                )
                runs.append((obs, rows["actions"][start : end + 1]))
            start = end + 1
        scale = self.real_transitions.obs.std(axis=0)
        self._errors = multistep_error(
            self.world_model, runs, self.max_rollout_length, scale, self._wm_rng
        )

    def _fit_model(self) -> None:
        started = time.perf_counter()
        rows = self._sync_real()
        if len(self.real_transitions) < MIN_FIT_ROWS:  # e.g. right after load(): wait
            self._last_fit = -1
            self.model_fit_s += time.perf_counter() - started
            return
        if rows is not None and self.rollout_length == "error" and self.world_model.version:
            self._measure_error(rows)
        try:
            report = self.world_model.fit(
                self.real_transitions,
                max_epochs=self.model_max_epochs,
                max_updates=self.model_max_updates,
            )
        except ModelDivergedError as error:
            self._stop_imagination(f"the world model diverged ({error})")
            return
        finally:
            self.model_fit_s += time.perf_counter() - started
        self.mbpo_log.append(
            {
                "step": int(self.num_timesteps),
                "version": report.version,
                "validation": dict(report.validation),
                "epochs": report.epochs,
                "fit_s": report.wall_s,
                "rollout_length": self.current_rollout_length(),
                "errors": list(self._errors),
                "model_buffer": len(self.model_replay),
            }
        )

    def _rollout(self) -> None:
        started = time.perf_counter()
        try:
            k = self.current_rollout_length()
            obs = self.real_transitions.sample_starts(self.rollout_batch, self._wm_rng)
            members = self._wm_rng.integers(0, self.world_model.num_elites, len(obs))
            self.actor.set_training_mode(False)
            for _ in range(k):
                with torch.no_grad():
                    tensor = torch.as_tensor(obs, device=self.device)
                    actions = self.actor(tensor, deterministic=False).cpu().numpy()
                step = self.world_model.step(obs, actions, members, self._wm_rng)
                if not (np.isfinite(step.next_obs).all() and np.isfinite(step.reward).all()):
                    self._stop_imagination(
                        f"a rollout of model version {self.model_version} predicted NaN or infinity"
                    )
                    return
                self.model_replay.add(
                    obs,
                    actions,
                    step.reward,
                    step.next_obs,
                    step.terminated.astype(np.float32),
                    self.model_version,
                )
                alive = ~step.terminated
                if not alive.any():
                    break
                obs, members = step.next_obs[alive], members[alive]
        finally:
            self.imagine_s += time.perf_counter() - started

    # ----------------------------------------------------------------- training
    def train(self, gradient_steps: int, batch_size: int = 64) -> None:
        """Refit and roll out when due, then SAC's gradient steps on mixed batches."""
        steps = self.num_timesteps
        if self.imagination_enabled and (
            self._last_fit < 0 or steps - self._last_fit >= self.model_every
        ):
            self._last_fit = steps
            self._fit_model()
        if (
            self.imagination_enabled
            and self.model_version
            and (self._last_rollout < 0 or steps - self._last_rollout >= self.rollout_every)
        ):
            self._last_rollout = steps
            self._rollout()
        if not (self.imagination_enabled and len(self.model_replay)):
            super().train(gradient_steps, batch_size)
            return
        real = self.replay_buffer
        self.replay_buffer = self.mixed_replay  # type: ignore[assignment]
        try:
            super().train(gradient_steps, batch_size)
        finally:
            self.replay_buffer = real

    def summary(self) -> dict[str, Any]:
        """Plain data: settings, model version, fits, imagined rows, CPU split."""
        return {
            "updates_per_step": self.updates_per_step,
            "real_ratio": self.real_ratio,
            "rollout_length": self.rollout_length,
            "model_version": self.model_version,
            "imagined_rows": int(self.model_replay.total_added),
            "imagination_enabled": self.imagination_enabled,
            "disabled_reason": self.disabled_reason,
            "model_fit_s": self.model_fit_s,
            "imagine_s": self.imagine_s,
            "fits": list(self.mbpo_log),
        }
