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
from fleetgym.wrappers.channel_base import DelaySampler

__all__ = [
    "START_RULES",
    "UNDERRUN_RULES",
    "ActionPacket",
    "ArrivalLink",
    "Playout",
    "PlayoutBuffer",
    "check_packet",
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

    Args:
        tick: The tick ``actions[0]`` applies at (an int >= 0).
        actions: A non-empty sequence of actions (a list, or an array whose first axis is
            the chunk); kept as given.

    Example:
        >>> p = ActionPacket(5, [1, 0, 1])
        >>> p.tick, len(p), p.covers(6), p.action_at(6)
        (5, 3, True, 0)

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
        """Whether this packet holds an action for ``tick``.

        Args:
            tick: A control tick (an int; ticks count ``step`` calls from 0 at ``reset``).
        """
        return self.tick <= tick < self.tick + len(self.actions)

    def action_at(self, tick: int) -> Any:
        """The action for ``tick`` (which the packet must cover).

        Args:
            tick: A tick in ``self.tick .. self.tick + len(self) - 1`` (see :meth:`covers`);
                outside it, the result is another tick's action or an IndexError.
        """
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

        Args:
            space: The env's action space; ``safe_action`` is checked against it. When a
                rule needs a safe action and ``safe_action`` is None, a Box space's zero
                action (clipped into its bounds) is used.

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
    """The packets arrived for the ticks to come; at each tick, the newest one's action.

    ``receive(sent, packet, now)`` files a packet that arrived at tick ``now``;
    ``take(t)`` returns ``(sent_tick, action)`` of the newest (latest sent) filed packet
    that covers tick ``t``, or None. Ticks are taken in order, each once.

    A packet is an entry ``(sent, start, actions, end)`` (``end = start + k``), *eligible*
    from tick ``max(start, arrival)``: held in ``pending`` under that tick until then, then
    moved to ``active``. An active entry is dropped once a newer active one ends no earlier
    (the newer one covers every tick it could), so ``active`` runs from the oldest to the
    newest with decreasing ends, the winner at a tick is its last entry not yet ended, and
    a packet costs O(1) to file whatever its ``k``.
    """

    __slots__ = ("active", "pending", "more", "_next", "late")

    def __init__(self) -> None:
        self.active: list[tuple[int, int, Any, int]] = []
        self.pending: dict[int, tuple[int, int, Any, int]] = {}
        #: Entries eligible at a tick another pending entry already holds (rare).
        self.more: dict[int, list[tuple[int, int, Any, int]]] = {}
        self._next = 0  # the next tick take() expects
        self.late = 0

    def clear(self) -> None:
        self.active.clear()
        self.pending.clear()
        self.more.clear()
        self._next = 0
        self.late = 0

    def __len__(self) -> int:
        return len(self.active) + len(self.pending) + sum(map(len, self.more.values()))

    def receive(self, sent: int, packet: ActionPacket | tuple[int, Any], now: int) -> int:
        """File ``packet`` (sent at tick ``sent``; an ActionPacket or its ``(tick, actions)``)
        at tick ``now``; returns the ticks it still covers (0: it came too late for all of
        them, counted in ``late``)."""
        if isinstance(packet, ActionPacket):
            start, actions = packet.tick, packet.actions
        else:
            start, actions = packet
        end = start + len(actions)
        eligible = start if start > now else now
        if eligible >= end:
            self.late += 1
            return 0
        self.pend(eligible, (sent, start, actions, end))
        return end - eligible

    def pend(self, eligible: int, entry: tuple[int, int, Any, int]) -> None:
        """Hold ``entry`` until tick ``eligible`` (>= the next tick taken)."""
        if eligible not in self.pending:
            self.pending[eligible] = entry
        else:
            self.more.setdefault(eligible, []).append(entry)

    def activate(self, entry: tuple[int, int, Any, int]) -> None:
        """Make ``entry`` active (its start has come and it has arrived)."""
        active = self.active
        sent, end = entry[0], entry[3]
        if not active or active[-1][0] <= sent:  # the newest so far: the common case
            while active and active[-1][3] <= end:
                active.pop()
            active.append(entry)
            return
        # Older than an active entry (sent out of order): keep it only where it is not
        # covered by a newer one, and drop the older ones it covers.
        i = len(active)
        while i and active[i - 1][0] > sent:
            i -= 1
        if active[i][3] >= end:
            return
        j = i
        while j and active[j - 1][3] <= end:
            j -= 1
        active[j:i] = [entry]

    def take(self, tick: int) -> tuple[int, Any] | None:
        if tick != self._next:
            self._catch_up(tick)
        self._next = tick + 1
        entry = self.pending.pop(tick, None)
        if entry is not None:
            self.activate(entry)
            if self.more:
                for other in self.more.pop(tick, ()):
                    self.activate(other)
        active = self.active
        while active and active[-1][3] <= tick:
            active.pop()
        if not active:
            return None
        entry = active[-1]
        return entry[0], entry[2][tick - entry[1]]

    def _catch_up(self, tick: int) -> None:
        """Activate what became eligible at ticks skipped before ``tick`` (take() was not
        called for them)."""
        for when in sorted(t for t in self.pending if t < tick):
            self.activate(self.pending.pop(when))
            for other in self.more.pop(when, ()):
                self.activate(other)


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
