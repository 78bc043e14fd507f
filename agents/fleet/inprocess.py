"""The default fleet: every actor runs in this process, one after the other.

Concurrency is what is *simulated*: a round runs slot 0's whole rollout, then slot 1's, and
so on, each really executed and timed on its own, so the per-actor times are those of an
actor with a core to itself, and the round's wall time is their sum (the scheduling env
computes the concurrent round time from the per-actor times). Deterministic given a seed.

``batched=True`` is the fast path: all slots step in lockstep through
:func:`~fleetgym.agents.rollout.rollout_many`, with one batched policy forward per step for
the whole fleet instead of one per actor. Each slot keeps its own environment and random
stream, so trajectories match the sequential mode up to float rounding of the batched
forward. Per-actor times are then *apportioned*: the lockstep wall (and CPU) time divided
equally among the slots, since every slot did the same number of steps; the per-slot
variation of env step times is averaged out.
"""

from __future__ import annotations

import functools
import logging
import pickle
import time
from typing import Any

from fleetgym.agents.fleet.base import (
    DEFAULT_ACTOR_TIMEOUT_S,
    DEFAULT_STARTUP_TIMEOUT_S,
    Actor,
    ActorFactory,
    RoundParts,
    SlotProgress,
    SupervisedFleetBase,
    default_actor_factory,
)
from fleetgym.agents.fleet.waiting import call_bounded
from fleetgym.agents.types import ActorFailure, ActorTiming, Trajectory, Weights
from fleetgym.errors import FleetError

logger = logging.getLogger(__name__)


