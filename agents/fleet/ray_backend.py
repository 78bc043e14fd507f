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

Ray is optional (``pip install fleetgym[ray]``) and imported only when a RayFleet is built.
If Ray is not initialised yet, the fleet starts a local instance (:func:`init_local_ray`:
servers bound to 127.0.0.1) and shuts it down on ``close``; connect to a
cluster by calling ``ray.init(address=...)`` yourself first, or passing ``address``.

Timing: ``compute_s``/``cpu_s`` are measured inside the actor; ``transfer_s`` is the
``ray.put`` of the weights plus what the round trip took beyond the actor's own work
(scheduling, argument fetch, result transfer), which is Ray's overhead per call.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from fleetgym.agents.fleet.base import ActorFactory, RoundParts, SlotProgress, SupervisedFleetBase
from fleetgym.agents.types import ActorFailure, ActorTiming, Trajectory, Weights
from fleetgym.errors import FleetError

logger = logging.getLogger(__name__)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "RayFleet needs Ray: expected the optional extra installed "
            "(pip install 'fleetgym[ray]'), actual: ray is not importable"
        ) from exc
    return ray


def init_local_ray(**kwargs: Any) -> None:
    """Start a single-machine Ray instance whose servers listen on 127.0.0.1 only.

    ``ray.init`` on Linux replaces a loopback ``_node_ip_address`` by the machine's
    routable address so other nodes can join; a local fleet needs no other node, so this
    switches that off for the head node and the processes it spawns.

    Args:
        **kwargs: Passed to ``ray.init`` (e.g. ``num_cpus=2``, ``include_dashboard=False``).

    Raises:
        ImportError: If Ray is not installed.
    """
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray = _import_ray()
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False
    options: dict[str, Any] = {"include_dashboard": False, "_node_ip_address": "127.0.0.1"}
    options.update(kwargs)
    ray.init(**options)


class RayActorHost:
    """The body of one Ray actor: builds the slot's actor, runs whole rollouts.

    Plain class: :class:`RayFleet` turns it into a Ray actor with ``ray.remote``, so
    importing this module does not import Ray.
    """

    def __init__(
        self, factory: ActorFactory, workload: Any, slot: int, seed: int, incarnation: int
    ) -> None:
        import torch

        torch.set_num_threads(1)  # one core per actor, as the fleet models it
        started = time.perf_counter()
        self.actor = factory(workload, slot, seed, incarnation)
        self.build_s = time.perf_counter() - started

    def ready(self) -> tuple[int, float]:
        """``(pid, seconds the actor took to build)``."""
        return os.getpid(), self.build_s

    def rollout(
        self, weights: Weights, steps: int, policy_version: int
    ) -> tuple[Trajectory, float, float]:
        """One rollout; returns ``(trajectory, compute_s, cpu_s)``."""
        cpu_started = time.process_time()
        started = time.perf_counter()
        trajectory = self.actor.rollout(weights, steps, policy_version)
        return trajectory, time.perf_counter() - started, time.process_time() - cpu_started


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


