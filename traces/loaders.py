"""Readers for per-packet network traces (see ``traces/README.md`` for every format).

Every reader returns a :class:`TraceData`: per-packet send times and one-way delays in
milliseconds, with ``np.inf`` as the delay of a lost packet, plus the period after which
the trace wraps around. Anything malformed raises :class:`fleetgym.errors.TraceFormatError`
naming the file and the line, never a bare numpy or ``ValueError`` traceback. Raw ``ping``
output is read by :func:`~fleetgym.traces.ping.read_ping` (:mod:`fleetgym.traces.ping`
says what it accepts); :class:`TraceData` and the file reading every reader shares are in
:mod:`fleetgym.traces.trace_data`.

This module sits at the bottom of the import ladder: it imports only numpy,
:mod:`fleetgym.errors`, :mod:`fleetgym.validation` and its sibling trace modules. The
channel that replays a trace is :class:`fleetgym.wrappers.channels.TraceChannel`.
"""

from __future__ import annotations

import math
import os
from importlib import resources
from pathlib import Path

import numpy as np

from fleetgym.errors import TraceFormatError
from fleetgym.traces.ping import looks_like_ping, read_ping
from fleetgym.traces.trace_data import (
    _ENCODING,
    MAX_TRACE_MS,
    TraceData,
    _open_regular,
    _read_lines,
)
from fleetgym.validation import check_choice, check_float, quote

__all__ = [
    "CSV_HEADER",
    "TRACE_FORMATS",
    "list_traces",
    "load_trace",
    "read_csv_trace",
    "read_delay_list",
    "read_mahimahi",
    "trace_path",
]

#: The header line of fleetgym's own CSV format.
CSV_HEADER = "send_ms,delay_ms"
#: Format names accepted by :func:`load_trace` (``"auto"`` guesses from name and content).
TRACE_FORMATS = ("auto", "csv", "delays", "mahimahi", "ping")
#: Words accepted for a lost packet in a delay list.
_LOST_WORDS = frozenset({"lost", "-"})
#: Longest Mahimahi trace period (ms, about 2.8 hours): one row per millisecond is kept.
MAX_MAHIMAHI_PERIOD_MS = 10_000_000
#: File name endings that ``format="auto"`` reads as a Mahimahi trace.
_MAHIMAHI_SUFFIXES = (".up", ".down", ".mahimahi", ".mm")


