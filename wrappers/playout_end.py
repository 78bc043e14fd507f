"""The env end of a shim with a playout buffer: one episode's state and one tick.

The rules (packet format, clock, playout, start and gaps) are documented in
:mod:`fleetgym.wrappers.playout`; this module applies them, for the network shim (Mode 2)
and for ``fleetgym serve-env`` (Mode 3), with the same code.
"""

from __future__ import annotations

import math
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from fleetgym.validation import quote
from fleetgym.wrappers.links import FifoLink, copy_tree
from fleetgym.wrappers.playout import (
    ActionPacket,
    ArrivalLink,
    Playout,
    PlayoutBuffer,
    check_packet,
)

__all__ = ["PlayoutEnd"]

_INF = math.inf
_ndarray = np.ndarray


class PlayoutEnd:
    """The env end of a shim with a playout buffer: one episode's state and one tick.

    :meth:`step` is the shim's ``step`` for a packet: check it, send it on the downlink,
    file what arrived, apply tick ``t``'s action (or wait, or handle an underrun), step the
    env, send the observation on the uplink, and return the freshest observation. Two
    forms: :meth:`step_fifo` on the shim's :class:`~fleetgym.wrappers.links.FifoLink`
    pair (``delivery="fifo"``, the default: every delivery tick precomputed, each packet
    filed as it arrives, newest last), and :meth:`step` on an :class:`ArrivalLink` and a
    ``PacketLink`` (``delivery="latest"``, or copied observations). Both put
    ``action_source``, ``obs_age_steps`` and ``action_age_steps`` in the env's ``info``
    (with ``full``, the applied action and the links' losses too).
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
        self._max_ahead, self._max_chunk = playout.max_ahead, playout.max_chunk
        self._wait = playout.start == "wait"
        self._underrun = playout.underrun
        self._hold = playout.underrun == "hold"
        self.buffer = PlayoutBuffer()
        # step_fifo's links and their position in the blocks of delays (see attach).
        self._up: Any = None
        self._down: Any = None
        self._k = 0
        # Late packets of step_fifo, by the tick they arrive at (counted then).
        self._late_at: dict[int, int] = {}
        #: Whether step() also puts ``uplink_lost``, ``downlink_lost`` and
        #: ``applied_action`` in ``info`` (the shim's ``info="full"``).
        self.full = False
        self.start(None)

    def start(self, obs: Any) -> None:
        """A new episode: nothing filed or in flight, counters 0; ``obs`` is the env's
        current state."""
        self.buffer.clear()
        self._late_at.clear()
        self.obs = obs
        self.wait_ticks = 0
        self.underruns = 0
        self.holds = 0  # ticks applied without a packet's action (not waits)
        self.applied: Any = self.safe
        self.applied_sent = -1

    def attach(self, up: FifoLink, down: FifoLink, block: int) -> None:
        """Use ``up`` and ``down`` (new links, whose first step draws their first blocks of
        ``block`` delays) in :meth:`step_fifo`."""
        self._up, self._down = up, down
        self._k = block

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
        tick, actions = packet.tick, packet.actions
        if tick < t or tick > t + self._max_ahead or len(actions) > self._max_chunk:
            check_packet(packet, t, self.playout, self._check_action)
        hi = self._hi
        if hi:  # a Discrete space: valid Python ints (an int array's tolist) pass
            lo = self._lo
            ints = actions.tolist() if type(actions) is _ndarray else actions
            for action in ints:
                if type(action) is not int or not lo <= action < hi:
                    return self._check_each(actions, t)
            return ints
        return self._check_chunk(actions, t)

    def _check_chunk(self, actions: Any, t: int) -> Any:
        """The actions of a packet of a space other than Discrete, checked."""
        if type(actions) is _ndarray and actions.ndim >= 1:
            k = len(actions)
            batch = self._batch_checks.get(k)
            if batch is None:
                from fleetgym.wrappers.action_check import ActionCheck

                batch = self._batch_checks[k] = ActionCheck(self._space, batch=k)
            batch(actions, t)
            return actions
        return self._check_each(actions, t)

    def _check_each(self, actions: Any, t: int) -> Any:
        """Each action checked on its own (raises for the first invalid one)."""
        for action in actions:
            self._check_action(action, t)
        if self._hi and type(actions) is _ndarray and actions.ndim == 1:
            return actions.tolist()
        return actions

    def choose(self, t: int) -> tuple[Any, str]:
        """Tick ``t``'s action and where it came from (``None`` and ``"wait"``: no step)."""
        got = self.buffer.take(t)
        if got is not None:
            self.applied_sent, self.applied = got
            return got[1], "packet"
        return self._gap(t)

    def _gap(self, t: int) -> tuple[Any, str]:
        """Tick ``t`` with no covering packet: wait, the start action, or an underrun."""
        if self.applied_sent < 0:  # no packet's action applied yet this episode
            if self._wait:
                self.wait_ticks += 1
                return None, "wait"
            self.holds += 1
            return self.safe, "start"
        self.underruns += 1
        self.holds += 1
        rule = self._underrun
        if rule == "hold":
            return self.applied, "hold"
        if rule == "safe":
            return self.safe, "safe"
        action = self.playout.fallback(self.obs)  # type: ignore[misc]
        self._check_action(action, t)
        return action, "fallback"

    def _paused(self) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """A tick spent waiting for the first action: the env does not step."""
        obs = self.obs
        obs = obs.copy() if type(obs) is _ndarray else obs
        info: dict[str, Any] = {}
        truncated = self.wait_ticks >= self.playout.max_wait
        if truncated:
            info["playout_timeout"] = True
        return obs, 0.0, False, truncated, info

    def step(
        self, env: gym.Env[Any, Any], t: int, packet: Any, down: ArrivalLink, up: Any
    ) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """One tick on an :class:`ArrivalLink` downlink and a ``PacketLink`` uplink."""
        actions = self.check(packet, t)
        down_lost, arrived = down.tick(t, (packet.tick, actions))
        if arrived:
            receive = self.buffer.receive
            for sent, p in arrived:
                receive(sent, p, t)
        action, source = self.choose(t)
        if action is None:
            obs, reward, terminated, truncated, info = self._paused()
        else:
            obs, reward, terminated, truncated, info = env.step(action)
            self.obs = obs
        up_code = up.tick(t + 1, obs)
        ret = up.best_payload
        if up_code < 2:
            ret = ret.copy() if type(ret) is _ndarray else copy_tree(ret)
        info["action_source"] = source
        info["obs_age_steps"] = t + 1 - up.best_idx
        # The age of the packet whose plan applies (held or not); before the first, the
        # start counts as sent at tick -1 (applied_sent is -1 then).
        info["action_age_steps"] = t - self.applied_sent
        if self.full:
            info["uplink_lost"] = up_code & 1 == 1
            info["downlink_lost"] = down_lost
            info["applied_action"] = action
        return ret, reward, terminated, truncated, info

    def step_fifo(
        self, env: gym.Env[Any, Any], t: int, packet: Any
    ) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """One tick on the attached FifoLinks (their send and delivery inlined, as in the
        shim's own step)."""
        # check(), its Discrete case inlined: valid Python ints (an int array's tolist).
        if type(packet) is not ActionPacket:
            check_packet(packet, t, self.playout, self._check_action)
        start, actions = packet.tick, packet.actions
        if start < t or start > t + self._max_ahead or len(actions) > self._max_chunk:
            check_packet(packet, t, self.playout, self._check_action)
        hi = self._hi
        if hi:
            lo = self._lo
            ints = actions.tolist() if type(actions) is _ndarray else actions
            for a in ints:
                if type(a) is not int or not lo <= a < hi:
                    ints = self._check_each(actions, t)
                    break
            actions = ints
        else:
            actions = self._check_chunk(actions, t)
        down, up = self._down, self._up
        k = self._k
        try:
            late_down = down.late[k]
            late_up = up.late[k]
        except IndexError:  # both blocks used up (each link draws one packet a step)
            down.refill(t)
            up.refill(t)
            k = 0
            late_down = down.late[0]
            late_up = up.late[0]
        self._k = k + 1
        # Send: the packet arrives at tick floor(t + delay), never before the one sent before
        # it, and is eligible from the later of that tick and its start (PlayoutBuffer).
        buffer = self.buffer
        due_at = t + late_down if late_down is not None else self._special(k, t)
        if due_at >= 0:
            if due_at > down.last:
                down.last = due_at
            else:
                due_at = down.last
            end = start + len(actions)
            if due_at >= end:  # it arrives after all its ticks: late (counted then)
                late_at = self._late_at
                late_at[due_at] = late_at.get(due_at, 0) + 1
            else:
                eligible = start if start > due_at else due_at
                pending = buffer.pending
                if eligible in pending:
                    buffer.pend(eligible, (t, start, actions, end))
                else:
                    pending[eligible] = (t, start, actions, end)
        late_at = self._late_at
        if late_at:
            buffer.late += late_at.pop(t, 0)
        # Apply tick t's action: the newest eligible packet that covers t (take(), inlined;
        # every tick is taken here, in order).
        active = buffer.active
        got = buffer.pending.pop(t, None)
        if got is not None:
            if not active or active[-1][0] <= got[0]:  # activate(), its common case
                end = got[3]
                while active and active[-1][3] <= end:
                    active.pop()
                active.append(got)
            else:
                buffer.activate(got)
            if buffer.more:
                for other in buffer.more.pop(t, ()):
                    buffer.activate(other)
        while active and active[-1][3] <= t:
            active.pop()
        if active:
            got = active[-1]
            self.applied_sent = got[0]
            self.applied = action = got[2][t - got[1]]
            source = "packet"
        elif self._hold and self.applied_sent >= 0:  # _gap(), its common case
            self.underruns += 1
            self.holds += 1
            action, source = self.applied, "hold"
        else:
            action, source = self._gap(t)
        if action is None:
            obs, reward, terminated, truncated, info = self._paused()
        else:
            obs, reward, terminated, truncated, info = env.step(action)
            self.obs = obs
        # The uplink (FifoLink's send and delivery, as in the shim's step).
        t1 = t + 1
        due = up.due
        if late_up is not None:
            due_at = t1 + late_up
            if due_at > up.last:
                up.last = due_at
                due[due_at] = (t1, obs, up.overtaken)
            else:
                up.overtaken = n = up.overtaken + 1
                due[up.last] = (t1, obs, n)
            up_lost = False
        else:
            up_lost = up.send_special(k, t1, obs)
        fresh = due.pop(t1, None)
        if fresh is None:
            used = up.best
            ret = used[1]
            ret = ret.copy() if type(ret) is _ndarray else copy_tree(ret)
        else:
            up.best = used = fresh
            ret = fresh[1]
        info["action_source"] = source
        info["obs_age_steps"] = t1 - used[0]
        info["action_age_steps"] = t - self.applied_sent
        if self.full:
            info["uplink_lost"] = up_lost
            info["downlink_lost"] = down.lost_at(k)
            info["applied_action"] = action
        return ret, reward, terminated, truncated, info

    def _special(self, k: int, t: int) -> int:
        """The tick the downlink's packet ``t`` (entry ``k`` of the block, lateness None) is
        due at, from the exact float sum; -1 if it is lost."""
        down = self._down
        rel = float(down.rel[k])
        if rel == _INF:
            down.lost += 1
            return -1
        return int(t + rel)  # t + rel >= 0: int() is floor
