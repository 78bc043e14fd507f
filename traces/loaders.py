"""Readers for per-packet network traces (see ``traces/README.md`` for every format).

Every reader returns a :class:`TraceData`: per-packet send times and one-way delays in
milliseconds, with ``np.inf`` as the delay of a lost packet, plus the period after which
the trace wraps around. Anything malformed raises :class:`fleetgym.errors.TraceFormatError`
naming the file and the line, never a bare numpy or ``ValueError`` traceback. Raw ``ping``
output is read by :func:`read_ping` (its section below says what it accepts).

This module sits at the bottom of the import ladder: it imports only numpy,
:mod:`fleetgym.errors` and :mod:`fleetgym.validation`. The channel that replays a trace is
:class:`fleetgym.wrappers.channels.TraceChannel`.
"""

from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.errors import TraceFormatError
from fleetgym.validation import check_choice, check_float, quote

__all__ = [
    "CSV_HEADER",
    "DELAY_KINDS",
    "PING_DEFAULT_INTERVAL_MS",
    "TRACE_FORMATS",
    "TraceData",
    "list_traces",
    "load_trace",
    "looks_like_ping",
    "read_csv_trace",
    "read_delay_list",
    "read_mahimahi",
    "read_ping",
    "trace_path",
]

#: The header line of fleetgym's own CSV format.
CSV_HEADER = "send_ms,delay_ms"
#: Format names accepted by :func:`load_trace` (``"auto"`` guesses from name and content).
TRACE_FORMATS = ("auto", "csv", "delays", "mahimahi", "ping")
#: What a trace's delays are (:attr:`TraceData.kind`): ``"one-way"`` delays as captured,
#: ``"half-rtt"`` round-trip times halved into one-way delays (a symmetric path assumed),
#: ``"rtt"`` whole round-trip times (what ``ping`` measured, not halved).
DELAY_KINDS = ("one-way", "half-rtt", "rtt")
#: Words accepted for a lost packet in a delay list.
_LOST_WORDS = frozenset({"lost", "-"})
#: Largest trace file read (a trace of one packet per ms for a day is ~2 GB; refuse that).
_MAX_BYTES = 256 * 1024 * 1024
#: Largest time or delay in a trace (ms, about 31.7 years); larger values are typos.
MAX_TRACE_MS = 1e12
#: Longest Mahimahi trace period (ms, about 2.8 hours): one row per millisecond is kept.
MAX_MAHIMAHI_PERIOD_MS = 10_000_000
#: Text encoding of trace files: UTF-8, with the byte-order mark spreadsheet programs
#: write (``utf-8-sig`` drops it; a file without it reads the same).
_ENCODING = "utf-8-sig"
_MAHIMAHI_SUFFIXES = (".up", ".down", ".mahimahi", ".mm")


