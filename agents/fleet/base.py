"""Machinery every fleet backend shares: argument checks, per-slot seeds, round assembly.

A backend only decides *where* an actor's rollout runs (this process, a local worker
process, a Ray actor). What a slot is, how it is seeded, how a round is checked and how
its pieces are put together into a :class:`~fleetgym.agents.types.RoundResult` is the
same everywhere and lives here, so the backends agree trajectory for trajectory: for the
same seed and weights, slot ``i`` of every backend steps the same environment with the
same random stream.

This module imports numpy only; torch loads when the first actor is built.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fleetgym.agents.types import ActorFailure, ActorTiming, RoundResult, Trajectory, Weights
from fleetgym.errors import FleetError
from fleetgym.extras import require
from fleetgym.validation import check_int, check_timeout

if TYPE_CHECKING:  # pragma: no cover - typing only
    from fleetgym.agents.workloads import Workload

logger = logging.getLogger(__name__)

#: Upper bound on ``max_actors``: a guard against typos (a fleet of 10**6 processes), not a
#: design limit; the scheduling env uses 32.
MAX_ACTORS_LIMIT = 4096

#: Upper bound on ``steps_per_actor`` of one round (each actor holds the whole trajectory
#: in memory).
MAX_STEPS_PER_ACTOR = 10_000_000

#: What a fault is called in :class:`~fleetgym.agents.types.ActorFailure`.
FAILURE_KINDS = ("crash", "timeout", "error")


class Actor(Protocol):
    """What a fleet slot holds: something that runs one whole rollout per call."""

    def rollout(self, weights: Weights, steps: int, policy_version: int) -> Trajectory:
        """Load ``weights`` and run ``steps`` environment steps."""
        ...


#: Builds the actor of one slot: ``factory(workload, actor_id, fleet_seed, incarnation)``.
#: The actor derives its env seed and sampling stream from ``(fleet_seed, actor_id,
#: incarnation)``, so every backend starts slot ``i`` identically.
ActorFactory = Callable[..., Actor]


def default_actor_factory(workload: Workload, actor_id: int, seed: int, incarnation: int) -> Actor:
    """The real actor: a :class:`~fleetgym.agents.rollout.RolloutWorker` (imports torch)."""
    from fleetgym.agents.rollout import RolloutWorker

    return RolloutWorker(workload, actor_id, seed, incarnation)


def check_weights(weights: Any) -> Weights:
    """``weights`` as a ``dict[str, np.ndarray]`` (no code travels to actors).

    Raises:
        TypeError: If it is not a mapping of strings to numpy arrays of a float or integer
            dtype (an ``object`` array is refused here, before any actor sees it).
        ValueError: If a float array holds NaN or infinity.
    """
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights: expected dict[str, np.ndarray], actual {type(weights).__name__}")
    for key, value in weights.items():
        if not isinstance(key, str):
            raise TypeError(f"weights: expected str keys, actual {type(key).__name__} {key!r}")
        if not isinstance(value, np.ndarray):
            raise TypeError(
                f"weights[{key!r}]: expected np.ndarray, actual {type(value).__name__} "
                "(convert a torch state_dict with policy.get_weights())"
            )
        if value.dtype.kind not in "fiu":
            # An object array would make every actor unpickle or crash on it.
            raise TypeError(
                f"weights[{key!r}]: expected a float or integer array, actual dtype {value.dtype}"
            )
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ValueError(f"weights[{key!r}]: expected finite values, actual NaN or inf")
    return dict(weights)


def resolve_workload(workload: Any) -> Workload:
    """A :class:`~fleetgym.agents.workloads.Workload` from a name or a workload.

    Raises:
        TypeError: If ``workload`` is neither.
        fleetgym.errors.UnknownWorkloadError: If the name is not registered.
    """
    from fleetgym.agents.workloads import get_workload

    return get_workload(workload)


#: A backend's round before assembly: trajectories and timings by slot, and the faults.
RoundParts = tuple[dict[int, Trajectory], dict[int, ActorTiming], list[ActorFailure]]

#: Characters of a fault's message kept in its ActorFailure (a traceback's tail).
FAILURE_MESSAGE_CHARS = 2000


@dataclass
class SlotProgress:
    """How far one supervised unit (an actor, a worker process) got in the current round.

    ``failures`` are the faults that led to a re-run; once the re-run delivers, they are
    marked ``rerun`` (:meth:`mark_rerun`).
    """

    state: str = "starting"  # "starting" | "running"
    deadline: float = float("inf")
    attempts: int = 0
    cold: bool = False
    failures: list[ActorFailure] = field(default_factory=list)

    def mark_rerun(self) -> None:
        """The re-run delivered: every fault that caused it is marked ``rerun``."""
        for failure in self.failures:
            failure.rerun = True


#: Default ``startup_timeout`` and ``actor_timeout`` of every backend, in seconds.
DEFAULT_STARTUP_TIMEOUT_S = 300.0
DEFAULT_ACTOR_TIMEOUT_S = 300.0


class FleetBase:
    """Shared state and checks of every backend (not used directly).

    Args:
        workload: A workload name or :class:`~fleetgym.agents.workloads.Workload`.
        max_actors: Largest fleet a round may ask for (slots ``0..max_actors-1``).
        seed: Fleet seed; slot ``i``'s ``k``-th incarnation seeds its env and sampling
            stream from ``(seed, i, k)``.
        actor_factory: Builds a slot's actor,
            ``factory(workload, actor_id, fleet_seed, incarnation)``; None (the default)
            builds the real :class:`~fleetgym.agents.rollout.RolloutWorker`.
        max_retries: How many times a faulted slot's rollout is run again within the
            same round (on a restarted actor) before the round gives up on it.
        on_incomplete: ``"partial"`` returns a round whose ``complete`` is False when a
            slot still failed after its retries; ``"raise"`` raises
            :class:`~fleetgym.errors.FleetError` instead.

    Raises:
        TypeError, ValueError: On an argument of the wrong type or range.
    """

    max_actors: int
    closed: bool

    def __init__(
        self,
        workload: Any,
        *,
        max_actors: int = 32,
        seed: int = 0,
        actor_factory: ActorFactory | None = None,
        max_retries: int = 1,
        on_incomplete: str = "partial",
    ) -> None:
        self.workload = resolve_workload(workload)
        self.max_actors = check_int("max_actors", max_actors, 1, MAX_ACTORS_LIMIT)
        self.seed = check_int("seed", seed, 0, 2**63 - 1)
        if actor_factory is not None and not callable(actor_factory):
            raise TypeError(
                "actor_factory: expected a callable (workload, actor_id, seed, incarnation) "
                f"-> actor, "
                f"actual {type(actor_factory).__name__}"
            )
        if actor_factory is None:  # the default actors run the workload's torch policy
            require("torch", f"{type(self).__name__} (its default actors)")
        self.actor_factory: ActorFactory = actor_factory or default_actor_factory
        self.max_retries = check_int("max_retries", max_retries, 0)
        if on_incomplete not in ("partial", "raise"):
            raise ValueError(
                f"on_incomplete: expected 'partial' or 'raise', actual {on_incomplete!r}"
            )
        self.on_incomplete = on_incomplete
        self.closed = False
        #: How many times each slot has been (re)started; its next seed uses this.
        self.incarnations: dict[int, int] = {}
        self.rounds_run = 0
        self._weight_shapes: dict[str, tuple[int, ...]] | None = None

    # -- checks ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise FleetError(f"{type(self).__name__} is closed: expected an open fleet")

    def _check_round(
        self, weights: Any, num_actors: Any, steps_per_actor: Any, policy_version: Any
    ) -> tuple[Weights, int, int, int]:
        self._check_open()
        weights = check_weights(weights)
        num_actors = check_int("num_actors", num_actors, 1, self.max_actors)
        steps_per_actor = check_int("steps_per_actor", steps_per_actor, 1, MAX_STEPS_PER_ACTOR)
        policy_version = check_int("policy_version", policy_version, 0)
        return weights, num_actors, steps_per_actor, policy_version

    def _check_weights_fit(self, weights: Weights) -> None:
        """Refuse weights the workload's policy cannot load, before any actor sees them.

        A wrong state_dict is the caller's error: caught here it raises at once, instead
        of failing every actor, which would restart them all. Only checked for the
        default actor (a custom actor may take other weights).
        """
        if self.actor_factory is not default_actor_factory:
            return
        if self._weight_shapes is None:
            reference = self.workload.make_policy().get_weights()
            self._weight_shapes = {key: tuple(v.shape) for key, v in reference.items()}
        given = {key: tuple(v.shape) for key, v in weights.items()}
        if given != self._weight_shapes:
            missing = sorted(set(self._weight_shapes) - set(given))
            unexpected = sorted(set(given) - set(self._weight_shapes))
            shapes = sorted(
                f"{key}: expected {self._weight_shapes[key]}, actual {given[key]}"
                for key in set(given) & set(self._weight_shapes)
                if given[key] != self._weight_shapes[key]
            )
            raise ValueError(
                f"weights: expected the {self.workload.name} policy's state_dict, actual "
                f"missing keys {missing}, unexpected keys {unexpected}, wrong shapes {shapes}"
            )

    def _check_prewarm(self, num_actors: Any) -> int:
        self._check_open()
        return check_int("num_actors", num_actors, 1, self.max_actors)

    # -- slots ----------------------------------------------------------------------------
    def _record_fault(
        self,
        slots: Sequence[int],
        progress: SlotProgress,
        kind: str,
        message: str,
        failures: list[ActorFailure],
        label: str,
    ) -> bool:
        """Count one fault of the unit running ``slots``; True if a retry is left.

        Appends one :class:`~fleetgym.agents.types.ActorFailure` per slot to ``failures``;
        with a retry left they are also kept in ``progress`` (marked ``rerun`` once the
        re-run delivers) and the re-run is a cold start. The caller replaces the unit.
        """
        progress.attempts += 1
        retry = progress.attempts <= self.max_retries
        message = message.strip()[-FAILURE_MESSAGE_CHARS:]
        mine = [
            ActorFailure(actor_id=s, kind=kind, message=message, restarted=retry, rerun=False)
            for s in slots
        ]
        failures.extend(mine)
        logger.warning("%s %s: %s", label, kind, (message.splitlines() or [""])[-1])
        if retry:
            progress.failures.extend(mine)
            progress.cold = True
        return retry

    def _next_incarnation(self, slot: int) -> int:
        """Claim the next incarnation of ``slot`` (0 the first time it starts)."""
        incarnation = self.incarnations.get(slot, -1) + 1
        self.incarnations[slot] = incarnation
        return incarnation

    # -- the round ------------------------------------------------------------------------
    def run_round(
        self,
        weights: Weights,
        num_actors: int,
        steps_per_actor: int,
        *,
        policy_version: int = 0,
    ) -> RoundResult:
        """Send ``weights`` to slots ``0..num_actors-1``; each runs ``steps_per_actor`` steps.

        Args:
            weights: The policy weights (parameter name -> float or integer numpy array,
                a torch ``state_dict`` converted to numpy). With the default actors they
                must match the workload's policy (keys and shapes).
            num_actors: How many slots run this round, ``1..max_actors``; the slots above
                it sit the round out (parked, or stopped under ``stop_idle=True``).
            steps_per_actor: Env steps each slot runs, ``1..10_000_000``.
            policy_version: Keyword-only version number (>= 0) recorded in each
                trajectory and in the result; 0 by default.

        Returns:
            The round: trajectories and timings ordered by actor id, the faults seen.

        Raises:
            TypeError, ValueError: On a bad argument (weights the workload's policy
                cannot load included).
            FleetError: If the fleet is closed, or a slot failed after its retries and
                ``on_incomplete="raise"``.
        """
        weights, num_actors, steps_per_actor, policy_version = self._check_round(
            weights, num_actors, steps_per_actor, policy_version
        )
        self._check_weights_fit(weights)
        started = time.perf_counter()
        trajectories, timings, failures = self._run_slots(
            weights, num_actors, steps_per_actor, policy_version
        )
        return self._assemble(
            num_actors,
            steps_per_actor,
            policy_version,
            trajectories,
            timings,
            failures,
            time.perf_counter() - started,
        )

    def _run_slots(
        self,
        weights: Weights,
        num_actors: int,
        steps_per_actor: int,
        policy_version: int,
    ) -> RoundParts:
        """The backend's part of a round (checked arguments): where the rollouts run."""
        raise NotImplementedError

    # -- results --------------------------------------------------------------------------
    def _assemble(
        self,
        num_actors: int,
        steps_per_actor: int,
        policy_version: int,
        trajectories: Mapping[int, Trajectory],
        timings: Mapping[int, ActorTiming],
        failures: list[ActorFailure],
        wall_s: float,
    ) -> RoundResult:
        """Put a round together, ordered by actor id, checking the backend kept its word."""
        for slot, trajectory in trajectories.items():
            if len(trajectory) != steps_per_actor or trajectory.actor_id != slot:
                # A broken actor implementation, not a user error: refuse to hand the
                # learner samples it would silently mis-weight.
                raise FleetError(
                    f"actor {slot}: expected a trajectory of {steps_per_actor} steps for "
                    f"actor_id {slot}, actual {len(trajectory)} steps for actor_id "
                    f"{trajectory.actor_id}"
                )
        result = RoundResult(
            num_actors=num_actors,
            steps_per_actor=steps_per_actor,
            policy_version=policy_version,
            trajectories=[trajectories[s] for s in sorted(trajectories)],
            timings=[timings[s] for s in sorted(timings)],
            failures=sorted(failures, key=lambda f: f.actor_id),
            wall_s=wall_s,
        )
        self.rounds_run += 1
        if not result.complete:
            missing = sorted(set(range(num_actors)) - set(trajectories))
            message = (
                f"round {self.rounds_run}: expected {num_actors} trajectories, actual "
                f"{len(trajectories)} (actors {missing} failed after {self.max_retries} "
                f"retries: {[f.message for f in failures if f.actor_id in missing]})"
            )
            if self.on_incomplete == "raise":
                raise FleetError(message)
            logger.warning(message)
        return result

    # -- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Release every actor (idempotent)."""
        self.closed = True

    def __enter__(self) -> FleetBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(workload={self.workload.name!r}, "
            f"max_actors={self.max_actors}, seed={self.seed})"
        )