class InProcessFleet(SupervisedFleetBase):
    """A fleet whose actors run sequentially in this process, each really timed.

    Models ``I`` concurrent actors, each with its own environment (persisting between
    rounds) and its own copy of the policy, by running their rollouts one after the other.
    An actor that raises is rebuilt (a new incarnation of its slot: fresh environment,
    new seed stream), its fault reported, and its rollout run again. A rollout that does
    not return within ``actor_timeout`` is a ``timeout`` fault: its thread cannot be
    stopped, so it is abandoned (a daemon thread) with its actor, which is never reused.

    Args:
        workload: A workload name or :class:`~fleetgym.agents.workloads.Workload`.
        max_actors: Largest fleet a round may ask for.
        seed: Fleet seed; slot ``i``'s ``k``-th incarnation seeds from ``(seed, i, k)``.
        batched: Step all slots in lockstep with one policy forward per step (fast);
            per-actor times are the lockstep time apportioned equally.
        max_retries: Re-runs of a faulted slot within a round.
        on_incomplete: ``"partial"`` or ``"raise"`` when a slot fails after its retries.
        actor_timeout: Seconds a rollout (a lockstep batch, batched) may take; None waits
            forever. Rollouts run in a helper thread so that the wait can end.
        startup_timeout: Seconds building an actor may take before :class:`FleetError`.
        actor_factory: Builds a slot's actor (default: the real RolloutWorker). Batched
            mode needs RolloutWorkers.

    Example:
        >>> from fleetgym.agents.fleet import InProcessFleet
        >>> from fleetgym.agents.workloads import get_workload
        >>> weights = get_workload("CartPole-v1").make_policy().get_weights()
        >>> fleet = InProcessFleet("CartPole-v1", max_actors=8, seed=0)
        >>> result = fleet.run_round(weights, num_actors=3, steps_per_actor=32)
        >>> len(result.trajectories), result.trajectories[0].obs.shape
        (3, (32, 4))
        >>> [t.cold_start for t in result.timings], fleet.run_round(weights, 2, 8).timings[0].cold_start
        ([True, True, True], False)
        >>> fleet.close()

    Raises:
        TypeError, ValueError: On an argument of the wrong type or range.
    """

    def __init__(
        self,
        workload: Any,
        *,
        max_actors: int = 32,
        seed: int = 0,
        batched: bool = False,
        max_retries: int = 1,
        on_incomplete: str = "partial",
        actor_timeout: float | None = DEFAULT_ACTOR_TIMEOUT_S,
        startup_timeout: float | None = DEFAULT_STARTUP_TIMEOUT_S,
        actor_factory: ActorFactory | None = None,
    ) -> None:
        super().__init__(
            workload,
            max_actors=max_actors,
            seed=seed,
            actor_factory=actor_factory,
            max_retries=max_retries,
            on_incomplete=on_incomplete,
            actor_timeout=actor_timeout,
            startup_timeout=startup_timeout,
        )
        if not isinstance(batched, bool):
            raise TypeError(f"batched: expected a bool, actual {type(batched).__name__}")
        if batched and actor_factory is not None:
            raise ValueError(
                "batched: expected the default actor factory (lockstep batching steps "
                "RolloutWorkers), actual a custom actor_factory"
            )
        self.batched = batched
        self._actors: dict[int, Actor] = {}

    @property
    def num_workers(self) -> int:
        """Slots that hold a built actor (built slots persist between rounds)."""
        return len(self._actors)

    def prewarm(self, num_actors: int) -> float:
        """Build the actors of slots ``0..num_actors-1`` ahead of a round.

        Args:
            num_actors: How many slots to make ready, ``1..max_actors``; slots that
                already hold an actor are kept, so a later round of this size starts warm.

        Returns:
            Seconds it took.
        """
        num_actors = self._check_prewarm(num_actors)
        started = time.perf_counter()
        for slot in range(num_actors):
            if slot not in self._actors:
                self._build(slot)
        return time.perf_counter() - started

    def _run_slots(
        self,
        weights: Weights,
        num_actors: int,
        steps_per_actor: int,
        policy_version: int,
    ) -> RoundParts:
        """One after the other (or in lockstep), each slot really timed."""
        startup = {}
        for slot in range(num_actors):
            if slot not in self._actors:
                startup[slot] = self._build(slot)
        if self.batched:
            trajectories, timings, failures = self._run_batched(
                weights, num_actors, steps_per_actor, policy_version, startup
            )
        else:
            trajectories, timings, failures = {}, {}, []
            for slot in range(num_actors):
                self._run_one(
                    slot, weights, steps_per_actor, policy_version, startup,
                    trajectories, timings, failures,
                )  # fmt: skip
        return trajectories, timings, failures

    #: What :meth:`actor_state` pickles: a dict with this ``format``.
    ACTOR_STATE_FORMAT = "fleetgym-inprocess-actors"

    def actor_state(self) -> bytes | None:
        """Every built slot's actor, pickled, for a training checkpoint.

        Captures what the next round continues from, slot by slot: the env object (its
        episode, time limit and random generator), the sampling generator, the current
        observation, the episode return and length and the step count (see
        :meth:`~fleetgym.agents.rollout.RolloutWorker.get_state`), and the fleet's
        incarnation numbers and round count. A fleet restored from it
        (:meth:`restore_actor_state`) runs its next round exactly as this one would.

        The result is a ``pickle``: restore it only from a file you wrote yourself (your
        own run's checkpoint folder), never from one that came from elsewhere.

        Returns:
            The pickled state, or ``None`` when an actor cannot be captured: actors of a
            custom ``actor_factory``, or an env that pickles as its constructor arguments
            (Gymnasium's ``EzPickle``: the MuJoCo and Atari envs), which a pickle would
            rebuild at its start instead of where its episode is.

        Raises:
            FleetError: If the fleet is closed.
        """
        self._check_open()
        if self.actor_factory is not default_actor_factory:
            return None
        from fleetgym.agents.rollout import RolloutWorker

        workers = dict(sorted(self._actors.items()))
        if not all(isinstance(w, RolloutWorker) and w.state_saveable for w in workers.values()):
            return None
        state = {
            "format": self.ACTOR_STATE_FORMAT,
            "version": 1,
            "workload": self.workload.name,
            "seed": self.seed,
            "incarnations": dict(self.incarnations),
            "rounds_run": self.rounds_run,
            "slots": {
                slot: worker.get_state()  # type: ignore[attr-defined]
                for slot, worker in workers.items()
            },
        }
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)

    def restore_actor_state(self, data: bytes) -> None:
        """Take back what :meth:`actor_state` returned; the next round continues from it.

        The actors the fleet holds are closed and replaced by the saved ones; slots the
        saved fleet had not built stay unbuilt. Everything is checked before anything is
        applied.

        ``data`` is unpickled: pass only bytes from a file you wrote yourself (your own
        run's checkpoint folder), never ones read from a network or another user.

        Args:
            data: The bytes :meth:`actor_state` returned, from a fleet of this workload and
                seed with at least as many slots as the saved one built.

        Raises:
            TypeError: If ``data`` is not ``bytes``.
            ValueError: If it is not such a state (not a pickle of one, another workload
                or seed, a slot beyond ``max_actors``, a worker state that does not fit),
                or the fleet has a custom ``actor_factory``.
            FleetError: If the fleet is closed.
        """
        self._check_open()
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"data: expected bytes, actual {type(data).__name__}")
        if self.actor_factory is not default_actor_factory:
            raise ValueError(
                "actor state: expected a fleet of the default actors, actual a custom actor_factory"
            )
        try:
            state = pickle.loads(data)
        except Exception as exc:  # pickle raises many types on foreign bytes
            raise ValueError(
                f"actor state: expected a pickle of an InProcessFleet's actors, actual bytes "
                f"that do not unpickle ({type(exc).__name__})"
            ) from None
        if not isinstance(state, dict) or state.get("format") != self.ACTOR_STATE_FORMAT:
            raise ValueError(
                f"actor state: expected format {self.ACTOR_STATE_FORMAT!r}, actual "
                f"{type(state).__name__ if not isinstance(state, dict) else state.get('format')!r}"
            )
        if state.get("version") != 1:
            raise ValueError(f"actor state: expected version 1, actual {state.get('version')!r}")
        for key, own in (("workload", self.workload.name), ("seed", self.seed)):
            if state.get(key) != own:
                raise ValueError(f"actor state: {key}: expected {own!r}, actual {state.get(key)!r}")
        incarnations, slots = state.get("incarnations"), state.get("slots")
        if not isinstance(incarnations, dict) or not isinstance(slots, dict):
            raise ValueError("actor state: expected dicts of incarnations and slots")
        for slot, number in incarnations.items():
            if not isinstance(slot, int) or not isinstance(number, int) or slot < 0 or number < 0:
                raise ValueError("actor state: incarnations: expected slot -> count >= 0")
        for slot in slots:
            if not isinstance(slot, int) or not 0 <= slot < self.max_actors:
                raise ValueError(
                    f"actor state: expected slots 0..{self.max_actors - 1} (max_actors), "
                    f"actual slot {slot!r}"
                )
            if slot not in incarnations:
                raise ValueError(f"actor state: slot {slot}: expected its incarnation number")
        rounds_run = state.get("rounds_run")
        if not isinstance(rounds_run, int) or rounds_run < 0:
            raise ValueError(
                f"actor state: rounds_run: expected an int >= 0, actual {rounds_run!r}"
            )
        from fleetgym.agents.rollout import RolloutWorker

        built: dict[int, RolloutWorker] = {}
        try:
            for slot, worker_state in sorted(slots.items()):
                worker = RolloutWorker(self.workload, slot, self.seed, incarnations[slot])
                built[slot] = worker
                worker.set_state(worker_state)
        except Exception:
            for worker in built.values():
                worker.close()
            raise
        for slot in list(self._actors):
            self._discard(slot)
        self._actors.update(built)
        self.incarnations = dict(incarnations)
        self.rounds_run = rounds_run

    def close(self) -> None:
        """Close every actor's environment (idempotent; one that fails to close is logged)."""
        for slot in list(self._actors):
            self._discard(slot)
        super().close()

    # -- internals ------------------------------------------------------------------------
    def _discard(self, slot: int) -> None:
        """Close and forget a slot's actor, so its next round starts a new incarnation.

        A faulted actor may hold a half-stepped environment: like a crashed worker
        process, it is never reused.
        """
        old = self._actors.pop(slot, None)
        if old is not None and callable(getattr(old, "close", None)):
            try:
                old.close()  # type: ignore[attr-defined]
            except Exception:  # a broken actor's env may fail to close too
                logger.debug("closing the actor of slot %d failed", slot, exc_info=True)

    def _fault_of(self, exc: Exception, slots: list[int]) -> tuple[str, str]:
        """The fault kind and message of a rollout that raised ``exc``.

        A timed-out rollout's thread still holds its actors: they are forgotten without
        being closed, never reused.
        """
        if isinstance(exc, TimeoutError):
            for slot in slots:
                self._actors.pop(slot, None)
            return "timeout", self._late_message(starting=False)
        return "error", f"{type(exc).__name__}: {exc}"

    def _build(self, slot: int) -> float:
        """(Re)build a slot's actor; returns its measured start-up time.

        Raises:
            FleetError: If the build takes longer than ``startup_timeout``.
        """
        self._discard(slot)
        incarnation = self._next_incarnation(slot)
        started = time.perf_counter()
        try:
            self._actors[slot] = call_bounded(
                lambda: self.actor_factory(self.workload, slot, self.seed, incarnation),
                self.startup_timeout,
                "startup_timeout",
                f"start of actor {slot}",
            )
        except TimeoutError as exc:
            raise FleetError(f"actor {slot}: {exc}") from exc
        return time.perf_counter() - started

    def _run_one(
        self,
        slot: int,
        weights: Weights,
        steps: int,
        policy_version: int,
        startup: dict[int, float],
        trajectories: dict[int, Trajectory],
        timings: dict[int, ActorTiming],
        failures: list[ActorFailure],
    ) -> None:
        progress = SlotProgress()
        while True:
            cpu_started = time.process_time()
            compute_started = time.perf_counter()
            actor = self._actors[slot]
            try:
                trajectory = call_bounded(
                    functools.partial(actor.rollout, weights, steps, policy_version),
                    self.actor_timeout,
                    "actor_timeout",
                    f"rollout of actor {slot}",
                )
            except Exception as exc:
                kind, message = self._fault_of(exc, [slot])
                if not self._record_fault(
                    [slot], progress, kind, message, failures, f"actor {slot}"
                ):
                    self._discard(slot)
                    return
                startup[slot] = self._build(slot)
                continue
            compute_s = time.perf_counter() - compute_started
            progress.mark_rerun()
            trajectories[slot] = trajectory
            timings[slot] = ActorTiming(
                actor_id=slot,
                startup_s=startup.get(slot, 0.0),
                compute_s=compute_s,
                transfer_s=0.0,  # nothing is serialised in-process
                cold_start=slot in startup,
                num_steps=len(trajectory),
                cpu_s=time.process_time() - cpu_started,
            )
            return

    def _run_batched(
        self,
        weights: Weights,
        num_actors: int,
        steps: int,
        policy_version: int,
        startup: dict[int, float],
    ) -> tuple[dict[int, Trajectory], dict[int, ActorTiming], list[ActorFailure]]:
        from fleetgym.agents.rollout import rollout_many

        slots = list(range(num_actors))
        failures: list[ActorFailure] = []
        progress = SlotProgress()
        while True:
            cpu_started = time.process_time()
            compute_started = time.perf_counter()
            actors = [self._actors[s] for s in slots]
            try:
                batch = call_bounded(
                    functools.partial(rollout_many, actors, weights, steps, policy_version),  # type: ignore[arg-type]
                    self.actor_timeout,
                    "actor_timeout",
                    f"lockstep rollout of actors 0..{num_actors - 1}",
                )
            except Exception as exc:
                # The lockstep step cannot tell which slot broke it: every slot is
                # rebuilt (its env may be half-stepped) and the whole batch re-run.
                kind, message = self._fault_of(exc, slots)
                message = f"{message} (lockstep batch of {num_actors})"
                if not self._record_fault(
                    slots, progress, kind, message, failures, "lockstep batch"
                ):
                    for slot in slots:
                        self._discard(slot)
                    return {}, {}, failures
                for slot in slots:
                    startup[slot] = self._build(slot)
                continue
            compute_s = (time.perf_counter() - compute_started) / num_actors
            cpu_s = (time.process_time() - cpu_started) / num_actors
            progress.mark_rerun()
            trajectories = dict(zip(slots, batch, strict=True))
            timings = {
                slot: ActorTiming(
                    actor_id=slot,
                    startup_s=startup.get(slot, 0.0),
                    compute_s=compute_s,
                    transfer_s=0.0,
                    cold_start=slot in startup,
                    num_steps=len(trajectories[slot]),
                    cpu_s=cpu_s,
                )
                for slot in slots
            }
            return trajectories, timings, failures
