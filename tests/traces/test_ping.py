"""Raw ``ping`` output as a trace: Linux iputils with and without -D, macOS/BSD, losses,
the interval, icmp_seq wrap-around, round trips halved, and every malformed capture."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetgym.errors import TraceFormatError
from fleetgym.traces import TraceData, load_trace, read_ping

# Linux iputils, `ping -D -O -i 0.05 192.0.2.7`: -O reports a request still unanswered when
# the next one goes out. icmp_seq 3 and 5 are lost; 4 and 6 are answered late (6 after 7),
# 7 comes twice.
LINUX_D = """\
PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.
[1700000000.090100] 64 bytes from 192.0.2.7: icmp_seq=1 ttl=57 time=40.1 ms
[1700000000.142300] 64 bytes from 192.0.2.7: icmp_seq=2 ttl=57 time=42.3 ms
[1700000000.200021] no answer yet for icmp_seq=3
[1700000000.250020] no answer yet for icmp_seq=4
[1700000000.261900] 64 bytes from 192.0.2.7: icmp_seq=4 ttl=57 time=61.9 ms
[1700000000.300019] no answer yet for icmp_seq=5
[1700000000.350022] no answer yet for icmp_seq=6
[1700000000.390500] 64 bytes from 192.0.2.7: icmp_seq=7 ttl=57 time=40.5 ms
[1700000000.390600] 64 bytes from 192.0.2.7: icmp_seq=7 ttl=57 time=40.6 ms (DUP!)
[1700000000.430000] 64 bytes from 192.0.2.7: icmp_seq=6 ttl=57 time=130 ms

--- 192.0.2.7 ping statistics ---
7 packets transmitted, 5 received, +1 duplicates, 28.5714% packet loss, time 301ms
rtt min/avg/max/mdev = 40.100/62.960/130.000/34.412 ms
"""

# Linux iputils without -D (`ping -i 0.02 192.0.2.7`): icmp_seq 2 is missing.
LINUX_PLAIN = """\
PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.
64 bytes from 192.0.2.7: icmp_seq=1 ttl=57 time=41.2 ms
64 bytes from 192.0.2.7: icmp_seq=3 ttl=57 time=8.25 ms
64 bytes from 192.0.2.7: icmp_seq=4 ttl=57 time=104 ms
"""

# macOS, `ping -i 0.1 192.0.2.7`: icmp_seq 2 times out, the statistics count 6 requests
# (icmp_seq 0-5), so 5 is lost too.
MACOS = """\
PING 192.0.2.7 (192.0.2.7): 56 data bytes
64 bytes from 192.0.2.7: icmp_seq=0 ttl=57 time=41.200 ms
64 bytes from 192.0.2.7: icmp_seq=1 ttl=57 time=39.871 ms
Request timeout for icmp_seq 2
64 bytes from 192.0.2.7: icmp_seq=3 ttl=57 time=40.005 ms
64 bytes from 192.0.2.7: icmp_seq=4 ttl=57 time=0.998 ms

