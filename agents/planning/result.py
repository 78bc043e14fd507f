"""What one simulation reports: :class:`SimulationResult`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["SimulationResult"]


@dataclass(frozen=True)
class SimulationResult:
    """What one simulation measured over its window (the updates after the warm-up).

    Args:
        env_steps_per_s: Env steps the learner consumed per second of the window.
        learner_utilisation: Fraction of the window the learner spent updating.
        wall_s: Length of the window (simulated seconds).
        env_steps: Env steps consumed in the window.
        updates: Updates in the window.
        server_batches: Batch size -> forward passes (all servers, in the window).
        lag_samples: Policy lag in updates -> samples consumed with it (in the window).
        dropped_fraction: Samples older than the bound (dropped by the learner).
        actor_wait_fraction: Fraction of actor time spent waiting for a ticket.
        max_outstanding: Most tickets out at once (never above the capacity).

    Example:
        >>> from fleetgym.agents.planning import (
        ...     ActorTimes, LearnerTimes, PipelineShape, simulate)
        >>> r = simulate(PipelineShape(n_actors=2, steps_per_actor=10),
        ...              ActorTimes(step_s=(0.001,)), LearnerTimes(0.01, 0.0), updates=3,
        ...              warmup_updates=1)
        >>> round(r.env_steps_per_s), round(r.learner_utilisation, 3)
        (1000, 0.5)
    """

    env_steps_per_s: float
    learner_utilisation: float
    wall_s: float
    env_steps: int
    updates: int
    server_batches: dict[int, int] = field(default_factory=dict)
    lag_samples: dict[int, int] = field(default_factory=dict)
    dropped_fraction: float = 0.0
    actor_wait_fraction: float = 0.0
    max_outstanding: int = 0

    @property
    def mean_server_batch(self) -> float:
        """Mean requests per forward pass (NaN without a server)."""
        passes = sum(self.server_batches.values())
        if not passes:
            return math.nan
        return sum(b * n for b, n in self.server_batches.items()) / passes

    def lag_percentile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the policy lag over samples (NaN if none).

        Args:
            q: Quantile in [0, 1] (0.5: the median); the smallest lag, in updates, whose
                share of the window's samples at or below it reaches ``q``.
        """
        if not self.lag_samples:
            return math.nan
        lags = np.array(sorted(self.lag_samples), np.float64)
        counts = np.array([self.lag_samples[int(k)] for k in lags], np.float64)
        cumulative = np.cumsum(counts) / counts.sum()
        return float(lags[min(int(np.searchsorted(cumulative, q - 1e-12)), len(lags) - 1)])

    @property
    def mean_lag(self) -> float:
        """Mean policy lag over samples (NaN if none)."""
        total = sum(self.lag_samples.values())
        if not total:
            return math.nan
        return sum(k * n for k, n in self.lag_samples.items()) / total
