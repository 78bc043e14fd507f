"""Packaged network traces and their loaders (``traces/README.md`` documents the formats).

Example:
    >>> from fleetgym.traces import list_traces, load_trace
    >>> "wifi-office.csv" in list_traces()
    True
    >>> trace = load_trace("wifi-office.csv")
    >>> len(trace) > 1000, 0.0 < trace.loss_rate < 0.1
    (True, True)
"""

from __future__ import annotations

from fleetgym.traces.loaders import (
    CSV_HEADER,
    TRACE_FORMATS,
    list_traces,
    load_trace,
    read_csv_trace,
    read_delay_list,
    read_mahimahi,
    trace_path,
)
from fleetgym.traces.ping import PING_DEFAULT_INTERVAL_MS, read_ping
from fleetgym.traces.trace_data import DELAY_KINDS, TraceData

__all__ = [
    "CSV_HEADER",
    "DELAY_KINDS",
    "PING_DEFAULT_INTERVAL_MS",
    "TRACE_FORMATS",
    "TraceData",
    "list_traces",
    "load_trace",
    "read_csv_trace",
    "read_delay_list",
    "read_mahimahi",
    "read_ping",
    "trace_path",
]
