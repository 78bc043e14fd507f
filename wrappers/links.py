"""The packets in flight: per-direction delay streams and arrival queues of the shims.

:class:`PacketLink` is one direction of one env for
:class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper` (a Python queue, a list lookup
per packet; the reference rule), :class:`FifoLink` the same in ``fifo`` order with each
packet's tick precomputed per block (the shim's default path, its step inlined);
:class:`~fleetgym.wrappers.vector_links.VectorLinks` holds both directions of every sub-env
for the vector shim. All follow the same
control-loop model (:mod:`fleetgym.wrappers.timeline`): a packet sent at tick ``i`` with
delay ``d`` is usable from tick ``floor(i + d / P + offset)``, where ``offset`` is the
direction's wait for the receiving clock's next tick, and in ``fifo`` order never before the
packet sent before it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from fleetgym.wrappers.channel_base import Channel, DelaySampler
from fleetgym.wrappers.channels import GaussianChannel
from fleetgym.wrappers.timeline import freshest

__all__ = ["FifoLink", "PacketLink", "always_on_time", "copy_tree"]

_INF = math.inf
#: Largest delay (in periods, offset included) :func:`always_on_time` accepts: a packet sent
#: at tick i < 2**31 then arrives at ``i + rel`` strictly before tick ``i + 1`` in floating
#: point too (the rounding of ``i + rel`` is at most 2**-21 there).
_ON_TIME_MAX = 1.0 - 2.0**-20


def copy_tree(x: Any) -> Any:
    """``x`` with every array in it copied (dicts and tuples rebuilt, other leaves kept)."""
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, dict):
        return {k: copy_tree(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(copy_tree(v) for v in x)
    return x


def always_on_time(channel: Channel, step_ms: float, offset: float) -> bool:
    """True if every packet of ``channel`` is usable at its own tick, whatever the seed.

    That is a fixed delay (a :class:`~fleetgym.wrappers.channels.GaussianChannel` without
    jitter or loss, which draws no random numbers) short enough to make the receiver's
    next tick: ``perfect``, or a short :func:`~fleetgym.wrappers.channels.FixedDelay`. Such
    a link never holds a packet in flight, never loses or reorders one, and its packet's
    age is always 0, so the shims can skip it. ``rel`` is computed as
    :meth:`PacketLink.refill` computes it.
    """
    if type(channel) is not GaussianChannel or channel.std_ms != 0.0 or channel.loss != 0.0:
        return False
    rel = max(channel.mean_ms, 0.0) / step_ms
    if offset:
        rel += offset
    return rel <= _ON_TIME_MAX


class PacketLink:
    """One direction of the network for one env: pre-drawn delays and in-flight packets.

    Times are in ticks (one control period). A packet sent at tick ``i`` with delay ``d``
    arrives at ``a = i + d / P + offset`` (``fifo``: ``max(a_prev, i + d / P + offset)``)
    and becomes usable at tick ``floor(a)``; ``offset`` (in periods, from
    :class:`~fleetgym.wrappers.timeline.LoopTiming`) is the wait for the receiver's next
    tick. Delays are drawn ``block`` at a time (the offset added then), so the per-step
    cost is a list lookup.
    """

    __slots__ = (
        "sampler",
        "step_ms",
        "block",
        "offset",
        "_draws",
        "fifo",
        "last_arrival",
        "pending",
        "next_due",
        "best_idx",
        "best_payload",
        "reordered",
        "stale",
        "lost",
    )

    def __init__(
        self, sampler: DelaySampler, step_ms: float, block: int, fifo: bool, offset: float = 0.0
    ) -> None:
        self.sampler = sampler
        self.step_ms = step_ms
        self.block = block
        self.offset = offset
        self.fifo = fifo
        # The pre-drawn delays (in periods) left; StopIteration when the block is used up.
        self._draws: Iterator[float] = iter(())
        # Packets in flight (fifo: in arrival order; latest: scanned on arrival).
        self.pending: deque[tuple[float, int, Any]] = deque()
        self.clear()

    def clear(self) -> None:
        """Forget packets in flight and the episode's counters (delays stay pre-drawn)."""
        self.last_arrival = -_INF
        self.pending.clear()
        self.next_due = _INF  # earliest arrival in flight (_INF when none)
        self.best_idx = -1
        self.best_payload: Any = None
        self.reordered = self.stale = self.lost = 0

    def start(self, idx: int, payload: Any) -> None:
        """Start an episode: :meth:`clear`, then ``payload`` (packet ``idx``) the freshest."""
        self.clear()
        self.best_idx = idx
        self.best_payload = payload

    def refill(self) -> None:
        """Draw the next block of delays (in periods, offset added) and start reading it."""
        rel = self.sampler.next(self.block) / self.step_ms
        if self.offset:
            rel += self.offset  # a lost packet stays at inf
        self._draws = iter(rel.tolist())

    def tick(self, idx: int, payload: Any) -> int:
        """Send packet ``idx`` at tick ``idx`` and process that tick's arrivals.

        Returns a code: bit 0 set if this packet was lost, bit 1 set if a packet newer
        than the previous freshest arrived (``best_idx``/``best_payload`` updated).
        """
        try:
            rel = next(self._draws)
        except StopIteration:
            self.refill()
            rel = next(self._draws)
        # Times as floats, so that every comparison below is float with float (the
        # interpreter's fast path); exact, as are idx and idx + 1 (below 2**53).
        limit = idx + 1.0
        if self.fifo:
            # In fifo order arrival times grow with the index, so the packets arriving
            # now are a run at the head of the queue, the last of them the newest, and
            # next_due is the head's arrival.
            pending = self.pending
            if rel != _INF:
                arrival = limit - 1.0 + rel
                last = self.last_arrival
                if arrival < last:
                    arrival = last
                self.last_arrival = arrival
                if arrival < limit:
                    # On time: everything still in flight arrives no later, all older.
                    if pending:
                        self.stale += len(pending)
                        pending.clear()
                        self.next_due = _INF
                    self.best_idx = idx
                    self.best_payload = payload
                    return 2
                if not pending:
                    self.next_due = arrival
                pending.append((arrival, idx, payload))
                code = 0
            else:
                self.lost += 1
                code = 1
            if self.next_due >= limit:
                return code
            item = pending.popleft()
            while pending:
                head = pending[0]
                if head[0] >= limit:
                    self.next_due = head[0]
                    break
                item = pending.popleft()
                self.stale += 1
            else:
                self.next_due = _INF
            self.best_idx = item[1]
            self.best_payload = item[2]
            return code + 2
        pending = self.pending
        if rel < 1.0 and not pending:  # below 1.0: usable at its own tick
            # On time with nothing in flight.
            self.best_idx = idx
            self.best_payload = payload
            return 2
        code = 0
        if rel == _INF:
            self.lost += 1
            code = 1
        else:
            arrival = limit - 1.0 + rel
            pending.append((arrival, idx, payload))
            if arrival < self.next_due:
                self.next_due = arrival
        if self.next_due >= limit:
            return code
        if self._deliver(limit):
            code += 2
        return code

    def _deliver(self, limit: float) -> bool:
        """Take every packet arriving before ``limit``; True if a newer one became freshest.

        The choice is :func:`~fleetgym.wrappers.timeline.freshest`, the rule the remote
        env's receivers apply too (the fifo path of :meth:`tick` is its special case for
        packets that cannot overtake each other).
        """
        arrived: list[tuple[float, int, Any]] = []
        keep: deque[tuple[float, int, Any]] = deque()
        due = _INF
        for item in self.pending:
            if item[0] < limit:
                arrived.append(item)
            else:
                keep.append(item)
                if item[0] < due:
                    due = item[0]
        self.pending = keep
        self.next_due = due
        at, stale, reordered = freshest([item[1] for item in arrived], self.best_idx)
        self.stale += stale
        self.reordered += reordered
        if at < 0:
            return False
        self.best_idx = arrived[at][1]
        self.best_payload = arrived[at][2]
        return True


