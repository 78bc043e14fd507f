"""Train, resume and fine-tune the learned actor scheduler (SB3 PPO on ``ActorSchedulingEnv``).

The scheduler of MinionsRL is a small PPO agent: policy and value networks of two
64-unit tanh layers, Adam at a learning rate of 0.005, trained for 100 episodes, where
one episode is one whole training run of a workload and one step is one round of it.
This module trains that agent with Stable-Baselines3 and counts *episodes* rather than
timesteps, because the paper's budget is in episodes and an episode's length (the number
of rounds until the target return) is what the scheduler itself changes.

Why ``n_steps=64`` and ``batch_size=32`` by default: an episode is tens of rounds, so 100
episodes are a few thousand scheduler steps. SB3's default ``n_steps=2048`` would give
one or two updates in the whole budget; 64 steps per update (about two episodes) gives
dozens of updates, each with ``n_epochs=10`` passes of two minibatches of 32. Fewer than
64 steps would make the per-update advantage normalisation rest on one episode.

Everything a run needs to continue is in its checkpoint: the SB3 zip stores the model and
optimiser, and the attribute ``fleetgym_meta`` (saved inside the zip with the rest of the
model's attributes) records the environment ID and keyword arguments, the episodes done
and the seed. :func:`train_scheduler` with ``resume_from=`` continues counting episodes
from there.

Example:
    >>> cfg = SchedulerPPOConfig(n_steps=16, batch_size=8)
    >>> cfg.policy_kwargs()["net_arch"]
    {'pi': [64, 64], 'vf': [64, 64]}
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fleetgym.experiments.argtypes import env_kwarg

if TYPE_CHECKING:  # heavy imports only when a function needs them
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecEnv

logger = logging.getLogger(__name__)

#: The deterministic CartPole scheduling env: fast, and an episode is reproducible.
DEFAULT_ENV_ID = "fleetgym/ActorScheduling-CartPole-Modeled-v0"
#: The general scheduling env (kwargs ``workload``, ...).
GENERAL_ENV_ID = "fleetgym/ActorScheduling-v0"
#: The small scheduler shipped with the package, used by ``fleetgym reproduce``.
SHIPPED_SCHEDULER = "learned_scheduler_cartpole.zip"
#: Name of the attribute that a saved scheduler carries its training metadata in.
META_ATTR = "fleetgym_meta"


# --------------------------------------------------------------------------- config
@dataclass
class SchedulerPPOConfig:
    """Hyperparameters of the scheduler's PPO (defaults: the paper's, plus our update size).

    Models the MinionsRL scheduler agent: policy and value networks 2 x 64 tanh, Adam with
    learning rate 0.005. ``n_steps`` x ``n_envs`` scheduler steps (rounds) make one update;
    see the module docstring for why 64.

    Example:
        >>> SchedulerPPOConfig().learning_rate
        0.005
        >>> SchedulerPPOConfig(n_steps=10, batch_size=4).rollout_size
        10

    Args:
        learning_rate: Adam learning rate.
        n_steps: scheduler steps per environment between updates.
        batch_size: minibatch size of each gradient step.
        n_epochs: passes over a rollout per update.
        gamma: discount of the scheduler's return (rounds are the time steps).
        gae_lambda: GAE lambda.
        clip_range: PPO clip range.
        ent_coef: entropy bonus; keeps the 32-way action distribution from collapsing
            before the value function has seen a few episodes.
        vf_coef: value loss weight.
        max_grad_norm: gradient clipping.
        n_envs: scheduling envs stepped together (each step of each is a real round).
        normalize_reward: scale rewards by a running std of the return (SB3
            ``VecNormalize(norm_obs=False)``); the observation is already normalised by
            the env, so a saved model needs nothing extra at evaluation.
        hidden: hidden layer sizes of both networks.
        actions: the action parametrisation
            (:data:`~fleetgym.agents.scheduler_actions.ACTION_MODES`): ``"pow2"`` (the
            default), the sizes 1, 2, 4, ..., ``max_actors``; ``"discrete"``, the env's
            ``Discrete(max_actors)`` (the paper's; 32 unordered choices collapse onto one
            early at lr 0.005, see the README); ``"log2"``, one continuous action on a log
            scale.
        use_sde: with ``actions="log2"``, generalised state-dependent exploration (SB3
            ``use_sde``, noise drawn once per rollout), so that exploration changes the
            fleet size smoothly with the state instead of at random every round.

    Raises:
        ValueError: a non-positive size or rate, or a batch larger than a rollout.
    """

    learning_rate: float = 0.005
    n_steps: int = 64
    batch_size: int = 32
    n_epochs: int = 10
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    n_envs: int = 1
    normalize_reward: bool = False
    hidden: tuple[int, ...] = (64, 64)
    actions: str = "pow2"
    use_sde: bool = False

    def __post_init__(self) -> None:
        from fleetgym.agents.scheduler_actions import ACTION_MODES

        if self.actions not in ACTION_MODES:
            raise ValueError(f"actions: expected one of {ACTION_MODES}, actual {self.actions!r}")
        if self.use_sde and self.actions != "log2":
            raise ValueError("use_sde: needs a continuous action space, actions='log2'")
        for name in ("n_steps", "batch_size", "n_epochs", "n_envs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive int, actual {value!r}")
        for name in ("learning_rate", "gamma", "clip_range", "max_grad_norm"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name}: expected a positive finite number, actual {value!r}")
        if not 0 < self.gamma <= 1:
            raise ValueError(f"gamma: expected a number in (0, 1], actual {self.gamma!r}")
        if not 0 <= self.gae_lambda <= 1:
            raise ValueError(f"gae_lambda: expected a number in [0, 1], actual {self.gae_lambda!r}")
        if self.ent_coef < 0 or self.vf_coef < 0:
            raise ValueError(
                f"ent_coef, vf_coef: expected numbers >= 0, actual {self.ent_coef!r}, {self.vf_coef!r}"
            )
        if self.batch_size > self.rollout_size:
            raise ValueError(
                f"batch_size: expected at most n_steps * n_envs = {self.rollout_size}, "
                f"actual {self.batch_size}"
            )
        self.hidden = tuple(int(h) for h in self.hidden)
        if not self.hidden or any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden: expected positive layer sizes, actual {self.hidden!r}")

    @property
    def rollout_size(self) -> int:
        """Scheduler steps collected per update."""
        return self.n_steps * self.n_envs

    def policy_kwargs(self) -> dict[str, Any]:
        """SB3 ``policy_kwargs``: separate 2 x 64 tanh policy and value networks."""
        import torch.nn as nn

        return {
            "net_arch": {"pi": list(self.hidden), "vf": list(self.hidden)},
            "activation_fn": nn.Tanh,
        }

    def ppo_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``stable_baselines3.PPO`` (all but env and policy)."""
        return {
            "learning_rate": self.learning_rate,
            "n_steps": self.n_steps,
            "batch_size": self.batch_size,
            "n_epochs": self.n_epochs,
            "gamma": self.gamma,
            "gae_lambda": self.gae_lambda,
            "clip_range": self.clip_range,
            "ent_coef": self.ent_coef,
            "vf_coef": self.vf_coef,
            "max_grad_norm": self.max_grad_norm,
            "policy_kwargs": self.policy_kwargs(),
            **({"use_sde": True, "sde_sample_freq": -1} if self.use_sde else {}),
        }


