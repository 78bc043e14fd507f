"""Network conditions on a real socket, and the receiving side's freshest-packet rule.

:class:`DelayedSender` applies a profile's channel where the kernel offers no ``netem``:
each outgoing packet takes the next delay of the channel's :class:`DelaySampler`
(the shim's samplers, drawn ``block_size`` at a time exactly as the shim's links draw
them, so one seed gives the same per-packet schedule in Modes 2 and 3). A lost packet
is never sent; a delivered one is held until ``t_send + delay`` and then sent for real
by a timer thread (``fifo``: never before the packet sent ahead of it, the shim's
``arrival_i = max(arrival_{i-1}, send_i + delay_i)``). How late the timer fires
against the release time it aimed at is kept as :attr:`DelayedSender.overshoot_ns`.

:class:`FreshestBox` is the receiving side of one direction: packets are filed with their
arrival time, and at a tick's deadline :meth:`FreshestBox.take` returns the freshest
packet that arrived by the deadline, if it is newer than the last one taken (the rule
of the simulated loop; the arrival-time filter keeps a late-waking timer from counting
packets that came after the deadline).

Example:
    >>> import numpy as np
    >>> from fleetgym.wrappers.channels import FixedDelay
    >>> sent = []
    >>> sender = DelayedSender(lambda data: sent.append(data))
    >>> sender.set_sampler(FixedDelay(0.0).sampler(np.random.default_rng(0)))
    >>> sender.submit(0, lambda t_wire: b"x", t_send_ns=0)
    False
    >>> sender.close()
    >>> sent
    [b'x']
"""

from __future__ import annotations

import collections
import heapq
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fleetgym.wrappers.channel_base import DelaySampler
from fleetgym.wrappers.remote.wire import Frame
from fleetgym.wrappers.timeline import freshest

__all__ = ["DelayedSender", "FreshestBox"]

log = logging.getLogger(__name__)


