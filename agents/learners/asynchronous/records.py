"""What each asynchronous update reports: :class:`UpdateRecord` and its TensorBoard scalars.

:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO` appends one record per
update to its ``history`` and, with ``tensorboard_log``, writes it with
:func:`log_update` (returns, losses, KL, clip fraction, the lag percentiles and
histogram, dropped samples, the effective sample size of the update's importance
weights, learner utilisation, env steps/s, and with imagination the
model's validation loss per head, the horizon, the imagined share and the uncertainty).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgym.agents.learners.lag import LagUpdateStats
from fleetgym.agents.world_model.imagination import ImaginationRecord, imagination_scalars


@dataclass
class UpdateRecord:
    """What one asynchronous update did, and where the run stands after it.

    Args:
        update: The update's index in the trainer's ``history``, from 0.
        total_steps: Env steps handed to the learner so far (dropped samples included),
            over every ``learn`` call: the trainer's ``num_timesteps``.
        wall_s: Wall seconds since this ``learn`` call started.
        learner_busy_s: Seconds this ``learn`` call spent in learner updates so far.
        queued: Trajectories waiting in the pipeline after this update (0 when the
            topology is not concurrent).
        actor_failures: Failed rollouts so far (each actor replaced by a new incarnation).
        stats: The learner's report of this update, with the lag of its samples.
        imagination: What imagination did in this update (``None`` without
            ``imagination=``).
    """

    update: int
    total_steps: int  # env steps handed to the learner so far (dropped samples included)
    wall_s: float  # since learn() started
    learner_busy_s: float  # time spent in updates so far
    queued: int  # trajectories waiting in the pipeline after this update
    actor_failures: int
    stats: LagUpdateStats
    #: What imagination did in this update (``None`` without ``imagination=``).
    imagination: ImaginationRecord | None = None

    @property
    def mean_return(self) -> float:
        return self.stats.mean_return

    @property
    def ess(self) -> float:
        """The effective sample size of the update's importance weights ``pi_theta / mu``,
        in ``(0, 1]`` (1: on-policy; NaN: not measured): :attr:`LagUpdateStats.ess`."""
        return self.stats.ess

    @property
    def learner_utilisation(self) -> float:
        """Share of the wall time so far spent in updates."""
        return self.learner_busy_s / self.wall_s if self.wall_s > 0 else 0.0


def summary_writer(folder: Path) -> Any:
    """A TensorBoard ``SummaryWriter`` writing into ``folder``."""
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(folder))


def log_scalars(writer: Any, stats: Any, step: int, wall_s: float, imagination: Any = None) -> None:
    """The scalars every update writes, sync or async: return, losses, KL, clip fraction,
    env steps/s, and with ``imagination`` (an ImaginationRecord) its ``imagination/...``."""
    for name, value in (
        ("rollout/ep_rew_mean", stats.mean_return),
        ("train/loss", stats.loss),
        ("train/policy_loss", stats.policy_loss),
        ("train/value_loss", stats.value_loss),
        ("train/entropy", stats.entropy),
        ("train/approx_kl", stats.kl),
        ("train/clip_fraction", stats.clip_fraction),
        ("time/steps_per_s", step / wall_s if wall_s else 0.0),
    ):
        writer.add_scalar(name, value, step)
    if imagination is not None:
        for name, value in imagination_scalars(imagination).items():
            writer.add_scalar(name, value, step)


def log_update(writer: Any, record: UpdateRecord) -> None:
    """Write one update's scalars (and its lag histogram) at its env-step count."""
    s, step = record.stats, record.total_steps
    log_scalars(writer, s, step, record.wall_s, record.imagination)
    for name, value in (
        ("lag/p50", s.lag_p50),
        ("lag/p99", s.lag_p99),
        ("lag/max", s.lag_max),
        ("lag/dropped_samples", s.dropped_samples),
        ("lag/ess", s.ess),
        ("time/learner_utilisation", record.learner_utilisation),
    ):
        writer.add_scalar(name, value, step)
    if len(s.lags):
        writer.add_histogram("lag/histogram", s.lags, step)


__all__ = ["UpdateRecord", "log_scalars", "log_update", "summary_writer"]
