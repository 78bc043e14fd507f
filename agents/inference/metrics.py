"""What the inference server measures: rates, batch sizes, waits, forward time, utilisation.

Memory stays bounded under any load: per-request samples (queue wait, latency) are kept
in fixed-size rings of the most recent :data:`WINDOW` requests, and the batch-size
histogram has at most ``max_batch`` bins.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from fleetgym.agents.inference.batching import percentile

#: Most recent requests whose queue wait and latency enter the percentiles.
WINDOW = 65536


class _Ring:
    """The last ``size`` float samples."""

    def __init__(self, size: int) -> None:
        self._data = np.zeros(size, np.float64)
        self._next = 0
        self._full = False

    def extend(self, values: np.ndarray) -> None:
        values = np.asarray(values, np.float64)[-len(self._data) :]
        n = len(values)
        end = self._next + n
        if end <= len(self._data):
            self._data[self._next : end] = values
        else:
            split = len(self._data) - self._next
            self._data[self._next :] = values[:split]
            self._data[: n - split] = values[split:]
        self._full = self._full or end >= len(self._data)
        self._next = end % len(self._data)

    def sorted(self) -> list[float]:
        data = self._data if self._full else self._data[: self._next]
        return sorted(data.tolist())


class ServerMetrics:
    """Counters of one :class:`~fleetgym.agents.inference.InferenceServer` (thread-safe).

    Args:
        max_batch: The server's batch limit (histogram size).
    """

    def __init__(self, max_batch: int) -> None:
        self._lock = threading.Lock()
        self._max_batch = max_batch
        self.reset()

    def reset(self) -> None:
        """Start a new measurement window (counters to zero, clock restarted)."""
        with self._lock:
            self._started = time.perf_counter()
            self._requests = 0
            self._batches = 0
            self._errors = 0
            self._forward_s = 0.0
            self._histogram = np.zeros(self._max_batch + 1, np.int64)
            self._waits = _Ring(WINDOW)
            self._latencies = _Ring(WINDOW)

    def record_batch(self, waits_s: np.ndarray, latencies_s: np.ndarray, forward_s: float) -> None:
        """One forward pass over ``len(waits_s)`` requests, just finished."""
        with self._lock:
            size = len(waits_s)
            self._requests += size
            self._batches += 1
            # Only the part of the pass inside this window counts as busy time.
            self._forward_s += min(forward_s, time.perf_counter() - self._started)
            self._histogram[size] += 1
            self._waits.extend(waits_s)
            self._latencies.extend(latencies_s)

    def record_errors(self, count: int) -> None:
        """Requests answered with an error (bad input, a failed forward)."""
        with self._lock:
            self._errors += count

    def snapshot(self) -> dict[str, Any]:
        """The figures since the last reset (times in milliseconds)."""
        with self._lock:
            wall = max(time.perf_counter() - self._started, 1e-9)
            waits, latencies = self._waits.sorted(), self._latencies.sorted()
            sizes = np.nonzero(self._histogram)[0]
            histogram = {int(s): int(self._histogram[s]) for s in sizes}
            batches = max(self._batches, 1)
            return {
                "wall_s": wall,
                "requests": self._requests,
                "batches": self._batches,
                "errors": self._errors,
                "requests_per_s": self._requests / wall,
                "mean_batch": self._requests / batches,
                "batch_histogram": histogram,
                "queue_wait_ms_p50": percentile(waits, 0.50) * 1e3,
                "queue_wait_ms_p95": percentile(waits, 0.95) * 1e3,
                "queue_wait_ms_p99": percentile(waits, 0.99) * 1e3,
                "latency_ms_p50": percentile(latencies, 0.50) * 1e3,
                "latency_ms_p99": percentile(latencies, 0.99) * 1e3,
                "forward_ms_mean": self._forward_s / batches * 1e3,
                "forward_s_total": self._forward_s,
                "utilisation": self._forward_s / wall,
            }
