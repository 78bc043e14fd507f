"""Policy graphs over the network: several policies on different machines as one env.

A :class:`PolicyGraph` is a set of policy nodes (:class:`PolicyNode`) joined by network
links (:class:`PolicyLink`), each link with its own profile (``"perfect"`` for a
function call on the same machine, ``"wifi-normal"``, a shipped capture such as
``"trace-wifi-office"``, a profile file). The environment is the node ``"env"``. The
typical graph is hierarchical: a planner on a remote server sets a goal every N ticks
over a slow link, a controller next to the env turns goal and observation into an
action every tick over a local link::

    env --wifi-normal--> planner --wifi-normal--> controller --perfect--> env
    env ------------------perfect---------------> controller

:class:`PolicyGraphEnv` makes the graph a Gymnasium env for one node, the trained one:
its observation is what its incoming links deliver, its action what it sends; the other
nodes run their policies (frozen callables, or callables that read a co-trained
learner's current parameters). Everything is numpy; policies are plain callables.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from fleetgym.errors import UnknownProfileError
from fleetgym.validation import check_int, quote
from fleetgym.wrappers.profiles import NetworkProfile, get_profile, list_profiles
from fleetgym.wrappers.shim_config import default_start_action

__all__ = ["ENV_NODE", "PolicyGraph", "PolicyLink", "PolicyNode"]

#: The reserved name of the environment in a policy graph.
ENV_NODE = "env"
#: SeedSequence spawn key of the links' delay streams (apart from the env's own seeding).
_GRAPH_STREAM_KEY = 0x9A9F
#: Delays drawn per refill of one link's stream.
_BLOCK = 256

#: A node's policy: the freshest message of each incoming link, by source name -> output.
NodePolicy = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class PolicyNode:
    """One policy of a graph: what it outputs, how often, and the callable that decides.

    The node acts at every tick ``t`` with ``t % period == 0`` (from the episode's
    start) and sends its output on all its outgoing links; between acts its receivers
    keep the last output that reached them (a goal or option held for ``period`` ticks).

    Args:
        name: Unique name in the graph (not ``"env"``).
        policy: ``policy(inputs) -> output``, ``inputs`` a dict from each incoming link's
            source name to its freshest message. None for the node being trained (its
            outputs are the actions given to :meth:`PolicyGraphEnv.step`).
        action_space: The space of the node's output (the env's action space for the
            node that drives the env).
        period: Ticks between two acts (>= 1).
        start_output: What the node's receivers see before its first message reaches
            them; default the space's zero action
            (:func:`~fleetgym.wrappers.shim_config.default_start_action`).

    Example:
        >>> from gymnasium import spaces
        >>> node = PolicyNode("planner", lambda inputs: 0.5, spaces.Box(-1, 1, ()), period=10)
        >>> node.name, node.period
        ('planner', 10)

    Raises:
        TypeError, ValueError: For a bad argument, naming it.
    """

    name: str
    policy: NodePolicy | None
    action_space: gym.Space[Any]
    period: int = 1
    start_output: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name: expected a non-empty str, actual {quote(self.name)}")
        if self.name == ENV_NODE:
            raise ValueError(f"name: {ENV_NODE!r} is the environment's reserved name")
        if self.policy is not None and not callable(self.policy):
            raise TypeError(
                f"policy of node {self.name!r}: expected a callable or None, "
                f"actual {type(self.policy).__name__}"
            )
        if not isinstance(self.action_space, gym.Space):
            raise TypeError(
                f"action_space of node {self.name!r}: expected a gymnasium Space, "
                f"actual {type(self.action_space).__name__}"
            )
        object.__setattr__(
            self, "period", check_int(f"period of node {self.name!r}", self.period, 1)
        )
        if self.start_output is None:
            object.__setattr__(self, "start_output", default_start_action(self.action_space))
        elif self.start_output not in self.action_space:
            raise ValueError(
                f"start_output of node {self.name!r}: expected an element of "
                f"{self.action_space}, actual {quote(self.start_output)}"
            )


@dataclass(frozen=True)
class PolicyLink:
    """A one-way network link from ``source`` to ``target`` under a network profile.

    A link out of the env carries observations and draws its delays from the profile's
    ``uplink`` channel; every other link carries a node's outputs (actions, goals) and
    draws from its ``downlink`` (the shim's convention). Packets keep their order
    (``fifo``, the shim's default delivery) and a lost packet never arrives.

    Args:
        source: The sending node's name, or ``"env"``.
        target: The receiving node's name, or ``"env"``.
        profile: A profile name (``fleetgym profiles`` lists them), a profile file or a
            :class:`~fleetgym.wrappers.profiles.NetworkProfile`; default ``"perfect"``.

    Example:
        >>> PolicyLink("env", "planner", "wifi-normal").profile.name
        'wifi-normal'

    Raises:
        TypeError: For a name that is not a non-empty str.
        UnknownProfileError: For a profile that does not exist.
    """

    source: str
    target: str
    profile: NetworkProfile | str = "perfect"

    def __post_init__(self) -> None:
        for end in ("source", "target"):
            value = getattr(self, end)
            if not isinstance(value, str) or not value:
                raise TypeError(f"{end}: expected a non-empty str, actual {quote(value)}")
        try:
            profile = get_profile(self.profile)  # type: ignore[arg-type]
        except UnknownProfileError:
            raise UnknownProfileError(
                f"profile of link {self.source} -> {self.target}: expected one of "
                f"{', '.join(list_profiles())} or a profile file, actual {quote(self.profile)}"
            ) from None
        object.__setattr__(self, "profile", profile)

    @property
    def channel(self) -> Any:
        """The channel this link's packets cross (uplink out of the env, else downlink)."""
        profile: NetworkProfile = self.profile  # type: ignore[assignment]
        return profile.uplink if self.source == ENV_NODE else profile.downlink


class PolicyGraph:
    """Policy nodes and the network links between them and the env, checked as a whole.

    Checks: node names unique; every link names known nodes, is not a self-loop and is
    not given twice; exactly one link into the env (the node that acts on it); every
    node sends somewhere; the links between nodes form no cycle (within a tick the
    nodes act in the order the links give, so a zero-delay goal reaches its controller
    in the same tick).

    Args:
        nodes: The policy nodes.
        links: The links (``"env"`` names the environment).

    Example:
        >>> from gymnasium import spaces
        >>> graph = PolicyGraph(
        ...     [
        ...         PolicyNode("planner", lambda inputs: 0.0, spaces.Box(-1, 1, ()), period=10),
        ...         PolicyNode("controller", None, spaces.Discrete(2)),
        ...     ],
        ...     [
        ...         PolicyLink("env", "planner", "wifi-normal"),
        ...         PolicyLink("planner", "controller", "wifi-normal"),
        ...         PolicyLink("env", "controller"),
        ...         PolicyLink("controller", "env"),
        ...     ],
        ... )
        >>> graph.order, graph.actuator
        (('planner', 'controller'), 'controller')

    Raises:
        TypeError: For an element that is not a PolicyNode / PolicyLink.
        ValueError: For a duplicate name, an unknown node, a self-loop, a duplicate link,
            a cycle, no link (or several) into the env, a node that sends nowhere.
    """

    def __init__(self, nodes: Sequence[PolicyNode], links: Sequence[PolicyLink]) -> None:
        if isinstance(nodes, (str, bytes)) or not isinstance(nodes, Sequence) or not nodes:
            raise TypeError(
                f"nodes: expected a non-empty sequence of PolicyNode, actual {quote(nodes)}"
            )
        if isinstance(links, (str, bytes)) or not isinstance(links, Sequence):
            raise TypeError(f"links: expected a sequence of PolicyLink, actual {quote(links)}")
        by_name: dict[str, PolicyNode] = {}
        for i, node in enumerate(nodes):
            if not isinstance(node, PolicyNode):
                raise TypeError(f"nodes[{i}]: expected a PolicyNode, actual {type(node).__name__}")
            if node.name in by_name:
                raise ValueError(f"nodes[{i}]: node name {node.name!r} is used twice")
            by_name[node.name] = node
        known = (ENV_NODE, *by_name)
        seen: set[tuple[str, str]] = set()
        for i, link in enumerate(links):
            if not isinstance(link, PolicyLink):
                raise TypeError(f"links[{i}]: expected a PolicyLink, actual {type(link).__name__}")
            for end in (link.source, link.target):
                if end not in known:
                    raise ValueError(
                        f"links[{i}] ({link.source} -> {link.target}): unknown node {end!r}; "
                        f"known: {', '.join(known)}"
                    )
            if link.source == link.target:
                raise ValueError(f"links[{i}]: a link from {link.source!r} to itself")
            if (link.source, link.target) in seen:
                raise ValueError(
                    f"links[{i}]: the link {link.source} -> {link.target} is given twice"
                )
            seen.add((link.source, link.target))
        into_env = [link.source for link in links if link.target == ENV_NODE]
        if len(into_env) != 1:
            raise ValueError(
                "links: expected exactly one link into 'env' (from the node that acts on it), "
                f"actual {len(into_env)}" + (f" (from {', '.join(into_env)})" if into_env else "")
            )
        for name in by_name:
            if not any(link.source == name for link in links):
                raise ValueError(f"node {name!r} sends to no one: give it a link out")
        self.nodes: dict[str, PolicyNode] = by_name
        self.links: tuple[PolicyLink, ...] = tuple(links)
        self.actuator: str = into_env[0]
        self.order: tuple[str, ...] = self._topological_order()

    def _topological_order(self) -> tuple[str, ...]:
        """Node names so that each node comes after every node that links to it.

        Raises:
            ValueError: If the links between nodes form a cycle (named in the message).
        """
        succ: dict[str, list[str]] = {name: [] for name in self.nodes}
        indegree = dict.fromkeys(self.nodes, 0)
        for link in self.links:
            if ENV_NODE not in (link.source, link.target):
                succ[link.source].append(link.target)
                indegree[link.target] += 1
        ready = deque(name for name in self.nodes if indegree[name] == 0)
        order: list[str] = []
        while ready:
            name = ready.popleft()
            order.append(name)
            for nxt in succ[name]:
                indegree[nxt] -= 1
                if indegree[nxt] == 0:
                    ready.append(nxt)
        if len(order) < len(self.nodes):
            raise ValueError(
                f"links: the policy graph has a cycle: {' -> '.join(self._cycle(succ))}"
            )
        return tuple(order)

    def _cycle(self, succ: Mapping[str, list[str]]) -> list[str]:
        """One cycle of ``succ`` as a closed path of names (called only when one exists)."""
        state: dict[str, int] = {}  # 1: on the current path, 2: done
        path: list[str] = []

        def visit(name: str) -> list[str] | None:
            state[name] = 1
            path.append(name)
            for nxt in succ[name]:
                if state.get(nxt) == 1:
                    return [*path[path.index(nxt) :], nxt]
                if nxt not in state and (found := visit(nxt)) is not None:
                    return found
            path.pop()
            state[name] = 2
            return None

        for name in succ:
            if name not in state and (found := visit(name)) is not None:
                return found
        raise AssertionError("no cycle")  # pragma: no cover - only called with a cycle

    def inputs_of(self, name: str) -> tuple[PolicyLink, ...]:
        """The links into ``name``, in the order given.

        Args:
            name: A node's name; a name that is not a node, or a node without incoming
                links, gives an empty tuple.
        """
        return tuple(link for link in self.links if link.target == name)

    def check_policies(self, trained: str | None) -> None:
        """Every node but ``trained`` must have a policy.

        Args:
            trained: The name of the node being trained (it may have no policy), or None
                when every node must have one.

        Raises:
            ValueError: Naming the first node without one.
        """
        for name, node in self.nodes.items():
            if name != trained and node.policy is None:
                raise ValueError(
                    f"node {name!r} has no policy (policy=None); only the trained node"
                    + (f" ({trained!r})" if trained else "")
                    + " may have none"
                )

    def __repr__(self) -> str:
        edges = ", ".join(f"{k.source}->{k.target}[{k.profile.name}]" for k in self.links)  # type: ignore[union-attr]
        return f"PolicyGraph(order={list(self.order)}, links=[{edges}])"
