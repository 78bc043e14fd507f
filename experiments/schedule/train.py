"""Train, resume and fine-tune the learned actor scheduler (SB3 PPO on ``ActorSchedulingEnv``).

This module counts *episodes* rather than timesteps, because the paper's budget is in
episodes and an episode's length (the number of rounds until the target return) is what
the scheduler itself changes. :func:`train_scheduler` with ``resume_from=`` continues
counting episodes from a checkpoint (:mod:`fleetgym.experiments.schedule.checkpoint`);
:func:`finetune_scheduler` continues a trained scheduler on another workload.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from fleetgym.agents.schedulers.actions import SchedulerActionWrapper, fleet_sizes, start_index
from fleetgym.experiments.schedule.callbacks import EpisodeBudgetCallback, EpisodeRecord
from fleetgym.experiments.schedule.checkpoint import (
    load_scheduler,
    read_resume_checkpoint,
    read_scheduler_meta,
    save_scheduler,
)
from fleetgym.experiments.schedule.config import (
    CARTPOLE_MODELED_ENV_ID,
    GENERAL_ENV_ID,
    SchedulerPPOConfig,
    stored_config,
    validate_env_kwargs,
)
from fleetgym.experiments.schedule.moves import MovesCheck, check_moves
from fleetgym.experiments.schedule.paired import PairedSeedsWrapper, pool_seeds
from fleetgym.experiments.schedule.policy import set_keep_prior
from fleetgym.experiments.schedule.start import StartSelection, select_start
from fleetgym.experiments.tables import write_csv
from fleetgym.validation import check_float, check_int

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv

__all__ = [
    "TrainingResult",
    "finetune_scheduler",
    "make_scheduler_vec_env",
    "train_scheduler",
]

logger = logging.getLogger(__name__)

_RECORD_FIELDS = list(EpisodeRecord.__dataclass_fields__)


@dataclass
class TrainingResult:
    """The outcome of :func:`train_scheduler` or :func:`finetune_scheduler`."""

    model_path: Path
    episodes: int  # total episodes the saved model has seen (across resumes)
    episodes_this_run: int
    timesteps: int
    updates: int
    wall_s: float
    cpu_s: float = 0.0  # CPU seconds of this process (the wall time on an idle machine)
    records: list[EpisodeRecord] = field(default_factory=list)
    checkpoints: list[Path] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly summary (no per-episode rows)."""
        rewards = [r.reward for r in self.records]
        return {
            "model_path": str(self.model_path),
            "episodes": self.episodes,
            "episodes_this_run": self.episodes_this_run,
            "timesteps": self.timesteps,
            "updates": self.updates,
            "wall_s": round(self.wall_s, 2),
            "wall_s_per_episode": round(self.wall_s / max(1, self.episodes_this_run), 3),
            "cpu_s": round(self.cpu_s, 2),
            "cpu_s_per_episode": round(self.cpu_s / max(1, self.episodes_this_run), 3),
            "mean_reward_last10": float(np.mean(rewards[-10:])) if rewards else float("nan"),
            "checkpoints": [str(p) for p in self.checkpoints],
        }


