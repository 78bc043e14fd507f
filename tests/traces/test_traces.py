"""Tests of fleetgym.traces: every format, the shipped trace, and every malformed-file error."""

from __future__ import annotations

import math
import os

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.errors import TraceFormatError
from fleetgym.traces import (
    TraceData,
    list_traces,
    load_trace,
    read_csv_trace,
    read_delay_list,
    read_mahimahi,
    trace_path,
)
from fleetgym.wrappers import NetworkShimWrapper, TraceChannel


def write(tmp_path, name: str, text: str | bytes):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_csv_format(tmp_path):
    path = write(tmp_path, "t.csv", "# a comment\n\nsend_ms, delay_ms\n0,8\n10,\n20,12.5\n20,3\n")
    trace = read_csv_trace(path)
    assert trace.send_ms.tolist() == [0, 10, 20, 20]
    assert trace.delay_ms.tolist() == [8, math.inf, 12.5, 3]
    assert trace.period_ms == 30.0  # span 20 + median positive gap 10
    assert trace.loss_rate == 0.25
    assert load_trace(path).delay_ms.tolist() == trace.delay_ms.tolist()


def test_delay_list_format(tmp_path):
    path = write(tmp_path, "ping.txt", "# interval_ms: 10\n12.5\nlost\n-\n14\n")
    trace = read_delay_list(path)
    assert trace.send_ms.tolist() == [0, 10, 20, 30] and trace.period_ms == 40
    assert trace.delay_ms.tolist() == [12.5, math.inf, math.inf, 14]
    assert read_delay_list(path, interval_ms=5).send_ms.tolist() == [0, 5, 10, 15]
    plain = write(tmp_path, "plain", "1\n2\n")
    assert load_trace(plain).period_ms == 40.0  # default 20 ms spacing
    with pytest.raises(ValueError, match="interval_ms: expected a finite number > 0"):
        read_delay_list(path, interval_ms=0)


def test_mahimahi_format(tmp_path):
    # Opportunities at 2, 2, 5 and 10 ms; the trace loops every 10 ms.
    path = write(tmp_path, "link.up", "2\n2\n5\n10\n")
    trace = load_trace(path, base_delay_ms=1.0)
    assert trace.period_ms == 10 and len(trace) == 10
    # Sent at 0 -> leaves at 2 (+1 base); at 3 -> 5; at 6 -> 10 (one row per ms, t mod 10).
    expected = [3, 2, 1, 3, 2, 1, 5, 4, 3, 2]
    assert trace.delay_ms.tolist() == expected
    ch = TraceChannel(trace, random_start=False)
    assert ch.sample_delays(np.random.default_rng(0), 3, step_ms=7.0).tolist() == [3, 4, 2]
    with pytest.raises(ValueError, match="base_delay_ms: expected a finite number >= 0"):
        read_mahimahi(path, base_delay_ms=-1)


def test_shipped_trace_loads_and_replays_in_the_shim():
    assert "wifi-office.csv" in list_traces()
    trace = load_trace("wifi-office.csv")
    assert len(trace) == 12_000 and 0.02 < trace.loss_rate < 0.06
    assert trace_path("wifi-office.csv").name == "wifi-office.csv"
    # The trace is correlated: successive delivered delays are strongly correlated.
    d = trace.delay_ms
    both = np.isfinite(d[:-1]) & np.isfinite(d[1:])
    assert np.corrcoef(d[:-1][both], d[1:][both])[0, 1] > 0.8
    env = NetworkShimWrapper(gym.make("CartPole-v1"), "trace-wifi-office")
    env.reset(seed=0)
    ages = []
    for _ in range(300):
        _, _, term, trunc, info = env.step(0)
        ages.append(info["obs_age_steps"])
        if term or trunc:
            env.reset()
    assert max(ages) >= 1  # the trace has delay spikes beyond one period
    with pytest.raises(ValueError, match="name: expected a shipped trace name"):
        trace_path("nope.csv")