--- 192.0.2.7 ping statistics ---
6 packets transmitted, 4 packets received, 33.3% packet loss
round-trip min/avg/max/stddev = 0.998/30.519/41.200/17.272 ms
"""


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def linux_capture(
    n: int = 100,
    *,
    interval_s: float = 0.02,
    lost: tuple[int, ...] = (),
    stamps: bool = True,
    first: int = 1,
) -> str:
    """`ping -D -i interval_s` output of n echo requests (icmp_seq first..), some lost."""
    lines = ["PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data."]
    for k in range(n):
        seq = (first + k) % 65536
        if first + k in lost:
            continue
        rtt = 40.0 + (k % 7)
        stamp = f"[{1700000000 + interval_s * k + rtt / 1000:.6f}] " if stamps else ""
        lines.append(f"{stamp}64 bytes from 192.0.2.7: icmp_seq={seq} ttl=57 time={rtt:.1f} ms")
    return "\n".join(lines) + "\n"


def test_linux_with_timestamps_losses_and_interval(tmp_path):
    trace = read_ping(write(tmp_path, "ping.txt", LINUX_D), halve=False)
    assert len(trace) == 7 and trace.kind == "rtt"
    inf = math.inf
    assert trace.delay_ms.tolist() == [40.1, 42.3, inf, 61.9, inf, 130.0, 40.5]
    # Sends: stamp minus round trip, 20 ms apart; the lost ones in between.
    # Sends: each reply's stamp minus its round trip, 50 ms apart; the lost ones in between.
    assert np.allclose(trace.send_ms, [0, 50, 100, 150, 200, 250, 300], atol=1e-3)
    assert trace.interval_source.startswith("the -D timestamps (median 50 ms per icmp_seq")
    assert trace.period_ms == pytest.approx(350.0)
    assert "Linux iputils, -D timestamps" in trace.origin
    assert "7 echo requests (icmp_seq 1-7), 5 replies, 2 lost (2 of them with" in trace.origin


def test_round_trips_are_halved_by_default(tmp_path):
    path = write(tmp_path, "ping.txt", LINUX_D)
    for trace in (read_ping(path), load_trace(path)):
        assert trace.kind == "half-rtt"
        assert trace.delay_ms[:2].tolist() == [20.05, 21.15]
        assert trace.loss_rate == pytest.approx(2 / 7)
    whole = load_trace(path, rtt=False)
    assert whole.kind == "rtt" and whole.delay_ms[0] == 40.1


def test_linux_without_timestamps_takes_the_interval_given_else_pings_default(tmp_path):
    path = write(tmp_path, "plain.txt", LINUX_PLAIN)
    trace = read_ping(path, halve=False)
    assert trace.delay_ms.tolist() == [41.2, math.inf, 8.25, 104.0]
    assert trace.send_ms.tolist() == [0, 1000, 2000, 3000] and trace.period_ms == 4000
    assert trace.interval_source.startswith("ping's default, 1000 ms (no -D timestamps")
    given = load_trace(path, interval_ms=20, rtt=False)
    assert given.send_ms.tolist() == [0, 20, 40, 60]
    assert given.interval_source == "given (--interval-ms / interval_ms=20)"
    assert "Linux iputils, no timestamps" in given.origin


def test_macos_timeouts_and_trailing_losses(tmp_path):
    trace = load_trace(write(tmp_path, "mac.txt", MACOS), interval_ms=100, rtt=False)
    inf = math.inf
    assert trace.delay_ms.tolist() == [41.2, 39.871, inf, 40.005, 0.998, inf]
    assert trace.send_ms.tolist() == [0, 100, 200, 300, 400, 500]
    assert "macOS/BSD" in trace.origin and "icmp_seq 0-5" in trace.origin


def test_icmp_seq_wraps_at_65536(tmp_path):
    text = linux_capture(60, first=65510, lost=(65530, 65536, 65537))
    trace = read_ping(write(tmp_path, "wrap.txt", text))
    assert len(trace) == 60 and int(np.isinf(trace.delay_ms).sum()) == 3
    assert np.allclose(np.diff(trace.send_ms), 20.0, atol=0.1)
    assert "icmp_seq 65510-33, wrapping at 65536" in trace.origin


def test_auto_detection_and_rtt_for_other_formats(tmp_path):
    assert load_trace(write(tmp_path, "ping.log", LINUX_PLAIN), interval_ms=10).kind == "half-rtt"
    csv = write(tmp_path, "rtt.csv", "send_ms,delay_ms\n0,40\n10,\n20,50\n")
    assert load_trace(csv).kind == "one-way"
    halved = load_trace(csv, rtt=True)
    assert halved.kind == "half-rtt" and halved.delay_ms.tolist() == [20, math.inf, 25]
    with pytest.raises(ValueError, match="rtt: expected None or False for a Mahimahi"):
        load_trace(write(tmp_path, "link.up", "1\n2\n"), rtt=True)
    with pytest.raises(ValueError, match="kind: expected round-trip times to halve"):
        halved.halved()
    with pytest.raises(ValueError, match="kind"):
        TraceData(np.array([0.0]), np.array([1.0]), 1.0, kind="two-way")


def _error(path, line: int | None, *needles: str) -> None:
    with pytest.raises(TraceFormatError) as caught:
        load_trace(path)
    err = caught.value
    assert err.path == str(path) and err.line == line, str(err)
    text = str(err)
    assert text.startswith(f"malformed trace file {path}")
    for needle in needles:
        assert needle in text, text


def test_mixed_formats_are_refused(tmp_path):
    mac_line = "64 bytes from 192.0.2.7: icmp_seq=3 ttl=57 time=40.005 ms"
    mixed = LINUX_PLAIN.replace("64 bytes from 192.0.2.7: icmp_seq=3 ttl=57 time=8.25 ms", mac_line)
    _error(write(tmp_path, "mixed.txt", mixed), 3, "mixed ping formats", "macOS/BSD", "line 2")
    mac_stats = LINUX_PLAIN + "4 packets transmitted, 3 packets received, 25.0% packet loss\n"
    _error(write(tmp_path, "stats.txt", mac_stats), 5, "mixed ping formats")
    no_stamp = LINUX_D.replace("[1700000000.142300] ", "")
    _error(write(tmp_path, "d.txt", no_stamp), 3, "-D timestamp", "line 2")


def test_unknown_formats_are_refused(tmp_path):
    windows = "Pinging 192.0.2.7 with 32 bytes of data:\nReply from 192.0.2.7: bytes=32 time=41ms TTL=57\n"
    _error(write(tmp_path, "win.txt", windows), 1, "unknown ping format", "Windows ping")
    stray = LINUX_PLAIN + "64 bytes from 192.0.2.7: seq=5 ttl=57 time=41.200 ms\n"
    _error(write(tmp_path, "busybox.txt", stray), 5, "unknown ping format", "seq=5")
    two_runs = LINUX_PLAIN + LINUX_PLAIN
    _error(write(tmp_path, "two.txt", two_runs), 5, "a second ping run starts here")
    header_only = "PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n"
    _error(write(tmp_path, "empty.txt", header_only), None, "no echo reply")


def test_a_timestamp_going_backwards_is_refused(tmp_path):
    back = LINUX_D.replace("[1700000000.142300]", "[1699999999.142300]")
    _error(write(tmp_path, "back.txt", back), 3, "timestamp goes backwards", "line 2")


def test_every_packet_lost_is_refused(tmp_path):
    lost = "".join(f"Request timeout for icmp_seq {k}\n" for k in range(60))
    _error(write(tmp_path, "lost.txt", lost), None, "every echo request is lost (60 of 60")
    stats = (
        "PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n\n--- 192.0.2.7 ping statistics ---\n"
        "80 packets transmitted, 0 received, 100% packet loss, time 1580ms\n"
    )
    _error(write(tmp_path, "none.txt", stats), None, "every echo request is lost (80 of 80")


def test_an_interval_that_contradicts_the_capture_is_refused(tmp_path):
    one_second = write(tmp_path, "slow.txt", linux_capture(60, interval_s=1.0))
    with pytest.raises(TraceFormatError) as caught:
        load_trace(one_second, interval_ms=20)
    err = caught.value
    assert err.path == str(one_second) and err.line == 3
    assert "interval_ms=20 contradicts the -D timestamps" in str(err)
    assert "1000 ms apart" in str(err)
    assert load_trace(one_second, interval_ms=1000).interval_source.endswith(
        "agrees with --interval-ms / interval_ms=1000"
    )
    # Without -D, iputils' statistics line shows 20 ms: ping's default 1000 ms contradicts it.
    fast = linux_capture(60, stamps=False) + (
        "\n--- 192.0.2.7 ping statistics ---\n"
        "60 packets transmitted, 60 received, 0% packet loss, time 1180ms\n"
    )
    path = write(tmp_path, "fast.txt", fast)
    _error(path, 64, "1000 ms (ping's default", "about 20 ms apart", "give --interval-ms")
    assert load_trace(path, interval_ms=20).send_ms[-1] == 59 * 20


def test_pings_own_warning_before_the_header_is_not_data(tmp_path):
    # `ping -D -I eth0 ...` prints a warning line before its header; a user's capture
    # starts with it, and both the auto-detected load and the reader skip it.
    text = (
        "ping: Warning: source address might be selected on device other than: eth0\n"
        + linux_capture(50, lost=(10, 11))
    )
    path = write(tmp_path, "capture.txt", text)
    plain = write(tmp_path, "plain.txt", linux_capture(50, lost=(10, 11)))
    trace = load_trace(path)
    assert isinstance(trace, TraceData) and len(trace) == 50
    assert trace.delay_ms.tolist() == load_trace(plain).delay_ms.tolist()


def test_a_csv_of_one_number_per_line_is_a_delay_list(tmp_path):
    # Round trips exported by a logger as a .csv, one per line, no header.
    path = write(tmp_path, "rtt.csv", "120.5\n4.5\n4.6\n")
    trace = load_trace(path)
    assert trace.delay_ms.tolist() == [120.5, 4.5, 4.6]
    with pytest.raises(TraceFormatError, match="send_ms"):
        load_trace(write(tmp_path, "bad.csv", "when,delay\n1,2\n"))
