"""A fleet of Ray actors: the same rounds as the other backends, on more than one machine.

Each slot is one Ray actor process holding one actor (a
:class:`~fleetgym.agents.rollout.RolloutWorker`). Per round the weights are put in Ray's
object store once (``ray.put``) and every actor receives the same reference; trajectories
come back through the object store (numpy arrays, zero-copy on the same node). Faults
follow :class:`~fleetgym.agents.fleet.process.ProcessFleet`: an actor that dies
(``crash``), raises (``error``) or exceeds ``actor_timeout`` (``timeout``; it is killed)
is replaced by a new incarnation of its slot and its rollout run again, up to
``max_retries`` times, so each slot contributes exactly one trajectory or is reported
missing. Shrinking parks actors (they stay alive and keep their environments); growing
starts only missing slots.

Which cluster: if Ray is not initialised yet and no ``address`` is given, the fleet starts
a local cluster of its own (:func:`init_local_ray`: ``address="local"``, servers bound to
127.0.0.1, never an older cluster found on the machine) and shuts it down on ``close``;
its actors get a fraction of a CPU each, so that ``max_actors`` of them fit. Otherwise it
joins the cluster (``address``, or the one ``ray.init`` connected to), logs its address
and refuses at once, before any round, a fleet the cluster cannot place
(:mod:`~fleetgym.agents.fleet.ray_cluster`).

Node loss: a replacement that the cluster has no room for (its node is gone and the
surviving actors hold the remaining resources) is not waited for. The slot's rollout runs
on a surviving actor instead, after that actor's own; the slot stays *shared* there
(:attr:`RayFleet.shared_slots`, :attr:`RayFleet.capacity`) until the cluster has room again.

Timing: ``compute_s``/``cpu_s`` are measured inside the actor; ``transfer_s`` is the
``ray.put`` of the weights plus what the round trip took beyond the actor's own work
(scheduling, argument fetch, result transfer; for a shared slot also its wait in line).

This module is the round driver; the actors by slot (starting, killing, sharing after a
node loss) are in :mod:`fleetgym.agents.fleet.ray_slots`.

Ray is optional (``pip install fleetgym[ray]``) and imported only when a RayFleet is built.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from fleetgym.agents.fleet.base import (
    DEFAULT_ACTOR_TIMEOUT_S,
    DEFAULT_STARTUP_TIMEOUT_S,
    ActorFactory,
    RoundParts,
)
from fleetgym.agents.fleet.ray_actor import (
    RayActorHost,
    _import_ray,
    check_reachable,
    init_local_ray,
)
from fleetgym.agents.fleet.ray_cluster import (
    actor_request,
    alive_node_resources,
    fractional_cpus,
    placement_error,
)
from fleetgym.agents.fleet.ray_slots import RaySlotPool, _Progress, _RaySlot
from fleetgym.agents.fleet.waiting import WaitLog
from fleetgym.agents.types import ActorFailure, ActorTiming, Trajectory, Weights
from fleetgym.errors import FleetError

__all__ = ["RayFleet"]

logger = logging.getLogger(__name__)

#: Longest a round's ``ray.wait`` blocks before it looks at the clock and the cluster.
WAIT_POLL_S = 1.0


class RayFleet(RaySlotPool):
    """A fleet of Ray actors, one per slot, with the same round interface as the others.

    Models actors spread over a Ray cluster (one machine or many): weights go out once per
    round through the object store, each actor runs its whole rollout with its own policy
    copy, crashed or hung actors are replaced and re-run within the round, and slots
    whose node is lost share a surviving actor. See the module docstring.

    Args:
        workload: A workload name or :class:`~fleetgym.agents.workloads.Workload`.
        max_actors: Largest fleet a round may ask for.
        seed: Fleet seed; slot ``i``'s ``k``-th incarnation seeds from ``(seed, i, k)``.
        actor_timeout: Seconds a rollout may take (``k`` times that for the ``k``-th in
            line on a shared actor) before its actor is killed and replaced; None waits
            forever (crashes are still detected).
        startup_timeout: Seconds an actor may take to be placed and started; Ray starts a
            few actor processes at a time, so the clock restarts whenever another actor of
            the fleet becomes ready (it bounds a stall, not a long queue).
        max_retries: Re-runs of a faulted slot within a round.
        on_incomplete: ``"partial"`` or ``"raise"`` when a slot fails after its retries.
        actor_options: Ray actor options (``num_cpus``, ``num_gpus``, ``memory``,
            ``resources``, ...). Default on a local cluster the fleet starts: ``num_cpus``
            of ``min(1, cpus / max_actors)``; on a cluster it joins: one CPU per actor.
        address: Ray cluster address to join (used only if Ray is not initialised yet);
            None or ``"local"`` starts a local cluster.
        init_kwargs: Extra ``ray.init`` arguments, used only if this fleet starts Ray
            (``num_cpus`` of a local cluster defaults to the machine's cores).
        actor_factory: Builds a slot's actor (default: the real RolloutWorker).

    Example:
        >>> from fleetgym.agents.fleet import RayFleet  # doctest: +SKIP
        >>> from fleetgym.agents.workloads import get_workload  # doctest: +SKIP
        >>> weights = get_workload("CartPole-v1").make_policy().get_weights()  # doctest: +SKIP
        >>> # A local 2-CPU cluster; 8 actors of 0.25 CPU each.
        >>> with RayFleet("CartPole-v1", max_actors=8, init_kwargs={"num_cpus": 2}) as fleet:  # doctest: +SKIP
        ...     result = fleet.run_round(weights, num_actors=8, steps_per_actor=16)
        >>> fleet.actor_options, len(result.trajectories)  # doctest: +SKIP
        ({'num_cpus': 0.25}, 8)

    Raises:
        ImportError: If Ray is not installed.
        TypeError, ValueError: On an argument of the wrong type or range.
        FleetError: If the cluster cannot place ``max_actors`` actors of
            ``actor_options`` (the message names the CPUs and the option that fits), or
            nothing answers at ``address`` (a ``host:port``, checked within 5 s).
    """

    def __init__(
        self,
        workload: Any,
        *,
        max_actors: int = 32,
        seed: int = 0,
        actor_timeout: float | None = DEFAULT_ACTOR_TIMEOUT_S,
        startup_timeout: float | None = DEFAULT_STARTUP_TIMEOUT_S,
        max_retries: int = 1,
        on_incomplete: str = "partial",
        actor_options: dict[str, Any] | None = None,
        address: str | None = None,
        init_kwargs: dict[str, Any] | None = None,
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
        for name, value in (("actor_options", actor_options), ("init_kwargs", init_kwargs)):
            if value is not None and not isinstance(value, dict):
                raise TypeError(f"{name}: expected a dict or None, actual {type(value).__name__}")
        if address is not None and not isinstance(address, str):
            raise TypeError(f"address: expected a str or None, actual {type(address).__name__}")
        self._ray = ray = _import_ray()
        self._slots: dict[int, _RaySlot] = {}
        #: Slots that run on another slot's actor: ``{slot: (host slot, incarnation)}``.
        self._shared: dict[int, tuple[int, int]] = {}
        self._queued: dict[int, int] = {}
        self.owns_ray = not ray.is_initialized()
        local = self.owns_ray and address in (None, "local")
        if self.owns_ray:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            kwargs.update(init_kwargs or {})
            if local:
                kwargs.setdefault("num_cpus", os.cpu_count() or 1)
                init_local_ray(**kwargs)
            else:
                check_reachable(address)
                ray.init(address=address, **kwargs)
        self.address = str(ray.get_runtime_context().gcs_address)
        nodes = alive_node_resources(ray.nodes())
        cpus = sum(node.get("CPU", 0.0) for node in nodes)
        options = dict(actor_options or {})
        if local:
            logger.info("started a local Ray cluster at %s with %g CPUs", self.address, cpus)
            if "num_cpus" not in options:
                options["num_cpus"] = fractional_cpus(cpus, self.max_actors)
                logger.info(
                    "Ray actors get num_cpus=%g each, so max_actors=%d fit the %g CPUs "
                    "(actor_options={'num_cpus': ...} sets it)",
                    options["num_cpus"], self.max_actors, cpus,
                )  # fmt: skip
        else:
            logger.info(
                "joined the Ray cluster at %s (%d node(s), %g CPUs)",
                self.address, len(nodes), cpus,
            )  # fmt: skip
            options.setdefault("num_cpus", 1)
        self.actor_options = options
        self._request = actor_request(options)
        error = placement_error(nodes, self._request, self.max_actors, self.address)
        if error is not None:
            if self.owns_ray:
                ray.shutdown()
            raise FleetError(error)
        self._remote_cls = ray.remote(RayActorHost)

    # -- public ---------------------------------------------------------------------------
    def prewarm(self, num_actors: int) -> float:
        """Start slots ``0..num_actors-1`` that have no actor and wait until they are ready.

        Args:
            num_actors: How many slots to make ready, ``1..max_actors``; a slot shared on
                a surviving actor after a node loss stays shared (not started here).

        Returns:
            Seconds it took.

        Raises:
            FleetError: If an actor fails to start, or is not placed and started within
                ``startup_timeout``.
        """
        num_actors = self._check_prewarm(num_actors)
        started = time.perf_counter()
        for slot in range(num_actors):
            if slot not in self._slots and slot not in self._shared:
                self._start(slot)
        waiting = {s for s in range(num_actors) if s in self._slots and not self._slots[s].ready}
        deadline = None if self.startup_timeout is None else started + self.startup_timeout
        wait_log = WaitLog("startup_timeout", self.startup_timeout, logger)
        while waiting:
            by_ref = {self._slots[s].ready_ref: s for s in waiting}
            left = None if deadline is None else deadline - time.perf_counter()
            done, _ = self._ray.wait(list(by_ref), num_returns=1, timeout=wait_log.timeout(left))
            for ref in done:
                slot = by_ref[ref]
                try:
                    self._mark_ready(self._slots[slot], self._ray.get(ref))
                except Exception as exc:
                    self._kill(slot)
                    raise FleetError(f"prewarm: actor {slot} failed to start: {exc}") from exc
                waiting.discard(slot)
                if self.startup_timeout is not None:  # progress: the others are queued
                    deadline = time.perf_counter() + self.startup_timeout
            if waiting and deadline is not None and time.perf_counter() >= deadline:
                for slot in waiting:
                    self._kill(slot)
                raise FleetError(
                    f"prewarm: expected Ray actors {sorted(waiting)} placed and started within "
                    f"startup_timeout={self.startup_timeout} s of the last one, actual not ready "
                    f"(the cluster "
                    f"has room for {self._room()} actors of {self.actor_options})"
                )
            wait_log.report(len(waiting), num_actors, "Ray actors to be placed and started")
        return time.perf_counter() - started

    def resize(self, num_actors: int) -> float:
        """Make slots ``0..num_actors-1`` ready; actors above stay parked.

        Args:
            num_actors: The fleet size to prepare for, ``1..max_actors`` (as
                :meth:`prewarm`: nothing is stopped).

        Returns:
            Seconds it took.
        """
        return self.prewarm(num_actors)

    def _run_slots(
        self,
        weights: Weights,
        num_actors: int,
        steps_per_actor: int,
        policy_version: int,
    ) -> RoundParts:
        """One Ray actor per slot; faults are replaced (or shared) and re-run."""
        ray = self._ray
        round_started = time.perf_counter()
        weights_ref = ray.put(weights)
        put_s = time.perf_counter() - round_started
        args = (weights_ref, steps_per_actor, policy_version)
        self._queued = {}
        progress: dict[int, _Progress] = {}
        for slot in range(num_actors):
            actor = self._slots.get(slot)
            progress[slot] = _Progress(
                cold=slot not in self._shared and not (actor and actor.ready)
            )
            self._dispatch(slot, progress[slot], args, round_start=True)

        trajectories: dict[int, Trajectory] = {}
        timings: dict[int, ActorTiming] = {}
        failures: list[ActorFailure] = []
        pending = set(progress)
        start_log = WaitLog("startup_timeout", self.startup_timeout, logger)
        run_log = WaitLog("actor_timeout", self.actor_timeout, logger)
        try:
            while pending:
                refs: dict[Any, int] = {}
                for slot in pending:
                    p = progress[slot]
                    refs[p.ref] = slot
                    host = self._slots.get(p.host)
                    if host is not None and not host.ready:
                        refs[host.ready_ref] = p.host
                soonest = min(progress[s].deadline for s in pending)
                timeout = min(WAIT_POLL_S, max(0.0, soonest - time.perf_counter()))
                done, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
                if done:  # and whatever else is ready by now
                    done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
                for ref in done:
                    slot = refs[ref]
                    host = self._slots.get(slot)
                    if host is not None and ref == host.ready_ref:
                        self._on_ready(slot, progress, pending, failures, args)
                    elif slot in pending and ref == progress[slot].ref:
                        self._on_result(
                            slot, progress[slot], ref, put_s, trajectories, timings, failures, args
                        )
                        if slot in trajectories or progress[slot].ref is None:
                            pending.discard(slot)
                self._check_late(progress, pending, failures, args)
                self._reroute_unplaceable(progress, pending, args)
                starting = [s for s in pending if progress[s].state == "starting"]
                if starting:
                    start_log.report(len(starting), num_actors, "Ray actors to be placed")
                else:
                    run_log.report(len(pending), num_actors, "rollouts on Ray actors")
        except BaseException:
            # Interrupted (Ctrl-C, a bug): an actor still running this round would run
            # the stale rollout before the next round's (Ray queues its calls), so the
            # actors of the pending ones are killed; their slots restart cold next time.
            for slot in pending:
                self._kill(progress[slot].host)
            raise
        del weights_ref
        return trajectories, timings, failures

    # -- the round's events ---------------------------------------------------------------
    def _on_ready(
        self,
        host_slot: int,
        progress: dict[int, _Progress],
        pending: set[int],
        failures: list[ActorFailure],
        args: tuple[Any, ...],
    ) -> None:
        """A starting actor answered ``ready()``: its rollouts' clocks start now."""
        host = self._slots[host_slot]
        try:
            self._mark_ready(host, self._ray.get(host.ready_ref))
        except Exception as exc:
            for slot in [s for s in pending if progress[s].host == host_slot]:
                if not self._fault(slot, progress[slot], exc, failures, args):
                    pending.discard(slot)
            return
        now = time.perf_counter()
        for slot in pending:
            p = progress[slot]
            if p.host == host_slot and p.state == "starting":
                p.state = "running"
                p.deadline = self._deadline(now, queued=p.queued)
            elif p.state == "starting":
                # Ray starts a few actor processes at a time: the others are not stuck
                # while the fleet's actors keep becoming ready.
                p.deadline = max(p.deadline, self._deadline(now, starting=True))

    def _on_result(
        self,
        slot: int,
        p: _Progress,
        ref: Any,
        put_s: float,
        trajectories: dict[int, Trajectory],
        timings: dict[int, ActorTiming],
        failures: list[ActorFailure],
        args: tuple[Any, ...],
    ) -> None:
        """A rollout ended: keep its trajectory, or count the fault (``p.ref`` None: gave up)."""
        try:
            trajectory, compute_s, cpu_s, build_s = self._ray.get(ref)
        except Exception as exc:
            if not self._fault(slot, p, exc, failures, args):
                p.ref = None
            return
        received = time.perf_counter()
        host = self._slots.get(p.host)
        startup_s = 0.0
        begun = p.submitted
        if host is not None and not host.ready:  # its ready() resolved first; seen only now
            self._mark_ready(host, self._ray.get(host.ready_ref))
        if p.host != slot:
            startup_s = float(build_s) if p.guest_cold else 0.0
        elif p.cold and host is not None:
            startup_s = host.startup_s
            begun = max(p.submitted, host.created + host.startup_s)
        timings[slot] = ActorTiming(
            actor_id=slot,
            startup_s=startup_s,
            compute_s=float(compute_s),
            transfer_s=put_s + max(0.0, received - begun - float(compute_s) - float(build_s)),
            cold_start=p.cold or p.guest_cold,
            num_steps=len(trajectory),
            cpu_s=float(cpu_s),
        )
        trajectories[slot] = trajectory
        p.mark_rerun()

    def _check_late(
        self,
        progress: dict[int, _Progress],
        pending: set[int],
        failures: list[ActorFailure],
        args: tuple[Any, ...],
    ) -> None:
        now = time.perf_counter()
        for slot in sorted(pending):
            p = progress[slot]
            if slot in pending and now >= p.deadline:
                late = TimeoutError(self._late_message(starting=p.state == "starting"))
                if not self._fault(slot, p, late, failures, args):
                    pending.discard(slot)

    # -- internals ------------------------------------------------------------------------
    def _fault(
        self,
        slot: int,
        p: _Progress,
        exc: BaseException,
        failures: list[ActorFailure],
        args: tuple[Any, ...],
    ) -> bool:
        """Record a fault, replace the actor if a retry is left; True if the slot goes on.

        A shared slot's crash or time-out is its host's (killed too); its error drops
        only the guest actor.
        """
        ray_exceptions = self._ray.exceptions
        if isinstance(exc, TimeoutError | ray_exceptions.GetTimeoutError):
            kind = "timeout"
        elif isinstance(exc, ray_exceptions.RayActorError):
            kind = "crash"
        else:
            kind = "error"
        if p.host == slot or kind != "error":
            self._kill(p.host)
        self._shared.pop(slot, None)
        if not self._record_fault([slot], p, kind, str(exc), failures, f"ray actor {slot}"):
            return False
        self._dispatch(slot, p, args)
        return True