# --------------------------------------------------------------------------- results
@dataclass
class EpisodeRecord:
    """What one scheduler training episode (one whole workload training run) came to."""

    episode: int
    reward: float
    rounds: int
    train_time: float  # sum of the rounds' (modelled or measured) times P_k
    cost: float
    success: bool
    mean_actors: float
    wall_s: float  # wall-clock seconds this machine spent on the episode


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


# --------------------------------------------------------------------------- env
def _validate_env_kwargs(env_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    if env_kwargs is None:
        return {}
    if not isinstance(env_kwargs, Mapping):
        raise TypeError(f"env_kwargs: expected a mapping, actual {type(env_kwargs).__name__}")
    return dict(env_kwargs)


def make_scheduler_vec_env(
    env_id: str = DEFAULT_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    n_envs: int = 1,
    seed: int | None = 0,
    normalize_reward: bool = False,
    gamma: float = 0.99,
    actions: str = "discrete",
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
            (:class:`~fleetgym.agents.scheduler_actions.SchedulerActionWrapper`).

    Raises:
        TypeError: ``env_kwargs`` is not a mapping.
        ValueError: ``n_envs`` < 1.
    """
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    import fleetgym  # noqa: F401  (registers the IDs)

    kwargs = _validate_env_kwargs(env_kwargs)
    if isinstance(n_envs, bool) or not isinstance(n_envs, int) or n_envs < 1:
        raise ValueError(f"n_envs: expected a positive int, actual {n_envs!r}")
    if env_id not in gym.registry:
        raise ValueError(
            f"env_id: expected a registered scheduling env, actual {env_id!r} "
            f"(known: {sorted(k for k in gym.registry if k.startswith('fleetgym/ActorScheduling'))})"
        )

    from fleetgym.agents.scheduler_actions import SchedulerActionWrapper

    def factory() -> gym.Env:
        env = gym.make(env_id, **kwargs)
        if actions != "discrete":
            env = SchedulerActionWrapper(env, actions)
        return Monitor(env)

    venv: VecEnv = DummyVecEnv([factory] * n_envs)
    if seed is not None:
        venv.seed(seed)
    if normalize_reward:
        venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=gamma)
    return venv


# --------------------------------------------------------------------------- callback
def _episode_callback_class() -> type:
    """Build the callback class lazily (SB3 is imported only when training)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class EpisodeBudgetCallback(BaseCallback):
        """Counts finished scheduler episodes, logs them, checkpoints, and stops at the budget.

        Each finished episode is one whole workload training run; its cost, training time,
        success and mean actor count go to TensorBoard under ``scheduler/`` and to
        :attr:`records`. Learning stops as soon as ``total_episodes`` have finished; the
        transitions since the last update (fewer than ``n_steps``) are then not trained on,
        which is cheaper than running part of one more episode to fill the rollout.
        """

        def __init__(
            self,
            total_episodes: int,
            *,
            start_episode: int = 0,
            checkpoint_every: int = 0,
            checkpoint_dir: Path | None = None,
            save_fn: Callable[[Path, int], None] | None = None,
            progress: bool = True,
            desc: str = "scheduler episodes",
        ) -> None:
            super().__init__(verbose=0)
            self.total_episodes = total_episodes
            self.episodes = start_episode
            self.start_episode = start_episode
            self.checkpoint_every = checkpoint_every
            self.checkpoint_dir = checkpoint_dir
            self.save_fn = save_fn
            self.progress = progress
            self.desc = desc
            self.records: list[EpisodeRecord] = []
            self.checkpoints: list[Path] = []
            self.updates = 0
            self._bar: Any = None
            self._acc: list[dict[str, float]] = []

        def _new_acc(self) -> dict[str, float]:
            return {"time": 0.0, "actors": 0.0, "rounds": 0.0, "wall0": time.perf_counter()}

        def _on_training_start(self) -> None:
            from tqdm.auto import tqdm

            self._acc = [self._new_acc() for _ in range(self.training_env.num_envs)]
            self._bar = tqdm(
                total=self.total_episodes,
                initial=self.start_episode,
                desc=self.desc,
                unit="ep",
                disable=not self.progress,
                dynamic_ncols=True,
            )

        def _on_rollout_end(self) -> None:
            self.updates += 1

        def _on_step(self) -> bool:
            infos = self.locals["infos"]
            dones = self.locals["dones"]
            for i, info in enumerate(infos):
                acc = self._acc[i]
                acc["time"] += float(info.get("round_time", 0.0))
                acc["actors"] += float(info.get("num_actors", 0.0))
                acc["rounds"] += 1
                if not dones[i]:
                    continue
                self.episodes += 1
                episode_info = info.get("episode", {})
                rounds = int(acc["rounds"])
                record = EpisodeRecord(
                    episode=self.episodes,
                    reward=float(episode_info.get("r", float("nan"))),
                    rounds=rounds,
                    train_time=acc["time"],
                    cost=float(info.get("total_cost", float("nan"))),
                    success=bool(info.get("success", False)),
                    mean_actors=acc["actors"] / max(1, rounds),
                    wall_s=time.perf_counter() - acc["wall0"],
                )
                self.records.append(record)
                self._acc[i] = self._new_acc()
                for key in ("reward", "rounds", "train_time", "cost", "mean_actors", "wall_s"):
                    self.logger.record(f"scheduler/{key}", getattr(record, key))
                self.logger.record("scheduler/success", float(record.success))
                self.logger.record("scheduler/episodes", self.episodes)
                if self._bar is not None:
                    self._bar.update(1)
                    self._bar.set_postfix(
                        reward=f"{record.reward:.1f}",
                        cost=f"{record.cost:.3g}",
                        actors=f"{record.mean_actors:.1f}",
                    )
                if (
                    self.checkpoint_every
                    and self.checkpoint_dir is not None
                    and self.save_fn is not None
                    and self.episodes % self.checkpoint_every == 0
                    and self.episodes < self.total_episodes
                ):
                    path = self.checkpoint_dir / f"scheduler_ep{self.episodes:04d}.zip"
                    self.save_fn(path, self.episodes)
                    self.checkpoints.append(path)
                if self.episodes >= self.total_episodes:
                    return False
            return True

        def _on_training_end(self) -> None:
            if self._bar is not None:
                self._bar.close()

    return EpisodeBudgetCallback


# --------------------------------------------------------------------------- train
def _check_episodes(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive int, actual {value!r}")
    return int(value)


def _save_model(model: PPO, path: Path, meta: dict[str, Any], episodes: int) -> None:
    meta = dict(meta, episodes=int(episodes), timesteps=int(model.num_timesteps))
    setattr(model, META_ATTR, meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The TensorBoard folder is a path of the machine that trained: a shipped or shared
    # checkpoint should not carry it (a resumed run passes its own).
    model.save(str(path), exclude=["tensorboard_log"])


def read_scheduler_meta(path: str | Path) -> dict[str, Any]:
    """The training metadata stored in a saved scheduler zip (without loading torch).

    Args:
        path: an SB3 zip written by :func:`train_scheduler`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the zip holds no fleetgym metadata.
    """
    import zipfile

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"scheduler checkpoint: expected an existing file, actual {path}")
    with zipfile.ZipFile(path) as archive:
        data = json.loads(archive.read("data").decode("utf-8"))
    meta = data.get(META_ATTR)
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected a fleetgym scheduler checkpoint, actual no {META_ATTR}")
    return meta


def load_scheduler(path: str | Path, env: Any = None, **kwargs: Any) -> PPO:
    """Load a saved scheduler (an SB3 PPO zip) on the CPU.

    Args:
        path: the zip.
        env: optional env to attach (needed to continue learning).
        **kwargs: passed to ``PPO.load``.

    Raises:
        FileNotFoundError: no such file.
    """
    from stable_baselines3 import PPO

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"scheduler checkpoint: expected an existing file, actual {path}")
    return PPO.load(str(path), env=env, device="cpu", **kwargs)


def export_scheduler(src: str | Path, dst: str | Path) -> Path:
    """Copy a trained scheduler to ``dst`` without paths of the machine that trained it.

    Used to ship a scheduler with the package; the model, optimiser and metadata are kept.

    Raises:
        FileNotFoundError: ``src`` does not exist.
        ValueError: ``src`` is not a fleetgym scheduler checkpoint.
    """
    meta = read_scheduler_meta(src)
    meta.pop("resumed_from", None)
    model = load_scheduler(src)
    episodes = int(meta.pop("episodes", 0))
    meta.pop("timesteps", None)
    _save_model(model, Path(dst), meta, episodes)
    return Path(dst)


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
) -> TrainingResult:
    """Train the scheduler with PPO until ``episodes`` episodes are done (in total).

    Writes ``<out_dir>/<name>.zip`` (the final model), ``<out_dir>/checkpoints/`` (one
    zip every ``checkpoint_every`` episodes), ``<out_dir>/tb/`` (TensorBoard), and
    ``<out_dir>/<name>_episodes.csv`` (one row per episode of this run).

    With ``resume_from``, the model, optimiser and episode count come from that zip
    (``env_id``/``env_kwargs`` default to the ones stored in it) and training continues
    until the total reaches ``episodes``.

    Args:
        out_dir: output directory (created).
        env_id: scheduling env ID (None: the stored one when resuming, else
            :data:`DEFAULT_ENV_ID`).
        env_kwargs: its ``gym.make`` keyword arguments (None when resuming on the stored
            env ID: the stored ones).
        episodes: total episodes the model should have seen when this returns.
        seed: seed of PPO and of the envs.
        config: PPO hyperparameters (ignored for the architecture when resuming).
        resume_from: a checkpoint zip to continue from.
        checkpoint_every: save every this many episodes (0: only the final model).
        tensorboard: write TensorBoard logs.
        progress: show a tqdm bar over episodes.
        name: file stem of the final model.
        learning_rate: override the learning rate (e.g. for fine-tuning).

    Raises:
        ValueError: bad budgets, or a checkpoint that has already seen ``episodes``.
        FileNotFoundError: ``resume_from`` does not exist.
    """
    from stable_baselines3 import PPO

    episodes = _check_episodes("episodes", episodes)
    if (
        isinstance(checkpoint_every, bool)
        or not isinstance(checkpoint_every, int)
        or checkpoint_every < 0
    ):
        raise ValueError(f"checkpoint_every: expected an int >= 0, actual {checkpoint_every!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed: expected an int, actual {type(seed).__name__}")
    config = config if config is not None else SchedulerPPOConfig()
    if not isinstance(config, SchedulerPPOConfig):
        raise TypeError(f"config: expected SchedulerPPOConfig, actual {type(config).__name__}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    start_episode = 0
    meta: dict[str, Any]
    if resume_from is not None:
        stored = read_scheduler_meta(resume_from)
        start_episode = int(stored.get("episodes", 0))
        if start_episode >= episodes:
            raise ValueError(
                f"episodes: expected more than the {start_episode} episodes the checkpoint "
                f"{resume_from} has seen, actual {episodes}"
            )
        stored_id = stored.get("env_id", DEFAULT_ENV_ID)
        if env_kwargs is None and env_id in (None, stored_id):
            env_kwargs = stored.get("env_kwargs", {})
        if env_id is None:
            env_id = stored_id
        stored_cfg = stored.get("config", {})
        config = SchedulerPPOConfig(
            **{
                **{
                    k: v
                    for k, v in stored_cfg.items()
                    if k in SchedulerPPOConfig.__dataclass_fields__
                },
                "n_envs": config.n_envs,
            }
        )
    if env_id is None:
        env_id = DEFAULT_ENV_ID
    kwargs = _validate_env_kwargs(env_kwargs)
    meta = {
        "env_id": env_id,
        "env_kwargs": kwargs,
        "seed": int(seed),
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
    }
    if resume_from is not None:
        meta["resumed_from"] = Path(resume_from).name

    venv = make_scheduler_vec_env(
        env_id,
        kwargs,
        n_envs=config.n_envs,
        seed=seed + start_episode,  # a resumed run does not replay the episodes it has seen
        normalize_reward=config.normalize_reward,
        gamma=config.gamma,
        actions=config.actions,
    )
    tb_dir = str(out / "tb") if tensorboard else None
    if resume_from is not None:
        custom: dict[str, Any] = {"n_envs": config.n_envs}
        if learning_rate is not None:
            custom["learning_rate"] = learning_rate
            custom["lr_schedule"] = lambda _progress: learning_rate
        model = load_scheduler(resume_from, env=venv, tensorboard_log=tb_dir, custom_objects=custom)
        if learning_rate is not None:
            model.learning_rate = learning_rate
            model._setup_lr_schedule()
        model.set_random_seed(seed + start_episode)
    else:
        ppo_kwargs = config.ppo_kwargs()
        if learning_rate is not None:
            ppo_kwargs["learning_rate"] = learning_rate
        model = PPO(
            "MlpPolicy",
            venv,
            seed=seed,
            device="cpu",
            tensorboard_log=tb_dir,
            verbose=0,
            **ppo_kwargs,
        )

    checkpoint_dir = out / "checkpoints"
    callback_cls = _episode_callback_class()
    callback = callback_cls(
        episodes,
        start_episode=start_episode,
        checkpoint_every=checkpoint_every,
        checkpoint_dir=checkpoint_dir,
        save_fn=lambda path, n: _save_model(model, path, meta, n),
        progress=progress,
        desc=f"{name} episodes",
    )
    # The callback stops learning; the timestep bound is only a safety net against an env
    # that never ends an episode (each episode is at most max_rounds steps).
    max_rounds = _max_rounds(venv)
    bound = (episodes - start_episode + config.n_envs) * max_rounds + config.rollout_size
    if tb_dir is None:
        from stable_baselines3.common.logger import Logger

        # No outputs: SB3's default logger would create a dated folder in the temp dir.
        model.set_logger(Logger(folder=None, output_formats=[]))
    started = time.perf_counter()
    cpu_started = time.process_time()
    model.learn(
        total_timesteps=bound,
        callback=callback,
        tb_log_name=name,
        reset_num_timesteps=resume_from is None,
        progress_bar=False,
    )
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    venv.close()
    final = out / f"{name}.zip"
    _save_model(model, final, meta, callback.episodes)
    _write_records(out / f"{name}_episodes.csv", callback.records)
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
    (out / f"{name}_summary.json").write_text(json.dumps(result.summary(), indent=2))
    logger.info(
        "trained %s: %d episodes (%d this run) in %.1f s",
        name,
        result.episodes,
        result.episodes_this_run,
        wall,
    )
    return result


def _max_rounds(venv: Any) -> int:
    """Upper bound on an episode's length, from the env if it says, else a generous one."""
    try:
        values = venv.get_attr("max_rounds")
        return max(int(v) for v in values)
    except (AttributeError, TypeError, ValueError):
        return 1000


def _write_records(path: Path, records: Sequence[EpisodeRecord]) -> None:
    import csv

    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        names = list(EpisodeRecord.__dataclass_fields__)
        writer.writerow(names)
        for rec in records:
            writer.writerow([getattr(rec, n) for n in names])


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
    episodes = _check_episodes("episodes", episodes)
    stored = read_scheduler_meta(checkpoint)
    already = int(stored.get("episodes", 0))
    kwargs = _validate_env_kwargs(env_kwargs)
    # Fine-tuning continues the stored model on a (possibly) different env, passed
    # explicitly so that train_scheduler does not fall back to the stored one.
    return train_scheduler(
        out_dir,
        env_id=env_id,
        env_kwargs=kwargs,
        episodes=already + episodes,
        seed=seed,
        config=SchedulerPPOConfig(**_stored_config(stored)),
        resume_from=checkpoint,
        checkpoint_every=checkpoint_every,
        tensorboard=tensorboard,
        progress=progress,
        name=name,
        learning_rate=learning_rate,
    )


def _stored_config(meta: Mapping[str, Any]) -> dict[str, Any]:
    cfg = dict(meta.get("config", {}))
    # Checkpoints from before the action modes acted in the env's own Discrete space.
    cfg.setdefault("actions", "discrete")
    if "hidden" in cfg:
        cfg["hidden"] = tuple(cfg["hidden"])
    return {k: v for k, v in cfg.items() if k in SchedulerPPOConfig.__dataclass_fields__}


# --------------------------------------------------------------------------- CLI
def add_env_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments that choose the scheduling env (shared by train and finetune)."""
    parser.add_argument(
        "--workload",
        default="CartPole-v1",
        help="workload the scheduled training runs train (default: CartPole-v1)",
    )
    parser.add_argument(
        "--timing",
        choices=("modeled", "measured"),
        default="modeled",
        help="modeled: deterministic per-step compute model (default, reproducible); "
        "measured: real measured compute times",
    )
    parser.add_argument(
        "--preset", choices=("fast", "paper"), default="fast", help="env defaults (fast)"
    )
    parser.add_argument("--max-actors", type=int, default=32, help="I_max (default 32)")
    parser.add_argument(
        "--env-id",
        default=None,
        help=f"scheduling env ID (default: {GENERAL_ENV_ID} with --workload, --preset, "
        "--timing and --max-actors)",
    )
    parser.add_argument(
        "--env-kwarg",
        action="append",
        default=[],
        type=env_kwarg,
        metavar="KEY=VALUE",
        help="extra env keyword argument (VALUE parsed as JSON if it can be), repeatable",
    )


def add_ppo_arguments(parser: argparse.ArgumentParser) -> None:
    """The scheduler's PPO hyperparameters."""
    from fleetgym.agents.scheduler_actions import ACTION_MODES

    d = SchedulerPPOConfig()
    parser.add_argument("--lr", type=float, default=d.learning_rate, help="Adam learning rate")
    parser.add_argument("--n-steps", type=int, default=d.n_steps, help="rounds per env per update")
    parser.add_argument("--batch-size", type=int, default=d.batch_size, help="minibatch size")
    parser.add_argument("--n-epochs", type=int, default=d.n_epochs, help="epochs per update")
    parser.add_argument("--n-envs", type=int, default=d.n_envs, help="scheduling envs in parallel")
    parser.add_argument("--gamma", type=float, default=d.gamma, help="discount over rounds")
    parser.add_argument("--ent-coef", type=float, default=d.ent_coef, help="entropy bonus")
    parser.add_argument(
        "--normalize-reward",
        action="store_true",
        help="scale rewards by a running std of the return (VecNormalize, rewards only)",
    )
    parser.add_argument(
        "--actions",
        choices=ACTION_MODES,
        default=d.actions,
        help="action parametrisation: pow2 (1, 2, 4, ..., max_actors; the default), discrete "
        "(Discrete(max_actors), the paper's) or log2 (one continuous action on a log scale)",
    )
    parser.add_argument(
        "--sde",
        action="store_true",
        help="state-dependent exploration (with --actions log2)",
    )


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fleetgym schedule train``."""
    add_env_arguments(parser)
    add_ppo_arguments(parser)
    parser.add_argument("--episodes", type=int, default=100, help="scheduler episodes (total)")
    parser.add_argument("--seed", type=int, default=0, help="seed of PPO and the envs")
    parser.add_argument("--out", default="fleetgym-out/scheduler", help="output directory")
    parser.add_argument("--name", default="scheduler", help="file stem of the model")
    parser.add_argument(
        "--checkpoint-every", type=int, default=10, help="save every N episodes (0: never)"
    )
    parser.add_argument("--resume", default=None, metavar="CHECKPOINT", help="continue from a zip")
    parser.add_argument("--no-tensorboard", action="store_true", help="do not write TB logs")
    parser.add_argument(
        "--eval-seeds",
        type=int,
        default=0,
        help="after training, compare with every baseline over this many seeds (0: skip)",
    )


def add_finetune_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fleetgym schedule finetune``."""
    add_env_arguments(parser)
    parser.add_argument(
        "--from",
        dest="from_checkpoint",
        required=True,
        metavar="CHECKPOINT",
        help="trained scheduler zip to fine-tune",
    )
    parser.add_argument("--episodes", type=int, default=10, help="fine-tuning episodes")
    parser.add_argument("--lr", type=float, default=None, help="new learning rate (default: keep)")
    parser.add_argument("--seed", type=int, default=0, help="seed")
    parser.add_argument("--out", default="fleetgym-out/finetune", help="output directory")
    parser.add_argument("--no-tensorboard", action="store_true", help="do not write TB logs")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also train from scratch for the same episodes and evaluate both (and --scratch)",
    )
    parser.add_argument(
        "--scratch",
        default=None,
        metavar="CHECKPOINT",
        help="a scheduler trained from scratch on this workload (e.g. 100 episodes) to compare",
    )
    parser.add_argument("--eval-seeds", type=int, default=5, help="evaluation seeds of --compare")
    parser.add_argument(
        "--baselines",
        default=None,
        help="comma-separated baselines of --compare (default: every heuristic and the "
        "Fixed(n) sweep)",
    )


def _split_names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def env_config_from_args(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The env ID and keyword arguments the CLI arguments select."""
    extra = dict(getattr(args, "env_kwarg", []) or [])
    if getattr(args, "env_id", None):
        return args.env_id, extra
    return GENERAL_ENV_ID, {
        "workload": args.workload,
        "preset": args.preset,
        "timing": args.timing,
        "max_actors": args.max_actors,
        **extra,
    }


def _setup_cli() -> None:
    import torch

    # The machines this runs on are small and shared; one thread is also the fastest for
    # networks of 64 units.
    torch.set_num_threads(1)


def train(args: argparse.Namespace) -> int:
    """``fleetgym schedule train``: train (or resume) the scheduler, optionally evaluate."""
    _setup_cli()
    env_id, env_kwargs = env_config_from_args(args)
    config = SchedulerPPOConfig(
        learning_rate=args.lr,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        n_epochs=args.n_epochs,
        n_envs=args.n_envs,
        gamma=args.gamma,
        ent_coef=args.ent_coef,
        normalize_reward=args.normalize_reward,
        actions=args.actions,
        use_sde=args.sde,
    )
    result = train_scheduler(
        args.out,
        env_id=env_id,
        env_kwargs=env_kwargs,
        episodes=args.episodes,
        seed=args.seed,
        config=config,
        resume_from=args.resume,
        checkpoint_every=args.checkpoint_every,
        tensorboard=not args.no_tensorboard,
        name=args.name,
    )
    from fleetgym.experiments import schedule_report as rep

    rep.plot_training_curve(result.records, Path(args.out) / f"{args.name}_training.png")
    summary = result.summary()
    print(json.dumps(summary, indent=2))
    if args.eval_seeds > 0:
        comparison = rep.compare_schedulers(
            Path(args.out) / "evaluation",
            learned={"learned": result.model_path},
            env_id=env_id,
            env_kwargs=env_kwargs,
            seeds=range(1000, 1000 + args.eval_seeds),
        )
        print(comparison["markdown"])
        print(json.dumps(comparison.get("ratios", {}), indent=1))
    print(
        f"model: {result.model_path}  (TensorBoard: tensorboard --logdir {Path(args.out) / 'tb'})"
    )
    return 0


def finetune(args: argparse.Namespace) -> int:
    """``fleetgym schedule finetune``: fine-tune a trained scheduler on a workload."""
    _setup_cli()
    env_id, env_kwargs = env_config_from_args(args)
    if args.compare or args.scratch:
        from fleetgym.experiments import schedule_report as rep

        comparison = rep.transfer_experiment(
            args.from_checkpoint,
            args.out,
            env_id=env_id,
            env_kwargs=env_kwargs,
            episodes=args.episodes,
            seed=args.seed,
            learning_rate=args.lr,
            scratch_checkpoint=args.scratch,
            eval_seeds=range(1000, 1000 + max(1, args.eval_seeds)),
            heuristics=None if args.baselines is None else _split_names(args.baselines),
            fixed_sweep=None if args.baselines is None else (),
            tensorboard=not args.no_tensorboard,
        )
        print(comparison["markdown"])
        return 0
    result = finetune_scheduler(
        args.from_checkpoint,
        args.out,
        env_id=env_id,
        env_kwargs=env_kwargs,
        episodes=args.episodes,
        seed=args.seed,
        learning_rate=args.lr,
        tensorboard=not args.no_tensorboard,
    )
    print(json.dumps(result.summary(), indent=2))
    return 0


def quick_scheduler_report(out_dir: str | Path, **kwargs: Any) -> dict[str, Any]:
    """The quick scheduling experiment of ``fleetgym reproduce`` (see
    :func:`fleetgym.experiments.schedule_report.quick_scheduler_report`)."""
    from fleetgym.experiments import schedule_report as rep

    _setup_cli()
    return rep.quick_scheduler_report(out_dir, **kwargs)


def shipped_scheduler_path() -> Path:
    """Path of the small trained scheduler shipped with the package.

    Raises:
        FileNotFoundError: the package was installed without it.
    """
    from importlib import resources

    path = Path(str(resources.files("fleetgym.experiments").joinpath(SHIPPED_SCHEDULER)))
    if not path.is_file():
        raise FileNotFoundError(
            f"shipped scheduler: expected {SHIPPED_SCHEDULER} in fleetgym.experiments, actual missing"
        )
    return path
