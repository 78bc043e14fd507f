"""Scheduled actions and action chunks: the env side's playout buffer.

Today's shim applies whichever action arrived last, so the network's jitter and loss decide
*when* each action acts. Networked control's answer (a de-jitter buffer at the actuator, as
in VoIP and teleoperation, and packet-based predictive control, where a packet carries a
plan of several actions) is implemented here:

**Packet format.** An :class:`ActionPacket` ``(tick, actions)`` carries ``k >= 1`` actions;
``actions[i]`` is meant for the env's tick ``tick + i``. The agent stamps it ``tick = t + D``
at its own tick ``t`` (``D``: the playout delay in ticks, chosen by the agent, e.g. with
:func:`choose_schedule`).

**Clock.** Both ends count control ticks from the episode's ``reset``: tick ``t`` is the
``t``-th ``step`` of the shim since the reset, so the agent's and the env's tick numbers are
the same without a clock exchange (the timeline of :mod:`fleetgym.wrappers.timeline`: the
env's step ``t`` happens ``(1 - uplink_share)`` of a period after the agent's tick ``t``).

**Playout rule.** At its tick ``t`` the env takes every packet that has arrived by then and
applies the action for tick ``t`` of the *newest* (latest sent) arrived packet that covers
``t``. A jittery link thus becomes a constant delay ``D`` whenever packets arrive within it,
and a lost or late packet is covered by the plan of an earlier one. Packets that arrive after
every tick they cover has passed are counted (``late_packets``) and dropped.

**Start and gaps** (:class:`Playout`). Before the first action of an episode applies, the env
either **waits** (``start="wait"``, the default: physics paused, as a robot waits for its
first command; the tick returns the same observation, reward 0, and counts in
``info["network"]["wait_ticks"]``) or applies ``safe_action`` (``start="safe"``). A tick
after that with no covering action is an **underrun**, handled by ``underrun``: ``"hold"``
(the last applied action again, the default), ``"safe"`` (``safe_action``) or ``"fallback"``
(``fallback(obs)``: a local policy on the env side, which sees the env's true current
observation). Underruns are counted in ``info``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.errors import InvalidActionError
from fleetgym.validation import check_choice, check_int, quote
from fleetgym.wrappers.channels import DelaySampler

__all__ = [
    "START_RULES",
    "UNDERRUN_RULES",
    "ActionPacket",
    "ArrivalLink",
    "Playout",
    "PlayoutBuffer",
]

#: What the env does before the first action of an episode applies.
START_RULES = ("wait", "safe")
#: What the env does at a tick no arrived packet covers (after the first action).
UNDERRUN_RULES = ("hold", "safe", "fallback")
#: Most actions in one packet, and the furthest ahead a packet may be stamped (ticks).
MAX_CHUNK = 4096
MAX_AHEAD = 100_000

_INF = math.inf


@dataclass(frozen=True)
class ActionPacket:
    """``k`` actions for the ticks ``tick .. tick + k - 1`` (see the module docstring).

    Example:
        >>> p = ActionPacket(5, [1, 0, 1])
        >>> p.tick, len(p), p.covers(6), p.action_at(6)
        (5, 3, True, 0)

    Args:
        tick: The tick ``actions[0]`` applies at (an int >= 0).
        actions: A non-empty sequence of actions (a list, or an array whose first axis is
            the chunk); kept as given.

    Raises:
        TypeError, ValueError: For a tick that is not an int >= 0, or no actions.
    """

    tick: int
    actions: Any = field(repr=False)

    def __post_init__(self) -> None:
        tick = self.tick
        if isinstance(tick, bool) or not isinstance(tick, (int, np.integer)):
            raise TypeError(f"ActionPacket.tick: expected an int >= 0, actual {quote(tick)}")
        if tick < 0:
            raise ValueError(f"ActionPacket.tick: expected an int >= 0, actual {tick}")
        object.__setattr__(self, "tick", int(tick))
        try:
            k = len(self.actions)
        except TypeError:
            raise TypeError(
                "ActionPacket.actions: expected a sequence of actions (one per tick), "
                f"actual {quote(self.actions)}"
            ) from None
        if k == 0:
            raise ValueError("ActionPacket.actions: expected at least one action, actual none")

    def __len__(self) -> int:
        return len(self.actions)

    def covers(self, tick: int) -> bool:
        """Whether this packet holds an action for ``tick``."""
        return self.tick <= tick < self.tick + len(self.actions)

    def action_at(self, tick: int) -> Any:
        """The action for ``tick`` (which the packet must cover)."""
        return self.actions[tick - self.tick]


@dataclass(frozen=True)
class Playout:
    """The env side's rules for scheduled action packets (see the module docstring).

    Args:
        start: ``"wait"`` (default: the env's physics waits for the first action) or
            ``"safe"`` (``safe_action`` until then).
        underrun: ``"hold"`` (default), ``"safe"`` or ``"fallback"``.
        safe_action: The action of ``start="safe"`` and ``underrun="safe"`` (required by
            them for a Discrete space, which has no neutral action; a Box space's default is
            its zero action clipped into the bounds).
        fallback: ``fallback(obs) -> action``, the env side's local policy for
            ``underrun="fallback"`` (an SB3 model's ``predict`` works through a lambda).
        max_wait: Ticks the env waits for its first action before it truncates the episode
            (``info["playout_timeout"]``), so a dead link cannot hang a run.
        max_ahead: The furthest ahead of the current tick a packet may be stamped.
        max_chunk: The most actions a packet may carry.

    Raises:
        TypeError, ValueError: For a bad rule or bound.
    """

    start: str = "wait"
    underrun: str = "hold"
    safe_action: Any = None
    fallback: Callable[[Any], Any] | None = field(default=None, compare=False)
    max_wait: int = 1000
    max_ahead: int = 1000
    max_chunk: int = 256

    def __post_init__(self) -> None:
        check_choice("start", self.start, START_RULES)
        check_choice("underrun", self.underrun, UNDERRUN_RULES)
        check_int("max_wait", self.max_wait, 1, 10**9)
        check_int("max_ahead", self.max_ahead, 1, MAX_AHEAD)
        check_int("max_chunk", self.max_chunk, 1, MAX_CHUNK)
        if self.underrun == "fallback" and not callable(self.fallback):
            raise TypeError(
                "fallback: expected a callable obs -> action for underrun='fallback', "
                f"actual {quote(self.fallback)}"
            )

    def safe_for(self, space: gym.Space[Any]) -> Any:
        """The safe action for ``space`` (None when no rule needs one).

        Raises:
            ValueError: When a rule needs it and there is none, or it is outside ``space``.
        """
        needed = self.start == "safe" or self.underrun == "safe"
        action = self.safe_action
        if action is None:
            if not needed:
                return None
            if isinstance(space, spaces.Box):
                return np.clip(np.zeros(space.shape, space.dtype), space.low, space.high)
            raise ValueError(
                f"safe_action: expected an element of {space} for start/underrun 'safe' "
                "(a Discrete space has no neutral action), actual None"
            )
        if not space.contains(
            np.asarray(action, dtype=space.dtype) if isinstance(space, spaces.Box) else action
        ):
            raise ValueError(f"safe_action: expected an element of {space}, actual {quote(action)}")
        return action


class ArrivalLink:
    """One direction that delivers *every* packet, in arrival order (not only the freshest).

    The same delays as the shim's ``PacketLink`` for the same sampler (drawn ``block`` at a
    time, in periods, the direction's ``offset`` added): a packet sent at tick ``i`` arrives
    at ``a = i + rel`` (``fifo``: never before the packet sent before it) and is delivered
    at tick ``floor(a)``.
    """

    __slots__ = (
        "sampler",
        "step_ms",
        "block",
        "offset",
        "fifo",
        "_draws",
        "_k",
        "_pending",
        "_last",
        "lost",
        "reordered",
        "_newest",
    )

    def __init__(
        self, sampler: DelaySampler, step_ms: float, block: int, fifo: bool, offset: float = 0.0
    ) -> None:
        self.sampler = sampler
        self.step_ms = step_ms
        self.block = block
        self.offset = offset
        self.fifo = fifo
        self._draws: list[float] = []
        self._k = 0
        self._pending: Any = deque() if fifo else []
        self.start()

    def start(self) -> None:
        """Nothing in flight, counters 0 (delays stay pre-drawn)."""
        self._pending.clear()
        self._last = -_INF
        self._newest = -1
        self.lost = self.reordered = 0

    def tick(self, idx: int, payload: Any) -> tuple[bool, list[tuple[int, Any]]]:
        """Send packet ``idx`` at tick ``idx``; returns (lost, the ``(idx, payload)`` of every
        packet delivered at this tick, in arrival order)."""
        k = self._k
        draws = self._draws
        if k >= len(draws):
            rel_block = self.sampler.next(self.block) / self.step_ms
            if self.offset:
                rel_block += self.offset
            self._draws = draws = rel_block.tolist()
            k = 0
        rel = draws[k]
        self._k = k + 1
        limit = idx + 1.0
        pending = self._pending
        lost = rel == _INF
        if self.fifo:
            if lost:
                self.lost += 1
            else:
                arrival = idx + rel
                if arrival < self._last:
                    arrival = self._last
                self._last = arrival
                if arrival < limit and not pending:
                    return False, [(idx, payload)]  # on time, nothing in flight
                pending.append((arrival, idx, payload))
            if not pending or pending[0][0] >= limit:
                return lost, []
            out = []
            while pending and pending[0][0] < limit:
                item = pending.popleft()
                out.append((item[1], item[2]))
            return lost, out
        if lost:
            self.lost += 1
        else:
            heapq.heappush(pending, (idx + rel, idx, payload))
        if not pending or pending[0][0] >= limit:
            return lost, []
        out = []
        while pending and pending[0][0] < limit:
            _, i, p = heapq.heappop(pending)
            if i < self._newest:
                self.reordered += 1
            else:
                self._newest = i
            out.append((i, p))
        return lost, out


class PlayoutBuffer:
    """The actions arrived for the ticks to come: for each tick, the newest packet's.

    ``receive`` files a packet's actions for the ticks from ``now`` on (an entry is replaced
    only by a packet sent later); ``take(t)`` removes and returns tick ``t``'s entry
    ``(sent_tick, action)``, or None. Entries exist only for ticks not yet taken, so the
    buffer holds at most ``max_ahead + max_chunk`` entries.
    """

    __slots__ = ("_plan", "late")

    def __init__(self) -> None:
        self._plan: dict[int, tuple[int, Any]] = {}
        self.late = 0

    def clear(self) -> None:
        self._plan.clear()
        self.late = 0

    def __len__(self) -> int:
        return len(self._plan)

    def receive(self, sent: int, packet: ActionPacket | tuple[int, Any], now: int) -> int:
        """File ``packet`` (sent at tick ``sent``; an ActionPacket or its ``(tick, actions)``)
        at tick ``now``; returns the ticks it still covers (0: it came too late for all of
        them, counted in ``late``)."""
        if isinstance(packet, ActionPacket):
            start, actions = packet.tick, packet.actions
        else:
            start, actions = packet
        first = now - start if now > start else 0
        k = len(actions)
        if first >= k:
            self.late += 1
            return 0
        plan = self._plan
        for i in range(first, k):
            tick = start + i
            old = plan.get(tick)
            if old is None or old[0] <= sent:
                plan[tick] = (sent, actions[i])
        return k - first

    def take(self, tick: int) -> tuple[int, Any] | None:
        return self._plan.pop(tick, None)


def check_packet(
    packet: Any, t: int, playout: Playout, check_action: Callable[[Any, int], None]
) -> ActionPacket:
    """``packet`` as a valid :class:`ActionPacket` sent at tick ``t``.

    Raises:
        InvalidActionError: For anything else: not a packet, stamped before ``t`` or more
            than ``max_ahead`` ticks after it, more than ``max_chunk`` actions, or an action
            outside the action space (NaN included).
    """
    if not isinstance(packet, ActionPacket):
        raise InvalidActionError(
            f"action at step {t}: expected an ActionPacket (the shim has a playout buffer), "
            f"actual {quote(packet)}"
        )
    if packet.tick < t:
        raise InvalidActionError(
            f"action packet at step {t}: expected a tick >= {t} (not in the past), "
            f"actual {packet.tick}"
        )
    if packet.tick > t + playout.max_ahead:
        raise InvalidActionError(
            f"action packet at step {t}: expected a tick <= {t + playout.max_ahead} "
            f"(max_ahead {playout.max_ahead}), actual {packet.tick}"
        )
    if len(packet) > playout.max_chunk:
        raise InvalidActionError(
            f"action packet at step {t}: expected at most {playout.max_chunk} actions "
            f"(max_chunk), actual {len(packet)}"
        )
    for action in packet.actions:
        check_action(action, t)
    return packet


class PlayoutEnd:
    """The env end of a shim with a playout buffer: one episode's state and one tick.

    :meth:`step` is the shim's ``step`` for a packet: check it, send it on the downlink
    (:class:`ArrivalLink`), file what arrived, apply tick ``t``'s action (or wait, or handle
    an underrun), step the env, send the observation on the uplink (the shim's
    ``PacketLink``), and return the freshest observation.
    """

    def __init__(self, playout: Playout, space: gym.Space[Any], check_action: Any) -> None:
        if not isinstance(playout, Playout):
            raise TypeError(f"playout: expected a Playout or None, actual {quote(playout)}")
        self.playout = playout
        self.safe = playout.safe_for(space)
        self._space = space
        self._check_action = check_action
        self._batch_checks: dict[int, Any] = {}
        # A Discrete space's valid Python ints skip the call (the shim's fast path).
        lo, hi = check_action.int_range or (0, 0)
        self._lo, self._hi = lo, hi
        self._wait = playout.start == "wait"
        self._underrun = playout.underrun
        self.buffer = PlayoutBuffer()
        self.start(None)

    def start(self, obs: Any) -> None:
        """A new episode: nothing filed, counters 0; ``obs`` is the env's current state."""
        self.buffer.clear()
        self.obs = obs
        self.started = False
        self.wait_ticks = 0
        self.underruns = 0
        self.applied: Any = self.safe
        self.applied_sent = -1

    def stats(self) -> dict[str, int]:
        return {
            "wait_ticks": self.wait_ticks,
            "underruns": self.underruns,
            "late_packets": self.buffer.late,
        }

    def check(self, packet: Any, t: int) -> Any:
        """:func:`check_packet`, with the common cases kept cheap; returns the actions to
        file (a Discrete space's as Python ints, which the env checks fastest)."""
        if type(packet) is not ActionPacket:
            check_packet(packet, t, self.playout, self._check_action)
        playout = self.playout
        tick, actions = packet.tick, packet.actions
        if tick < t or tick > t + playout.max_ahead or len(actions) > playout.max_chunk:
            check_packet(packet, t, playout, self._check_action)
        lo, hi = self._lo, self._hi
        if type(actions) is np.ndarray and actions.ndim >= 1:
            if hi and actions.ndim == 1 and actions.dtype.kind in "iu":
                ints = actions.tolist()
                for action in ints:
                    if not lo <= action < hi:
                        self._check_action(action, t)
                return ints
            k = len(actions)
            batch = self._batch_checks.get(k)
            if batch is None:
                from fleetgym.wrappers.action_check import ActionCheck

                batch = self._batch_checks[k] = ActionCheck(self._space, batch=k)
            batch(actions, t)
            return actions
        for action in actions:
            if type(action) is int and lo <= action < hi:
                continue
            self._check_action(action, t)
        return actions

    def choose(self, t: int) -> tuple[Any, str]:
        """Tick ``t``'s action and where it came from (``None`` and ``"wait"``: no step)."""
        entry = self.buffer.take(t)
        if entry is not None:
            self.started = True
            self.applied_sent, self.applied = entry
            return self.applied, "packet"
        if not self.started:
            if self._wait:
                self.wait_ticks += 1
                return None, "wait"
            return self.safe, "start"
        self.underruns += 1
        rule = self._underrun
        if rule == "hold":
            return self.applied, "hold"
        if rule == "safe":
            return self.safe, "safe"
        action = self.playout.fallback(self.obs)  # type: ignore[misc]
        self._check_action(action, t)
        return action, "fallback"

    def step(
        self, env: gym.Env[Any, Any], t: int, packet: Any, down: ArrivalLink, up: Any
    ) -> tuple[Any, Any, bool, bool, dict[str, Any], dict[str, Any]]:
        """One tick; returns ``(obs, reward, terminated, truncated, env info, ours)``;
        ``ours`` holds ``action_source``, the link codes and the ages (see the shim)."""
        actions = self.check(packet, t)
        down_lost, arrived = down.tick(t, (packet.tick, actions))
        if arrived:
            receive = self.buffer.receive
            for sent, p in arrived:
                receive(sent, p, t)
        action, source = self.choose(t)
        info: dict[str, Any]
        if action is None:  # waiting for the first action: the env does not step
            obs = self.obs
            obs = obs.copy() if type(obs) is np.ndarray else obs
            reward: Any = 0.0
            terminated, info = False, {}
            truncated = self.wait_ticks >= self.playout.max_wait
            if truncated:
                info["playout_timeout"] = True
        else:
            obs, reward, terminated, truncated, info = env.step(action)
            self.obs = obs
        up_code = up.tick(t + 1, obs)
        ret = up.best_payload
        if up_code < 2 and type(ret) is np.ndarray:
            ret = ret.copy()
        # The age of the packet whose plan applies (held or not); before the first, the
        # start counts as sent at tick -1 (applied_sent is -1 then).
        ours = {
            "action_source": source,
            "obs_age_steps": t + 1 - up.best_idx,
            "action_age_steps": t - self.applied_sent,
            "uplink_lost": up_code & 1 == 1,
            "downlink_lost": down_lost,
            "applied_action": action,
        }
        return ret, reward, terminated, truncated, info, ours
