"""A simulated cell as a channel: :class:`CellChannel` and :func:`cell_profile`.

A :class:`CellChannel` is one direction of one station of a :class:`WifiCell`. Its first
stream simulates the cell at the shim's control period (or reads the cached run,
:func:`~fleetgym.wrappers.cells.simulate.simulate_cells`) and every stream replays the
station's per-packet delays like a trace: packet ``k`` of an episode takes the packet the
station sent at ``offset + k * step_ms`` of the simulated stretch, which wraps around. The
offset is drawn from the stream's generator, so a seed replays the same stretch.

Both directions of a cell's profile replay the same station from the same offset
(:meth:`CellChannel.paired_samplers`): an observation and the action sent in the same tick
met the same cell. A vector shim's sub-env ``i`` replays station ``i mod stations``, and
all its sub-envs start every episode on the vector's shared clock (:attr:`follows_clock`),
so that on the same global tick they read the cell at the same simulated instant (the
robots contended with each other there).
:func:`fleetgym.wrappers.profiles.cell_profile` pairs them into a profile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetgym.traces.trace_data import TraceData
from fleetgym.validation import check_choice, check_float, check_int
from fleetgym.wrappers.cells.config import MAX_STATIONS, Cell, LteCell, WifiCell
from fleetgym.wrappers.cells.simulate import CellRun, require_ns3, simulate_cells
from fleetgym.wrappers.channel_base import Channel, DelaySampler, _check_rng, check_step_ms
from fleetgym.wrappers.trace_channel import _TraceSampler

__all__ = ["CellChannel"]

#: The control period at which :attr:`CellChannel.loss_rate` is measured when the cell has
#: none of its own.
_LOSS_STEP_MS = 20.0


@dataclass(frozen=True)
class CellChannel(Channel):
    """One direction of one station of a simulated cell (ns-3), replayed per packet.

    Args:
        cell: The cell (:class:`WifiCell` or :class:`LteCell`).
        direction: ``"uplink"`` (the station's observation packets) or ``"downlink"``
            (the access point's action packets to it); default ``"uplink"``.
        station: Which station, 0 to ``cell.stations - 1`` (default 0).

    Example:
        >>> from fleetgym.wrappers.cells import WifiCell
        >>> CellChannel(WifiCell(stations=4), "downlink").describe()[:24]  # doctest: +SKIP
        'ns-3 802.11n cell: 4 sta'

    Raises:
        TypeError, ValueError: For a bad argument.
        DependencyNotInstalled: If ns-3's bindings (the ``ns3`` extra) are not installed.
    """

    cell: Cell
    direction: str = "uplink"
    station: int = 0

    follows_clock = True

    def __post_init__(self) -> None:
        if not isinstance(self.cell, (WifiCell, LteCell)):
            raise TypeError(
                f"cell: expected a WifiCell or LteCell, actual {type(self.cell).__name__}"
            )
        check_choice("direction", self.direction, ("uplink", "downlink"))
        check_int("station", self.station, 0, min(self.cell.stations, MAX_STATIONS) - 1)
        require_ns3("fleetgym.wrappers.cells.CellChannel")

    def run(self, step_ms: float = _LOSS_STEP_MS) -> CellRun:
        """The cell's simulated run at control period ``step_ms`` (cached).

        Args:
            step_ms: The control period in ms (the cell's own, when it has one, wins).
        """
        return simulate_cells([self.cell.with_step(check_step_ms(step_ms))])[0]

    def _trace(self, step_ms: float, station: int) -> TraceData:
        return self.run(step_ms).trace(self.direction, station)

    def sampler(self, rng: np.random.Generator, step_ms: float = 20.0) -> DelaySampler:
        rng, step_ms = _check_rng(rng), check_step_ms(step_ms)
        trace = self._trace(step_ms, self.station)
        return _TraceSampler(trace, step_ms, float(rng.uniform(0.0, trace.period_ms)))

    def paired_samplers(
        self,
        downlink: Channel,
        up_rng: np.random.Generator,
        down_rng: np.random.Generator,
        step_ms: float = 20.0,
        slot: int = 0,
        clock_ms: float | None = None,
    ) -> tuple[DelaySampler, DelaySampler]:
        """Both directions of station ``slot mod stations`` from one offset when
        ``downlink`` is this cell's downlink (else independent streams): ``clock_ms``
        (modulo the simulated stretch) when given, so that a vector's sub-envs read the
        cell at the same instant; else drawn from ``up_rng``.

        Args:
            downlink: The channel carrying the actions.
            up_rng: The uplink's generator (draws the offset when ``clock_ms`` is None).
            down_rng: The downlink's generator (unused when paired).
            step_ms: The control period in ms.
            slot: The sub-env's index: station ``(station + slot) mod stations``.
            clock_ms: The episode's start on the vector's shared clock, or None.
        """
        twin = (
            isinstance(downlink, CellChannel)
            and downlink.cell == self.cell
            and (self.direction, downlink.direction) == ("uplink", "downlink")
        )
        if not twin:
            return super().paired_samplers(downlink, up_rng, down_rng, step_ms, slot, clock_ms)
        step_ms = check_step_ms(step_ms)
        station = (self.station + check_int("slot", slot, 0)) % self.cell.stations
        run = self.run(step_ms)
        up, down = run.trace("uplink", station), run.trace("downlink", station)
        offset = float(_check_rng(up_rng).uniform(0.0, up.period_ms))
        if clock_ms is not None:
            offset = float(check_float("clock_ms", clock_ms, 0.0)) % up.period_ms
        return _TraceSampler(up, step_ms, offset), _TraceSampler(down, step_ms, offset)

    @property
    def loss_rate(self) -> float:
        step = self.cell.step_ms or _LOSS_STEP_MS
        return self._trace(step, self.station).loss_rate

    def describe(self) -> str:
        return f"{self.cell.describe()}; {self.direction} of station {self.station}"