@pytest.mark.parametrize(
    "name,content,line,reason",
    [
        ("empty.csv", "", None, "empty file"),
        ("comments.csv", "# only\n\n", None, "empty file"),
        ("header.csv", "time,delay\n0,1\n", 1, "expected header 'send_ms,delay_ms'"),
        ("nohead.csv", "send_ms,delay_ms\n", None, "no packets after the header"),
        ("text.csv", "send_ms,delay_ms\n0,1\n10,abc\n", 3, "expected a number for delay_ms"),
        ("nan.csv", "send_ms,delay_ms\n0,nan\n", 2, "expected a finite number"),
        ("inf.csv", "send_ms,delay_ms\ninf,1\n", 2, "expected a finite number"),
        ("neg.csv", "send_ms,delay_ms\n0,1\n10,-3\n", 3, r"expected delay_ms in \[0, 1e\+12\]"),
        ("order.csv", "send_ms,delay_ms\n0,1\n10,1\n5,1\n", 4, "expected non-decreasing send_ms"),
        ("fields.csv", "send_ms,delay_ms\n0,1,2\n", 2, "expected 2 comma-separated fields"),
        ("bin.csv", b"send_ms,delay_ms\n0,1\n\x00\x01\x02", 3, "binary data"),
        ("utf.csv", b"send_ms,delay_ms\n\xff\xfe\x80\n", 2, "binary data"),
        ("ping.txt", "1\n2\nfoo\n", 3, "expected a number for delay_ms"),
        ("ping2.txt", "1\nnan\n", 2, "expected a finite number"),
        ("ping3.txt", "1\n-2\n", 2, r"expected delay_ms in \[0, 1e\+12\]"),
        ("link.up", "1\n5\n3\n", 3, "expected non-decreasing timestamps"),
        ("link2.up", "1\n2.5\n", 2, "expected an integer timestamp"),
        ("link3.up", "0\n0\n", None, "last timestamp > 0"),
        ("link4.up", "-1\n3\n", 1, r"expected a timestamp in \[0, 10000000\]"),
    ],
)
def test_malformed_files_raise_trace_format_error_naming_file_and_line(
    tmp_path, name, content, line, reason
):
    path = write(tmp_path, name, content)
    with pytest.raises(TraceFormatError, match=reason) as err:
        load_trace(path)
    assert err.value.path == str(path) and err.value.line == line
    assert str(path) in str(err.value)
    with pytest.raises(TraceFormatError):
        TraceChannel.from_file(path)


def test_missing_file_and_bad_arguments(tmp_path):
    with pytest.raises(TraceFormatError, match="cannot read the file"):
        load_trace(tmp_path / "missing.csv")
    with pytest.raises(ValueError, match="format: expected one of"):
        load_trace(tmp_path / "x.csv", format="pcap")
    with pytest.raises(TypeError, match="path: expected a str"):
        load_trace(3)
    with pytest.raises(ValueError, match="send_ms: expected finite, non-decreasing"):
        TraceData(np.array([1.0, 0.0]), np.array([1.0, 1.0]), 5.0)
    with pytest.raises(ValueError, match="delay_ms: expected delays >= 0"):
        TraceData(np.array([0.0]), np.array([np.nan]), 5.0)
    with pytest.raises(ValueError, match="same non-zero length"):
        TraceData(np.array([]), np.array([]), 5.0)
    with pytest.raises(ValueError, match="period_ms"):
        TraceData(np.array([0.0, 10.0]), np.array([1.0, 1.0]), 5.0)


def test_csv_with_a_utf8_byte_order_mark_loads_like_one_without(tmp_path):
    # Spreadsheet programs write UTF-8 CSV files with a byte-order mark.
    body = "send_ms,delay_ms\n0,5\n20,\n40,7.5\n"
    plain = load_trace(write(tmp_path, "plain.csv", body))
    for name in ("bom.csv", "bom.txt"):  # by extension, and by the header when guessing
        bom = load_trace(write(tmp_path, name, "\ufeff".encode() + body.encode()))
        assert bom.send_ms.tolist() == plain.send_ms.tolist()
        assert bom.delay_ms.tolist() == plain.delay_ms.tolist()
    with_bom = write(tmp_path, "bom.csv", "\ufeff".encode() + body.encode())
    assert read_csv_trace(with_bom).period_ms == plain.period_ms
    # A byte-order mark before a wrong header still names line 1.
    bad = write(tmp_path, "badbom.csv", "\ufeff".encode() + b"time,delay\n0,1\n")
    with pytest.raises(TraceFormatError, match="expected header") as err:
        load_trace(bad)
    assert err.value.line == 1


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need POSIX")
def test_a_named_pipe_is_rejected_without_blocking(tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    for fmt in ("auto", "csv", "delays", "mahimahi"):
        with pytest.raises(TraceFormatError, match="expected a regular file"):
            load_trace(fifo, fmt)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_is_rejected_and_reads_are_capped():
    with pytest.raises(TraceFormatError, match="expected a regular file"):
        load_trace("/dev/zero", "delays")


def test_a_huge_line_gives_a_bounded_message(tmp_path):
    path = write(tmp_path, "long.txt", "1\n" + "x" * 10_000_000 + "\n")
    with pytest.raises(TraceFormatError, match="expected a number for delay_ms") as err:
        load_trace(path)
    assert err.value.line == 2 and len(str(err.value)) < 400
    header = write(tmp_path, "long.csv", "y" * 10_000_000 + "\n")
    with pytest.raises(TraceFormatError, match="expected header") as err:
        load_trace(header)
    assert len(str(err.value)) < 400


@pytest.mark.parametrize(
    "name,content,line",
    [
        ("big.up", "1\n" + "9" * 4000 + "\n", 2),
        ("huge.up", "1\n" + "9" * 5000 + "\n", 2),
        ("far.csv", "send_ms,delay_ms\n0,1\n1e300,1\n", 3),
        ("slow.txt", "1\n1e300\n", 2),
    ],
)
def test_huge_numbers_name_file_and_line(tmp_path, name, content, line):
    path = write(tmp_path, name, content)
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    assert err.value.line == line and len(str(err.value)) < 400
