"""Per-packet records of one direction, written in the shim's trace format.

A :class:`PacketRecorder` learns which packets were sent (:meth:`PacketRecorder.expect`,
with the nominal send time) and which arrived (:meth:`PacketRecorder.arrived`, with the
send timestamp from the packet's header and the arrival time). :meth:`PacketRecorder.write`
writes fleetgym's CSV trace (``send_ms,delay_ms``, an empty delay for a lost packet; see
``traces/README.md``), so a Mode 3 run replays in Mode 2 through
``TraceChannel.from_file``.

Example:
    >>> rec = PacketRecorder("uplink")
    >>> rec.expect((0, 1), 1_000_000)
    >>> rec.expect((0, 2), 21_000_000)
    >>> rec.arrived((0, 1), 1_000_000, 31_000_000)
    >>> rec.rows()
    [(0.0, 30.0), (20.0, inf)]
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Hashable

import numpy as np

from fleetgym.traces.loaders import CSV_HEADER

__all__ = ["PacketRecorder"]

log = logging.getLogger(__name__)

#: Most packets one recorder keeps (about 200 MB); later ones are not recorded.
MAX_RECORDS = 5_000_000


class PacketRecorder:
    """What one direction's receiver observed, packet by packet (thread-safe).

    Args:
        direction: ``"uplink"`` or ``"downlink"`` (for messages).
        max_records: Most packets kept.
    """

    def __init__(self, direction: str, max_records: int = MAX_RECORDS) -> None:
        self.direction = direction
        self.max_records = max_records
        self._sent: dict[Hashable, int] = {}
        self._got: dict[Hashable, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self.dropped_records = 0

    def __len__(self) -> int:
        return len(self._sent)

    def expect(self, key: Hashable, nominal_send_ns: int) -> None:
        """Packet ``key`` was sent at about ``nominal_send_ns`` (wall clock, ns).

        Args:
            key: Identifies the packet, the same key :meth:`arrived` gets (the remote env
                uses ``(episode, tick)``). A key already expected keeps its first time.
            nominal_send_ns: The send time (wall clock, ns) recorded if the packet never
                arrives; its row then has an empty delay (lost). Beyond ``max_records``
                packets, nothing is recorded (counted in ``dropped_records``).
        """
        with self._lock:
            if len(self._sent) >= self.max_records:
                self.dropped_records += 1
                return
            self._sent.setdefault(key, nominal_send_ns)

    def arrived(self, key: Hashable, t_send_ns: int, t_recv_ns: int) -> None:
        """Packet ``key``, stamped ``t_send_ns`` by its sender, arrived at ``t_recv_ns``.

        Args:
            key: The packet, as given to :meth:`expect` (an arrival whose key is never
                expected is not written). Only the first arrival of a key is kept.
            t_send_ns, t_recv_ns: The sender's timestamp from the packet's header and the
                receiver's arrival time (wall clock, ns); the packet's delay is their
                difference, clipped at 0 (across hosts, the clocks must be synchronised).
        """
        with self._lock:
            if len(self._got) < self.max_records and key not in self._got:
                self._got[key] = (t_send_ns, t_recv_ns)

    def rows(self) -> list[tuple[float, float]]:
        """(send_ms from the first send, delay_ms or inf) per packet sent, by send time."""
        with self._lock:
            items = []
            for key, nominal in self._sent.items():
                got = self._got.get(key)
                if got is None:
                    items.append((nominal, math.inf))
                else:
                    items.append((got[0], max(0.0, (got[1] - got[0]) / 1e6)))
        if not items:
            return []
        items.sort(key=lambda r: r[0])
        t0 = items[0][0]
        return [((t - t0) / 1e6, d) for t, d in items]

    def delays_ms(self) -> np.ndarray:
        """Every sent packet's delay (ms), ``np.inf`` for a lost one, in send order."""
        return np.array([d for _, d in self.rows()], dtype=np.float64)

    def write(self, path: str | os.PathLike[str]) -> int:
        """Write the trace as fleetgym CSV; returns the number of packets written.

        The file appears whole or not at all (written beside it, then renamed), so a reader
        that polls for it never loads a half-written trace.

        Args:
            path: The CSV file to write (replaced if it exists); ``<path>.partial`` is
                written first, in the same folder, which must be writable.
        """
        rows = self.rows()
        partial = f"{os.fspath(path)}.partial"
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(f"# {self.direction} packets observed by a fleetgym remote env\n")
            handle.write(CSV_HEADER + "\n")
            for send_ms, delay_ms in rows:
                delay = "" if delay_ms == math.inf else f"{delay_ms:.4f}"
                handle.write(f"{send_ms:.4f},{delay}\n")
        os.replace(partial, path)
        log.info("wrote %d %s packets to %s", len(rows), self.direction, os.fspath(path))
        return len(rows)
