"""MBPO: SB3's SAC trained mostly on short model rollouts branched from real states.

:class:`MBPO` is a :class:`stable_baselines3.SAC` (``learn``, ``predict``, ``save``,
``load``, callbacks and the progress bar work as in SB3) that, once ``learning_starts``
real steps are in its replay buffer:

* refits the :class:`~fleetgym.agents.world_model.WorldModel` ensemble on every real
  transition every ``model.every`` real steps (warm-started, a fixed held-out split);
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

import dataclasses
import time
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import SAC

from fleetgym.agents.world_model.buffer import TransitionBuffer
from fleetgym.agents.world_model.config import linear_schedule
from fleetgym.agents.world_model.imagination import multistep_error
from fleetgym.agents.world_model.mbpo_config import MBPOConfig, config_from_1x
from fleetgym.agents.world_model.model import ModelDivergedError, WorldModel
from fleetgym.agents.world_model.replay import MixedReplay, ModelReplay, real_rows
from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import quote

__all__ = ["MBPO", "check_mbpo_env"]

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


class MBPO(SAC):
    """SAC on a mix of real and model-imagined transitions (Janner et al., 2019).

    Args:
        policy: SB3's policy (``"MlpPolicy"``).
        env: A Gymnasium env or ID with 1-D ``Box`` observation and action spaces.
        config: What MBPO adds to SAC (:class:`MBPOConfig`: the batch mix, the rollouts,
            the world model in its ``model``); default ``MBPOConfig()``. Saved and loaded
            with the agent.
        learning_starts: SB3 SAC's: real env steps (uniform random actions) before SAC's
            first update; model fits and rollouts also start with the first update.
        seed: SB3 SAC's seed (Python, NumPy, torch, the env); also seeds the world model,
            the real-transition buffer and the imagination draws (None: those use 0).
        verbose: SB3 SAC's log level: 0 none, 1 info, 2 debug.
        device: SB3 SAC's torch device for SAC's networks and batches (``"auto"``: CUDA if
            available, else the CPU).
        **sac_kwargs: Further SB3 SAC keywords (``batch_size``, ``policy_kwargs`` ...);
            ``gradient_steps`` and ``train_freq`` are set from ``config.updates_per_step``.

    Example:
        >>> from fleetgym.agents.world_model import MBPOConfig, MBPOModelConfig
        >>> config = MBPOConfig(updates_per_step=2, rollout_batch=50,
        ...                     model=MBPOModelConfig(every=100, ensemble_size=2, elites=1,
        ...                                           hidden_sizes=(32, 32)))
        >>> agent = MBPO("MlpPolicy", "Pendulum-v1", config, learning_starts=200, seed=0)
        >>> agent = agent.learn(300)
        >>> agent.model_version >= 1, len(agent.model_replay) > 0
        (True, True)

    Raises:
        TypeError / ValueError: For a bad argument, naming it (``config`` not an
            :class:`MBPOConfig`).
        fleetgym.errors.UnsupportedSpaceError: For an env whose spaces are not 1-D Boxes.
    """

    def __init__(
        self,
        policy: Any = "MlpPolicy",
        env: Any = None,
        config: MBPOConfig | None = None,
        *,
        learning_starts: int = 5000,
        seed: int | None = None,
        verbose: int = 0,
        device: torch.device | str = "auto",
        _init_setup_model: bool = True,
        **sac_kwargs: Any,
    ) -> None:
        config = MBPOConfig() if config is None else config
        if not isinstance(config, MBPOConfig):
            raise TypeError(f"config: expected an MBPOConfig, actual {quote(config)}")
        self.config = config
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
            gradient_steps=config.updates_per_step,
            train_freq=1,
            seed=seed,
            verbose=verbose,
            device=device,
            _init_setup_model=_init_setup_model,
            **sac_kwargs,
        )

    # ----------------------------------------------------------------- setup
    def _setup_model(self) -> None:
        legacy = config_from_1x(self.__dict__)  # a model saved by 1.x: its settings
        if legacy is not None:
            self.config = legacy
        super()._setup_model()
        check_mbpo_env(self.observation_space, self.action_space)
        seed = 0 if self.seed is None else int(self.seed)
        dim = int(np.prod(self.action_space.shape or (1,)))
        # The replay buffer holds SAC's actions rescaled to [-1, 1]; the model takes those.
        scaled = gym.spaces.Box(-1.0, 1.0, (dim,), np.float32)
        self.world_model = WorldModel(
            self.observation_space, scaled, seed=seed, **self.config.model.world_model_kwargs()
        )
        self.real_transitions = TransitionBuffer(max(10, int(self.buffer_size)), seed=seed)
        self.model_replay = ModelReplay(
            self.config.model_buffer_rows, self.world_model.obs_dim, dim
        )
        self._wm_rng = np.random.default_rng([seed, 0x3B0])
        self.mixed_replay = MixedReplay(
            self.replay_buffer, self.model_replay, self.config.real_ratio, self._wm_rng, self.device
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
    def updates_per_step(self) -> int:
        """SAC gradient steps per real step (``config.updates_per_step``)."""
        return self.config.updates_per_step

    @property
    def real_ratio(self) -> float:
        """Share of each batch that is real data (``config.real_ratio``)."""
        return self.config.real_ratio

    @property
    def rollout_length(self) -> int | str:
        """The rollout-length schedule or fixed length (``config.rollout_length``)."""
        return self.config.rollout_length

    @property
    def model_version(self) -> int:
        """Fits of the world model so far."""
        return int(self.world_model.version)

    def current_rollout_length(self) -> int:
        """The rollout length ``k`` the schedule gives now."""
        if isinstance(self.rollout_length, int):
            return self.rollout_length
        cfg = self.config
        low, high = cfg.min_rollout_length, cfg.max_rollout_length
        if self.rollout_length == "linear":
            first, last = cfg.rollout_schedule_steps
            return int(linear_schedule(low, high, first, last)(self.num_timesteps, None))
        k = low
        for h, e in enumerate(self._errors[:high], start=1):
            if not e <= cfg.error_tolerance:
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
            self.world_model, runs, self.config.max_rollout_length, scale, self._wm_rng
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
                max_epochs=self.config.model.max_epochs,
                max_updates=self.config.model.max_updates,
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
            obs = self.real_transitions.sample_starts(self.config.rollout_batch, self._wm_rng)
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
        """Refit and roll out when due, then SAC's gradient steps on mixed batches.

        Called by SB3's ``learn`` after each real step once ``learning_starts`` is reached.
        Batches are mixed only while imagination runs and the model buffer holds rows;
        otherwise SAC trains on real data alone.

        Args:
            gradient_steps: SAC gradient steps to take (``learn`` passes
                ``config.updates_per_step``).
            batch_size: Transitions per gradient step, ``real_ratio`` of them real
                (``learn`` passes the agent's ``batch_size``).
        """
        steps = self.num_timesteps
        if self.imagination_enabled and (
            self._last_fit < 0 or steps - self._last_fit >= self.config.model.every
        ):
            self._last_fit = steps
            self._fit_model()
        if (
            self.imagination_enabled
            and self.model_version
            and (
                self._last_rollout < 0 or steps - self._last_rollout >= self.config.rollout_interval
            )
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
            "config": dataclasses.asdict(self.config),
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
