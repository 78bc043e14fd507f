"""What a Ray cluster can hold: the placement arithmetic behind :class:`RayFleet`'s checks.

Ray places an actor on one node that has every resource it asks for, and holds them for
the actor's lifetime. How many actors of one shape a cluster can place is therefore a sum
over its alive nodes of how many fit on each. The fleet uses it three times: to size the
actors of a local cluster it starts itself (fractional CPUs), to refuse at once a fleet
that a user's cluster cannot place, and, after a node is lost, to tell a replacement that
will never be placed from one that is merely slow to start.

Pure functions of plain dicts (as ``ray.nodes()`` reports them), so they are tested
without Ray.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

#: Ray keeps resource quantities to four decimal places.
RESOURCE_PRECISION = 10_000

#: The ``actor_options`` keys that ask for a resource, and the resource they ask for.
_OPTION_RESOURCES = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}


def actor_request(actor_options: Mapping[str, Any]) -> dict[str, float]:
    """The resources one actor with ``actor_options`` holds, by Ray resource name.

    Example:
        >>> actor_request({"num_cpus": 0.5, "resources": {"fast": 1}, "max_concurrency": 2})
        {'CPU': 0.5, 'fast': 1.0}
    """
    request = {
        resource: float(actor_options[key])
        for key, resource in _OPTION_RESOURCES.items()
        if actor_options.get(key)
    }
    for name, amount in (actor_options.get("resources") or {}).items():
        if amount:
            request[str(name)] = float(amount)
    return request


def placeable(nodes: Iterable[Mapping[str, float]], request: Mapping[str, float]) -> int:
    """How many actors asking for ``request`` the ``nodes`` (their total resources) hold.

    An actor that asks for nothing fits without limit (reported as a large number).

    Example:
        >>> placeable([{"CPU": 1.0}, {"CPU": 1.0}], {"CPU": 0.5})
        4
        >>> placeable([{"CPU": 1.0}, {"CPU": 1.0}], {"CPU": 2.0})  # no node is big enough
        0
    """
    if not request:
        return 2**31
    total = 0
    for node in nodes:
        # In Ray's fixed-point units, so 2 CPUs hold exactly 32 actors of 0.0625.
        total += min(
            round(node.get(name, 0.0) * RESOURCE_PRECISION)
            // max(1, round(amount * RESOURCE_PRECISION))
            for name, amount in request.items()
        )
    return total


def fractional_cpus(cpus: float, max_actors: int) -> float:
    """The CPUs per actor that let ``max_actors`` share ``cpus``: at most 1, Ray-exact.

    Example:
        >>> fractional_cpus(2, 32), fractional_cpus(2, 3), fractional_cpus(8, 4)
        (0.0625, 0.6666, 1.0)
    """
    share = math.floor(cpus * RESOURCE_PRECISION / max_actors) / RESOURCE_PRECISION
    return max(1.0 / RESOURCE_PRECISION, min(1.0, share))


def alive_node_resources(nodes: Iterable[Mapping[str, Any]]) -> list[dict[str, float]]:
    """The total resources of each alive node of a ``ray.nodes()`` listing."""
    return [dict(node.get("Resources") or {}) for node in nodes if node.get("Alive")]


def placement_error(
    nodes: list[dict[str, float]],
    request: Mapping[str, float],
    max_actors: int,
    address: str,
) -> str | None:
    """Why the cluster cannot place ``max_actors`` actors of ``request`` (None if it can).

    The message names the CPUs the cluster has, the CPUs the fleet asks for and the
    ``actor_options`` (or ``max_actors``) that would fit.

    Example:
        >>> print(placement_error([{"CPU": 2.0}], {"CPU": 1.0}, 4, "127.0.0.1:6379"))
        actor_options: expected a Ray cluster that places max_actors=4 actors of {'CPU': 1.0}, actual room for 2 (cluster 127.0.0.1:6379: 2 CPUs available on 1 node(s), 4 CPUs requested = 4 x num_cpus=1); pass actor_options={'num_cpus': 0.5} or max_actors=2
    """
    room = placeable(nodes, request)
    if room >= max_actors:
        return None
    cpus = sum(node.get("CPU", 0.0) for node in nodes)
    per_actor = request.get("CPU", 0.0)
    fixes = []
    fitting = _largest_fitting_cpus(nodes, request, max_actors)
    if fitting is not None:
        fixes.append(f"actor_options={{'num_cpus': {fitting:g}}}")
    others = sorted(name for name in request if name != "CPU")
    if others:
        have = {name: sum(node.get(name, 0.0) for node in nodes) for name in others}
        fixes.append(f"smaller {others} requests (the cluster has {have})")
    if room > 0:
        fixes.append(f"max_actors={room}")
    return (
        f"actor_options: expected a Ray cluster that places max_actors={max_actors} actors "
        f"of {dict(request)}, actual room for {room} (cluster {address}: {cpus:g} CPUs "
        f"available on {len(nodes)} node(s), {per_actor * max_actors:g} CPUs requested = "
        f"{max_actors} x num_cpus={per_actor:g}); pass {' or '.join(fixes) or 'a larger cluster'}"
    )


def _largest_fitting_cpus(
    nodes: list[dict[str, float]], request: Mapping[str, float], max_actors: int
) -> float | None:
    """The largest ``num_cpus`` (below the requested one) that places ``max_actors``."""
    low, high = 1, round(request.get("CPU", 0.0) * RESOURCE_PRECISION) - 1
    if high < low or placeable(nodes, {**request, "CPU": low / RESOURCE_PRECISION}) < max_actors:
        return None
    while low < high:  # placeable() only grows as the CPUs per actor shrink
        middle = (low + high + 1) // 2
        if placeable(nodes, {**request, "CPU": middle / RESOURCE_PRECISION}) >= max_actors:
            low = middle
        else:
            high = middle - 1
    return low / RESOURCE_PRECISION