#: :class:`FifoLink` precomputes a packet's whole-tick lateness only for delays (offset
#: included, in periods) below this, and only while the episode's tick is below it too: then
#: ``i + floor(rel)`` is below 2**31 and equals ``floor(i + rel)`` in floating point unless
#: ``rel`` is within 2**-20 of the next whole number (such packets take the exact path).
_LATE_MAX = float(1 << 30)
_FRAC_MAX = 1.0 - 2.0**-20


class FifoLink:
    """One direction of the scalar shim in ``fifo`` order, with each packet's delivery tick
    precomputed: :class:`PacketLink`'s ``fifo`` rule at a fraction of its cost per step.

    The rule is the same: a packet sent at tick ``i`` with delay ``rel`` (in periods, offset
    included) is usable from tick ``floor(i + rel)`` (floating point, as
    :meth:`PacketLink.tick` computes it), never before the packet sent before it; at each
    tick the newest packet usable is the freshest and any others usable then are stale.
    Each block of delays is turned into whole-tick latenesses ``floor(rel)`` (``late``;
    ``None`` for a lost packet, or one whose tick needs the exact float sum, see
    :meth:`send_special`), so sending a packet is an integer sum and a dict store:
    ``due`` maps a tick to the newest packet usable then, ``(idx, payload, overtaken)``,
    where ``overtaken`` counts the episode's packets so far that joined a tick another packet
    was already due at. The freshest packet ``best`` is such a tuple: its ``overtaken`` is
    the episode's stale count, since a packet is stale exactly when a newer one joins its
    tick, and the packets of a tick are delivered together.

    The network shim inlines :meth:`send` and the delivery (``due.pop(t, None)``) in its step;
    the methods here are the reference for them and serve the rare packets.
    """

    __slots__ = (
        "sampler",
        "step_ms",
        "block",
        "offset",
        "late",
        "rel",
        "due",
        "last",
        "overtaken",
        "lost",
        "best",
    )

    #: Never reordered in fifo order (the same attribute as :class:`PacketLink`'s).
    reordered = 0

    def __init__(
        self, sampler: DelaySampler, step_ms: float, block: int, offset: float = 0.0
    ) -> None:
        self.sampler = sampler
        self.step_ms = step_ms
        self.block = block
        self.offset = offset
        # Per packet of the current block: the lateness in whole ticks (None: see
        # send_special) and the delay in periods, offset included (inf: lost).
        self.late: list[int | None] = []
        self.rel: np.ndarray = np.empty(0)
        self.due: dict[int, tuple[int, Any, int]] = {}
        self.start(-1, None)

    def start(self, idx: int, payload: Any) -> None:
        """Start an episode: nothing in flight, counters 0, ``payload`` (packet ``idx``) the
        freshest."""
        self.due.clear()
        self.last = -1  # the tick the last packet sent is due at (below any tick)
        self.overtaken = self.lost = 0
        self.best: tuple[int, Any, int] = (idx, payload, 0)

    @property
    def best_idx(self) -> int:
        return self.best[0]

    @property
    def best_payload(self) -> Any:
        return self.best[1]

    @property
    def stale(self) -> int:
        """Packets of this episode that arrived but were never the freshest."""
        return self.best[2]

    def refill(self, t: int) -> None:
        """Draw the next block of delays (as :meth:`PacketLink.refill` does) and their
        latenesses; ``t`` is the current episode tick (bounds the ticks of the block)."""
        rel = self.sampler.next(self.block) / self.step_ms
        if self.offset:
            rel += self.offset  # a lost packet stays at inf
        # The lateness floor(rel), capped so that a lost packet's casts too. Special: lost
        # or far (at the cap), or so close below a whole number that i + rel might round
        # up to it (rel - floor(rel) is exact).
        frac = np.minimum(rel, _LATE_MAX)
        whole = np.floor(frac)
        frac -= whole
        special = frac > _FRAC_MAX
        special |= whole >= _LATE_MAX
        if t + 2 * self.block >= _LATE_MAX:
            special[:] = True
        late: list[int | None] = whole.astype(np.int64).tolist()
        for j in np.flatnonzero(special).tolist():
            late[j] = None
        self.late = late
        self.rel = rel

    def send(self, idx: int, due_at: int, payload: Any) -> None:
        """Send packet ``idx`` (tick ``idx``), usable from tick ``due_at`` unless a packet
        sent before it is due later."""
        if due_at > self.last:
            self.last = due_at
            self.due[due_at] = (idx, payload, self.overtaken)
        else:  # it joins the tick the previous packet is due at, and overtakes it
            self.overtaken += 1
            self.due[self.last] = (idx, payload, self.overtaken)

    def send_special(self, k: int, idx: int, payload: Any) -> bool:
        """Send packet ``idx``, whose delay is entry ``k`` of the block and whose lateness is
        None: the exact float sum of :meth:`PacketLink.tick`. True if it is lost."""
        rel = float(self.rel[k])
        if rel == _INF:
            self.lost += 1
            return True
        self.send(idx, int(idx + rel), payload)  # idx + rel >= 0: int() is floor
        return False

    def lost_at(self, k: int) -> bool:
        """Whether entry ``k`` of the block is a lost packet."""
        return self.late[k] is None and float(self.rel[k]) == _INF

    def tick(self, k: int, idx: int, payload: Any) -> int:
        """Send packet ``idx`` (entry ``k`` of the block) at tick ``idx`` and process that
        tick's arrivals: :meth:`PacketLink.tick`'s codes and state. The shim inlines this."""
        late = self.late[k]
        code = 0
        if late is not None:
            self.send(idx, idx + late, payload)
        elif self.send_special(k, idx, payload):
            code = 1
        best = self.due.pop(idx, None)
        if best is None:
            return code
        self.best = best
        return code + 2