class DelayedSender:
    """Holds each packet for its channel's delay, drops it with its loss, then sends it.

    Args:
        send: Puts the bytes on the wire (``socket.sendto`` bound to the peer, or a
            stream write); exceptions it raises are logged and counted, not raised.
        fifo: Keep packets in order (the shim's ``delivery="fifo"``).
        block_size: Delays drawn per refill (the shim's ``block_size``).
        keep_overshoot: How many recent timer overshoots to keep.
    """

    def __init__(
        self,
        send: Callable[[bytes], Any],
        *,
        fifo: bool = True,
        block_size: int = 512,
        keep_overshoot: int = 100_000,
    ) -> None:
        self._send = send
        self.fifo = fifo
        self.block_size = block_size
        self._sampler: DelaySampler | None = None
        self._buf: list[float] = []
        self._pos = 0
        self._last_release = -math.inf
        self._heap: list[tuple[int, int, Callable[[int], bytes]]] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.lost = 0
        self.send_errors = 0
        self.overshoot_ns: collections.deque[int] = collections.deque(maxlen=keep_overshoot)

    def set_sampler(self, sampler: DelaySampler | None) -> None:
        """Use a new delay stream (None: send at once, never drop); packets held stay held.

        Args:
            sampler: The channel's per-packet delays (ms, ``np.inf`` = lost), e.g. a
                profile direction's ``channel.sampler(rng, step_ms)``; delays already drawn
                from the old stream are discarded. ``None``: no delay and no loss.
        """
        with self._cond:
            self._sampler = sampler
            self._buf, self._pos = [], 0

    def clear(self) -> None:
        """Drop the packets held (a new episode); the delay stream continues."""
        with self._cond:
            self._heap.clear()
            self._last_release = -math.inf

    def _next_delay_ms(self) -> float:
        if self._sampler is None:
            return 0.0
        if self._pos == len(self._buf):
            self._buf = self._sampler.next(self.block_size).tolist()
            self._pos = 0
        d = self._buf[self._pos]
        self._pos += 1
        return float(d)

    def submit(self, seq: int, encode: Callable[[int], bytes], t_send_ns: int) -> bool:
        """Send packet ``seq`` (its bytes made by ``encode(t_wire_ns)`` when it leaves).

        Args:
            seq: The packet's tick index, for the caller's bookkeeping; the sender does not
                read it (packets leave in release-time order).
            encode: Called once with the wall-clock time (ns) the packet leaves, returns
                its bytes (so the frame's ``t_wire_ns`` is exact); an exception it raises is
                counted in ``send_errors``. Never called for a lost packet.
            t_send_ns: When the packet was sent (wall clock, ``time.time_ns()``); it is
                released ``t_send_ns`` + the channel's delay (``fifo``: not before the
                packet ahead of it). A time in the past releases it at once.

        Returns:
            True if the channel lost it, or the sender is closed (nothing is sent).
        """
        with self._cond:
            if self._closed:
                return True
            delay = self._next_delay_ms()
            if delay == math.inf:
                self.lost += 1
                return True
            release = t_send_ns + int(delay * 1e6)
            if self.fifo and release < self._last_release:
                release = int(self._last_release)
            self._last_release = release
            if delay == 0.0 and not self._heap:
                now = time.time_ns()
            else:
                heapq.heappush(self._heap, (release, self._count, encode))
                self._count += 1
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="fleetgym-delayed-sender", daemon=True
                    )
                    self._thread.start()
                self._cond.notify()
                return False
        self._emit(encode, release, now)
        return False

    def _emit(self, encode: Callable[[int], bytes], release: int, now: int) -> None:
        try:
            self._send(encode(now))
            self.sent += 1
        except Exception as exc:  # a closed socket at teardown, a full buffer
            self.send_errors += 1
            log.debug("send failed: %s", exc)
        self.overshoot_ns.append(max(0, now - release))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    if self._heap:
                        wait = (self._heap[0][0] - time.time_ns()) / 1e9
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if self._closed:
                    return
                release, _, encode = heapq.heappop(self._heap)
            self._emit(encode, release, time.time_ns())

    def overshoot_quantiles_ms(self, qs: tuple[float, ...] = (0.5, 0.99)) -> list[float]:
        """Quantiles of how late the timer released packets (ms), NaN before any.

        Args:
            qs: The quantile levels, each in [0, 1]; the default is the median and the
                99th percentile. One value is returned per level, in the same order.
        """
        data = np.asarray(self.overshoot_ns, dtype=np.float64)
        if data.size == 0:
            return [math.nan] * len(qs)
        return [float(v) / 1e6 for v in np.quantile(data, qs)]

    def close(self) -> None:
        """Stop the timer thread (packets still held are dropped)."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)


class FreshestBox:
    """The packets of one direction that arrived, and the freshest-by-deadline rule.

    The choice at a deadline is :func:`~fleetgym.wrappers.timeline.freshest`, the shim's
    own rule, and so are the counters: ``reordered`` (arrived after a newer packet had
    arrived by an earlier deadline), ``stale`` (arrived but never used because a newer one
    had arrived by the same deadline). Packets of another episode (``meta["ep"]``) are
    ignored.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._pending: list[Frame] = []
        self.episode = 0
        self.best_seq = -1
        self.reordered = 0
        self.stale = 0
        self.arrived = 0

    def reset(self, episode: int, best_seq: int) -> None:
        """Start an episode: forget every packet, the freshest so far is ``best_seq``.

        Args:
            episode: The new episode's number; packets whose ``meta["ep"]`` differs are
                ignored from now on (the old episode's packets still in flight).
            best_seq: The tick index of the packet already in use (e.g. 0 for the reset
                observation, -1 for none); only packets with a larger ``seq`` are taken.
                The ``reordered``, ``stale`` and ``arrived`` counters restart at 0.
        """
        with self._lock:
            self.episode = episode
            self._pending = []
            self.best_seq = best_seq
            self.reordered = self.stale = self.arrived = 0

    def put(self, frame: Frame) -> None:
        """File a packet that arrived (at ``frame.t_recv_ns``).

        Args:
            frame: A decoded packet whose ``t_recv_ns`` is its arrival (wall clock, ns);
                ignored unless its ``meta["ep"]`` is the current episode.
        """
        with self._lock:
            if frame.meta.get("ep") != self.episode:
                return
            self.arrived += 1
            self._pending.append(frame)
        self._event.set()

    def take(self, deadline_ns: int) -> Frame | None:
        """The freshest packet that arrived by ``deadline_ns`` if newer than the last taken.

        Args:
            deadline_ns: The tick's deadline (wall clock, ns, the clock of the frames'
                ``t_recv_ns``). Packets that arrived by then are used or discarded as stale;
                later ones stay for a later deadline. ``None`` is returned if none is newer.
        """
        with self._lock:
            arrived = [f for f in self._pending if f.t_recv_ns <= deadline_ns]
            if not arrived:
                return None
            self._pending = [f for f in self._pending if f.t_recv_ns > deadline_ns]
            at, stale, reordered = freshest([f.seq for f in arrived], self.best_seq)
            self.stale += stale
            self.reordered += reordered
            if at < 0:
                return None
            self.best_seq = arrived[at].seq
            return arrived[at]
