"""The actor fleet: backends that run I actors per round (see :mod:`fleetgym.agents.types`).

Three backends share one interface (:class:`~fleetgym.agents.types.ActorFleet`):

* :class:`InProcessFleet` (``"inprocess"``, the default): actors run one after the other in
  this process, each really timed; deterministic. ``batched=True`` steps all slots in
  lockstep with one policy forward per step (the fast path).
* :class:`ProcessFleet` (``"process"``): one local worker process per slot on Gymnasium's
  AsyncVectorEnv pattern; elastic, fault-tolerant, shared memory for weights and
  observations.
* :class:`RayFleet` (``"ray"``): one Ray actor per slot (``pip install fleetgym[ray]``).

Backends are looked up by name in a registry (:mod:`fleetgym.agents.fleet.registry`):
:func:`register_backend` adds one (a new module plus one call) that :func:`make_fleet`
then builds. The names are the one vocabulary of :mod:`fleetgym.agents.backends`.

``make_fleet(..., inference="server")`` runs a backend with its actors acting through a
shared inference server (:mod:`fleetgym.agents.fleet.served`; on Ray the server is a Ray
actor, :mod:`fleetgym.agents.fleet.served_ray`).

Importing this package imports neither torch nor Ray.
"""

from __future__ import annotations

from typing import Any

from fleetgym.agents.backends import BACKENDS, INFERENCE_MODES, RENAMED_BACKENDS
from fleetgym.agents.fleet.base import ActorFactory, FleetBase
from fleetgym.agents.fleet.inprocess import InProcessFleet
from fleetgym.agents.fleet.process import ProcessFleet
from fleetgym.agents.fleet.registry import (
    FleetBackend,
    backend_names,
    get_backend,
    register_backend,
    unregister_backend,
)
from fleetgym.validation import check_choice


def make_fleet(
    workload: Any,
    backend: str = "inprocess",
    max_actors: int = 32,
    seed: int = 0,
    inference: str = "local",
    **opts: Any,
) -> FleetBase:
    """Build a fleet backend by name (a lookup in the backend registry).

    Args:
        workload: A workload name or :class:`~fleetgym.agents.workloads.Workload`.
        backend: ``"inprocess"``, ``"process"``, ``"ray"``
            (:data:`~fleetgym.agents.backends.BACKENDS`) or a name registered with
            :func:`register_backend`.
        max_actors: Largest fleet a round may ask for.
        seed: Fleet seed.
        inference: ``"local"`` (the default: every actor runs its own policy copy) or
            ``"server"``: actors act through an inference server the fleet runs
            (:mod:`fleetgym.agents.fleet.served`, every built-in backend; on ``"ray"`` the
            server is a Ray actor; ``inference_options`` sets the server's options).
        **opts: Backend options (see each backend's class).

    Example:
        >>> from fleetgym.agents.fleet import make_fleet
        >>> fleet = make_fleet("CartPole-v1", backend="inprocess", max_actors=4, batched=True)
        >>> type(fleet).__name__, fleet.max_actors
        ('InProcessFleet', 4)
        >>> fleet.close()

    Returns:
        The fleet (a context manager; ``close()`` releases its workers).

    Raises:
        ValueError: On an unknown backend (a 1.x name: naming its 2.0 name) or inference
            mode, or an inference mode the backend does not build.
        TypeError: On an option the backend does not take.
        ImportError: For ``"ray"`` without Ray installed.
    """
    check_choice("inference", inference, INFERENCE_MODES)
    fleet: FleetBase = get_backend(backend).build(workload, max_actors, seed, inference, **opts)
    return fleet


def __getattr__(name: str) -> Any:
    # RayFleet is resolved lazily so the package stays importable without Ray loaded.
    if name == "RayFleet":
        from fleetgym.agents.fleet.ray_backend import RayFleet

        return RayFleet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ActorFactory",
    "BACKENDS",
    "INFERENCE_MODES",
    "FleetBackend",
    "FleetBase",
    "InProcessFleet",
    "ProcessFleet",
    "RENAMED_BACKENDS",
    "RayFleet",
    "backend_names",
    "get_backend",
    "make_fleet",
    "register_backend",
    "unregister_backend",
]
