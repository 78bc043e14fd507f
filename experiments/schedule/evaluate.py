"""Running schedulers on the scheduling env: one recorded episode per seed.

The heuristic baselines of :mod:`fleetgym.agents.schedulers` and trained SB3 models run
the same way: anything with SB3's ``predict`` schedules
:class:`~fleetgym.meta_env.ActorSchedulingEnv` for one episode (one whole training run of
the workload) per seed, and each episode becomes an :class:`EpisodeResult`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.agents.schedulers import make_baseline
from fleetgym.experiments.schedule.checkpoint import load_learned_scheduler
from fleetgym.experiments.schedule.config import GENERAL_ENV_ID, validate_env_kwargs
from fleetgym.experiments.schedule.phases import PhaseSchedule, PhaseScheduler
from fleetgym.validation import check_int

__all__ = ["ALL_SCHEDULERS", "EpisodeResult", "evaluate_scheduler", "resolve_schedulers"]

#: What ``--scheduler all`` expands to: a Fixed(n) sweep and every MinionsRL heuristic
#: (Fixed(32) is Max).
ALL_SCHEDULERS: tuple[str, ...] = (
    "fixed:1",
    "fixed:4",
    "fixed:8",
    "fixed:16",
    "max",
    "increase",
    "decrease",
    "adapt",
    "server",
)


@dataclass
class EpisodeResult:
    """One evaluation episode: one whole training run of the workload under a scheduler.

    ``time_s`` is the sum of the round times P_k (the time to target when ``success``),
    ``cost`` the total billed cost, both as the env accounts them (modelled or measured).
    """

    scheduler: str
    seed: int
    success: bool
    target_reached: bool
    time_s: float
    cost: float
    rounds: int
    total_reward: float
    mean_actors: float
    max_return: float
    final_return: float
    wall_s: float
    num_actors: list[int] = field(default_factory=list)
    mean_return: list[float] = field(default_factory=list)

    @property
    def time_to_target_s(self) -> float:
        """Sum of round times until the target, NaN if it was not reached within budget."""
        return self.time_s if self.success else math.nan


def _check_seeds(seeds: Iterable[int]) -> list[int]:
    out = [check_int("seeds", s, low=0) for s in seeds]
    if not out:
        raise ValueError("seeds: expected at least one seed, actual none")
    return out


def evaluate_scheduler(
    scheduler: Any,
    env_kwargs: Mapping[str, Any] | None,
    seeds: Iterable[int],
    *,
    env_id: str = GENERAL_ENV_ID,
    name: str | None = None,
    deterministic: bool = True,
    progress: Any = None,
) -> list[EpisodeResult]:
    """Run ``scheduler`` for one episode per seed and record each episode.

    Works with anything that has SB3's ``predict(obs, state, episode_start,
    deterministic) -> (action, state)``: the baselines and trained SB3 models. The
    scheduler's ``env_overrides`` (e.g. the server-based fleet's VM billing) are merged
    into ``env_kwargs``; recurrent state is threaded through ``state``/``episode_start``.

    Args:
        scheduler: the predictor.
        env_kwargs: keyword arguments of ``gym.make(env_id, ...)``.
        seeds: one episode per seed (``reset(seed=...)``).
        env_id: the scheduling env's ID.
        name: the scheduler's name in the records (default: its ``name`` or class).
        deterministic: passed to ``predict``.
        progress: a tqdm bar to advance by one per episode (or None).

    Returns:
        One :class:`EpisodeResult` per seed.

    Raises:
        TypeError: ``scheduler`` has no ``predict`` or ``env_kwargs`` is not a mapping.
        ValueError: no seeds, or a negative one.
    """
    if not callable(getattr(scheduler, "predict", None)):
        raise TypeError(
            f"scheduler: expected an object with SB3's predict(), actual {type(scheduler).__name__}"
        )
    base_kwargs = validate_env_kwargs(env_kwargs)
    seeds = _check_seeds(seeds)
    label = name or getattr(scheduler, "name", None) or type(scheduler).__name__
    kwargs = {**base_kwargs, **dict(getattr(scheduler, "env_overrides", {}) or {})}
    env = gym.make(env_id, **kwargs)
    results = []
    try:
        for seed in seeds:
            started = time.perf_counter()
            obs, info = env.reset(seed=seed)
            state: Any = None
            episode_start = np.ones((1,), dtype=bool)
            actors: list[int] = []
            returns: list[float] = []
            total_reward = 0.0
            while True:
                action, state = scheduler.predict(
                    obs, state=state, episode_start=episode_start, deterministic=deterministic
                )
                episode_start = np.zeros((1,), dtype=bool)
                obs, reward, terminated, truncated, info = env.step(action)
                total_reward += float(reward)
                actors.append(int(info["num_actors"]))
                returns.append(float(info["mean_return"]))
                if terminated or truncated:
                    break
            results.append(
                EpisodeResult(
                    scheduler=label,
                    seed=seed,
                    success=bool(info["success"]),
                    target_reached=bool(info["target_reached"]),
                    time_s=float(info["total_time"]),
                    cost=float(info["total_cost"]),
                    rounds=int(info["round"]),
                    total_reward=total_reward,
                    mean_actors=float(np.mean(actors)),
                    max_return=float(info["max_return"]),
                    final_return=float(info["mean_return"]),
                    wall_s=time.perf_counter() - started,
                    num_actors=actors,
                    mean_return=returns,
                )
            )
            if progress is not None:
                progress.update(1)
                progress.set_postfix(scheduler=label, seed=str(seed))
    finally:
        env.close()
    return results


def resolve_schedulers(
    names: str | Sequence[str], *, max_actors: int = 32, target_return: float | None = None
) -> dict[str, Any]:
    """Schedulers by name: ``fixed:N``, ``max``, ``increase``, ``decrease``, ``adapt``,
    ``server``, ``all`` (:data:`ALL_SCHEDULERS`), ``learned:PATH`` (an SB3 PPO zip) and
    ``phase:16x9>8x5>16`` (a piecewise-constant schedule: 16 actors for 9 rounds, 8 for 5,
    then 16; see :class:`~fleetgym.experiments.schedule.phases.PhaseSchedule`).

    Names may be given as a list or comma-separated. Returns table name -> predictor.

    Raises:
        ValueError: an unknown name; FileNotFoundError: a missing ``learned:`` zip.
    """
    if isinstance(names, str):
        names = [names]
    flat: list[str] = []
    for item in names:
        if not isinstance(item, str):
            raise TypeError(f"scheduler: expected a name, actual {type(item).__name__}")
        # A learned path may itself contain commas only if given alone.
        parts = [item] if item.startswith("learned:") else item.split(",")
        flat.extend(p.strip() for p in parts if p.strip())
    if not flat:
        raise ValueError("scheduler: expected at least one name, actual none")
    out: dict[str, Any] = {}
    for spec in flat:
        if spec.lower() == "all":
            for base in ALL_SCHEDULERS:
                sched = make_baseline(base, max_actors=max_actors, target_return=target_return)
                out[sched.name] = sched
        elif spec.startswith("phase:"):
            phases = PhaseScheduler(PhaseSchedule.parse(spec.split(":", 1)[1]))
            out[phases.name] = phases
        elif spec.startswith("learned:"):
            path = spec.split(":", 1)[1]
            if not path:
                raise ValueError(f"scheduler: expected learned:PATH, actual {spec!r}")
            key = "learned" if "learned" not in out else f"learned:{Path(path).stem}"
            out[key] = load_learned_scheduler(path)
        else:
            sched = make_baseline(spec, max_actors=max_actors, target_return=target_return)
            out[sched.name] = sched
    return out
