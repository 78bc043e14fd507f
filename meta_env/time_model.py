"""Time of one distributed training round: what this machine shows and what it cannot.

* **The time model** (:class:`TimeModel`): what this machine cannot show -- a container's
  cold start (300 ms per actor, 1500 ms for a GPU learner, as measured by MinionsRL on
  Azure Container Instances), pre-warming that hides it, the transfer of weights to every
  actor and of its trajectory back (latency + bytes / bandwidth) and a learner speed factor
  (a GPU runs the update ``learner_speed_factor`` times faster than this CPU).
* **The compute model** (:class:`ComputeCostModel`): for ``timing="modeled"``, the compute
  of a rollout and of an update as a deterministic function of the step and sample counts,
  with an optional seeded per-actor slowdown (stragglers), so an episode is reproducible.

All times are seconds. Every parameter is bounded (:data:`MAX_SECONDS`,
:data:`MIN_BANDWIDTH`, :data:`MAX_SPEED_FACTOR`, :data:`MAX_JITTER_CV`), so that no finite
but absurd value can make a round's time overflow to infinity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from fleetgym.validation import check_bool, check_float, check_int

__all__ = [
    "MAX_JITTER_CV",
    "MAX_SECONDS",
    "MAX_SPEED_FACTOR",
    "MIN_BANDWIDTH",
    "ActorTimeBreakdown",
    "ComputeCostModel",
    "LearnerTimeBreakdown",
    "TimeModel",
    "trajectory_nbytes",
    "weights_nbytes",
]

#: Largest accepted duration of one modelled item (a cold start, a latency, a step): ~32 years.
MAX_SECONDS = 1e9
#: Smallest accepted bandwidth, bytes per second.
MIN_BANDWIDTH = 1.0
#: Largest accepted learner speed factor (and the inverse of the smallest).
MAX_SPEED_FACTOR = 1e6
#: Largest ``warm_pool``: the bound on a fleet's ``max_actors``.
MAX_WARM_POOL = 4096
#: Largest accepted coefficient of variation of the stragglers' slowdown.
MAX_JITTER_CV = 100.0


def weights_nbytes(weights: dict[str, np.ndarray]) -> int:
    """Bytes on the wire of a weights dict (the raw arrays)."""
    return int(sum(np.asarray(a).nbytes for a in weights.values()))


def trajectory_nbytes(trajectory: Any) -> int:
    """Bytes on the wire of a :class:`~fleetgym.agents.types.Trajectory` (its arrays)."""
    total = 0
    for name in (
        "obs",
        "actions",
        "log_probs",
        "values",
        "rewards",
        "terminated",
        "truncated",
        "truncation_values",
    ):
        array = getattr(trajectory, name, None)
        if array is not None:
            total += int(np.asarray(array).nbytes)
    return total


@dataclass(frozen=True)
class ActorTimeBreakdown:
    """One actor's modelled time in one round (seconds)."""

    cold_start_s: float
    transfer_s: float
    compute_s: float

    @property
    def total_s(self) -> float:
        return self.cold_start_s + self.transfer_s + self.compute_s


@dataclass(frozen=True)
class LearnerTimeBreakdown:
    """The learner's modelled time in one round (seconds)."""

    cold_start_s: float
    update_s: float

    @property
    def total_s(self) -> float:
        return self.cold_start_s + self.update_s