def make_scheduler_vec_env(
    env_id: str = CARTPOLE_MODELED_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    n_envs: int = 1,
    seed: int | None = 0,
    normalize_reward: bool = False,
    gamma: float = 0.99,
    actions: str = "discrete",
    start_actors: int | None = None,
    paired_seeds: int = 0,
    train_starts: Sequence[int] = (),
    reference_cache: Mapping[int, np.ndarray] | None = None,
) -> VecEnv:
    """The SB3 vector env the scheduler trains on (``DummyVecEnv`` of ``Monitor``-ed envs).

    ``DummyVecEnv`` (in-process) is used even for several envs: each scheduling env runs a
    fleet of its own, and stepping them in subprocesses on a 2-core machine would only
    add contention.

    Args:
        env_id: a registered scheduling env ID.
        env_kwargs: keyword arguments of ``gym.make``.
        n_envs: number of envs.
        seed: seed of the first env (SB3 gives env ``i`` seed ``seed + i``).
        normalize_reward: wrap in ``VecNormalize(norm_obs=False, norm_reward=True)``.
        gamma: discount used by the reward normalisation.
        actions: the scheduler's action parametrisation
            (:class:`~fleetgym.agents.schedulers.actions.SchedulerActionWrapper`).
        start_actors: with ``actions="step"``, the size an episode starts from.
        paired_seeds: train on a pool of this many workload seeds per env, each round
            paid relative to a constant fleet of the start size on the same seed
            (:class:`~fleetgym.experiments.schedule.paired.PairedSeedsWrapper`); 0: a
            fresh seed every episode and the env's own reward.
        train_starts: with ``actions="step"``, exploring starts (each episode starts from
            one of these sizes, drawn by a generator seeded from ``seed`` and the env's
            index); the paired reference stays the constant fleet of ``start_actors``.
        reference_cache: the paired reference's per-round rewards already run, by
            workload seed (from the start-size selection).

    Raises:
        TypeError: ``env_kwargs`` is not a mapping.
        ValueError: ``n_envs`` < 1.
    """
    kwargs = validate_env_kwargs(env_kwargs)
    n_envs = check_int("n_envs", n_envs, low=1)
    paired_seeds = check_int("paired_seeds", paired_seeds, low=0)
    _check_env_id(env_id)

    def factory(index: int) -> gym.Env:
        env = gym.make(env_id, **kwargs)
        if actions != "discrete":
            starts_seed = None if seed is None else [seed, index]
            env = SchedulerActionWrapper(
                env,
                actions,
                start_actors=start_actors,
                train_starts=train_starts,
                starts_seed=starts_seed,
            )
        env = Monitor(env)
        if paired_seeds:
            space = env.unwrapped.action_space
            if not isinstance(space, gym.spaces.Discrete):
                raise TypeError(f"env: expected a Discrete action space, actual {space}")
            max_actors = int(space.n)
            reference = fleet_sizes(max_actors)[start_index(max_actors, start_actors)]
            env = PairedSeedsWrapper(
                env,
                lambda: gym.make(env_id, **kwargs),
                pool_size=paired_seeds,
                reference_actors=reference,
                reference_cache=reference_cache,
            )
        return env

    venv: VecEnv = DummyVecEnv([functools.partial(factory, i) for i in range(n_envs)])
    if seed is not None:
        venv.seed(seed)
    if normalize_reward:
        venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=gamma)
    return venv


