"""Trace replay: :class:`TraceChannel`, a channel that replays a recorded per-packet trace.

The parametric channel models are in :mod:`fleetgym.wrappers.channels`, which
re-exports :class:`TraceChannel`; the interface it implements is
:mod:`fleetgym.wrappers.channel_base`. Traces are read by :mod:`fleetgym.traces.loaders` (a :class:`~fleetgym.traces.trace_data.TraceData`).
"""

from __future__ import annotations

import os

import numpy as np

from fleetgym.traces.loaders import load_trace
from fleetgym.traces.trace_data import TraceData
from fleetgym.validation import check_bool
from fleetgym.wrappers.channel_base import Channel, DelaySampler, _check_rng, check_step_ms


class TraceChannel(Channel):
    """Replays a recorded per-packet trace (send time, delay or lost).

    A packet sent at virtual time t takes the trace row with the latest ``send_ms``
    <= ``send_ms[0] + ((t + offset) mod period)``; the trace wraps around. With
    ``random_start`` (default) each stream starts at an offset drawn uniformly over
    the period from its generator, so different seeds replay different stretches and
    the same seed replays the same one; otherwise every stream starts at the
    trace's beginning.

    Stream API: :meth:`sampler` ``(rng, step_ms)`` and :meth:`sample_delays`
    ``(rng, n, step_ms=20.0)`` (ms, ``np.inf`` = lost), see :class:`Channel`.
    Load a file with :meth:`from_file` (formats: ``traces/README.md``).

    Args:
        trace: The trace (see :class:`fleetgym.traces.TraceData`).
        random_start: Start each stream at a random point of the trace.
        name: A label for listings; defaults to the trace's source.

    Example:
        >>> import numpy as np
        >>> from fleetgym.traces import TraceData
        >>> data = TraceData(np.array([0.0, 20.0, 40.0]), np.array([5.0, 25.0, np.inf]), 60.0)
        >>> ch = TraceChannel(data, random_start=False)
        >>> ch.sample_delays(np.random.default_rng(0), 4).tolist()
        [5.0, 25.0, inf, 5.0]

    Raises:
        TypeError: If ``trace`` is not a ``TraceData`` or ``random_start`` not a bool.
    """

    def __init__(
        self, trace: TraceData, random_start: bool = True, name: str | None = None
    ) -> None:
        if not isinstance(trace, TraceData):
            raise TypeError(
                f"trace: expected a fleetgym.traces.TraceData, actual {type(trace).__name__}"
            )
        check_bool("random_start", random_start)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name: expected a str or None, actual {type(name).__name__}")
        self.trace = trace
        self.random_start = random_start
        self.name = name if name is not None else os.path.basename(trace.source)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        format: str = "auto",
        *,
        interval_ms: float | None = None,
        base_delay_ms: float = 0.0,
        random_start: bool = True,
    ) -> TraceChannel:
        """Load a trace file (or the name of a shipped trace) as a channel.

        Args:
            path: File path, or a shipped trace's name (``fleetgym profiles`` lists them).
            format: ``"auto"``, ``"csv"``, ``"delays"`` or ``"mahimahi"``
                (see :func:`fleetgym.traces.load_trace`).
            interval_ms: Packet spacing of a plain delay list.
            base_delay_ms: Propagation delay added to a Mahimahi trace.
            random_start: See the class docstring.

        Raises:
            fleetgym.errors.TraceFormatError: If the file is malformed (names file and line).
        """
        trace = load_trace(path, format, interval_ms=interval_ms, base_delay_ms=base_delay_ms)
        return cls(trace, random_start=random_start)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TraceChannel):
            return NotImplemented
        return (
            self.random_start == other.random_start
            and self.trace.period_ms == other.trace.period_ms
            and np.array_equal(self.trace.send_ms, other.trace.send_ms)
            and np.array_equal(self.trace.delay_ms, other.trace.delay_ms)
        )

    def __hash__(self) -> int:
        # Content-based like __eq__ (equal traces loaded from different files hash alike).
        return hash((len(self.trace), self.trace.period_ms, self.random_start))

    def __repr__(self) -> str:
        return f"TraceChannel({self.name!r}, packets={len(self.trace)}, random_start={self.random_start})"

    @property
    def loss_rate(self) -> float:
        return self.trace.loss_rate

    def describe(self) -> str:
        ok = self.trace.delay_ms[np.isfinite(self.trace.delay_ms)]
        delay = f"{np.median(ok):.1f} ms median" if ok.size else "all lost"
        return (
            f"trace {self.name}: {len(self.trace)} packets over {self.trace.period_ms / 1000:.1f} s, "
            f"{delay}, loss {self.loss_rate:.1%}"
        )

    def sampler(self, rng: np.random.Generator, step_ms: float = 20.0) -> DelaySampler:
        rng, step_ms = _check_rng(rng), check_step_ms(step_ms)
        offset = float(rng.uniform(0.0, self.trace.period_ms)) if self.random_start else 0.0
        return _TraceSampler(self.trace, step_ms, offset)


class _TraceSampler(DelaySampler):
    """Packet ``k`` of the stream takes the trace's delay at ``offset + k * step_ms``."""

    def __init__(self, trace: TraceData, step_ms: float, offset: float) -> None:
        self._trace, self._step, self._offset, self._k = trace, step_ms, offset, 0

    def next(self, n: int) -> np.ndarray:
        t = (self._k + np.arange(n, dtype=np.float64)) * self._step + self._offset
        self._k += n
        return np.array(self._trace.delays_at(t))