class SupervisedFleetBase(FleetBase):
    """Adds the two timeouts that bound every wait of a backend.

    Args:
        workload: See :class:`FleetBase` (as are the other keyword arguments).
        actor_timeout: Seconds an actor may take for one round's rollout before it is
            treated as hung (a ``timeout`` fault: killed, replaced, re-run if a retry is
            left); None waits forever.
        startup_timeout: The same for starting an actor (a Ray actor's placement
            included).

    Raises:
        TypeError, ValueError: On an argument of the wrong type or range.
    """

    def __init__(
        self,
        workload: Any,
        *,
        actor_timeout: float | None = DEFAULT_ACTOR_TIMEOUT_S,
        startup_timeout: float | None = DEFAULT_STARTUP_TIMEOUT_S,
        **options: Any,
    ) -> None:
        super().__init__(workload, **options)
        self.actor_timeout = check_timeout("actor_timeout", actor_timeout)
        self.startup_timeout = check_timeout("startup_timeout", startup_timeout)

    def _deadline(self, now: float, *, starting: bool = False, queued: int = 1) -> float:
        """When a unit started (or dispatched behind ``queued - 1`` others) at ``now`` is late."""
        limit = self.startup_timeout if starting else self.actor_timeout
        return float("inf") if limit is None else now + limit * (1 if starting else queued)

    def _late_message(self, *, starting: bool) -> str:
        """What a unit that missed its deadline is reported with."""
        if starting:
            return f"did not start within startup_timeout={self.startup_timeout} s"
        return f"did not finish its rollout within actor_timeout={self.actor_timeout} s"