def train_scheduler(
    out_dir: str | Path,
    *,
    env_id: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    episodes: int = 100,
    seed: int = 0,
    config: SchedulerPPOConfig | None = None,
    resume_from: str | Path | None = None,
    checkpoint_every: int = 10,
    tensorboard: bool = True,
    progress: bool = True,
    name: str = "scheduler",
    learning_rate: float | None = None,
    checkpoint_minutes: float | None = None,
    keep: int = 3,
) -> TrainingResult:
    """Train the scheduler with PPO until ``episodes`` episodes are done (in total).

    Writes ``<out_dir>/<name>.zip`` (the final model), ``<out_dir>/checkpoints/``
    (``scheduler_epNNNN.zip`` at the end of an episode, every ``checkpoint_every``
    episodes and once ``checkpoint_minutes`` minutes have passed since the last one, the
    newest ``keep`` kept), ``<out_dir>/tb/`` (TensorBoard), and
    ``<out_dir>/<name>_episodes.csv`` (one row per episode of this run). Every zip is
    written atomically (a temporary file in the same folder, fsync, rename).

    With ``resume_from``, the model, optimiser and episode count come from that zip
    (``env_id``/``env_kwargs`` default to the ones stored in it) and training continues
    until the total reaches ``episodes``. The checkpoint is read and checked before any
    work; a resumed run is not bit-identical to an uninterrupted one (its envs start new
    episodes on the seed ``seed + episodes done``).

    Args:
        out_dir: output directory (created).
        env_id: scheduling env ID (None: the stored one when resuming, else
            :data:`~fleetgym.experiments.schedule.config.CARTPOLE_MODELED_ENV_ID`).
        env_kwargs: its ``gym.make`` keyword arguments (None when resuming on the stored
            env ID: the stored ones).
        episodes: total episodes the model should have seen when this returns.
        seed: seed of PPO and of the envs.
        config: PPO hyperparameters (ignored for the architecture when resuming).
        resume_from: a checkpoint zip to continue from, or a folder: its newest periodic
            checkpoint, else the newest of its ``checkpoints/`` (a run's ``out_dir``).
        checkpoint_every: save every this many episodes (0: no episode trigger).
        tensorboard: write TensorBoard logs.
        progress: show a tqdm bar over episodes.
        name: file stem of the final model.
        learning_rate: override the learning rate (e.g. for fine-tuning).
        checkpoint_minutes: also save at the end of the first episode once this many
            minutes have passed since the last checkpoint (a finite number > 0; ``None``:
            no time trigger).
        keep: how many of the newest periodic checkpoints to keep (an int >= 1); older
            ones are deleted once a new one is in place.

    Raises:
        ValueError: bad budgets, or a checkpoint that has already seen ``episodes``.
        FileNotFoundError: ``resume_from`` does not exist.
        CheckpointError: ``resume_from`` is a folder without checkpoints, a truncated,
            corrupt or foreign file, or one written by a newer fleetgym (a
            ``ValueError``, naming the file; before any work).
    """
    episodes = check_int("episodes", episodes, low=1)
    checkpoint_every = check_int("checkpoint_every", checkpoint_every, low=0)
    if checkpoint_minutes is not None:
        checkpoint_minutes = check_float("checkpoint_minutes", checkpoint_minutes, 0.0, strict=True)
    keep = check_int("keep", keep, low=1)
    seed = check_int("seed", seed)
    config = config if config is not None else SchedulerPPOConfig()
    if not isinstance(config, SchedulerPPOConfig):
        raise TypeError(f"config: expected SchedulerPPOConfig, actual {type(config).__name__}")
    out = Path(out_dir)
    start_episode = 0
    meta: dict[str, Any]
    resume_file: Path | None = None
    if resume_from is not None:
        # Read and checked before anything is written.
        resume_file, stored = read_resume_checkpoint(resume_from)
        start_episode = int(stored.get("episodes", 0))
        logger.info("resuming from %s after %d episodes", resume_file, start_episode)
        if start_episode >= episodes:
            raise ValueError(
                f"episodes: expected more than the {start_episode} episodes the checkpoint "
                f"{resume_file} has seen, actual {episodes}"
            )
        stored_id = stored.get("env_id", CARTPOLE_MODELED_ENV_ID)
        if env_kwargs is None and env_id in (None, stored_id):
            env_kwargs = stored.get("env_kwargs", {})
        if env_id is None:
            env_id = stored_id
        config = SchedulerPPOConfig(**{**stored_config(stored), "n_envs": config.n_envs})
    if env_id is None:
        env_id = CARTPOLE_MODELED_ENV_ID
    out.mkdir(parents=True, exist_ok=True)
    kwargs = validate_env_kwargs(env_kwargs)
    config = config.resolved(_env_max_actors(env_id, kwargs))
    started = time.perf_counter()
    cpu_started = time.process_time()
    selection: StartSelection | None = None
    if resume_file is None and config.start_search:
        # Selected once: every size on the first env's training pool (env i's pool is drawn
        # from seed + i), the close ones on the pool's continuation.
        selection = select_start(
            lambda: gym.make(env_id, **kwargs),
            config.start_search,
            pool_seeds(seed % 2**31, max(config.paired_seeds, config.start_search_seeds)),
            first=max(2, config.paired_seeds),
            progress=progress,
        )
        config = replace(config, start_actors=selection.best)
        write_csv(out / f"{name}_start_search.csv", selection.rows())
        logger.info("start size: %d of %s", selection.best, selection.mean_totals())
    meta = {
        "env_id": env_id,
        "env_kwargs": kwargs,
        "seed": int(seed),
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
    }
    if resume_file is not None:
        meta["resumed_from"] = resume_file.name

    venv = make_scheduler_vec_env(
        env_id,
        kwargs,
        n_envs=config.n_envs,
        seed=seed + start_episode,  # a resumed run does not replay the episodes it has seen
        normalize_reward=config.normalize_reward,
        gamma=config.gamma,
        actions=config.actions,
        start_actors=config.start_actors,
        paired_seeds=config.paired_seeds,
        train_starts=config.train_starts,
        reference_cache=selection.rewards[selection.best] if selection is not None else None,
    )
    tb_dir = str(out / "tb") if tensorboard else None
    if resume_file is not None:
        custom: dict[str, Any] = {"n_envs": config.n_envs}
        if learning_rate is not None:
            custom["learning_rate"] = learning_rate
            custom["lr_schedule"] = lambda _progress: learning_rate
        model = load_scheduler(resume_file, env=venv, tensorboard_log=tb_dir, custom_objects=custom)
        if learning_rate is not None:
            model.learning_rate = learning_rate
            model._setup_lr_schedule()
        model.set_random_seed(seed + start_episode)
    else:
        ppo_kwargs = config.ppo_kwargs()
        if learning_rate is not None:
            ppo_kwargs["learning_rate"] = learning_rate
        policy: Any = "MlpPolicy"
        if config.actions == "step" and config.first_keep_prior is not None:
            from fleetgym.experiments.schedule.policy import FirstMovePolicy, first_move_offset

            policy = FirstMovePolicy
            ppo_kwargs["policy_kwargs"]["first_offset"] = first_move_offset(
                config.keep_prior, config.first_keep_prior
            )
        model = PPO(
            policy,
            venv,
            seed=seed,
            device="cpu",
            tensorboard_log=tb_dir,
            verbose=0,
            **ppo_kwargs,
        )
        if config.actions == "step":
            set_keep_prior(model, config.keep_prior)

    checkpoint_dir = out / "checkpoints"
    callback = EpisodeBudgetCallback(
        episodes,
        start_episode=start_episode,
        checkpoint_every=checkpoint_every,
        checkpoint_dir=checkpoint_dir,
        save_fn=lambda path, n: save_scheduler(model, path, meta, n),
        progress=progress,
        desc=f"{name} episodes",
        checkpoint_minutes=checkpoint_minutes,
        keep=keep,
    )
    # The callback stops learning; the timestep bound is only a safety net against an env
    # that never ends an episode (each episode is at most max_rounds steps).
    max_rounds = _max_rounds(venv)
    bound = (episodes - start_episode + config.n_envs) * max_rounds + config.rollout_size
    if tb_dir is None:
        # No outputs: SB3's default logger would create a dated folder in the temp dir.
        model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(
        total_timesteps=bound,
        callback=callback,
        tb_log_name=name,
        reset_num_timesteps=resume_file is None,
        progress_bar=False,
    )
    reference_actors = int(venv.get_attr("reference_actors")[0]) if config.check_moves else 0
    venv.close()
    final = out / f"{name}.zip"
    save_scheduler(model, final, meta, callback.episodes)
    logger.info("saved %s", final)
    moves: MovesCheck | None = None
    if config.check_moves:
        # After the episodes' bar: the deterministic scheduler plays the training pool
        # (minutes on a slow workload), with a bar of its own.
        logger.info(
            "moves check: the trained scheduler against a constant fleet of %d on %d "
            "training seeds",
            reference_actors,
            config.paired_seeds,
        )
        moves = check_moves(
            final,
            env_id,
            kwargs,
            pool_seeds((seed + start_episode) % 2**31, config.paired_seeds),
            start_actors=reference_actors,
            keep_prior=config.keep_prior,
            reference=selection.rewards[selection.best] if selection is not None else None,
            progress=progress,
        )
        logger.info("moves check: %s", moves.summary())
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    write_csv(out / f"{name}_episodes.csv", callback.records, fieldnames=_RECORD_FIELDS)
    result = TrainingResult(
        model_path=final,
        episodes=callback.episodes,
        episodes_this_run=callback.episodes - start_episode,
        timesteps=int(model.num_timesteps),
        updates=callback.updates,
        wall_s=wall,
        cpu_s=cpu,
        records=list(callback.records),
        checkpoints=list(callback.checkpoints),
    )
    summary = result.summary()
    if selection is not None:
        summary["start_search"] = {str(n): v for n, v in selection.mean_totals().items()}
        summary["start_actors"] = selection.best
    if moves is not None:
        summary["moves_check"] = moves.summary()
    (out / f"{name}_summary.json").write_text(json.dumps(summary, indent=2))
    logger.info(
        "trained %s: %d episodes (%d this run) in %.1f s",
        name,
        result.episodes,
        result.episodes_this_run,
        wall,
    )
    return result


