"""The moves check: a trained ``"step"`` scheduler keeps its moves only if they pay.

PPO trains a *stochastic* policy; what ships is its deterministic (argmax) schedule. On
CartPole a move away from the best constant fleet costs 0.01-0.03 in total reward while
one workload seed's total spreads 0.02-0.04, so 100 episodes leave the policy's move
preferences close to noise, and the argmax can end up halving at the first decision or
climbing and falling (``docs/explanation/learned-scheduler.md``). :func:`check_moves` plays the
deterministic scheduler on the training pool's workload seeds and compares it, seed by
seed, with the constant fleet of its start size (the paired reference it trained
against). If the moves do not gain on average, the policy's action head is reset to the
keep prior (its weights to 0, so "keep" is the argmax in every state) and the scheduler
plays its start size throughout; its value network and optimiser are kept.

The check uses only training seeds: the held-out evaluation seeds never choose anything.

Example:
    >>> import tempfile, pathlib
    >>> from fleetgym.experiments.schedule.config import SchedulerPPOConfig
    >>> from fleetgym.experiments.schedule.train import train_scheduler
    >>> tiny = {"workload": "CartPole-v1", "timing": "modeled", "max_actors": 4,
    ...         "steps_per_actor": 16, "max_rounds": 3}
    >>> cfg = SchedulerPPOConfig(n_steps=4, batch_size=4, paired_seeds=2, check_moves=True)
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> result = train_scheduler(out, env_id="fleetgym/ActorScheduling-v0", env_kwargs=tiny,
    ...                          episodes=1, config=cfg, progress=False, tensorboard=False)
    >>> import json
    >>> sorted(json.loads((out / "scheduler_summary.json").read_text())["moves_check"])
    ['kept', 'mean_diff', 'seeds', 'stderr']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.experiments.schedule.checkpoint import (
    META_ATTR,
    load_learned_scheduler,
    load_scheduler,
    save_scheduler,
)
from fleetgym.experiments.schedule.evaluate import evaluate_scheduler
from fleetgym.experiments.schedule.paired import fixed_fleet_rewards

__all__ = ["MovesCheck", "check_moves", "reset_moves"]


@dataclass
class MovesCheck:
    """The deterministic scheduler's paired gain over its start size's constant fleet."""

    seeds: int
    mean_diff: float  # mean over the seeds of (scheduler's total - constant fleet's total)
    stderr: float
    kept: bool  # the moves gained on average and stay; else the head was reset

    def summary(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def check_moves(
    model_path: str | Path,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    seeds: Sequence[int],
    *,
    start_actors: int,
    keep_prior: float,
    reference: Mapping[int, np.ndarray] | None = None,
    progress: bool = False,
) -> MovesCheck:
    """Play the saved scheduler on ``seeds``; reset its moves unless they gain on average.

    Args:
        model_path: the trained ``"step"`` scheduler's zip (rewritten when reset).
        env_id, env_kwargs: the scheduling env it trained on.
        seeds: training workload seeds (the paired pool).
        start_actors: its start size (the constant fleet it is compared with).
        keep_prior: P(keep) of the reset policy.
        reference: the constant fleet's per-round rewards already run, by seed.
        progress: a tqdm bar over the episodes played (the scheduler's, then the
            constant fleet's where ``reference`` lacks a seed).

    Raises:
        ValueError: no seeds.
    """
    from tqdm.auto import tqdm

    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds: expected at least one")
    known = dict(reference or {})
    missing = [s for s in seeds if s not in known]
    with tqdm(
        total=len(seeds) + len(missing), desc="moves check", unit="ep", disable=not progress
    ) as bar:
        played = evaluate_scheduler(
            load_learned_scheduler(model_path),
            env_kwargs,
            seeds,
            env_id=env_id,
            deterministic=True,
            progress=bar,
        )
        if missing:
            env = gym.make(env_id, **env_kwargs)
            try:
                for s in missing:
                    bar.set_postfix(scheduler=f"fixed:{start_actors}", seed=s)
                    known[s] = fixed_fleet_rewards(env, start_actors, s, name="start_actors")
                    bar.update(1)
            finally:
                env.close()
    diff = np.array([e.total_reward - known[e.seed].sum() for e in played])
    stderr = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
    # (a tolerance for the order of summation: a policy that keeps gains exactly 0)
    kept = bool(diff.mean() > 1e-9)
    if not kept:
        reset_moves(model_path, keep_prior)
    return MovesCheck(seeds=len(seeds), mean_diff=float(diff.mean()), stderr=stderr, kept=kept)


def reset_moves(model_path: str | Path, keep_prior: float) -> None:
    """Reset a saved ``"step"`` scheduler's action head to the keep prior, in place.

    The head's weights become 0 and its biases give P(keep) = ``keep_prior`` (at least
    that where a first-move offset applies), so "keep" is the argmax in every state.
    """
    import torch

    from fleetgym.experiments.schedule.policy import set_keep_prior

    model = load_scheduler(model_path)
    meta = dict(getattr(model, META_ATTR, None) or {})
    head: Any = model.policy.action_net  # an nn.Linear (SB3 types it as a Module)
    with torch.no_grad():
        head.weight.zero_()
    offset = float(getattr(model.policy, "first_offset", 0.0))
    set_keep_prior(model, keep_prior, shift=-min(0.0, offset))
    save_scheduler(model, Path(model_path), meta, int(meta.get("episodes", 0)))
