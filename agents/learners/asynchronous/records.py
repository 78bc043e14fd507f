"""What each asynchronous update reports: :class:`UpdateRecord` and its TensorBoard scalars.

:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO` appends one record per
update to its ``history`` (the newest ``history_limit`` of them) and, with
``tensorboard_log``, writes it with :func:`log_update` (returns, losses, KL, clip
fraction, the lag percentiles and histogram, dropped samples, the effective sample size
of the update's importance weights, learner utilisation, env steps/s, and with
imagination the model's validation loss per head, the horizon, the imagined share and
the uncertainty). :func:`record_dict` and :func:`record_from_dict` turn a record into
the plain values a checkpoint stores and back; a record's per-sample lags are stored as
runs of equal values (:func:`lag_runs`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.agents.learners.lag import LagUpdateStats
from fleetgym.agents.world_model.imagination import ImaginationRecord, imagination_scalars
from fleetgym.validation import quote


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


def _plain(value: Any) -> Any:
    """``value`` with numpy arrays and scalars as lists and Python numbers (weights_only)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def lag_runs(lags: np.ndarray) -> list[list[int]]:
    """Per-sample lags as ``[lag, count]`` runs, in order (a trajectory's samples share one
    lag, so an update's few hundred lags become a few runs).

    Example:
        >>> lag_runs(np.array([1, 1, 1, 4, 4, 0]))
        [[1, 3], [4, 2], [0, 1]]
    """
    lags = np.asarray(lags).reshape(-1)
    if not len(lags):
        return []
    starts = np.flatnonzero(np.r_[True, lags[1:] != lags[:-1]])
    counts = np.diff(np.r_[starts, len(lags)])
    return [[int(lags[i]), int(n)] for i, n in zip(starts, counts, strict=True)]


def lags_from_runs(runs: Any) -> np.ndarray:
    """The per-sample lags :func:`lag_runs` wrote (a plain list of lags, as older
    checkpoints hold, is read as it is).

    Raises:
        ValueError: If ``runs`` is neither.
    """
    if isinstance(runs, dict) and set(runs) == {"runs"}:
        pairs = runs["runs"]
        if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(type(v) is int for v in p) and p[1] > 0
            for p in pairs
        ):
            raise ValueError("lags: expected runs of [lag, count >= 1] ints")
        if not pairs:
            return np.zeros(0, np.int64)
        values, counts = zip(*pairs, strict=True)
        return np.repeat(np.asarray(values, np.int64), np.asarray(counts, np.int64))
    return np.asarray(runs, np.int64).reshape(-1)


def record_dict(record: UpdateRecord) -> dict[str, Any]:
    """One update record as plain values (its ``lags`` as :func:`lag_runs`), for a
    checkpoint."""
    data: dict[str, Any] = _plain(dataclasses.asdict(record))
    data["stats"]["lags"] = {"runs": lag_runs(record.stats.lags)}
    return data


def record_from_dict(data: Any, where: str) -> UpdateRecord:
    """The :class:`UpdateRecord` :func:`record_dict` wrote.

    Raises:
        ValueError: Naming ``where``, if ``data`` is not such a dict.
    """
    names = {f.name for f in dataclasses.fields(UpdateRecord)}
    if not isinstance(data, dict) or set(data) != names:
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: expected fields {sorted(names)}, actual {keys}")
    values = dict(data)
    try:
        stats = dict(values.pop("stats"))
        stats["lags"] = lags_from_runs(stats.get("lags", []))
        imagination = values.pop("imagination")
        record = UpdateRecord(
            stats=LagUpdateStats(**stats),
            imagination=None if imagination is None else ImaginationRecord(**imagination),
            **values,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    for name in ("update", "total_steps", "queued", "actor_failures"):
        value = getattr(record, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}: {name}: expected an int >= 0, actual {quote(value)}")
    for name in ("wall_s", "learner_busy_s"):
        value = getattr(record, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"{where}: {name}: expected a number >= 0, actual {quote(value)}")
    return record


__all__ = [
    "UpdateRecord",
    "lag_runs",
    "lags_from_runs",
    "log_scalars",
    "log_update",
    "record_dict",
    "record_from_dict",
    "summary_writer",
]
