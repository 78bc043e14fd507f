"""A policy graph as a Gymnasium env for one node: :class:`PolicyGraphEnv`.

The graph itself (:class:`~fleetgym.wrappers.policy_graph.PolicyGraph`, its nodes and
links) is described in :mod:`fleetgym.wrappers.policy_graph`; this module runs it: each
link is a wire that delays messages by its profile's delays, tick by tick, and the env
steps the other nodes' policies around the trained one.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.validation import check_float, quote
from fleetgym.wrappers.channel_base import DelaySampler
from fleetgym.wrappers.links import copy_tree
from fleetgym.wrappers.policy_graph import (
    _BLOCK,
    _GRAPH_STREAM_KEY,
    ENV_NODE,
    PolicyGraph,
)
from fleetgym.wrappers.shim_config import infer_step_ms
from fleetgym.wrappers.timeline import check_uplink_share

__all__ = ["PolicyGraphEnv"]


class _Wire:
    """One link's packets in flight, in virtual time (periods).

    A packet sent at tick ``i`` leaves at ``i + send_phase`` and arrives ``d / P`` later
    (in ``fifo`` order never before the packet sent before it); the receiver, whose ticks
    fall at ``j + recv_phase``, uses it from its first tick after the arrival (at the
    same tick when the delay is zero and both ends share a phase).
    """

    __slots__ = ("sampler", "step_ms", "send_phase", "recv_phase", "queue", "last", "draws")

    def __init__(self, sampler: DelaySampler, step_ms: float, send_phase: float, recv_phase: float):
        self.sampler, self.step_ms = sampler, step_ms
        self.send_phase, self.recv_phase = send_phase, recv_phase
        self.queue: deque[tuple[int, int, Any]] = deque()  # (usable tick, stamp, payload)
        self.last = -math.inf
        self.draws: list[float] = []

    def send(self, tick: int, stamp: int, payload: Any) -> None:
        if not self.draws:
            self.draws = self.sampler.next(_BLOCK).tolist()[::-1]
        delay = self.draws.pop()
        if delay == math.inf:
            return  # lost
        arrival = max(self.last, tick + self.send_phase + delay / self.step_ms)
        self.last = arrival
        x = arrival - self.recv_phase
        # On time when it arrives strictly before the receiver's tick (the shim's rule); a
        # zero delay between nodes of one phase is a call within the tick.
        self.queue.append((tick if x == tick else math.floor(x) + 1, stamp, payload))

    def receive(self, tick: int) -> tuple[int, Any] | None:
        """The freshest packet usable at ``tick`` (stamp, payload), or None if none new."""
        got = None
        queue = self.queue
        while queue and queue[0][0] <= tick:
            _, stamp, payload = queue.popleft()
            got = (stamp, payload)
        return got


class PolicyGraphEnv(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """A policy graph around an env, as a Gymnasium env for one node (the trained one).

    Time is virtual, in ticks of ``step_ms`` (the env's control period), the shim's
    control loop (:class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper`) extended to
    several nodes: at tick ``t`` the nodes act at ``t * P`` in the graph's
    :attr:`~PolicyGraph.order` (each node due at ``t``: it reads the freshest message of
    each incoming link, calls its policy, sends the output on its outgoing links); the env
    steps at ``(t + 1 - s) * P`` (``s = uplink_share``) with the freshest action that has
    reached it (else the one it applied last, or the actuator's ``start_output`` before
    the first) and sends the next observation on its outgoing links. A packet is used from
    the receiver's first tick after its arrival, and a ``"perfect"`` link between
    nodes delivers within the tick and a ``"perfect"`` env-controller loop is the bare env;
    a single node over one profile both ways has the shim's timing.

    ``reset`` gives every node linked from the env the initial observation at once (age
    0, as the shim does) and calls ``policy.reset()`` on every node but the trained one
    whose policy has one (a stateful policy starts each episode afresh).
    ``step(action)`` is one act of the trained node: it sends ``action`` and runs ticks
    until the trained node is due again (``period`` ticks) or the episode ends; the reward
    is the env's summed over those ticks. The observation is a ``Dict`` of the trained
    node's incoming links by source name. ``info`` holds the env's info of the last tick
    plus ``graph_ticks`` (ticks run by this call) and ``input_age_steps`` (per source:
    ticks since the message's content was produced).

    Randomness: the links' delay streams come from ``reset(seed=...)`` through
    ``np.random.SeedSequence`` (apart from the env's own ``np_random``); a reset without
    seed continues them. Same seed, same policies: same episode.

    Args:
        env: The environment (any spaces; the actuator's ``action_space`` must equal its
            action space).
        graph: The :class:`PolicyGraph`.
        trained: The name of the node whose actions ``step`` takes.
        step_ms: The control period in ms; inferred from the env when None (as the shim
            does, :func:`~fleetgym.wrappers.shim_config.infer_step_ms`).
        uplink_share: The nodes' phase ``s`` in (0, 1): the env steps ``(1 - s) * P``
            after the nodes' tick (the shim's parameter of the same name).

    Example:
        >>> import gymnasium as gym
        >>> from gymnasium import spaces
        >>> from fleetgym.wrappers import PolicyLink, PolicyNode
        >>> graph = PolicyGraph(
        ...     [
        ...         PolicyNode("planner", lambda inputs: np.float32(0.0), spaces.Box(-2, 2, ()), 10),
        ...         PolicyNode("controller", None, spaces.Discrete(2)),
        ...     ],
        ...     [
        ...         PolicyLink("env", "planner", "wifi-normal"),
        ...         PolicyLink("planner", "controller", "wifi-normal"),
        ...         PolicyLink("env", "controller"),
        ...         PolicyLink("controller", "env"),
        ...     ],
        ... )
        >>> env = PolicyGraphEnv(gym.make("CartPole-v1"), graph, trained="controller")
        >>> obs, info = env.reset(seed=0)
        >>> sorted(obs), env.action_space
        (['env', 'planner'], Discrete(2))
        >>> obs, reward, terminated, truncated, info = env.step(1)
        >>> info["graph_ticks"], info["input_age_steps"]["env"]
        (1, 0)

    Raises:
        TypeError, ValueError: For a bad argument (a trained node not in the graph, a
            node other than it without a policy, an actuator whose space is not the env's).
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        graph: PolicyGraph,
        trained: str,
        *,
        step_ms: float | None = None,
        uplink_share: float = 0.5,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, graph=graph, trained=trained, step_ms=step_ms, uplink_share=uplink_share
        )
        if not isinstance(env, gym.Env):
            raise TypeError(f"env: expected a gymnasium.Env, actual {type(env).__name__}")
        if not isinstance(graph, PolicyGraph):
            raise TypeError(f"graph: expected a PolicyGraph, actual {type(graph).__name__}")
        if not isinstance(trained, str) or trained not in graph.nodes:
            raise ValueError(
                f"trained: expected one of the graph's nodes ({', '.join(graph.nodes)}), "
                f"actual {quote(trained)}"
            )
        graph.check_policies(trained)
        actuator = graph.nodes[graph.actuator]
        if actuator.action_space != env.action_space:
            raise ValueError(
                f"node {actuator.name!r} acts on the env: expected its action_space to be the "
                f"env's {env.action_space}, actual {actuator.action_space}"
            )
        gym.Wrapper.__init__(self, env)
        if step_ms is None:
            step_ms = infer_step_ms(env)
            if step_ms is None:
                raise ValueError(
                    "step_ms: the env has no control period to infer it from; pass step_ms"
                )
        self.step_ms = check_float("step_ms", step_ms, 1e-3, 1e7)
        self.uplink_share = check_uplink_share(uplink_share)
        self.graph, self.trained = graph, trained
        self._node = graph.nodes[trained]
        self._inputs = {name: graph.inputs_of(name) for name in graph.nodes}
        self._env_inputs = graph.inputs_of(ENV_NODE)
        self._out = {
            name: [k for k in graph.links if k.source == name] for name in (ENV_NODE, *graph.nodes)
        }

        def space_of(source: str) -> gym.Space[Any]:
            return env.observation_space if source == ENV_NODE else graph.nodes[source].action_space

        self.observation_space = spaces.Dict(
            {link.source: space_of(link.source) for link in self._inputs[trained]}
        )
        self.action_space = self._node.action_space
        self._root: np.random.SeedSequence | None = None
        self._wires: dict[tuple[str, str], _Wire] = {}
        self._fresh: dict[tuple[str, str], tuple[int, Any]] = {}
        self._t = 0
        self._pos = 0  # the trained node's index in graph.order
        self._applied: Any = None
        self._done = True

    # -- the loop --------------------------------------------------------------------
    def _read(self, name: str, tick: int) -> dict[str, Any]:
        """``name``'s inputs at ``tick``: each incoming link's freshest message."""
        out = {}
        for link in self._inputs[name]:
            key = (link.source, link.target)
            got = self._wires[key].receive(tick)
            if got is not None:
                self._fresh[key] = got
            out[link.source] = self._fresh[key][1]
        return out

    def _send(self, source: str, tick: int, stamp: int, payload: Any) -> None:
        for link in self._out[source]:
            self._wires[(source, link.target)].send(tick, stamp, copy_tree(payload))

    def _observation(self) -> tuple[dict[str, Any], dict[str, int]]:
        obs = self._read(self.trained, self._t)
        ages = {
            link.source: self._t - self._fresh[(link.source, self.trained)][0]
            for link in self._inputs[self.trained]
        }
        return obs, ages

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None or self._root is None:
            self._root = np.random.SeedSequence(seed, spawn_key=(_GRAPH_STREAM_KEY,))
        children = self._root.spawn(len(self.graph.links))
        env_phase = 1.0 - self.uplink_share
        self._wires, self._fresh = {}, {}
        for link, child in zip(self.graph.links, children, strict=True):
            sampler = link.channel.sampler(
                np.random.Generator(np.random.PCG64(child)), self.step_ms
            )
            send = env_phase if link.source == ENV_NODE else 0.0
            recv = env_phase if link.target == ENV_NODE else 0.0
            key = (link.source, link.target)
            self._wires[key] = _Wire(sampler, self.step_ms, send, recv)
            first = obs if link.source == ENV_NODE else self.graph.nodes[link.source].start_output
            self._fresh[key] = (0, copy_tree(first))
        self._applied = self.graph.nodes[self.graph.actuator].start_output
        for name, node in self.graph.nodes.items():
            hook = getattr(node.policy, "reset", None)
            if name != self.trained and callable(hook):
                hook()  # a stateful policy (a planner's current waypoint) starts over
        self._t, self._done = 0, False
        self._pos = self.graph.order.index(self.trained)
        self._run_nodes(0, stop_at_trained=True)
        observation, ages = self._observation()
        return observation, {**info, "input_age_steps": ages}

    def _run_nodes(self, start: int, *, stop_at_trained: bool) -> bool:
        """Run the nodes due at this tick from position ``start``; True if paused at the
        trained node (which is then due)."""
        t = self._t
        for pos in range(start, len(self.graph.order)):
            name = self.graph.order[pos]
            node = self.graph.nodes[name]
            if t % node.period:
                continue
            if name == self.trained and stop_at_trained:
                return True
            assert node.policy is not None  # checked in __init__
            self._send(name, t, t, node.policy(self._read(name, t)))
        return False

    def step(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError("step: the episode is over (or never started); call reset() first")
        if action not in self.action_space:
            raise ValueError(
                f"action: expected an element of {self.action_space}, actual {quote(action)}"
            )
        reward = 0.0
        ticks = 0
        terminated = truncated = False
        info: dict[str, Any] = {}
        self._send(self.trained, self._t, self._t, action)
        start = self._pos + 1
        while True:
            self._run_nodes(start, stop_at_trained=False)
            # The env's step t, at (t + 1 - s) P: the freshest action that has reached it.
            env_link = self._env_inputs[0]
            key = (env_link.source, ENV_NODE)
            got = self._wires[key].receive(self._t)
            if got is not None:
                self._fresh[key] = got
                self._applied = got[1]
            obs, r, terminated, truncated, info = self.env.step(self._applied)
            reward += float(r)
            ticks += 1
            self._send(ENV_NODE, self._t, self._t + 1, obs)
            self._t += 1
            if terminated or truncated:
                self._done = True
                break
            if self._run_nodes(0, stop_at_trained=True):
                break
            start = len(self.graph.order)  # the nodes of this tick have run
        observation, ages = self._observation()
        info = {**info, "graph_ticks": ticks, "input_age_steps": ages}
        return observation, reward, terminated, truncated, info

    def run_episode(self, seed: int | None = None) -> tuple[float, int]:
        """One episode with every node's own policy, the trained one's included.

        Returns the episode's return and its length in env steps (ticks).

        Args:
            seed: Passed to :meth:`reset`: seeds the env and the links' delay streams, so
                the same seed with the same policies gives the same episode. None: the
                streams continue and the env is reset without a seed.

        Raises:
            ValueError: If the trained node has no policy.
        """
        policy = self._node.policy
        if policy is None:
            raise ValueError(f"run_episode: the trained node {self.trained!r} has no policy")
        obs, _ = self.reset(seed=seed)
        total, ticks = 0.0, 0
        while True:
            obs, reward, terminated, truncated, info = self.step(policy(obs))
            total += float(reward)
            ticks += info["graph_ticks"]
            if terminated or truncated:
                return total, ticks
