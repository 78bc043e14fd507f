"""A per-packet delay trace (:class:`TraceData`) and the file reading every loader shares.

At the bottom of the import ladder: numpy, :mod:`fleetgym.errors` and
:mod:`fleetgym.validation` only. The readers of each format are in
:mod:`fleetgym.traces.loaders` and :mod:`fleetgym.traces.ping`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fleetgym.errors import TraceFormatError
from fleetgym.validation import check_choice, check_float

__all__ = ["DELAY_KINDS", "MAX_TRACE_MS", "TraceData"]

#: What a trace's delays are (:attr:`TraceData.kind`): ``"one-way"`` delays as captured,
#: ``"half-rtt"`` round-trip times halved into one-way delays (a symmetric path assumed),
#: ``"rtt"`` whole round-trip times (what ``ping`` measured, not halved).
DELAY_KINDS = ("one-way", "half-rtt", "rtt")
#: Largest trace file read (a trace of one packet per ms for a day is ~2 GB; refuse that).
_MAX_BYTES = 256 * 1024 * 1024
#: Largest time or delay in a trace (ms, about 31.7 years); larger values are typos.
MAX_TRACE_MS = 1e12
#: Text encoding of trace files: UTF-8, with the byte-order mark spreadsheet programs
#: write (``utf-8-sig`` drops it; a file without it reads the same).
_ENCODING = "utf-8-sig"


@dataclass(frozen=True, eq=False)
class TraceData:
    """A per-packet delay trace: what a packet sent at a given time experienced.

    A packet sent at virtual time ``t`` (ms) takes the row with the latest ``send_ms``
    that is ``<= send_ms[0] + (t mod period_ms)``: the trace wraps around after
    ``period_ms``.

    Args:
        send_ms: Non-decreasing send times (ms), shape ``(n,)``, ``n >= 1``.
        delay_ms: One-way delay (ms) of each packet, ``np.inf`` when it was lost.
        period_ms: Length of the trace before it repeats (ms), ``> 0``.
        source: Where the trace came from (file path or a name), for messages.
        kind: What the delays are, one of :data:`DELAY_KINDS` (``"half-rtt"``: round trips
            halved, as :meth:`halved` and the ``ping`` reader make them).
        interval_source: How the packet spacing was found, for reports (e.g. ``"the -D
            timestamps"``, ``"ping's default, 1000 ms"``); empty if not recorded.
        origin: What the file held, for reports (e.g. ``"ping output (Linux iputils)"``).

    Example:
        >>> trace = TraceData(np.array([0.0, 10.0]), np.array([5.0, np.inf]), 20.0, "demo")
        >>> len(trace), round(trace.loss_rate, 2)
        (2, 0.5)

    Raises:
        ValueError: If the arrays do not have the shapes and values described above.
    """

    send_ms: np.ndarray
    delay_ms: np.ndarray
    period_ms: float
    source: str = "<memory>"
    kind: str = "one-way"
    interval_source: str = ""
    origin: str = ""

    def __post_init__(self) -> None:
        send = np.asarray(self.send_ms, dtype=np.float64)
        delay = np.asarray(self.delay_ms, dtype=np.float64)
        if send.ndim != 1 or send.shape != delay.shape or send.size == 0:
            raise ValueError(
                "send_ms: expected send_ms and delay_ms as 1-d arrays of the same non-zero length, "
                f"actual shapes {send.shape} and {delay.shape}"
            )
        if not np.all(np.isfinite(send)) or np.any(np.diff(send) < 0):
            raise ValueError("send_ms: expected finite, non-decreasing times, actual not")
        if np.any(np.isnan(delay)) or np.any(delay < 0):
            raise ValueError("delay_ms: expected delays >= 0 (np.inf = lost), actual NaN or < 0")
        check_choice("kind", self.kind, DELAY_KINDS)
        period = check_float("period_ms", self.period_ms, 0.0, strict=True)
        if period < float(send[-1] - send[0]):
            raise ValueError(
                f"period_ms: expected >= the trace's span {send[-1] - send[0]}, actual {period}"
            )
        send.setflags(write=False)
        delay.setflags(write=False)
        object.__setattr__(self, "send_ms", send)
        object.__setattr__(self, "delay_ms", delay)
        object.__setattr__(self, "period_ms", period)

    def __len__(self) -> int:
        return int(self.send_ms.size)

    @property
    def loss_rate(self) -> float:
        """Fraction of packets in the trace that were lost."""
        return float(np.mean(np.isinf(self.delay_ms)))

    def halved(self) -> TraceData:
        """The trace's round-trip times as one-way delays: each delay halved (``kind
        "half-rtt"``), which assumes the path is symmetric (both directions take half).

        Example:
            >>> rtt = TraceData(np.array([0.0, 10.0]), np.array([40.0, np.inf]), 20.0, kind="rtt")
            >>> one_way = rtt.halved()
            >>> one_way.delay_ms.tolist(), one_way.kind
            ([20.0, inf], 'half-rtt')

        Raises:
            ValueError: If the delays are already halved.
        """
        if self.kind == "half-rtt":
            raise ValueError("kind: expected round-trip times to halve, actual 'half-rtt'")
        return replace(self, delay_ms=self.delay_ms / 2.0, kind="half-rtt")

    def delays_at(self, t_ms: np.ndarray) -> np.ndarray:
        """Delays (ms, ``np.inf`` = lost) of packets sent at virtual times ``t_ms``.

        Args:
            t_ms: Send times in virtual milliseconds, any shape (a scalar too); each is
                wrapped modulo :attr:`period_ms`. The result has the same shape.
        """
        tau = self.send_ms[0] + np.mod(np.asarray(t_ms, dtype=np.float64), self.period_ms)
        rows = np.searchsorted(self.send_ms, tau, side="right") - 1
        return self.delay_ms[np.clip(rows, 0, self.send_ms.size - 1)]


def _open_regular(name: str) -> Any:
    """Open ``name`` for reading bytes, refusing anything but a regular file.

    The type is checked before opening, so a named pipe (which would block ``open``
    until a writer appears) or a device is rejected at once.
    """
    try:
        mode = os.stat(name).st_mode
    except OSError as exc:
        raise TraceFormatError(name, None, f"cannot read the file: {exc}") from exc
    if not stat.S_ISREG(mode):
        raise TraceFormatError(
            name, None, "expected a regular file, actual a pipe, device, socket or directory"
        )
    try:
        return open(name, "rb")  # noqa: SIM115 (closed by the caller's with block)
    except OSError as exc:
        raise TraceFormatError(name, None, f"cannot read the file: {exc}") from exc


def _read_lines(path: str | os.PathLike[str]) -> tuple[str, list[str]]:
    """The file's text lines; binary garbage and oversize files become TraceFormatError.

    At most :data:`_MAX_BYTES` bytes are read, whatever size the file system reports.
    """
    name = os.fspath(path)
    with _open_regular(name) as handle:
        try:
            raw = handle.read(_MAX_BYTES + 1)
        except OSError as exc:
            raise TraceFormatError(name, None, f"cannot read the file: {exc}") from exc
    if len(raw) > _MAX_BYTES:
        raise TraceFormatError(
            name, None, f"expected at most {_MAX_BYTES} bytes, actual more than that"
        )
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise TraceFormatError(name, line, "binary data (NUL byte), expected a text file")
    try:
        text = raw.decode(_ENCODING)
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise TraceFormatError(name, line, "binary data (not UTF-8), expected a text file") from exc
    lines = text.splitlines()
    if not any(ln.strip() and not ln.lstrip().startswith("#") for ln in lines):
        raise TraceFormatError(name, None, "empty file, expected at least one packet")
    return name, lines