def _number(text: str, name: str, line: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceFormatError(
            name, line, f"expected a number for {what}, actual {quote(text)}"
        ) from None
    if not math.isfinite(value):
        raise TraceFormatError(
            name, line, f"expected a finite number for {what}, actual {quote(text)}"
        )
    if value < 0 or value > MAX_TRACE_MS:
        raise TraceFormatError(
            name, line, f"expected {what} in [0, {MAX_TRACE_MS:g}], actual {quote(value)}"
        )
    return value


def _period(send: list[float]) -> float:
    """Span of the send times plus one typical gap, so the last row gets its share."""
    gaps = np.diff(np.asarray(send))
    positive = gaps[gaps > 0]
    gap = float(np.median(positive)) if positive.size else 1.0
    return float(send[-1] - send[0]) + gap


def read_csv_trace(path: str | os.PathLike[str]) -> TraceData:
    """Read fleetgym's CSV trace: header ``send_ms,delay_ms``, empty delay = lost packet.

    Lines starting with ``#`` and blank lines are skipped. Send times must be
    non-decreasing; the trace's period is its span plus the median gap between sends.

    Args:
        path: The CSV file to read (a regular text file, at most 256 MiB).

    Raises:
        TraceFormatError: Empty file, wrong header, wrong column count, non-numeric, NaN
            or negative values, decreasing send times, or binary data.
    """
    name, lines = _read_lines(path)
    send: list[float] = []
    delay: list[float] = []
    header_seen = False
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        if not header_seen:
            if text.replace(" ", "") != CSV_HEADER:
                raise TraceFormatError(
                    name, number, f"expected header {CSV_HEADER!r}, actual {quote(text)}"
                )
            header_seen = True
            continue
        fields = text.split(",")
        if len(fields) != 2:
            raise TraceFormatError(
                name, number, f"expected 2 comma-separated fields, actual {len(fields)}"
            )
        s = _number(fields[0].strip(), name, number, "send_ms")
        if send and s < send[-1]:
            raise TraceFormatError(
                name, number, f"expected non-decreasing send_ms, actual {s} after {send[-1]}"
            )
        d_text = fields[1].strip()
        d = math.inf if d_text == "" else _number(d_text, name, number, "delay_ms")
        send.append(s)
        delay.append(d)
    if not send:
        raise TraceFormatError(name, None, "no packets after the header")
    return TraceData(
        np.asarray(send),
        np.asarray(delay),
        _period(send),
        name,
        interval_source="the send_ms column (median gap between sends)",
        origin="fleetgym CSV",
    )


def read_delay_list(path: str | os.PathLike[str], interval_ms: float | None = None) -> TraceData:
    """Read a plain list of per-packet delays (ms), one per line; ``lost`` or ``-`` = lost.

    Packets are ``interval_ms`` apart. The interval comes from the argument, else from a
    ``# interval_ms: X`` line in the file, else 20 ms (CartPole's control period).

    Args:
        path: The delay list to read (a regular text file, at most 256 MiB).
        interval_ms: Time between consecutive packets (ms, ``> 0``); it overrides the
            file's ``# interval_ms:`` line. ``None`` (default): that line, else 20 ms.

    Raises:
        TraceFormatError: Empty file, non-numeric, NaN or negative values, binary data.
        ValueError: If ``interval_ms`` is not a positive finite number.
    """
    if interval_ms is not None:
        interval_ms = check_float("interval_ms", interval_ms, 0.0, MAX_TRACE_MS, strict=True)
    name, lines = _read_lines(path)
    delays: list[float] = []
    file_interval: float | None = None
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        if text.startswith("#"):
            key, _, value = text[1:].partition(":")
            if key.strip() == "interval_ms":
                file_interval = _number(value.strip(), name, number, "interval_ms")
                if file_interval <= 0:
                    raise TraceFormatError(
                        name, number, f"expected interval_ms > 0, actual {file_interval}"
                    )
            continue
        if text.lower() in _LOST_WORDS:
            delays.append(math.inf)
        else:
            delays.append(_number(text, name, number, "delay_ms"))
    if interval_ms is not None:
        step, how = interval_ms, f"given (--interval-ms / interval_ms={interval_ms:g})"
    elif file_interval is not None:
        step, how = file_interval, f"the file's '# interval_ms: {file_interval:g}' line"
    else:
        step, how = 20.0, "a delay list's default, 20 ms (no --interval-ms / interval_ms given)"
    send = np.arange(len(delays), dtype=np.float64) * step
    return TraceData(
        send, np.asarray(delays), len(delays) * step, name, interval_source=how, origin="delay list"
    )


def read_mahimahi(path: str | os.PathLike[str], base_delay_ms: float = 0.0) -> TraceData:
    """Read a Mahimahi ``mm-link`` trace as per-millisecond delays.

    Each line of an mm-link trace is a time (integer ms) at which the link can deliver one
    MTU-sized packet; the trace loops after its last timestamp. A control packet is far
    smaller than the link's capacity, so it never queues behind our own traffic: a packet
    sent at ``t`` leaves at the next delivery opportunity ``>= t`` and arrives
    ``base_delay_ms`` later. The result has one row per millisecond of the period.

    Args:
        path: The mm-link trace file to read (a regular text file, at most 256 MiB).
        base_delay_ms: Propagation delay (ms, ``>= 0``) added to every packet's wait for
            its delivery opportunity; the default 0 gives the queueing wait alone.

    Raises:
        TraceFormatError: Empty file, non-integer, negative or decreasing timestamps, a
            last timestamp of 0, or binary data.
        ValueError: If ``base_delay_ms`` is negative or not finite.
    """
    base_delay_ms = check_float("base_delay_ms", base_delay_ms, 0.0, MAX_TRACE_MS)
    name, lines = _read_lines(path)
    stamps: list[int] = []
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            value = int(text)
        except ValueError:
            raise TraceFormatError(
                name, number, f"expected an integer timestamp (ms), actual {quote(text)}"
            ) from None
        if not 0 <= value <= MAX_MAHIMAHI_PERIOD_MS:
            raise TraceFormatError(
                name,
                number,
                f"expected a timestamp in [0, {MAX_MAHIMAHI_PERIOD_MS}], actual {quote(value)}",
            )
        if stamps and value < stamps[-1]:
            raise TraceFormatError(
                name,
                number,
                f"expected non-decreasing timestamps, actual {value} after {stamps[-1]}",
            )
        stamps.append(value)
    period = stamps[-1]
    if period <= 0:
        raise TraceFormatError(name, None, "expected a last timestamp > 0 (the trace's period)")
    opportunities = np.asarray(stamps, dtype=np.float64)
    send = np.arange(period, dtype=np.float64)
    # The next opportunity at or after each ms; past the last one, the first of the next loop.
    nxt = np.searchsorted(opportunities, send, side="left")
    wrapped = nxt >= opportunities.size
    leave = np.where(wrapped, 0.0, opportunities[np.minimum(nxt, opportunities.size - 1)])
    leave = np.where(wrapped, opportunities[0] + period, leave)
    delay = leave - send + float(base_delay_ms)
    return TraceData(
        send,
        delay,
        float(period),
        name,
        interval_source="one row per ms",
        origin="Mahimahi link trace",
    )


def list_traces() -> list[str]:
    """Names of the trace files shipped with fleetgym (usable with :func:`load_trace`)."""
    root = resources.files("fleetgym.traces")
    names = [
        entry.name
        for entry in root.iterdir()
        if entry.name.endswith((".csv", ".txt") + _MAHIMAHI_SUFFIXES) and entry.is_file()
    ]
    return sorted(names)


def trace_path(name: str) -> Path:
    """Filesystem path of a shipped trace file.

    Args:
        name: The file name of a shipped trace, one of :func:`list_traces` (e.g.
            ``"wifi-office.csv"``).

    Raises:
        ValueError: If no shipped trace has that name (the message lists them).
    """
    if name not in list_traces():
        raise ValueError(
            f"name: expected a shipped trace name, one of {list_traces()}, actual {quote(name)}"
        )
    return Path(str(resources.files("fleetgym.traces").joinpath(name)))


def _guess_format(name: str, lines_head: str) -> str:
    if looks_like_ping(lines_head):
        return "ping"
    if lines_head.replace(" ", "").startswith("send_ms"):
        return "csv"
    if name.endswith(".csv"):
        # A .csv of one number per line (round trips exported from a logger) is a delay
        # list; any other .csv is fleetgym's send_ms,delay_ms (its reader names a bad header).
        try:
            float(lines_head.strip())
        except ValueError:
            return "csv"
        return "delays"
    if name.endswith(_MAHIMAHI_SUFFIXES):
        return "mahimahi"
    return "delays"


def load_trace(
    path: str | os.PathLike[str],
    format: str = "auto",
    *,
    interval_ms: float | None = None,
    base_delay_ms: float = 0.0,
    rtt: bool | None = None,
) -> TraceData:
    """Read a trace file in any supported format.

    Args:
        path: A file path, or the name of a shipped trace (see :func:`list_traces`).
        format: ``"csv"`` (fleetgym's ``send_ms,delay_ms``), ``"delays"`` (one delay per
            line), ``"mahimahi"`` (mm-link delivery opportunities), ``"ping"`` (raw
            ``ping`` output, :func:`fleetgym.traces.read_ping`) or ``"auto"``: a file
            whose first line is ping output (``PING host ...``, ``64 bytes from ...``) is
            ping, a ``send_ms`` header or a ``.csv`` file means csv (but a ``.csv`` whose
            first line is a single number is a delay list),
            ``.up``/``.down``/``.mahimahi``/``.mm`` mean mahimahi, anything else is a delay
            list.
        interval_ms: Packet spacing of a delay list (see :func:`read_delay_list`), or of
            ping output without ``-D`` timestamps (with them, it must agree with them).
        base_delay_ms: Propagation delay added to a Mahimahi trace.
        rtt: Whether the file holds round-trip times. ``None`` (default): ping output
            does (its round trips are halved into one-way delays), other formats hold
            one-way delays. ``True``: halve every delay (a CSV or delay list of round
            trips; symmetric paths assumed). ``False``: take the values as they are (for
            ping output: whole round-trip times, ``kind "rtt"``).

    Raises:
        TraceFormatError: If the file is malformed (message names file and line).
        ValueError: If ``format`` is unknown, or ``rtt=True`` for a Mahimahi trace.
    """
    check_choice("format", format, TRACE_FORMATS)
    if rtt is not None and not isinstance(rtt, bool):
        raise TypeError(f"rtt: expected None, True or False, actual {type(rtt).__name__}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a str or os.PathLike, actual {type(path).__name__}")
    name = os.fspath(path)
    if isinstance(path, str) and os.sep not in name and name in list_traces():
        name = str(trace_path(name))
    fmt = format
    if fmt == "auto":
        with _open_regular(name) as handle:
            try:
                head = handle.read(4096).decode(_ENCODING, errors="replace")
            except OSError as exc:
                raise TraceFormatError(name, None, f"cannot read the file: {exc}") from exc
        first = next((ln for ln in head.splitlines() if ln.strip() and not ln.startswith("#")), "")
        fmt = _guess_format(name, first)
    if fmt == "ping":
        return read_ping(name, interval_ms=interval_ms, halve=rtt is not False)
    if fmt == "mahimahi" and rtt:
        raise ValueError(
            "rtt: expected None or False for a Mahimahi trace (delivery times of one "
            "direction, not round trips), actual True"
        )
    if fmt == "csv":
        trace = read_csv_trace(name)
    elif fmt == "mahimahi":
        trace = read_mahimahi(name, base_delay_ms=base_delay_ms)
    else:
        trace = read_delay_list(name, interval_ms=interval_ms)
    return trace.halved() if rtt else trace
