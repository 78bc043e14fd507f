"""Simulated cells as channels: a Wi-Fi access point (or an LTE base station) and its
stations, simulated by ns-3.

Statistical channels and replayed captures do not know that delay depends on who else is
on the link. A :class:`WifiCell` is an 802.11 cell (an :class:`LteCell` an LTE one) whose
stations all run the control loop
(and may stream background traffic beside it); ns-3 simulates it ahead, once per
configuration, in a child process, and a :class:`CellChannel` replays a station's packets
per tick like a trace. Needs the ``ns3`` extra (``pip install "fleetgym[ns3]"``); the
configuration itself is plain data and needs nothing.

Example:
    >>> from fleetgym.wrappers.cells import WifiCell
    >>> WifiCell(stations=16, background_mbps=4.0).describe()
    'ns-3 802.11n cell: 16 station(s) at 10 m (static), 4 Mb/s up each, 200 B up / 64 B down per period'
"""

from __future__ import annotations

from fleetgym.wrappers.cells.channel import CellChannel
from fleetgym.wrappers.cells.config import (
    LTE_BANDWIDTHS_RB,
    MOBILITY,
    WIFI_STANDARDS,
    LteCell,
    WifiCell,
    cell_from_dict,
)
from fleetgym.wrappers.cells.simulate import (
    CellRun,
    CellSimulationError,
    cache_dir,
    simulate_cells,
)

__all__ = [
    "LTE_BANDWIDTHS_RB",
    "MOBILITY",
    "WIFI_STANDARDS",
    "CellChannel",
    "CellRun",
    "CellSimulationError",
    "LteCell",
    "WifiCell",
    "cache_dir",
    "cell_from_dict",
    "simulate_cells",
]
