"""The batching rule of the inference server, its configuration, and the adaptive deadline.

Everything here is pure (no threads, no clock of its own: the caller passes ``now``), so
the rule is tested exactly with a fake clock.

The rule (:class:`RequestQueue`): requests queue oldest first; a batch of the oldest
``max_batch`` requests is *due* when

1. the queue holds ``max_batch`` requests (a full batch), or
2. the oldest request has waited ``wait_s``, or
3. every connected client already has a request waiting: no further request can arrive
   before one is answered, so waiting longer only adds latency (16 actors with
   ``max_batch=256`` never pay the timeout).

The adaptive deadline (:func:`auto_wait`, ``max_wait_ms="auto"``) is derived in its
docstring; :class:`DeadlineController` feeds it measured rates and forward times.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fleetgym.validation import check_choice, check_float, check_int, quote

#: Devices the server accepts (``"cuda"`` and ``"cuda:N"`` need a torch with CUDA).
DEVICE_PREFIXES = ("cpu", "cuda")

T = TypeVar("T")


def check_device(name: str, device: Any) -> str:
    """``device`` as ``"cpu"`` or a CUDA device this process's torch can use.

    Checked where the device is parsed, so a machine without CUDA refuses ``"cuda"`` up
    front instead of torch's ``AssertionError`` at the first forward pass. torch is
    imported only for a CUDA device.

    Example:
        >>> check_device("device", "cpu")
        'cpu'
        >>> check_device("device", "tpu")
        Traceback (most recent call last):
        ...
        ValueError: device: expected 'cpu' or 'cuda[:N]', actual 'tpu'

    Raises:
        TypeError: If ``device`` is not a string.
        ValueError: If it is neither ``"cpu"`` nor ``"cuda[:N]"``, or names a CUDA device
            torch has not here (no CUDA build, no GPU, an index past the last GPU).
    """
    if not isinstance(device, str):
        raise TypeError(f"{name}: expected 'cpu' or 'cuda[:N]', actual {quote(device)}")
    prefix, colon, index = device.partition(":")
    valid_index = not colon or (index.isdigit() and len(index) <= 4 and index.isascii())
    if prefix not in DEVICE_PREFIXES or not valid_index or (prefix == "cpu" and colon):
        raise ValueError(f"{name}: expected 'cpu' or 'cuda[:N]', actual {quote(device)}")
    if prefix == "cpu":
        return device
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of the policies
        reason = "torch is not installed"
    else:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count and int(index or 0) < count:
            return device
        reason = f"torch sees {count} CUDA devices" if count else "torch has no CUDA here"
    raise ValueError(
        f"{name}: expected 'cpu' or an available accelerator, actual {quote(device)} ({reason})"
    )


@dataclass(frozen=True)
class InferenceConfig:
    """The inference server's settings, frozen and validated once.

    Args:
        max_batch: Most requests in one forward pass.
        max_wait_ms: How long the oldest request may wait for a batch to fill, or
            ``"auto"`` (chosen from measured arrival rate and forward time).
        latency_budget_ms: The p99 request latency ``"auto"`` keeps under (also the cap
            of its wait).
        device: ``"cpu"`` or a CUDA device (``"cuda"``, ``"cuda:0"``) torch can use here.
        target_utilisation: The share of wall time in forward passes ``"auto"`` aims
            not to exceed (below 1: a saturated server's queue grows without bound).
        max_client_slots: Most requests one client may have in flight (bounds memory).

    Example:
        >>> InferenceConfig(max_batch=64, max_wait_ms="auto").adaptive
        True
        >>> InferenceConfig(max_wait_ms=-1.0)
        Traceback (most recent call last):
        ...
        ValueError: max_wait_ms: expected a finite number >= 0 and <= 60000, actual -1.0

    Raises:
        TypeError, ValueError: On an argument of the wrong type or range (a CUDA
            ``device`` on a machine whose torch has no CUDA: see :func:`check_device`).
    """

    max_batch: int = 256
    max_wait_ms: float | str = 5.0
    latency_budget_ms: float = 50.0
    device: str = "cpu"
    target_utilisation: float = 0.8
    max_client_slots: int = 4096

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_batch", check_int("max_batch", self.max_batch, 1, 65536))
        if isinstance(self.max_wait_ms, str):
            check_choice("max_wait_ms", self.max_wait_ms, ("auto",))
        else:
            wait = check_float("max_wait_ms", self.max_wait_ms, low=0.0, high=60_000.0)
            object.__setattr__(self, "max_wait_ms", wait)
        budget = check_float("latency_budget_ms", self.latency_budget_ms, low=0.0, strict=True)
        object.__setattr__(self, "latency_budget_ms", budget)
        check_device("device", self.device)
        util = check_float("target_utilisation", self.target_utilisation, 0.0, 1.0, strict=True)
        object.__setattr__(self, "target_utilisation", util)
        slots = check_int("max_client_slots", self.max_client_slots, 1, 1 << 20)
        object.__setattr__(self, "max_client_slots", slots)

    @property
    def adaptive(self) -> bool:
        """Whether the wait is chosen by the server (``max_wait_ms="auto"``)."""
        return self.max_wait_ms == "auto"

    @property
    def wait_s(self) -> float:
        """The fixed wait in seconds (the starting wait, 0, when adaptive)."""
        return 0.0 if isinstance(self.max_wait_ms, str) else self.max_wait_ms / 1000.0


@dataclass
class Queued(Generic[T]):
    """One waiting request: when it arrived, whose it is, and the caller's payload."""

    arrival: float
    client: Hashable
    item: T


class RequestQueue(Generic[T]):
    """Requests waiting for a batch, oldest first, and the rule that says a batch is due.

    Args:
        max_batch: Most requests in one batch.

    Example:
        >>> q = RequestQueue(max_batch=4)
        >>> q.push(0.000, "a", 1); q.push(0.001, "b", 2)
        >>> q.due(now=0.002, wait_s=0.005, connected=3)  # c may still send
        False
        >>> q.due(now=0.005, wait_s=0.005, connected=3)  # the oldest waited 5 ms
        True
        >>> q.due(now=0.002, wait_s=0.005, connected=2)  # every client is waiting
        True
        >>> [r.item for r in q.take()], len(q)
        ([1, 2], 0)
    """

    def __init__(self, max_batch: int) -> None:
        self.max_batch = check_int("max_batch", max_batch, 1)
        self._queue: deque[Queued[T]] = deque()
        self._per_client: Counter[Hashable] = Counter()

    def __len__(self) -> int:
        return len(self._queue)

    def push(self, arrival: float, client: Hashable, item: T) -> None:
        """Queue one request (arrivals must not go back in time).

        Args:
            arrival: When it arrived, in seconds on the caller's clock (the one ``now`` of
                :meth:`due` reads); not before the previous arrival.
            client: Whose it is (any hashable key): the rule counts distinct clients.
            item: The caller's payload, returned as ``Queued.item`` by :meth:`take`.
        """
        self._queue.append(Queued(arrival, client, item))
        self._per_client[client] += 1

    @property
    def clients_waiting(self) -> int:
        """How many distinct clients have at least one request queued."""
        return len(self._per_client)

    def due(self, now: float, wait_s: float, connected: int) -> bool:
        """Whether a batch should run now (the three conditions of the module docstring).

        Args:
            now: The current time, in seconds on the clock of the arrivals.
            wait_s: Seconds the oldest request may wait for a batch to fill.
            connected: Clients connected now: once that many distinct clients have a
                request queued, the batch is due.
        """
        if not self._queue:
            return False
        return (
            len(self._queue) >= self.max_batch
            or now >= self._queue[0].arrival + wait_s
            or len(self._per_client) >= connected
        )

    def deadline(self, wait_s: float) -> float | None:
        """When the oldest request will have waited ``wait_s`` (None if the queue is empty).

        Args:
            wait_s: Seconds the oldest request may wait, as given to :meth:`due`.
        """
        return self._queue[0].arrival + wait_s if self._queue else None

    def take(self) -> list[Queued[T]]:
        """Remove and return the oldest ``max_batch`` requests."""
        count = min(self.max_batch, len(self._queue))
        batch = [self._queue.popleft() for _ in range(count)]
        for entry in batch:
            left = self._per_client[entry.client] - 1
            if left:
                self._per_client[entry.client] = left
            else:
                del self._per_client[entry.client]
        return batch

    def remove_client(self, client: Hashable) -> list[Queued[T]]:
        """Drop every queued request of ``client`` (it disconnected); returns them.

        Args:
            client: The key its requests were pushed with; one with none queued gives ``[]``.
        """
        if client not in self._per_client:
            return []
        kept: deque[Queued[T]] = deque()
        removed: list[Queued[T]] = []
        for entry in self._queue:
            (removed if entry.client == client else kept).append(entry)
        self._queue = kept
        del self._per_client[client]
        return removed


def auto_wait(
    rate: float,
    fixed_s: float,
    per_item_s: float,
    max_batch: int,
    budget_s: float,
    target_utilisation: float = 0.8,
) -> float:
    """The wait (seconds) ``max_wait_ms="auto"`` uses, from measured rates.

    Model: requests arrive at ``rate`` = λ per second; a forward pass of ``b`` requests
    takes ``f(b) = a + c·b`` (``a`` = ``fixed_s``, ``c`` = ``per_item_s``). A batch
    collects the requests that arrived while the previous pass ran and during its own
    wait ``w``, so it holds about ``b = 1 + λ·(w + f(b))``:

        b(w) = (1 + λ·(w + a)) / (1 − λ·c).

    The share of wall time the server computes (the cores or accelerator it takes from
    the actors) is

        ρ(w) = λ·f(b)/b = λ·(a/b(w) + c).

    Actors are a closed loop (an actor sends its next request after the answer): waiting
    lengthens every actor's cycle, so it only pays where it buys something, namely the
    compute of a server that would otherwise spend more than ``ρ*``
    (``target_utilisation``) of its time on tiny batches. Throughput is therefore highest
    at the *smallest* wait with ``ρ(w) ≤ ρ*``:

        b* = λ·a / (ρ* − λ·c),    w_thr = b*·(1 − λ·c)/λ − 1/λ − a     (0 if negative;

    with ``w = 0`` the batches already hold ``b(0)`` requests, which is enough whenever
    ``b(0) ≥ b*``). When ``λ·c ≥ ρ*`` no batch size brings ρ under ``ρ*``, and the server
    batches as much as the latency budget allows. Latency: a request waits at most ``w``,
    may find a pass in flight, then runs in its own: ``latency ≤ w + 2·f(b(w))``. Keeping
    that under the budget ``L`` gives

        w ≤ w_lat = (L − 2a − 2c·b(0)) / (1 + 2cλ/(1 − λc)),

    and waiting past the time a full batch takes to arrive is pointless:
    ``b(w) ≤ B``, i.e. ``w ≤ w_full = (B·(1 − λc) − 1)/λ − a``. The result is
    ``clamp(w_thr, 0, min(w_lat, w_full))``.

    Args:
        rate: Measured request arrival rate λ (per second).
        fixed_s: Fixed cost ``a`` of a forward pass (seconds).
        per_item_s: Cost ``c`` per request in a forward pass (seconds).
        max_batch: ``B``.
        budget_s: The latency budget ``L`` (seconds).
        target_utilisation: ``ρ*``.

    Example:
        >>> # 2000 requests/s, passes of 5 ms + 0.1 ms per request: b(0) = 13.75, b* = 16.67
        >>> round(auto_wait(rate=2000, fixed_s=5e-3, per_item_s=1e-4, max_batch=256,
        ...                 budget_s=0.1) * 1e3, 3)
        1.167
        >>> auto_wait(rate=1000, fixed_s=1e-3, per_item_s=1e-5, max_batch=256, budget_s=0.05)
        0.0

    Returns:
        The wait in seconds (>= 0).
    """
    lam, a, c = max(rate, 0.0), max(fixed_s, 0.0), max(per_item_s, 0.0)
    if lam <= 0.0:
        return 0.0
    keep = 1.0 - lam * c  # the share of arrivals the per-request cost leaves room for
    if keep <= 0.0:
        keep = 1e-9  # overloaded: b(w) grows without bound; the caps below decide
    b0 = (1.0 + lam * a) / keep
    w_lat = max(0.0, (budget_s - 2.0 * a - 2.0 * c * b0) / (1.0 + 2.0 * c * lam / keep))
    w_full = max(0.0, (max_batch * keep - 1.0) / lam - a)
    cap = min(w_lat, w_full)
    if lam * c >= target_utilisation:
        return cap
    b_star = lam * a / (target_utilisation - lam * c)
    w_thr = max(0.0, b_star * keep / lam - 1.0 / lam - a)
    return min(w_thr, cap)


class DeadlineController:
    """Feeds :func:`auto_wait` with measured rates; the wait of an adaptive server.

    Arrival rate: requests counted between updates, smoothed exponentially. Service
    time of a batch (the server passes its whole cost: stacking the inputs, the forward
    pass, answering every client): ``f(b) = a + c·b`` fitted by exponentially weighted
    least squares over the batches seen (one size only: ``c = 0``, ``a`` the mean).

    Args:
        config: The server's configuration.
        smoothing: Weight of the newest measurement (0 < smoothing <= 1).
    """

    def __init__(self, config: InferenceConfig, smoothing: float = 0.1) -> None:
        self.config = config
        self.smoothing = check_float("smoothing", smoothing, 0.0, 1.0, strict=False)
        self.rate = 0.0
        self.wait_s = 0.0 if config.adaptive else config.wait_s
        # Weighted sums for the least-squares fit of f(b) = a + c b.
        self._sw = self._sb = self._sbb = self._st = self._sbt = 0.0
        self._arrivals = 0
        self._since: float | None = None

    def arrived(self, count: int = 1) -> None:
        """Count requests that arrived."""
        self._arrivals += count

    def forward_model(self) -> tuple[float, float]:
        """The fitted ``(a, c)`` of ``f(b) = a + c·b`` (seconds)."""
        if self._sw <= 0.0:
            return 0.0, 0.0
        mean_b, mean_t = self._sb / self._sw, self._st / self._sw
        var_b = self._sbb / self._sw - mean_b * mean_b
        if var_b <= 1e-9 * max(1.0, mean_b * mean_b):
            return mean_t, 0.0
        c = max(0.0, (self._sbt / self._sw - mean_b * mean_t) / var_b)
        return max(0.0, mean_t - c * mean_b), c

    def batch_done(self, now: float, size: int, forward_s: float) -> float:
        """Record one forward pass; returns the wait to use next (seconds)."""
        keep = 1.0 - self.smoothing
        self._sw = self._sw * keep + 1.0
        self._sb = self._sb * keep + size
        self._sbb = self._sbb * keep + size * size
        self._st = self._st * keep + forward_s
        self._sbt = self._sbt * keep + size * forward_s
        if self._since is None:
            self._since = now
            self._arrivals = 0
            return self.wait_s
        elapsed = now - self._since
        if elapsed < 1e-3:  # too short a window for a rate
            return self.wait_s
        measured = self._arrivals / elapsed
        self.rate = measured if self.rate == 0.0 else keep * self.rate + self.smoothing * measured
        self._since, self._arrivals = now, 0
        if self.config.adaptive:
            a, c = self.forward_model()
            self.wait_s = auto_wait(
                self.rate,
                a,
                c,
                self.config.max_batch,
                self.config.latency_budget_ms / 1000.0,
                self.config.target_utilisation,
            )
        return self.wait_s

    def state(self) -> dict[str, Any]:
        """The controller's current estimates (for metrics)."""
        a, c = self.forward_model()
        return {
            "wait_ms": self.wait_s * 1e3,
            "arrival_rate": self.rate,
            "forward_fixed_ms": a * 1e3,
            "forward_per_request_ms": c * 1e3,
        }


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of sorted values by the nearest-rank rule (nan if empty).

    Example:
        >>> percentile([1.0, 2.0, 3.0, 4.0], 0.5), percentile([1.0, 2.0, 3.0, 4.0], 0.99)
        (2.0, 4.0)
    """
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]