class RayFleet(SupervisedFleetBase):
    """A fleet of Ray actors, one per slot, with the same round interface as the others.

    Models actors spread over a Ray cluster (one machine or many): weights go out once per
    round through the object store, each actor runs its whole rollout with its own policy
    copy, crashed or hung actors are replaced and re-run within the round.

    Example:
        >>> import ray  # doctest: +SKIP
        >>> from fleetgym.agents.fleet import RayFleet  # doctest: +SKIP
        >>> from fleetgym.agents.workloads import get_workload  # doctest: +SKIP
        >>> ray.init(num_cpus=2, include_dashboard=False)  # doctest: +SKIP
        >>> weights = get_workload("CartPole-v1").make_policy().get_weights()  # doctest: +SKIP
        >>> with RayFleet("CartPole-v1", max_actors=2) as fleet:  # doctest: +SKIP
        ...     result = fleet.run_round(weights, num_actors=2, steps_per_actor=16)
        >>> [t.obs.shape for t in result.trajectories]  # doctest: +SKIP
        [(16, 4), (16, 4)]

    Args:
        workload: A workload name or :class:`~fleetgym.agents.workloads.Workload`.
        max_actors: Largest fleet a round may ask for.
        seed: Fleet seed; slot ``i``'s ``k``-th incarnation seeds from ``(seed, i, k)``.
        actor_timeout: Seconds a slot may take to finish a rollout before it is killed and
            replaced; None waits forever (crashes are still detected).
        startup_timeout: The same for an actor to start (Ray actor start-ups are slow).
        max_retries: Re-runs of a faulted slot within a round.
        on_incomplete: ``"partial"`` or ``"raise"`` when a slot fails after its retries.
        actor_options: Ray actor options (``num_cpus``, ``resources``, ...); default one
            CPU per actor, so Ray places at most one actor per core.
        address: Ray cluster address, used only if Ray is not initialised yet.
        init_kwargs: Extra ``ray.init`` arguments, used only if this fleet starts Ray.
        actor_factory: Builds a slot's actor (default: the real RolloutWorker).

    Raises:
        ImportError: If Ray is not installed.
        TypeError, ValueError: On an argument of the wrong type or range.
    """

    def __init__(
        self,
        workload: Any,
        *,
        max_actors: int = 32,
        seed: int = 0,
        actor_timeout: float | None = 300.0,
        startup_timeout: float | None = 300.0,
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
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            kwargs.update(init_kwargs or {})
            if address is None:
                init_local_ray(**kwargs)
            else:
                ray.init(address=address, **kwargs)
        self.actor_options = {"num_cpus": 1, **(actor_options or {})}
        self._remote_cls = ray.remote(RayActorHost)
        self._slots: dict[int, _RaySlot] = {}

    # -- public ---------------------------------------------------------------------------
    @property
    def num_workers(self) -> int:
        """Ray actors held (active and parked)."""
        return len(self._slots)

    def worker_pids(self) -> dict[int, int]:
        """``{slot: pid}`` of the ready actors (same node only; for fault tests)."""
        return {s: a.pid for s, a in sorted(self._slots.items()) if a.ready and a.pid}

    def prewarm(self, num_actors: int) -> float:
        """Start slots ``0..num_actors-1`` that have no actor and wait until they are ready.

        Returns:
            Seconds it took.

        Raises:
            FleetError: If an actor fails to start within ``startup_timeout``.
        """
        num_actors = self._check_prewarm(num_actors)
        started = time.perf_counter()
        for slot in range(num_actors):
            if slot not in self._slots:
                self._start(slot)
        for slot in range(num_actors):
            actor = self._slots[slot]
            if actor.ready:
                continue
            try:
                self._mark_ready(
                    actor, self._ray.get(actor.ready_ref, timeout=self.startup_timeout)
                )
            except Exception as exc:
                self._kill(slot)
                raise FleetError(f"prewarm: actor {slot} failed to start: {exc}") from exc
        return time.perf_counter() - started

    def resize(self, num_actors: int) -> float:
        """Make slots ``0..num_actors-1`` ready; actors above stay parked.

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
        """One Ray actor per slot; faults are replaced and re-run."""
        ray = self._ray
        round_started = time.perf_counter()
        weights_ref = ray.put(weights)
        put_s = time.perf_counter() - round_started
        args = (weights_ref, steps_per_actor, policy_version)

        progress: dict[int, _Progress] = {}
        for slot in range(num_actors):
            actor = self._slots.get(slot)
            progress[slot] = _Progress(cold=actor is None or not actor.ready)
            if actor is None:
                actor = self._start(slot)
            self._submit(slot, progress[slot], args)

        trajectories: dict[int, Trajectory] = {}
        timings: dict[int, ActorTiming] = {}
        failures: list[ActorFailure] = []
        pending = set(progress)
        try:
            while pending:
                refs = {}
                for slot in pending:
                    p = progress[slot]
                    refs[p.ref] = slot
                    actor = self._slots[slot]
                    if not actor.ready:
                        refs[actor.ready_ref] = slot
                timeout = None
                soonest = min(progress[s].deadline for s in pending)
                if soonest != float("inf"):
                    timeout = max(0.0, soonest - time.perf_counter())
                done, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
                for ref in done:
                    slot = refs[ref]
                    p, actor = progress[slot], self._slots[slot]
                    if ref is actor.ready_ref and not actor.ready:
                        try:
                            self._mark_ready(actor, ray.get(ref))
                            p.state = "running"
                            p.deadline = self._deadline(time.perf_counter())
                        except Exception as exc:
                            if not self._fault(slot, p, exc, failures, args):
                                pending.discard(slot)
                        continue
                    try:
                        trajectory, compute_s, cpu_s = ray.get(ref)
                    except Exception as exc:
                        if not self._fault(slot, p, exc, failures, args):
                            pending.discard(slot)
                        continue
                    received = time.perf_counter()
                    if not actor.ready:  # its ready() resolved first; noticed only now
                        self._mark_ready(actor, ray.get(actor.ready_ref))
                    begun = (
                        max(p.submitted, actor.created + actor.startup_s) if p.cold else p.submitted
                    )
                    timings[slot] = ActorTiming(
                        actor_id=slot,
                        startup_s=actor.startup_s if p.cold else 0.0,
                        compute_s=float(compute_s),
                        transfer_s=put_s + max(0.0, received - begun - float(compute_s)),
                        cold_start=p.cold,
                        num_steps=len(trajectory),
                        cpu_s=float(cpu_s),
                    )
                    trajectories[slot] = trajectory
                    p.mark_rerun()
                    pending.discard(slot)
                now = time.perf_counter()
                for slot in list(pending):
                    p = progress[slot]
                    if now >= p.deadline:
                        late = TimeoutError(
                            self._late_message(starting=not self._slots[slot].ready)
                        )
                        if not self._fault(slot, p, late, failures, args):
                            pending.discard(slot)
        except BaseException:
            # Interrupted (Ctrl-C, a bug): an actor still running this round would run
            # the stale rollout before the next round's (Ray queues its calls), so the
            # pending ones are killed; their slots restart cold next time.
            for slot in pending:
                self._kill(slot)
            raise
        del weights_ref
        return trajectories, timings, failures

    def close(self) -> None:
        """Kill every actor; shut Ray down if this fleet started it (idempotent)."""
        if self.closed:
            return
        for slot in list(self._slots):
            self._kill(slot)
        if self.owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
        super().close()

    # -- internals ------------------------------------------------------------------------
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

    def _submit(self, slot: int, p: _Progress, args: tuple[Any, ...]) -> None:
        actor = self._slots[slot]
        # Ray runs an actor's calls in order, so the rollout may be queued behind the
        # actor's construction; its deadline starts once the actor is ready.
        p.ref = actor.handle.rollout.remote(*args)
        p.submitted = time.perf_counter()
        p.state = "running" if actor.ready else "starting"
        p.deadline = self._deadline(p.submitted, starting=not actor.ready)

    def _kill(self, slot: int) -> None:
        actor = self._slots.pop(slot, None)
        if actor is not None:
            try:
                self._ray.kill(actor.handle, no_restart=True)
            except Exception:  # already dead
                logger.debug("ray.kill of slot %d failed", slot, exc_info=True)

    def _fault(
        self,
        slot: int,
        p: _Progress,
        exc: BaseException,
        failures: list[ActorFailure],
        args: tuple[Any, ...],
    ) -> bool:
        """Record a fault, replace the actor if a retry is left; True if the slot goes on."""
        ray_exceptions = self._ray.exceptions
        if isinstance(exc, TimeoutError | ray_exceptions.GetTimeoutError):
            kind = "timeout"
        elif isinstance(exc, ray_exceptions.RayActorError):
            kind = "crash"
        else:
            kind = "error"
        self._kill(slot)
        if not self._record_fault([slot], p, kind, str(exc), failures, f"ray actor {slot}"):
            return False
        self._start(slot)
        self._submit(slot, p, args)
        return True
