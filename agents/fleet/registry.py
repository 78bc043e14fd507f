"""The fleet backend registry: backend name -> the fleet classes :func:`make_fleet` builds.

Each backend registers a :class:`FleetBackend`: the fleet its actors act with their own
policy copy (``inference="local"``) and, optionally, the fleet whose actors act through an
inference server (``inference="server"``). Either may be given as the class (or any
factory ``factory(workload, max_actors=..., seed=..., **opts) -> FleetBase``) or as the
import path ``"package.module:Name"``, imported on first use, so that registering the Ray
backend imports neither Ray nor torch.

Adding a backend is one new module plus one call, without editing fleetgym:

    >>> from fleetgym.agents.fleet import InProcessFleet, make_fleet, register_backend
    >>> class QuietFleet(InProcessFleet):
    ...     pass
    >>> _ = register_backend("quiet", local=QuietFleet)
    >>> with make_fleet("CartPole-v1", backend="quiet", max_actors=2) as fleet:
    ...     type(fleet).__name__
    'QuietFleet'
    >>> unregister_backend("quiet")

The built-in names are :data:`~fleetgym.agents.backends.BACKENDS`; the names of 1.x
(:data:`~fleetgym.agents.backends.RENAMED_BACKENDS`) cannot be registered.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import threading
from collections.abc import Callable
from typing import Any

from fleetgym.agents.backends import BACKENDS, RENAMED_BACKENDS, renamed_hint
from fleetgym.validation import check_bool, check_choice, quote

#: A fleet class or factory, or its import path ``"package.module:Name"``.
FleetFactory = Callable[..., Any] | str

_NAME = re.compile(r"[a-z][a-z0-9_\-]*\Z")
_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z")


def _check_factory(name: str, value: Any, optional: bool) -> FleetFactory | None:
    if value is None and optional:
        return None
    if isinstance(value, str):
        if not _PATH.match(value):
            raise ValueError(
                f"{name}: expected an import path 'module:Name', actual {quote(value)}"
            )
        return value
    if not callable(value):
        raise TypeError(
            f"{name}: expected a fleet class, a factory or 'module:Name'"
            f"{' or None' if optional else ''}, actual {type(value).__name__} {quote(value)}"
        )
    return value  # type: ignore[no-any-return]


def _resolve(factory: FleetFactory) -> Callable[..., Any]:
    if not isinstance(factory, str):
        return factory
    module, _, attr = factory.partition(":")
    resolved: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return resolved


@dataclasses.dataclass(frozen=True)
class FleetBackend:
    """One registered fleet backend.

    Args:
        name: The backend's name (lower case letters, digits, ``_`` and ``-``).
        local: The fleet of ``inference="local"``: a class or factory called as
            ``local(workload, max_actors=..., seed=..., **opts)``, or its import path.
        server: The fleet of ``inference="server"`` (the same call), or None if the
            backend has no inference-server variant.

    Raises:
        TypeError: If ``name`` is not a string or a factory is neither callable nor a str.
        ValueError: If ``name`` or an import path is malformed.
    """

    name: str
    local: FleetFactory
    server: FleetFactory | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"name: expected a str, actual {type(self.name).__name__}")
        if not _NAME.match(self.name):
            raise ValueError(
                f"name: expected lower case letters, digits, '_' and '-', actual {quote(self.name)}"
            )
        _check_factory("local", self.local, optional=False)
        _check_factory("server", self.server, optional=True)

    @property
    def inference_modes(self) -> tuple[str, ...]:
        """The ``inference=`` modes this backend builds."""
        return ("local",) if self.server is None else ("local", "server")

    def build(self, workload: Any, max_actors: int, seed: int, inference: str, **opts: Any) -> Any:
        """Build this backend's fleet.

        Args:
            workload: A workload name or :class:`~fleetgym.agents.workloads.Workload`.
            max_actors: Largest fleet a round may ask for.
            seed: Fleet seed.
            inference: ``"local"`` or ``"server"``.
            **opts: The fleet's own options.

        Returns:
            The fleet.

        Raises:
            ValueError: If the backend has no fleet for ``inference``.
        """
        check_choice("inference", inference, self.inference_modes)
        factory = self.local if inference == "local" else self.server
        assert factory is not None  # checked above
        return _resolve(factory)(workload, max_actors=max_actors, seed=seed, **opts)


_REGISTRY: dict[str, FleetBackend] = {}
_LOCK = threading.Lock()


def register_backend(
    name: str,
    local: FleetFactory,
    server: FleetFactory | None = None,
    *,
    replace: bool = False,
) -> FleetBackend:
    """Register a fleet backend under ``name`` for :func:`make_fleet` to build.

    Args:
        name: The backend's name (lower case letters, digits, ``_`` and ``-``).
        local: The fleet of ``inference="local"`` (class, factory or ``"module:Name"``).
        server: The fleet of ``inference="server"`` (None: the backend has none).
        replace: Replace a backend already registered under ``name``.

    Returns:
        The registered :class:`FleetBackend`.

    Raises:
        TypeError: For arguments of the wrong type.
        ValueError: If ``name`` is malformed, a 1.x backend name, or taken (without
            ``replace``).
    """
    check_bool("replace", replace)
    backend = FleetBackend(name, local, server)
    if name in RENAMED_BACKENDS:
        raise ValueError(f"name: expected a new backend name, actual {name!r}{renamed_hint(name)}")
    with _LOCK:
        if name in _REGISTRY and not replace:
            raise ValueError(
                f"name: expected a backend name not registered yet (or replace=True), "
                f"actual {name!r}"
            )
        _REGISTRY[name] = backend
    return backend


def unregister_backend(name: str) -> None:
    """Remove the backend registered under ``name`` (a built-in one too).

    Args:
        name: The registered backend name (see :func:`backend_names`).

    Raises:
        ValueError: If no backend is registered under ``name``.
    """
    with _LOCK:
        if _REGISTRY.pop(name, None) is None:
            raise ValueError(f"backend: expected one of {backend_names()}, actual {quote(name)}")


def backend_names() -> tuple[str, ...]:
    """The registered backend names, the built-in ones first."""
    names = tuple(_REGISTRY)
    return tuple(n for n in BACKENDS if n in names) + tuple(n for n in names if n not in BACKENDS)


def get_backend(name: str) -> FleetBackend:
    """The fleet backend registered under ``name``.

    Args:
        name: A registered backend name (see :func:`backend_names`); a 1.x name is
            refused with its 2.0 name in the message.

    Raises:
        TypeError: If ``name`` is not a string.
        ValueError: If no backend is registered under ``name`` (for a 1.x name the message
            names its 2.0 name).
    """
    if not isinstance(name, str):
        raise TypeError(f"backend: expected one of {backend_names()}, actual {quote(name)}")
    backend = _REGISTRY.get(name)
    if backend is None:
        raise ValueError(
            f"backend: expected one of {backend_names()}, actual {quote(name)}{renamed_hint(name)}"
        )
    return backend


_FLEET = "fleetgym.agents.fleet"
register_backend(
    "inprocess", f"{_FLEET}.inprocess:InProcessFleet", f"{_FLEET}.served:ServedInProcessFleet"
)
register_backend("process", f"{_FLEET}.process:ProcessFleet", f"{_FLEET}.served:ServedProcessFleet")
register_backend("ray", f"{_FLEET}.ray_backend:RayFleet", f"{_FLEET}.served_ray:ServedRayFleet")

__all__ = [
    "FleetBackend",
    "FleetFactory",
    "backend_names",
    "get_backend",
    "register_backend",
    "unregister_backend",
]