@dataclass(frozen=True)
class TimeModel:
    """What a round costs in time beyond the compute: cold starts, transfers, GPU speed.

    An actor's time is ``cold start (unless warm) + 2 * latency + (weight bytes +
    trajectory bytes) / bandwidth + compute``: it downloads the weights, runs its rollout
    and uploads its trajectory. The learner's time is ``cold start (unless warm) +
    update / learner_speed_factor``. With ``prewarm`` the learner is kept warm across rounds
    and so are actor containers (no cold start on the critical path; warm containers are
    billed for the whole round, see :class:`ServerlessCostModel`): with ``warm_pool=None``
    the *keep-alive* policy keeps the previous round's ``I_k-1`` actors alive (the first
    round's actors are warmed before training starts), with ``warm_pool=N`` a fixed pool
    of slots ``0..N-1`` is kept alive whether used or not. Under keep-alive, containers a
    round no longer needs stay warm (and billed) for ``keep_alive_s`` more seconds before
    they are released, as serverless platforms keep idle instances for a while: a fleet
    that shrinks and grows back within that time pays no cold start for it.

    Args:
        cold_start_actor_s: start-up of one actor container (MinionsRL: ~0.3 s).
        cold_start_learner_s: start-up of the GPU learner container (~1.5 s).
        prewarm: keep the learner and actor containers warm between rounds.
        warm_pool: with ``prewarm``, a fixed pool of warm actor slots; None: keep-alive
            (the previous round's actors stay warm).
        keep_alive_s: under keep-alive, how long an idle actor container stays warm
            (billed) before it is released (0: at the start of the next round).
        bandwidth_bytes_per_s: actor <-> learner bandwidth (default 1 Gbit/s).
        latency_s: one-way latency of one transfer.
        learner_speed_factor: how many times faster the learner's device runs the update
            than this machine's CPU (1.0: as measured or modelled).

    Example:
        >>> tm = TimeModel(bandwidth_bytes_per_s=1e6, latency_s=0.01)
        >>> round(tm.actor_time(0.5, weight_bytes=10_000, trajectory_bytes=40_000).total_s, 3)
        0.87
        >>> tm.learner_time(0.2).total_s
        1.7

    Raises:
        TypeError: a value of the wrong type (a non-numeric time, a non-bool ``prewarm``,
            a non-integer ``warm_pool``).
        ValueError: a value out of range: times outside ``[0, MAX_SECONDS]``, a bandwidth
            below :data:`MIN_BANDWIDTH`, a speed factor outside
            ``[1 / MAX_SPEED_FACTOR, MAX_SPEED_FACTOR]``, a ``warm_pool`` outside
            ``[0, MAX_WARM_POOL]``.
    """

    cold_start_actor_s: float = 0.3
    cold_start_learner_s: float = 1.5
    prewarm: bool = False
    warm_pool: int | None = None
    keep_alive_s: float = 0.0
    bandwidth_bytes_per_s: float = 125e6
    latency_s: float = 0.001
    learner_speed_factor: float = 1.0

    def __post_init__(self) -> None:
        for name in ("cold_start_actor_s", "cold_start_learner_s", "latency_s", "keep_alive_s"):
            check_float(name, getattr(self, name), low=0.0, high=MAX_SECONDS)
        check_float("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, low=MIN_BANDWIDTH)
        check_float(
            "learner_speed_factor",
            self.learner_speed_factor,
            low=1.0 / MAX_SPEED_FACTOR,
            high=MAX_SPEED_FACTOR,
        )
        check_bool("prewarm", self.prewarm)
        if self.warm_pool is not None:
            # A pool larger than any fleet (MAX_WARM_POOL, the fleet's max_actors bound) is a
            # typo, not a setting; within it, the pool is clipped to the env's max_actors.
            check_int("warm_pool", self.warm_pool, low=0, high=MAX_WARM_POOL)

    @property
    def keep_alive(self) -> bool:
        """Pre-warming by keeping the previous round's actors alive."""
        return bool(self.prewarm) and self.warm_pool is None

    def pool_size(self, max_actors: int, previous_actors: int = 0) -> int:
        """Warm actor slots in a round (0 without ``prewarm``).

        Args:
            max_actors: the fleet's size.
            previous_actors: actors of the previous round (keep-alive).

        Raises:
            TypeError: a count that is not an int.
            ValueError: a negative count.
        """
        max_actors = check_int("max_actors", max_actors, low=0)
        previous_actors = check_int("previous_actors", previous_actors, low=0)
        if not self.prewarm:
            return 0
        if self.warm_pool is None:
            return min(int(previous_actors), max_actors)
        return min(int(self.warm_pool), max_actors)

    def transfer_s(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` in one transfer.

        Args:
            nbytes: Bytes moved (``>= 0``, finite); the time is ``latency_s + nbytes /
                bandwidth_bytes_per_s``, so 0 bytes still cost one latency.

        Raises:
            TypeError: ``nbytes`` is not a number.
            ValueError: ``nbytes`` is negative, NaN or infinite.
        """
        size = check_float("nbytes", nbytes, low=0.0)
        return self.latency_s + size / self.bandwidth_bytes_per_s

    def actor_time(
        self, compute_s: float, *, weight_bytes: int, trajectory_bytes: int, warm: bool = False
    ) -> ActorTimeBreakdown:
        """One actor's time: cold start, weights down + trajectory up, compute.

        Args:
            compute_s: The rollout's compute time (seconds, ``>= 0``), measured or from
                :meth:`ComputeCostModel.actor_compute_s`; not scaled by any factor.
            weight_bytes, trajectory_bytes: Bytes of the weights downloaded and of the
                trajectory uploaded (``>= 0``); each is one transfer (:meth:`transfer_s`).
            warm: Whether the actor's container is already warm (no cold start); default
                ``False`` adds ``cold_start_actor_s``.

        Raises:
            TypeError: a value of the wrong type.
            ValueError: a negative, NaN or infinite time or byte count.
        """
        compute_s = check_float("compute_s", compute_s, low=0.0)
        down = check_float("weight_bytes", weight_bytes, low=0.0)
        up = check_float("trajectory_bytes", trajectory_bytes, low=0.0)
        return ActorTimeBreakdown(
            cold_start_s=0.0 if check_bool("warm", warm) else self.cold_start_actor_s,
            transfer_s=self.transfer_s(down) + self.transfer_s(up),
            compute_s=compute_s,
        )

    def learner_time(self, update_s: float, *, warm: bool = False) -> LearnerTimeBreakdown:
        """The learner's time: cold start and the update on the learner's device.

        Args:
            update_s: The update's time on this machine's CPU (seconds, ``>= 0``, measured
                or modelled); it is divided by ``learner_speed_factor``.
            warm: Whether the learner's container is already warm (no cold start); default
                ``False`` adds ``cold_start_learner_s``.

        Raises:
            TypeError: a value of the wrong type.
            ValueError: ``update_s`` negative, NaN or infinite.
        """
        update_s = check_float("update_s", update_s, low=0.0)
        return LearnerTimeBreakdown(
            cold_start_s=0.0 if check_bool("warm", warm) else self.cold_start_learner_s,
            update_s=update_s / self.learner_speed_factor,
        )


@dataclass(frozen=True)
class ComputeCostModel:
    """Deterministic compute of rollouts and updates, for ``timing="modeled"``.

    A rollout of ``n`` steps takes ``actor_overhead_s + n * actor_step_s`` on one vCPU
    (environment step + policy forward), times a per-actor slowdown drawn from a
    log-normal with coefficient of variation ``actor_jitter_cv`` (mean 1) from the
    generator the caller passes, so the slowest of many actors gates the round as on a
    real cloud and the same seed draws the same slowdowns. An update over ``m`` samples
    takes ``learner_overhead_s + m * learner_sample_s`` on this CPU (all epochs included).

    Args:
        actor_step_s: seconds per environment step of one actor.
        actor_overhead_s: fixed seconds per rollout.
        learner_sample_s: seconds per sample of an update (all epochs).
        learner_overhead_s: fixed seconds per update.
        actor_jitter_cv: coefficient of variation of the per-actor slowdown (0: none).

    Example:
        >>> cm = ComputeCostModel(actor_step_s=1e-4, actor_overhead_s=0.01,
        ...                       learner_sample_s=2e-5, learner_overhead_s=0.05)
        >>> cm.actor_compute_s(100, np.random.default_rng(0), 3).tolist()
        [0.02, 0.02, 0.02]
        >>> round(cm.learner_update_s(1000), 3)
        0.07

    Raises:
        TypeError: a value that is not a number.
        ValueError: a negative or non-finite value, a time above :data:`MAX_SECONDS` or a
            coefficient of variation above :data:`MAX_JITTER_CV`.
    """

    actor_step_s: float
    actor_overhead_s: float
    learner_sample_s: float
    learner_overhead_s: float
    actor_jitter_cv: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            high = MAX_JITTER_CV if f.name == "actor_jitter_cv" else MAX_SECONDS
            check_float(f.name, getattr(self, f.name), low=0.0, high=high)

    def actor_compute_s(self, steps: int, rng: np.random.Generator, num_actors: int) -> np.ndarray:
        """Compute seconds of ``num_actors`` rollouts of ``steps`` steps each.

        Args:
            steps: Environment steps of each actor's rollout (an int ``>= 0``).
            rng: The generator the per-actor slowdowns are drawn from (one log-normal draw
                per actor); not used when ``actor_jitter_cv`` is 0.
            num_actors: How many rollouts (an int ``>= 0``); the result has one entry
                (seconds) per actor.

        Raises:
            TypeError: ``steps`` or ``num_actors`` not an int, ``rng`` not a
                :class:`numpy.random.Generator`.
            ValueError: ``steps`` or ``num_actors`` negative.
        """
        steps = check_int("steps", steps, low=0)
        num_actors = check_int("num_actors", num_actors, low=0)
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng: expected a numpy Generator, actual {type(rng).__name__}")
        base = self.actor_overhead_s + steps * self.actor_step_s
        if self.actor_jitter_cv == 0.0:
            return np.full(num_actors, base)
        # Log-normal with mean 1 and the requested CV: sigma^2 = log(1 + cv^2), mu = -sigma^2/2.
        sigma2 = math.log1p(self.actor_jitter_cv**2)
        slowdown = rng.lognormal(mean=-sigma2 / 2.0, sigma=math.sqrt(sigma2), size=num_actors)
        return base * slowdown

    def learner_update_s(self, num_samples: int) -> float:
        """Compute seconds of one update over ``num_samples`` samples.

        Args:
            num_samples: Samples the update trains on, all epochs counted once (an int
                ``>= 0``); the time is ``learner_overhead_s + num_samples *
                learner_sample_s``, on this CPU (before any learner speed factor).

        Raises:
            TypeError: ``num_samples`` is not an int.
            ValueError: ``num_samples`` is negative.
        """
        num_samples = check_int("num_samples", num_samples, low=0)
        return self.learner_overhead_s + num_samples * self.learner_sample_s