def _check_env_id(env_id: str) -> None:
    if env_id not in gym.registry:
        raise ValueError(
            f"env_id: expected a registered scheduling env, actual {env_id!r} "
            f"(known: {sorted(k for k in gym.registry if k.startswith('fleetgym/ActorScheduling'))})"
        )


def _env_max_actors(env_id: str, kwargs: Mapping[str, Any]) -> int:
    """The scheduling env's ``max_actors`` (its ``Discrete`` action count); making the env
    is cheap, no fleet starts before ``reset``."""
    _check_env_id(env_id)
    env = gym.make(env_id, **kwargs)
    try:
        return int(getattr(env.action_space, "n", 32))
    finally:
        env.close()


def _max_rounds(venv: Any) -> int:
    """Upper bound on an episode's length, from the env if it says, else a generous one."""
    try:
        values = venv.get_attr("max_rounds")
        return max(int(v) for v in values)
    except (AttributeError, TypeError, ValueError):
        return 1000


def finetune_scheduler(
    checkpoint: str | Path,
    out_dir: str | Path,
    *,
    env_id: str = GENERAL_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    episodes: int = 10,
    seed: int = 0,
    learning_rate: float | None = None,
    checkpoint_every: int = 0,
    tensorboard: bool = True,
    progress: bool = True,
    name: str = "finetuned",
) -> TrainingResult:
    """Fine-tune a trained scheduler on a new workload for ``episodes`` more episodes.

    This is the paper's transfer: the scheduler keeps its networks and optimiser and
    continues learning on the new env for a short budget (10 episodes by default).

    Args:
        checkpoint: the trained scheduler's zip.
        out_dir: output directory.
        env_id: scheduling env of the new workload.
        env_kwargs: its keyword arguments (e.g. ``{"workload": "Hopper-v5"}``).
        episodes: episodes of fine-tuning.
        seed: seed.
        learning_rate: optional new learning rate.
        checkpoint_every: save every this many episodes (0: only the final model).
        tensorboard: write TensorBoard logs.
        progress: tqdm bar.
        name: file stem of the fine-tuned model.

    Raises:
        FileNotFoundError: no such checkpoint.
        ValueError: ``episodes`` < 1.
    """
    episodes = check_int("episodes", episodes, low=1)
    stored = read_scheduler_meta(checkpoint)
    already = int(stored.get("episodes", 0))
    kwargs = validate_env_kwargs(env_kwargs)
    # Fine-tuning continues the stored model on a (possibly) different env, passed
    # explicitly so that train_scheduler does not fall back to the stored one.
    return train_scheduler(
        out_dir,
        env_id=env_id,
        env_kwargs=kwargs,
        episodes=already + episodes,
        seed=seed,
        config=SchedulerPPOConfig(**stored_config(stored)),
        resume_from=checkpoint,
        checkpoint_every=checkpoint_every,
        tensorboard=tensorboard,
        progress=progress,
        name=name,
        learning_rate=learning_rate,
    )