@dataclass(frozen=True, eq=False)
class TraceData:
    """A per-packet delay trace: what a packet sent at a given time experienced.

    A packet sent at virtual time ``t`` (ms) takes the row with the latest ``send_ms``
    that is ``<= send_ms[0] + (t mod period_ms)``: the trace wraps around after
    ``period_ms``.

    Example:
        >>> trace = TraceData(np.array([0.0, 10.0]), np.array([5.0, np.inf]), 20.0, "demo")
        >>> len(trace), round(trace.loss_rate, 2)
        (2, 0.5)

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
        """Delays (ms, ``np.inf`` = lost) of packets sent at virtual times ``t_ms``."""
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


# --- Raw ping output --------------------------------------------------------------------
#
# Raw ``ping`` output as a trace: Linux iputils (with or without ``-D``) and macOS/BSD ping.
#
# ``ping -D -i 0.02 host > ping.txt`` is a trace as it stands: every echo request is a
# packet, sent at its icmp_seq's time, and its round-trip time is what ``time=`` says. What
# is read (``traces/README.md`` has the rules with examples):
#
# - Replies: ``64 bytes from 1.2.3.4: icmp_seq=5 ttl=57 time=41.2 ms`` (iputils prints
#   one or two decimals above 10 ms, three only below 1 ms), ``... time=41.200 ms``
#   (macOS/BSD always print three), with or without iputils ``-D`` timestamps
#   (``[1700000000.123456] 64 bytes from ...``). Duplicates (``(DUP!)``) count once.
# - Losses: every icmp_seq missing between the first and the last seen, ``Request timeout for
#   icmp_seq 7``, ``no answer yet for icmp_seq=7`` (iputils ``-O``) and ``From 1.2.3.4
#   icmp_seq=7 Destination Host Unreachable`` lines, unless a reply for that icmp_seq
#   arrives after all; with the ``PING`` header and the statistics lines of one whole run,
#   the lost requests before the first and after the last seen ones too. icmp_seq wraps at
#   65536; the reader unwraps it.
# - Send times: with ``-D`` timestamps, each reply's timestamp minus its round-trip time
#   (a lost request's by interpolation between its neighbours); without them, icmp_seq
#   times the interval (``interval_ms``, else ping's default 1000 ms). The interval found
#   is recorded in :attr:`TraceData.interval_source` for reports.
#
# Anything else is a :class:`fleetgym.errors.TraceFormatError` naming the file and the line:
# a line that is not ping output, Windows ping, lines of both the Linux and the macOS form,
# ``-D`` timestamps on some lines but not others, a timestamp going backwards, a second
# ``PING`` run in the same file, an ``interval_ms`` that contradicts the timestamps (or the
# statistics line's ``time``) by more than a factor of 1.5, or no reply and no lost request
# at all.
#

#: ping's own default interval (``-i`` not given): one echo request a second.
PING_DEFAULT_INTERVAL_MS = 1000.0
#: An interval (given, or ping's default) contradicts the capture when it is off by more
#: than this factor from what the timestamps or the statistics line show.
INTERVAL_TOLERANCE = 1.5
#: icmp_seq is a 16-bit counter.
_SEQ_MODULUS = 65536
#: Most echo requests one file may hold (a day at 2 ms); a larger span is a damaged file.
_MAX_PACKETS = 50_000_000

_TS = r"(?:\[(?P<ts>\d+(?:\.\d+)?)\]\s*)?"
_REPLY = re.compile(
    _TS + r"(?P<bytes>\d+) bytes from (?P<host>.+?)[:,] icmp_[rs]eq=(?P<seq>\d+) "
    r"(?:ttl|hlim)=\d+ time[=<](?P<time>\d+(?:\.(?P<dec>\d+))?) ?ms(?P<rest>.*)$"
)
_TIMEOUT_MAC = re.compile(_TS + r"Request timeout for icmp_seq[ =](?P<seq>\d+)\s*$")
_TIMEOUT_LINUX = re.compile(_TS + r"no answer yet for icmp_seq=(?P<seq>\d+)\s*$")
_ERROR_REPLY = re.compile(_TS + r"From (?P<host>.+?):? icmp_seq=(?P<seq>\d+) (?P<msg>.+)$")
_HEADER = re.compile(r"PING \S")
_STATS = re.compile(r"--- .* ping statistics ---\s*$")
_COUNTS = re.compile(
    r"(?P<tx>\d+) packets transmitted, (?P<rx>\d+) (?P<mac>packets )?received"
    r"(?P<extra>(?:, \+\d+ (?:duplicates|errors|corrupted))*)"
    r", (?P<loss>[\d.]+)% packet loss(?:, time (?P<time>\d+)ms)?"
)
_RTT_LINUX = re.compile(r"rtt min/avg/max/mdev = ")
_RTT_MAC = re.compile(r"round-trip min/avg/max/(?:stddev|std-dev) = ")
_PING_MESSAGE = re.compile(_TS + r"ping: ")
_WINDOWS = re.compile(
    r"(Pinging \S+ .*with \d+ bytes of data|Reply from \S+: bytes=|Request timed out)"
)
_PING_LIKE = re.compile(
    r"(\[\d+(?:\.\d+)?\]\s*)?(PING \S|\d+ bytes from |Request timeout for icmp_seq|"
    r"no answer yet for icmp_seq|From \S+ icmp_seq=|Pinging \S|Reply from \S)"
)

_LINUX, _MAC = "Linux iputils", "macOS/BSD"


def looks_like_ping(line: str) -> bool:
    """Whether ``line`` (a file's first non-comment line) starts ``ping`` output.

    Example:
        >>> looks_like_ping("PING example.org (93.184.216.34) 56(84) bytes of data.")
        True
        >>> looks_like_ping("[1700000000.1] 64 bytes from 1.2.3.4: icmp_seq=1 ttl=57 time=9.1 ms")
        True
        >>> looks_like_ping("send_ms,delay_ms"), looks_like_ping("12.5")
        (False, False)
    """
    return _PING_LIKE.match(line.strip()) is not None


@dataclass
class _Run:
    """What the lines of one ping run said, in file order."""

    name: str
    style: str | None = None
    style_line: int = 0
    style_why: str = ""
    stamped: bool | None = None
    stamped_line: int = 0
    header_line: int | None = None
    seen_echo: bool = False
    last_ts: float | None = None
    last_ts_line: int = 0
    prev_seq: int | None = None
    replies: dict[int, tuple[float, float | None, int]] = field(default_factory=dict)
    lost: dict[int, int] = field(default_factory=dict)  # seq -> line of its loss line
    transmitted: int | None = None
    summary_time_ms: float | None = None
    summary_line: int = 0
    in_summary: bool = False

    def set_style(self, style: str, line: int, why: str) -> None:
        if self.style is None:
            self.style, self.style_line, self.style_why = style, line, why
        elif self.style != style:
            raise TraceFormatError(
                self.name,
                line,
                f"mixed ping formats: this line is {style} ping output ({why}), line "
                f"{self.style_line} is {self.style} ({self.style_why}); expected one run of "
                "one ping",
            )

    def set_stamped(self, stamped: bool, line: int) -> None:
        if self.stamped is None:
            self.stamped, self.stamped_line = stamped, line
        elif self.stamped != stamped:
            has, lacks = (line, self.stamped_line) if stamped else (self.stamped_line, line)
            raise TraceFormatError(
                self.name,
                line,
                f"mixed ping formats: line {has} has a -D timestamp '[...]', line {lacks} has "
                "none; expected every reply and timeout line with one, or none",
            )

    def timestamp(self, text: str | None, line: int) -> float | None:
        self.set_stamped(text is not None, line)
        if text is None:
            return None
        ts = float(text)
        if not math.isfinite(ts):
            raise TraceFormatError(self.name, line, f"expected a finite timestamp, actual {text}")
        if self.last_ts is not None and ts < self.last_ts:
            raise TraceFormatError(
                self.name,
                line,
                f"timestamp goes backwards: [{text}] is {1000.0 * (self.last_ts - ts):.3f} ms "
                f"before line {self.last_ts_line}'s; expected non-decreasing -D timestamps",
            )
        self.last_ts, self.last_ts_line = ts, line
        return ts

    def unwrap(self, raw: int, line: int) -> int:
        """icmp_seq counted on past 65535: the value nearest the previous one."""
        if raw >= _SEQ_MODULUS:
            raise TraceFormatError(
                self.name, line, f"expected icmp_seq in [0, {_SEQ_MODULUS - 1}], actual {raw}"
            )
        self.seen_echo = True
        seq = raw
        if self.prev_seq is not None:
            prev = self.prev_seq
            base = prev - prev % _SEQ_MODULUS + raw
            seq = min((base - _SEQ_MODULUS, base, base + _SEQ_MODULUS), key=lambda s: abs(s - prev))
        self.prev_seq = seq
        return seq


def _reply(run: _Run, match: re.Match[str], number: int) -> None:
    time_text, decimals = match["time"], match["dec"]
    rtt = float(time_text)
    if not 0.0 <= rtt <= MAX_TRACE_MS:
        raise TraceFormatError(
            run.name, number, f"expected time= in [0, {MAX_TRACE_MS:g}] ms, actual {time_text}"
        )
    if decimals is None or len(decimals) < 3:
        run.set_style(_LINUX, number, f"time={time_text} ms: iputils' precision")
    elif len(decimals) == 3 and rtt >= 1.0:
        run.set_style(_MAC, number, f"time={time_text} ms: three decimals above 1 ms")
    ts = run.timestamp(match["ts"], number)
    seq = run.unwrap(int(match["seq"]), number)
    if "DUP!" in match["rest"] or seq in run.replies:
        return
    run.replies[seq] = (rtt, ts, number)


def _lost(run: _Run, match: re.Match[str], number: int, style: str | None, why: str) -> None:
    if style is not None:
        run.set_style(style, number, why)
    run.timestamp(match["ts"], number)
    seq = run.unwrap(int(match["seq"]), number)
    run.lost.setdefault(seq, number)


def _summary(run: _Run, text: str, number: int) -> bool:
    """Read a statistics line; False if ``text`` is none."""
    counts = _COUNTS.match(text)
    if counts is not None:
        if counts["mac"]:
            run.set_style(_MAC, number, "'packets received' in the statistics")
        elif counts["time"] is not None:
            run.set_style(_LINUX, number, "'received, ..., time' in the statistics")
        run.transmitted = int(counts["tx"])
        run.summary_line = number
        if counts["time"] is not None:
            run.summary_time_ms = float(counts["time"])
        return True
    if _RTT_LINUX.match(text):
        run.set_style(_LINUX, number, "'rtt min/avg/max/mdev' in the statistics")
        return True
    if _RTT_MAC.match(text):
        run.set_style(_MAC, number, "'round-trip min/avg/max/stddev' in the statistics")
        return True
    return False


def _parse(name: str, lines: list[str]) -> _Run:
    run = _Run(name)
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        if _HEADER.match(text):
            if run.seen_echo or run.header_line is not None:
                raise TraceFormatError(
                    name,
                    number,
                    f"a second ping run starts here (the first at line "
                    f"{run.header_line or 1}); expected one run per file",
                )
            run.header_line = number
            continue
        match = _REPLY.match(text)
        if match is not None:
            _reply(run, match, number)
            continue
        match = _TIMEOUT_LINUX.match(text)
        if match is not None:
            _lost(run, match, number, _LINUX, "'no answer yet' is iputils' -O")
            continue
        match = _TIMEOUT_MAC.match(text) or _ERROR_REPLY.match(text)
        if match is not None:
            _lost(run, match, number, None, "")
            continue
        if _STATS.match(text):
            run.in_summary = True
            continue
        if _summary(run, text, number) or _PING_MESSAGE.match(text):
            continue
        if _WINDOWS.match(text):
            raise TraceFormatError(
                name,
                number,
                f"unknown ping format: {quote(text)} is Windows ping; expected Linux iputils "
                "or macOS/BSD ping output (ping -D -i 0.02 host > ping.txt)",
            )
        raise TraceFormatError(
            name,
            number,
            f"unknown ping format: expected a line of Linux iputils or macOS/BSD ping output "
            f"(a reply '64 bytes from ...: icmp_seq=N ttl=T time=X ms', a timeout, the "
            f"header or the statistics), actual {quote(text)}",
        )
    return run


def _interval_from_stamps(
    run: _Run, seqs: np.ndarray, sends: np.ndarray, lines: np.ndarray, interval_ms: float | None
) -> tuple[float, str]:
    """The median send gap per icmp_seq; checked against ``interval_ms`` when given."""
    gaps = np.diff(sends) / np.diff(seqs)
    if gaps.size == 0:
        step = interval_ms if interval_ms is not None else PING_DEFAULT_INTERVAL_MS
        return step, f"{step:g} ms: one reply only, too few -D timestamps to measure it"
    measured = float(np.median(gaps))
    if interval_ms is not None and not (
        1.0 / INTERVAL_TOLERANCE <= interval_ms / max(measured, 1e-9) <= INTERVAL_TOLERANCE
    ):
        off = np.flatnonzero(
            (gaps > interval_ms * INTERVAL_TOLERANCE) | (gaps < interval_ms / INTERVAL_TOLERANCE)
        )
        k = int(off[0]) if off.size else 0
        raise TraceFormatError(
            run.name,
            int(lines[k + 1]),
            f"--interval-ms / interval_ms={interval_ms:g} contradicts the -D timestamps: "
            f"echo requests are sent {measured:.4g} ms apart (median over {gaps.size} "
            f"pairs of replies; this reply was sent {gaps[k]:.4g} ms per icmp_seq after line "
            f"{int(lines[k])}'s); leave --interval-ms out or fix it",
        )
    how = f"the -D timestamps (median {measured:.4g} ms per icmp_seq over {gaps.size} pairs)"
    if interval_ms is not None:
        how += f"; agrees with --interval-ms / interval_ms={interval_ms:g}"
    return measured, how


def _check_summary_time(run: _Run, step: float, how: str) -> None:
    """Without timestamps, ``time`` in iputils' statistics line bounds the interval."""
    if run.summary_time_ms is None or run.transmitted is None or run.transmitted < 10:
        return
    implied = run.summary_time_ms / (run.transmitted - 1)
    if implied > 0 and 1.0 / INTERVAL_TOLERANCE <= step / implied <= INTERVAL_TOLERANCE:
        return
    raise TraceFormatError(
        run.name,
        run.summary_line,
        f"the interval {step:g} ms ({how}) contradicts the statistics: "
        f"{run.transmitted} packets in {run.summary_time_ms:g} ms, about {implied:.4g} ms "
        f"apart; give --interval-ms / interval_ms={implied:.3g} (the -i of the ping command) "
        "or capture with ping -D",
    )


def read_ping(
    path: str | os.PathLike[str], interval_ms: float | None = None, *, halve: bool = True
) -> TraceData:
    """Read raw ``ping`` output (Linux iputils with or without ``-D``, macOS/BSD).

    Every echo request between the first and the last icmp_seq seen is a packet; the ones
    without a reply are lost (``np.inf``). The rules are in the comment above and, with
    examples, in ``traces/README.md`` (format 4).

    Example:
        >>> import tempfile
        >>> rtt = {k: 40.0 + k % 3 for k in range(1, 61) if k != 7}  # icmp_seq 7 lost
        >>> lines = [f"[{1700000000 + 0.02 * k + t / 1000:.6f}] 64 bytes from 1.2.3.4: "
        ...          f"icmp_seq={k} ttl=57 time={t:.1f} ms" for k, t in rtt.items()]
        >>> with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        ...     _ = f.write("\\n".join(lines))
        >>> trace = read_ping(f.name)
        >>> len(trace), round(trace.loss_rate, 3), trace.kind, float(trace.delay_ms[0])
        (60, 0.017, 'half-rtt', 20.5)
        >>> trace.interval_source
        'the -D timestamps (median 20 ms per icmp_seq over 58 pairs)'
        >>> os.remove(f.name)

    Args:
        path: The file ``ping ... > path`` wrote.
        interval_ms: The ``-i`` of the ping command in ms; needed without ``-D``
            timestamps (default: ping's 1000 ms), checked against them with.
        halve: Halve each round-trip time into a one-way delay (``kind "half-rtt"``,
            symmetric paths assumed); False keeps whole round trips (``kind "rtt"``).

    Raises:
        TraceFormatError: For every malformed input listed in the comment above.
        ValueError: If ``interval_ms`` is not a positive finite number.
    """
    if interval_ms is not None:
        interval_ms = check_float("interval_ms", interval_ms, 0.0, MAX_TRACE_MS, strict=True)
    name, lines = _read_lines(path)
    run = _parse(name, lines)
    if not run.replies and not run.lost and not run.transmitted:
        raise TraceFormatError(
            name, None, "no echo reply and no lost echo request: expected ping output"
        )
    style = run.style or "Linux or macOS"
    seen = sorted(set(run.replies) | set(run.lost))
    first = seen[0] if seen else 0
    last = seen[-1] if seen else -1
    start = 0 if run.style == _MAC else 1
    whole_run = run.header_line is not None and run.transmitted is not None
    if whole_run and (not seen or (first >= start and last <= start + run.transmitted - 1)):  # type: ignore[operator]
        first, last = start, start + run.transmitted - 1  # type: ignore[operator]
    n = last - first + 1
    if n <= 0:
        raise TraceFormatError(name, run.summary_line or None, "no echo request in the capture")
    if n > _MAX_PACKETS:
        raise TraceFormatError(
            name, None, f"expected at most {_MAX_PACKETS} echo requests, actual icmp_seq span {n}"
        )
    if not run.replies:
        raise TraceFormatError(
            name,
            None,
            f"every echo request is lost ({n} of {n}, icmp_seq {first % _SEQ_MODULUS}-"
            f"{last % _SEQ_MODULUS}): no round-trip time to fit or replay",
        )
    k = np.arange(first, last + 1)
    rtt = np.full(n, math.inf)
    reply_seqs = np.asarray(sorted(run.replies), dtype=np.int64)
    if reply_seqs.size:
        rtt[reply_seqs - first] = [run.replies[int(s)][0] for s in reply_seqs]
    if run.stamped:
        stamps = np.asarray([run.replies[int(s)][1] for s in reply_seqs], dtype=np.float64)
        sends = (stamps - stamps.min()) * 1000.0 - rtt[reply_seqs - first]
        reply_lines = np.asarray([run.replies[int(s)][2] for s in reply_seqs])
        step, how = _interval_from_stamps(run, reply_seqs, sends, reply_lines, interval_ms)
        send = np.interp(k, reply_seqs, sends)
        send = np.where(k < reply_seqs[0], sends[0] - (reply_seqs[0] - k) * step, send)
        send = np.where(k > reply_seqs[-1], sends[-1] + (k - reply_seqs[-1]) * step, send)
        send = np.maximum.accumulate(send)
    else:
        if interval_ms is not None:
            step, how = interval_ms, f"given (--interval-ms / interval_ms={interval_ms:g})"
        else:
            step = PING_DEFAULT_INTERVAL_MS
            how = (
                f"ping's default, {step:g} ms (no -D timestamps, no --interval-ms / "
                "interval_ms given)"
            )
        _check_summary_time(run, step, how)
        send = (k - first) * step
    send = send - send[0]
    lost = n - int(reply_seqs.size)
    reported = len(set(run.lost) - set(run.replies))
    stamped = "-D timestamps" if run.stamped else "no timestamps"
    origin = (
        f"ping output ({style}, {stamped}): {n} echo requests (icmp_seq {first % _SEQ_MODULUS}"
        f"-{last % _SEQ_MODULUS}{', wrapping at 65536' if last >= _SEQ_MODULUS else ''}), "
        f"{reply_seqs.size} replies, {lost} lost ({reported} of them with a timeout or error line)"
    )
    trace = TraceData(
        send,
        rtt,
        float(send[-1] - send[0]) + step,
        name,
        kind="rtt",
        interval_source=how,
        origin=origin,
    )
    return trace.halved() if halve else trace


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
    if name.endswith(".csv") or lines_head.replace(" ", "").startswith("send_ms"):
        return "csv"
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
            ping, ``.csv`` files or a ``send_ms`` header mean csv,
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
