"""Asynchronous actor slots as Ray actors
(:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`, ``backend="ray"``).

With ``backend="ray"`` each actor slot is one Ray actor (a
:class:`~fleetgym.agents.fleet.ray_actor.RayActorHost`, the synchronous Ray fleet's actor
body) on any node of a Ray cluster; the slot's thread in the learner's process only waits
for its rollouts. :class:`RayActorGroup` is the cluster side, shared by every slot: it
joins a cluster (``address``, or the one ``ray.init`` already connected to) or starts a
local one on 127.0.0.1 as :class:`~fleetgym.agents.fleet.ray_backend.RayFleet` does
(fractional CPUs so that ``n_actors`` fit; on a cluster it joins, one CPU per actor), and
refuses at once, with the fleet's message, ``n_actors`` the cluster cannot place. It puts
each set of published weights into Ray's object store once (:meth:`RayActorGroup.weights_ref`)
and every rollout of those weights passes the same reference. :class:`RayActor` is one slot.

Identity: the Ray actor builds the slot's actor with the trainer's own ``(actor_id, seed,
incarnation)``, so slot ``i`` steps the same environment with the same random stream as
with threads or processes, and attaches ``s_n`` (the observation after the last step) to
the trajectory before it leaves the actor.

Faults: a trajectory comes back whole through the object store (``ray.get``) or not at
all. A Ray actor that dies (``RayActorError``: killed, its node lost), raises, or does not
finish within ``actor_timeout`` (it is then killed) makes the slot's rollout raise
:class:`~fleetgym.errors.FleetError`;
:class:`~fleetgym.agents.learners.asynchronous.slots.AsyncActorSlots` counts the failure
and builds the next incarnation (a new Ray actor). Every wait is bounded
(``startup_timeout``, ``actor_timeout``) and logged once it lasts a few seconds.

Lost capacity: a replacement the cluster has no room for (its node is gone and the other
slots' Ray actors hold what is left) is not waited for: it raises :class:`NoRoomError`,
and the slots park that slot (logged with the room left, listed in
``AsyncActorSlots.parked``) until the cluster has room again; training goes on with the
others.

Not supported: ``inference="server"`` with ``backend="ray"`` (refused by
:func:`check_ray_options`): the Ray actors act with their own policy copy.

Ray is optional (``pip install fleetgym[ray]``) and imported only when a group is built.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import Any

import numpy as np

from fleetgym.agents.fleet.base import DEFAULT_ACTOR_TIMEOUT_S, DEFAULT_STARTUP_TIMEOUT_S
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
    placeable,
    placement_error,
)
from fleetgym.agents.fleet.waiting import WaitLog
from fleetgym.agents.types import Trajectory, Weights
from fleetgym.agents.workloads import Workload
from fleetgym.errors import FleetError
from fleetgym.validation import quote

logger = logging.getLogger(__name__)


def check_ray_options(
    backend: str, inference: str, address: Any, actor_options: Any
) -> tuple[str | None, dict[str, Any] | None]:
    """``(address, actor_options)`` checked against the backend and the inference mode.

    Raises:
        TypeError: If ``address`` is not a str or None, or ``actor_options`` not a dict.
        ValueError: If either is given without ``backend="ray"``, or ``backend="ray"`` is
            combined with ``inference="server"`` (not supported).
    """
    if address is not None and not isinstance(address, str):
        raise TypeError(f"address: expected a Ray address (str) or None, actual {quote(address)}")
    if actor_options is not None and not isinstance(actor_options, dict):
        raise TypeError(
            f"ray_actor_options: expected a dict or None, actual {type(actor_options).__name__}"
        )
    if backend != "ray":
        for name, value in (("address", address), ("ray_actor_options", actor_options)):
            if value is not None:
                raise ValueError(f"{name}: expected None unless backend='ray', actual {backend!r}")
    elif inference == "server":
        raise ValueError(
            "inference: expected 'local' with backend='ray' (Ray actors act with their own "
            "policy copy; the inference server is not supported there), actual 'server'"
        )
    return address, actor_options


#: Longest a wait blocks before it looks at the cluster's room (seconds).
ROOM_POLL_S = 1.0


class NoRoomError(FleetError):
    """The Ray cluster has no room for a slot's Ray actor (a node was lost).

    Not a failed rollout: :class:`~fleetgym.agents.learners.asynchronous.slots.AsyncActorSlots`
    parks the slot until the cluster has room again, and the other slots go on.
    """


class _ObservedActor:
    """Inside the Ray actor: the slot's actor, whose trajectories carry ``s_n``."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def rollout(self, weights: Weights, steps: int, policy_version: int) -> Trajectory:
        from fleetgym.agents.learners.asynchronous.pipeline import with_next_obs

        trajectory = self.actor.rollout(weights, steps, policy_version)
        return with_next_obs(trajectory, getattr(self.actor, "obs", None))


def _build_observed(
    factory: Any, workload: Workload, actor_id: int, seed: int, incarnation: int
) -> _ObservedActor:
    return _ObservedActor(factory(workload, actor_id, seed, incarnation))


