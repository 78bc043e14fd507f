"""The SB3 callback of the scheduler's training: episode budget, records, checkpoints.

SB3 counts timesteps; the scheduler's budget is in episodes (one episode is one whole
training run of a workload), so :class:`EpisodeBudgetCallback` counts finished episodes
and stops learning at the budget. It also writes the periodic checkpoints, at episode
ends: every N episodes and/or once M minutes have passed since the last one, the newest
``keep`` kept (:func:`~fleetgym.experiments.schedule.checkpoint.prune_checkpoints`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback
from tqdm.auto import tqdm

from fleetgym.experiments.schedule.checkpoint import checkpoint_path, prune_checkpoints

__all__ = ["EpisodeBudgetCallback", "EpisodeRecord"]


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


class EpisodeBudgetCallback(BaseCallback):
    """Counts finished scheduler episodes, logs them, checkpoints, and stops at the budget.

    Each finished episode is one whole workload training run; its cost, training time,
    success and mean actor count go to TensorBoard under ``scheduler/`` and to
    :attr:`records`. Learning stops as soon as ``total_episodes`` have finished; the
    transitions since the last update (fewer than ``n_steps``) are then not trained on,
    which is cheaper than running part of one more episode to fill the rollout.

    Args:
        total_episodes: stop when this many episodes (counting ``start_episode``) are done.
        start_episode: episodes already done (a resumed run).
        checkpoint_every: call ``save_fn`` every this many episodes (0: never).
        checkpoint_dir: folder of the checkpoints.
        save_fn: ``save_fn(path, episodes)`` saves the model.
        progress: show a tqdm bar over episodes.
        desc: the bar's label.
        checkpoint_minutes: also call ``save_fn`` at the end of the first episode once this
            many minutes have passed since the last checkpoint (or the start); ``None``:
            no time trigger. No checkpoint is written at the last episode (the caller
            saves the final model).
        keep: after each checkpoint, delete all but the newest ``keep`` in
            ``checkpoint_dir`` (``None``: keep them all).
    """

    def __init__(
        self,
        total_episodes: int,
        *,
        start_episode: int = 0,
        checkpoint_every: int = 0,
        checkpoint_dir: Path | None = None,
        save_fn: Callable[[Path, int], object] | None = None,
        progress: bool = True,
        desc: str = "scheduler episodes",
        checkpoint_minutes: float | None = None,
        keep: int | None = None,
    ) -> None:
        super().__init__(verbose=0)
        self.total_episodes = total_episodes
        self.episodes = start_episode
        self.start_episode = start_episode
        self.checkpoint_every = checkpoint_every
        self.checkpoint_dir = checkpoint_dir
        self.save_fn = save_fn
        self.checkpoint_minutes = checkpoint_minutes
        self.keep = keep
        self._last_checkpoint = time.monotonic()
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
        self._last_checkpoint = time.monotonic()
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
            if self._checkpoint_due():
                self._checkpoint()
            if self.episodes >= self.total_episodes:
                return False
        return True

    def _checkpoint_due(self) -> bool:
        """Whether a checkpoint is due at the end of this episode (never the last one)."""
        if self.checkpoint_dir is None or self.save_fn is None:
            return False
        if self.episodes >= self.total_episodes:
            return False
        if self.checkpoint_every and self.episodes % self.checkpoint_every == 0:
            return True
        minutes = self.checkpoint_minutes
        return minutes is not None and time.monotonic() - self._last_checkpoint >= 60.0 * minutes

    def _checkpoint(self) -> None:
        assert self.checkpoint_dir is not None and self.save_fn is not None
        path = checkpoint_path(self.checkpoint_dir, self.episodes)
        self.save_fn(path, self.episodes)
        self._last_checkpoint = time.monotonic()
        if path not in self.checkpoints:
            self.checkpoints.append(path)
        if self.keep is not None:
            prune_checkpoints(self.checkpoint_dir, self.keep, path)
            self.checkpoints = [p for p in self.checkpoints if p.is_file()]

    def _on_training_end(self) -> None:
        if self._bar is not None:
            self._bar.close()
