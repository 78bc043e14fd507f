"""The Ray side of :class:`~fleetgym.agents.fleet.ray_backend.RayFleet`: the actor body and
the start of a local cluster.

:class:`RayActorHost` is what runs inside each Ray actor process (a plain class, made a Ray
actor by the fleet, so importing this module does not import Ray); :func:`init_local_ray`
starts a new single-machine cluster on 127.0.0.1; :func:`check_reachable` refuses at once a
cluster address nothing answers at.
"""

from __future__ import annotations

import os
import time
from typing import Any

from fleetgym.agents.fleet.base import Actor, ActorFactory
from fleetgym.agents.types import Trajectory, Weights
from fleetgym.errors import FleetError

#: Seconds the check that something listens at a Ray address may take.
CONNECT_CHECK_S = 5.0


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
    """Start a new single-machine Ray cluster whose servers listen on 127.0.0.1 only.

    ``address="local"`` tells Ray to start a cluster even when an address file of an older
    one (``ray start`` run earlier, since dead) is left on the machine. ``ray.init`` on
    Linux replaces a loopback ``_node_ip_address`` by the machine's routable address so
    other nodes can join; a local fleet needs no other node, so this switches that off.

    Args:
        **kwargs: Passed to ``ray.init`` (e.g. ``num_cpus=2``, ``include_dashboard=False``).

    Raises:
        ImportError: If Ray is not installed.
    """
    ray = _import_ray()
    from ray._private import ray_constants

    # The processes ray.init starts inherit the switch; it is taken back afterwards so a
    # later `ray start` of the user's (a child of this process) may still join clusters.
    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    previous, previous_flag = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ.setdefault(name, "0")
    ray_constants.ENABLE_RAY_CLUSTER = False
    options: dict[str, Any] = {
        "address": "local",
        "include_dashboard": False,
        "_node_ip_address": "127.0.0.1",
    }
    options.update(kwargs)
    try:
        ray.init(**options)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = previous_flag
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def check_reachable(address: Any, timeout: float = CONNECT_CHECK_S) -> None:
    """Refuse at once a ``host:port`` nothing listens at (``ray.init`` would retry for minutes).

    A bare TCP connect, closed at once (nothing is sent); other address forms (``"auto"``,
    ``ray://...``) are left to Ray.

    Example:
        >>> check_reachable("127.0.0.1:1", timeout=1.0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        fleetgym.errors.FleetError: address: expected a Ray cluster to join at '127.0.0.1:1', actual nothing answers there within 1 s (...)

    Raises:
        FleetError: If nothing accepts a connection there within ``timeout`` seconds.
    """
    import socket

    host, sep, port = str(address).rpartition(":")
    if not sep or "/" in str(address) or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except (OSError, ValueError, OverflowError) as exc:
        raise FleetError(
            f"address: expected a Ray cluster to join at {address!r}, actual nothing answers "
            f"there within {timeout:g} s ({exc})"
        ) from exc


class RayActorHost:
    """The body of one Ray actor: builds the slot's actor, runs whole rollouts.

    After a node is lost it may also hold *guest* actors, of slots whose own Ray actor
    cannot be placed; their rollouts run after the host's own (Ray runs an actor's calls
    one at a time). Plain class: :class:`RayFleet` turns it into a Ray actor with
    ``ray.remote``, so importing this module does not import Ray.
    """

    def __init__(
        self, factory: ActorFactory, workload: Any, slot: int, seed: int, incarnation: int
    ) -> None:
        import torch

        torch.set_num_threads(1)  # one core per actor, as the fleet models it
        started = time.perf_counter()
        self.actor = factory(workload, slot, seed, incarnation)
        self.build_s = time.perf_counter() - started
        self.guests: dict[int, tuple[int, Actor]] = {}

    def ready(self) -> tuple[int, float]:
        """``(pid, seconds the actor took to build)``."""
        return os.getpid(), self.build_s

    def rollout(
        self,
        weights: Weights,
        steps: int,
        policy_version: int,
        guest: tuple[ActorFactory, Any, int, int, int] | None = None,
    ) -> tuple[Trajectory, float, float, float]:
        """One rollout of the own actor, or of ``guest = (factory, workload, slot, seed,
        incarnation)`` (built on first use); returns ``(trajectory, compute_s, cpu_s,
        build_s)``."""
        actor, build_s = self.actor, 0.0
        if guest is not None:
            factory, workload, slot, seed, incarnation = guest
            held = self.guests.get(slot)
            if held is None or held[0] != incarnation:
                started = time.perf_counter()
                self.guests[slot] = (incarnation, factory(workload, slot, seed, incarnation))
                build_s = time.perf_counter() - started
            actor = self.guests[slot][1]
        cpu_started = time.process_time()
        started = time.perf_counter()
        trajectory = actor.rollout(weights, steps, policy_version)
        compute_s = time.perf_counter() - started
        return trajectory, compute_s, time.process_time() - cpu_started, build_s

    def release(self, slot: int) -> None:
        """Drop the guest actor of ``slot`` (it has its own Ray actor again)."""
        self.guests.pop(slot, None)