def _writable(trajectory: Trajectory) -> Trajectory:
    """``trajectory`` with its arrays copied out of the object store.

    ``ray.get`` maps numpy arrays read-only (zero-copy); the learner turns them into
    tensors, which must own writable memory.
    """
    for name, value in vars(trajectory).items():
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            setattr(trajectory, name, value.copy())
    return trajectory


class RayActorGroup:
    """The Ray cluster the asynchronous trainer's ``backend="ray"`` slots run on.

    Models the connection to a Ray cluster (joined or started, as the synchronous Ray
    fleet does), the resources each slot's Ray actor asks for, and the published
    weights in the object store. See the module docstring.

    Args:
        n_actors: Actor slots the cluster must place.
        address: Ray cluster to join (used only if Ray is not initialised yet); None or
            ``"local"`` starts a local cluster on 127.0.0.1 (shut down on :meth:`close`).
        actor_options: Ray actor options of each slot (default as
            :class:`~fleetgym.agents.fleet.ray_backend.RayFleet`'s).
        init_kwargs: Extra ``ray.init`` arguments, if this group starts Ray.
        startup_timeout: Seconds a Ray actor may take to be placed and built.
        actor_timeout: Seconds a rollout may take before its Ray actor is killed.

    Example:
        >>> group = RayActorGroup(2, init_kwargs={"num_cpus": 1})  # doctest: +SKIP
        >>> group.actor_options  # doctest: +SKIP
        {'num_cpus': 0.5}
        >>> group.close()  # doctest: +SKIP

    Raises:
        ImportError: If Ray is not installed (naming the extra).
        FleetError: If the cluster cannot place ``n_actors`` actors of ``actor_options``
            (naming the CPUs and what would fit), or the address cannot be joined.
    """

    def __init__(
        self,
        n_actors: int,
        address: str | None = None,
        actor_options: dict[str, Any] | None = None,
        init_kwargs: dict[str, Any] | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
        actor_timeout: float = DEFAULT_ACTOR_TIMEOUT_S,
    ) -> None:
        self.ray = ray = _import_ray()
        self.n_actors = n_actors
        self.startup_timeout = startup_timeout
        self.actor_timeout = actor_timeout
        self.owns_ray = not ray.is_initialized()
        #: Whether this group started a local cluster (else it joined one).
        self.local = local = self.owns_ray and address in (None, "local")
        if self.owns_ray:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            kwargs.update(init_kwargs or {})
            if not local:
                check_reachable(address)
            try:
                if local:
                    kwargs.setdefault("num_cpus", os.cpu_count() or 1)
                    init_local_ray(**kwargs)
                else:
                    ray.init(address=address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise FleetError(
                    f"address: expected a Ray cluster to join at {address!r}, actual {exc}"
                ) from exc
        self.address = str(ray.get_runtime_context().gcs_address)
        nodes = alive_node_resources(ray.nodes())
        cpus = sum(node.get("CPU", 0.0) for node in nodes)
        options = dict(actor_options or {})
        if local:
            options.setdefault("num_cpus", fractional_cpus(cpus, n_actors))
            logger.info(
                "started a local Ray cluster at %s with %g CPUs; %d actor slots of %s",
                self.address, cpus, n_actors, options,
            )  # fmt: skip
        else:
            options.setdefault("num_cpus", 1)
            logger.info(
                "joined the Ray cluster at %s (%d node(s), %g CPUs); %d actor slots of %s",
                self.address, len(nodes), cpus, n_actors, options,
            )  # fmt: skip
        self.actor_options = options
        self._request = actor_request(options)
        error = placement_error(nodes, self._request, n_actors, self.address)
        if error is not None:
            if self.owns_ray:
                ray.shutdown()
            # The fleet's message, in the trainer's words.
            raise FleetError(error.replace("max_actors", "n_actors"))
        self.remote_cls = ray.remote(RayActorHost)
        self._lock = threading.Lock()
        self._weights: Weights | None = None
        self._weights_ref: Any = None
        #: Objects put into the object store so far (one per published set of weights).
        self.puts = 0
        self._held: set[int] = set()  # slots with a Ray actor of this group

    def has_room(self, slot: int) -> bool:
        """Whether the cluster's alive nodes hold a Ray actor for ``slot`` beside the others'."""
        with self._lock:
            others = len(self._held - {slot})
        return self.room() > others

    def hold(self, slot: int, held: bool) -> None:
        """Record that ``slot`` has (or no longer has) a Ray actor."""
        with self._lock:
            (self._held.add if held else self._held.discard)(slot)

    def room(self) -> int:
        """How many slot actors the cluster's alive nodes hold."""
        return placeable(alive_node_resources(self.ray.nodes()), self._request)

    def weights_ref(self, weights: Weights) -> Any:
        """The object-store reference of ``weights``: put once, shared by every rollout."""
        with self._lock:
            if weights is not self._weights:
                self._weights_ref = self.ray.put(weights)
                self._weights = weights
                self.puts += 1
            return self._weights_ref

    def wait(
        self, ref: Any, timeout: float, limit_name: str, what: str, slot: int | None = None
    ) -> Any:
        """``ray.get(ref)`` within ``timeout`` seconds (logged while it lasts).

        With ``slot`` (a Ray actor starting), it gives up as soon as the cluster has no room
        for the slot's actor: it would never be placed.

        Raises:
            TimeoutError: If it is not ready by then.
            NoRoomError: If ``slot`` is given and the cluster has no room for it.
        """
        wait_log = WaitLog(limit_name, timeout, logger)
        deadline = time.perf_counter() + timeout
        while True:
            left = min(ROOM_POLL_S, deadline - time.perf_counter())
            done, _ = self.ray.wait([ref], num_returns=1, timeout=wait_log.timeout(left))
            if done:
                return self.ray.get(ref)
            if time.perf_counter() >= deadline:
                raise TimeoutError(f"{what}: expected within {limit_name}={timeout:g} s")
            if slot is not None and not self.has_room(slot):
                raise NoRoomError(self.lost_capacity(slot))
            wait_log.report(1, 1, what)

    def lost_capacity(self, slot: int) -> str:
        """What a slot that has no room is told (the capacity the cluster has left)."""
        return (
            f"actor {slot}: expected room for {self.n_actors} Ray actors of "
            f"{self.actor_options}, actual room for {self.room()} on the alive nodes (a node "
            f"was lost)"
        )

    def close(self) -> None:
        """Shut Ray down if this group started it (idempotent)."""
        if self.owns_ray and self.ray.is_initialized():
            self.ray.shutdown()
        self.owns_ray = False


class RayActor:
    """One asynchronous actor slot running in a Ray actor of a :class:`RayActorGroup`.

    Models a rollout node's actor: a persistent environment and policy copy in a Ray
    actor process, sent the object-store reference of the behaviour weights with each
    rollout and returning whole trajectories only.

    Args:
        group: The cluster side.
        workload: The workload.
        actor_id: The trainer's slot index.
        seed: The trainer's seed.
        incarnation: Restarts of this slot so far.
        factory: Builds the slot's actor inside the Ray actor,
            ``factory(workload, actor_id, seed, incarnation)`` (picklable by cloudpickle).

    Raises:
        NoRoomError: If the cluster has no room for it (checked before and while it starts).
        FleetError: If the Ray actor is not placed and built within ``startup_timeout``
            (it is killed) or fails to build.
    """

    def __init__(
        self,
        group: RayActorGroup,
        workload: Workload,
        actor_id: int,
        seed: int,
        incarnation: int,
        factory: Any,
    ) -> None:
        self.group = group
        self.actor_id = actor_id
        self.incarnation = incarnation
        if not group.has_room(actor_id):
            raise NoRoomError(group.lost_capacity(actor_id))
        group.hold(actor_id, True)
        self.handle = group.remote_cls.options(
            max_restarts=0, max_task_retries=0, **group.actor_options
        ).remote(functools.partial(_build_observed, factory), workload, actor_id, seed, incarnation)
        what = f"Ray actor {actor_id} to be placed and started"
        try:
            pid, _ = group.wait(
                self.handle.ready.remote(), group.startup_timeout, "startup_timeout", what, actor_id
            )
        except NoRoomError:
            self.kill()
            raise
        except Exception as exc:
            self.kill()
            raise FleetError(
                f"actor {actor_id}: expected its Ray actor placed and started, actual {exc} "
                f"(the cluster has room for {group.room()} actors of {group.actor_options})"
            ) from exc
        #: The Ray actor's process id (on its node).
        self.pid: int = int(pid)

    def rollout(self, weights: Weights, steps: int, policy_version: int) -> Trajectory:
        """One whole rollout in the Ray actor.

        Raises:
            FleetError: If the Ray actor died or did not finish within ``actor_timeout``
                (it is then killed); nothing of the rollout is returned.
            Whatever the rollout raised in the Ray actor (a Ray task error).
        """
        ray = self.group.ray
        ref = self.handle.rollout.remote(self.group.weights_ref(weights), steps, policy_version)
        what = f"a rollout of Ray actor {self.actor_id}"
        try:
            trajectory = self.group.wait(ref, self.group.actor_timeout, "actor_timeout", what)[0]
        except TimeoutError as exc:
            self.kill()
            raise FleetError(f"actor {self.actor_id}: {exc}, actual still running") from exc
        except ray.exceptions.RayActorError as exc:
            raise FleetError(
                f"actor {self.actor_id}: expected its Ray actor alive, actual it died ({exc})"
            ) from exc
        trajectory.actor_id = self.actor_id
        return _writable(trajectory)

    def kill(self) -> None:
        """Kill the Ray actor now (safe from another thread: its rollout then raises)."""
        self.group.hold(self.actor_id, False)
        try:
            self.group.ray.kill(self.handle, no_restart=True)
        except Exception:  # already dead, or Ray already shut down
            logger.debug("ray.kill of actor %d failed", self.actor_id, exc_info=True)

    def close(self) -> None:
        """Kill the Ray actor (its resources return to the cluster)."""
        self.kill()


__all__ = ["NoRoomError", "RayActor", "RayActorGroup", "check_ray_options"]
