"""The Ray actors of :class:`~fleetgym.agents.fleet.ray_backend.RayFleet` and where slots run.

:class:`RaySlotPool` holds the fleet's Ray actors, one per slot: starting an actor (a new
incarnation of its slot), marking it ready, killing it, submitting a slot's rollout to
its own actor or, when the cluster has no room for it (a lost node), to a surviving actor
that it then shares, and moving such a slot back to an own actor once there is room
again; also ``close()``. The round driver (waiting for results, timings, faults, retries
and timeouts) is :class:`~fleetgym.agents.fleet.ray_backend.RayFleet`, which connects to
the cluster in its constructor; the actor body is :mod:`fleetgym.agents.fleet.ray_actor`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from fleetgym.agents.fleet.base import SlotProgress, SupervisedFleetBase
from fleetgym.agents.fleet.ray_cluster import alive_node_resources, placeable

logger = logging.getLogger(__name__)


@dataclass
class _RaySlot:
    handle: Any
    incarnation: int
    created: float
    ready_ref: Any
    ready: bool = False
    startup_s: float = 0.0
    pid: int | None = None


@dataclass
class _Progress(SlotProgress):
    ref: Any = None
    submitted: float = 0.0
    host: int = -1  # the slot whose Ray actor runs this rollout (itself unless shared)
    queued: int = 1  # rollouts of this round on that actor up to and including this one
    guest_cold: bool = False


class RaySlotPool(SupervisedFleetBase):
    """The Ray actors behind :class:`~fleetgym.agents.fleet.ray_backend.RayFleet`, by slot.

    Models which Ray actor runs each slot's rollouts: its own, or, after a node is lost
    and the cluster has no room for a replacement, a surviving actor it shares. It runs
    no round itself; :class:`~fleetgym.agents.fleet.ray_backend.RayFleet` subclasses it,
    sets the attributes declared here in its constructor and drives the rounds.
    """

    _ray: Any  # the ray module
    _slots: dict[int, _RaySlot]
    _shared: dict[int, tuple[int, int]]
    _queued: dict[int, int]
    owns_ray: bool
    actor_options: dict[str, Any]
    _request: dict[str, float]
    _remote_cls: Any

    @property
    def num_workers(self) -> int:
        """Ray actors held (active and parked)."""
        return len(self._slots)

    @property
    def capacity(self) -> int:
        """Ray actors this fleet holds now; below the slots used once a node is lost."""
        return len(self._slots)

    @property
    def shared_slots(self) -> dict[int, int]:
        """``{slot: host slot}`` of slots whose rollouts run on another slot's actor."""
        return {slot: host for slot, (host, _) in sorted(self._shared.items())}

    def worker_pids(self) -> dict[int, int]:
        """``{slot: pid}`` of the ready actors (same node only; for fault tests)."""
        return {s: a.pid for s, a in sorted(self._slots.items()) if a.ready and a.pid}

    def close(self) -> None:
        """Kill every actor; shut Ray down if this fleet started it (idempotent)."""
        if self.closed:
            return
        for slot in list(self._slots):
            self._kill(slot)
        if self.owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
        super().close()

    def _reroute_unplaceable(
        self, progress: dict[int, _Progress], pending: set[int], args: tuple[Any, ...]
    ) -> None:
        """Starting actors the cluster has no room for (a lost node): share a live one."""
        starting = [s for s in sorted(pending) if progress[s].state == "starting"]
        own_starting = [s for s in starting if progress[s].host == s]
        if not own_starting:
            return
        excess = len(self._slots) - self._room()
        for slot in reversed(own_starting[-excess:] if excess > 0 else []):
            if self._pick_host(exclude=slot) is None:
                return
            self._kill(slot)
            self._dispatch(slot, progress[slot], args)

    def _room(self) -> int:
        """How many actors of ``actor_options`` the cluster's alive nodes hold."""
        return placeable(alive_node_resources(self._ray.nodes()), self._request)

    def _pick_host(self, exclude: int) -> int | None:
        """The live actor with the fewest rollouts queued this round (ready ones first)."""
        hosts = [s for s in self._slots if s != exclude]
        if not hosts:
            return None
        return min(hosts, key=lambda s: (not self._slots[s].ready, self._queued.get(s, 0), s))

    def _dispatch(
        self, slot: int, p: _Progress, args: tuple[Any, ...], *, round_start: bool = False
    ) -> None:
        """Submit ``slot``'s rollout: to its own actor, started if missing and the cluster
        has room, else to a live actor that it shares."""
        p.guest_cold = False
        guest = None
        if slot not in self._slots:
            shared = self._shared.get(slot)
            if shared is not None and shared[0] in self._slots and round_start:
                if len(self._slots) < self._room():  # room again: back to an own actor
                    self._slots[shared[0]].handle.release.remote(slot)
                    shared = None
                    del self._shared[slot]
            if shared is None or shared[0] not in self._slots:
                self._shared.pop(slot, None)
                host = self._pick_host(exclude=slot)
                if host is None or len(self._slots) < self._room():
                    self._start(slot)
                    p.cold = True
                else:
                    shared = self._shared[slot] = (host, self._next_incarnation(slot))
                    p.guest_cold = True
                    logger.warning(
                        "the Ray cluster has no room for actor %d (room for %d actors of %s): "
                        "its rollouts run on actor %d, after that actor's own; the fleet now "
                        "has %d Ray actors for its slots %s",
                        slot, self._room(), self.actor_options, host, len(self._slots),
                        sorted({*self._slots, *self._shared}),
                    )  # fmt: skip
            if shared is not None:
                guest = (self.actor_factory, self.workload, slot, self.seed, shared[1])
        p.host = slot if guest is None else self._shared[slot][0]
        actor = self._slots[p.host]
        self._queued[p.host] = p.queued = self._queued.get(p.host, 0) + 1
        # Ray runs an actor's calls in order: the rollout may wait for the actor's
        # construction (its clock starts at ready) or for the rollouts queued before it.
        p.ref = actor.handle.rollout.remote(*args, guest)
        p.submitted = time.perf_counter()
        p.state = "running" if actor.ready else "starting"
        p.deadline = self._deadline(p.submitted, starting=not actor.ready, queued=p.queued)

    def _start(self, slot: int) -> _RaySlot:
        incarnation = self._next_incarnation(slot)
        handle = self._remote_cls.options(
            max_restarts=0, max_task_retries=0, **self.actor_options
        ).remote(self.actor_factory, self.workload, slot, self.seed, incarnation)
        actor = _RaySlot(handle, incarnation, time.perf_counter(), handle.ready.remote())
        self._slots[slot] = actor
        return actor

    def _mark_ready(self, actor: _RaySlot, info: tuple[int, float]) -> None:
        actor.ready = True
        actor.pid = int(info[0])
        actor.startup_s = time.perf_counter() - actor.created

    def _kill(self, slot: int) -> None:
        """Kill ``slot``'s own actor; the slots it hosted lose their guest actors."""
        actor = self._slots.pop(slot, None)
        for guest in [g for g, (host, _) in self._shared.items() if host == slot]:
            del self._shared[guest]
        if actor is not None:
            try:
                self._ray.kill(actor.handle, no_restart=True)
            except Exception:  # already dead
                logger.debug("ray.kill of slot %d failed", slot, exc_info=True)
