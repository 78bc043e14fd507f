"""Raw ``ping`` output as a trace: Linux iputils (with or without ``-D``) and macOS/BSD.

:func:`read_ping` returns a :class:`~fleetgym.traces.trace_data.TraceData` of round trips
(or halved into one-way delays); :func:`looks_like_ping` tells :func:`load_trace
<fleetgym.traces.loaders.load_trace>` a ping capture from its first line.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

from fleetgym.errors import TraceFormatError
from fleetgym.traces.trace_data import MAX_TRACE_MS, TraceData, _read_lines
from fleetgym.validation import check_float, quote

__all__ = ["PING_DEFAULT_INTERVAL_MS", "looks_like_ping", "read_ping"]

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
    r"no answer yet for icmp_seq|From \S+ icmp_seq=|Pinging \S|Reply from \S|ping: )"
)

_LINUX, _MAC = "Linux iputils", "macOS/BSD"


def looks_like_ping(line: str) -> bool:
    """Whether ``line`` (a file's first non-comment line) starts ``ping`` output.

    ping's own messages (``ping: Warning: ...``, printed before the header by ``ping -I``)
    count: they start ping output, and the reader skips them as it skips the header and the
    statistics.

    Example:
        >>> looks_like_ping("PING example.org (93.184.216.34) 56(84) bytes of data.")
        True
        >>> looks_like_ping("[1700000000.1] 64 bytes from 1.2.3.4: icmp_seq=1 ttl=57 time=9.1 ms")
        True
        >>> looks_like_ping("ping: Warning: source address might be selected on device other than: eth0")
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

    Args:
        path: The file ``ping ... > path`` wrote.
        interval_ms: The ``-i`` of the ping command in ms; needed without ``-D``
            timestamps (default: ping's 1000 ms), checked against them with.
        halve: Halve each round-trip time into a one-way delay (``kind "half-rtt"``,
            symmetric paths assumed); False keeps whole round trips (``kind "rtt"``).

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
