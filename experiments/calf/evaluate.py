"""Evaluating CALF policies under network conditions, and aggregating over seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleetgym.experiments.calf.conditions import NetworkCondition
from fleetgym.experiments.calf.setup import EnvSetup, vec_env
from fleetgym.experiments.calf.train import TrainedPolicy
from fleetgym.experiments.tables import group_by
from fleetgym.validation import check_int

__all__ = ["CalfResults", "Cell", "EvalRecord", "aggregate", "eval_seed", "evaluate_policy"]


@dataclass(frozen=True)
class EvalRecord:
    """Returns of one policy (regime, seed) under one condition.

    Args:
        env_id: Task.
        regime: Regime name.
        seed: Training seed.
        condition: Condition name.
        mean_return: Mean episode return.
        std_return: Std of episode returns.
        n_episodes: Episodes evaluated.
        table: Which table the record belongs to (``grid``, ``ablation``, ``degraded``).
    """

    env_id: str
    regime: str
    seed: int
    condition: str
    mean_return: float
    std_return: float
    n_episodes: int
    table: str = "grid"


def evaluate_policy(
    setup: EnvSetup,
    policy: TrainedPolicy,
    condition: NetworkCondition,
    n_episodes: int = 50,
    *,
    n_envs: int = 10,
    seed: int = 0,
    table: str = "grid",
) -> EvalRecord:
    """Deterministic returns of ``policy`` under ``condition`` (same input stack as trained).

    Episodes run on ``n_envs`` envs at once (batched inference); SB3's episode
    accounting gives every env an equal share so short episodes are not over-counted.

    Raises:
        ValueError: if ``n_episodes`` < 1.
    """
    from stable_baselines3.common.evaluation import evaluate_policy as sb3_evaluate

    n_episodes = check_int("n_episodes", n_episodes, low=1)
    n_envs = max(1, min(n_envs, n_episodes))
    if policy.layout.policy_slot is not None:  # the scheduled chunks: this policy's plans
        policy.layout.policy_slot.model = policy.model
    vec = vec_env(setup, condition, policy.layout, n_envs, seed=seed)
    returns, _ = sb3_evaluate(
        policy.model,
        vec,
        n_eval_episodes=n_episodes,
        deterministic=True,
        return_episode_rewards=True,
        warn=False,
    )
    vec.close()
    arr = np.asarray(returns, dtype=np.float64)
    return EvalRecord(
        setup.env_id,
        policy.regime.name,
        policy.seed,
        condition.name,
        float(arr.mean()),
        float(arr.std()),
        int(arr.size),
        table,
    )


def eval_seed(train_seed: int, condition: str) -> int:
    """Evaluation seed: differs per training seed and condition, reproducible."""
    return 100_000 + 1_000 * train_seed + sum(condition.encode()) % 997


@dataclass(frozen=True)
class Cell:
    """Aggregate over seeds of one (table, regime, condition).

    Args:
        table, regime, condition: Keys.
        mean: Mean over seeds of the per-seed mean return.
        std: Std over seeds of the per-seed mean return (the seed spread).
        n_seeds: Seeds aggregated.
        gap: 1 - mean(condition) / mean(sim-clean) over the same seeds (NaN without clean).
        gap_std: Std over seeds of the per-seed gaps.
    """

    table: str
    regime: str
    condition: str
    mean: float
    std: float
    n_seeds: int
    gap: float
    gap_std: float


def aggregate(records: Sequence[EvalRecord], clean: str = "sim-clean") -> list[Cell]:
    """Mean ± seed std per (table, regime, condition), with the gap against ``clean``.

    Ablation records use the grid's clean return of the same regime and seed when
    their own table has none.
    """
    groups = group_by(records, key=lambda r: (r.table, r.regime, r.condition))
    # One value per seed; a seed evaluated twice keeps its last record.
    by_key = {key: {r.seed: r.mean_return for r in rs} for key, rs in groups.items()}
    clean_of: dict[tuple[str, int], float] = {}
    for r in records:
        if r.condition == clean:
            clean_of.setdefault((r.regime, r.seed), r.mean_return)
    cells = []
    for (table, regime, cond), per_seed in by_key.items():
        seeds = sorted(per_seed)
        vals = np.array([per_seed[s] for s in seeds])
        cleans = np.array([clean_of.get((regime, s), math.nan) for s in seeds])
        gaps = 1.0 - vals / np.where(cleans > 0, cleans, math.nan)
        gap = 1.0 - vals.mean() / cleans.mean() if np.all(cleans > 0) else math.nan
        cells.append(
            Cell(
                table,
                regime,
                cond,
                float(vals.mean()),
                float(vals.std()),
                len(seeds),
                float(gap),
                float(np.nanstd(gaps)) if np.any(np.isfinite(gaps)) else math.nan,
            )
        )
    return cells


@dataclass
class CalfResults:
    """What :func:`~fleetgym.experiments.calf.experiment.run_calf` measured and wrote.

    Args:
        env_id: Task.
        records: Per-seed :class:`EvalRecord` list.
        cells: Aggregated :class:`Cell` list.
        files: Paths written.
        wall_s: Wall time of the whole run.
        train_wall_s: Training wall time per (regime, seed).
        layouts: Input layout (k, m) per regime.
    """

    env_id: str
    records: list[EvalRecord]
    cells: list[Cell]
    files: list[Path]
    wall_s: float
    train_wall_s: dict[str, float] = field(default_factory=dict)
    layouts: dict[str, tuple[int, int]] = field(default_factory=dict)

    def cell(self, regime: str, condition: str, table: str = "grid") -> Cell:
        """The aggregated cell of (table, regime, condition).

        Raises:
            KeyError: if that cell was not measured.
        """
        for c in self.cells:
            if (c.table, c.regime, c.condition) == (table, regime, condition):
                return c
        raise KeyError(f"expected a cell ({table}, {regime}, {condition}); not measured")
