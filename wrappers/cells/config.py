"""What a simulated Wi-Fi cell is: :class:`WifiCell`, a frozen, plain-data configuration.

A cell is one access point and ``stations`` robots around it. Every station runs the
control loop the shim models: an observation packet of ``obs_bytes`` up to the access point
and an action packet of ``action_bytes`` down to the station, once per control period;
beside it each station may stream ``background_mbps`` of other traffic up (a camera, a
map upload). The cell is simulated by ns-3 (:mod:`fleetgym.wrappers.cells.simulate`);
this module needs nothing but the standard library, so a configuration can be written,
checked and hashed without the ``ns3`` extra.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from fleetgym.validation import check_choice, check_float, check_int, quote

__all__ = ["CELL_TYPES", "MOBILITY", "WIFI_STANDARDS", "WifiCell", "cell_from_dict"]

#: The 802.11 standards a cell may run (ns-3's ``WifiStandard`` of the same name).
WIFI_STANDARDS = ("802.11a", "802.11g", "802.11n", "802.11ac", "802.11ax")
#: How stations move: ``"static"`` (evenly spaced on a circle of radius ``distance_m``) or
#: ``"walk"`` (a random walk at 1 m/s inside the square of half-side ``distance_m``).
MOBILITY = ("static", "walk")
#: The ``"type"`` values of a cell's plain-data form.
CELL_TYPES = ("wifi",)
#: Most stations one cell simulates (ns-3's cost grows with the square of contention).
MAX_STATIONS = 128
#: Longest stretch simulated (seconds): one cell's schedule, replayed with wrap-around.
MAX_SECONDS = 3600.0


@dataclass(frozen=True)
class WifiCell:
    """One 802.11 access point with ``stations`` robots, each running the control loop.

    Args:
        standard: The 802.11 standard (:data:`WIFI_STANDARDS`; default ``"802.11n"``).
        stations: Robots on the access point, 1 to 128 (default 1); each sends an
            observation and receives an action every control period, so they contend with
            each other. A shim replays station 0; a vector shim's sub-env ``i`` replays
            station ``i mod stations``.
        distance_m: Distance of the stations from the access point in metres, in (0, 1000]
            (default 10); the radius of a ``"walk"``.
        mobility: ``"static"`` or ``"walk"`` (:data:`MOBILITY`; default ``"static"``).
        background_mbps: Other traffic each station streams up, Mb/s, in [0, 1000]
            (default 0): constant-rate UDP of 1,400-byte packets.
        obs_bytes: Observation packet size in bytes (UDP payload), 12 to 65,000 (default 200).
        action_bytes: Action packet size in bytes, 12 to 65,000 (default 64).
        step_ms: The control period the packets are sent at, in ms; None (default): the
            period of the shim that replays the cell (the cell is simulated per period).
        seconds: Simulated stretch in seconds, in [1, 3600] (default 30); replays wrap.
        seed: ns-3's run number (``RngSeedManager::SetRun``), an int >= 0 (default 0):
            the same configuration and seed give the same packets.

    Example:
        >>> cell = WifiCell(stations=8, background_mbps=2.0)
        >>> cell.stations, cell.standard, cell.key()[:12] == WifiCell(8, background_mbps=2.0).key()[:12]
        (8, '802.11n', False)

    Raises:
        TypeError: For an argument of the wrong type.
        ValueError: For a value out of its range or an unknown choice.
    """

    stations: int = 1
    standard: str = "802.11n"
    distance_m: float = 10.0
    mobility: str = "static"
    background_mbps: float = 0.0
    obs_bytes: int = 200
    action_bytes: int = 64
    step_ms: float | None = None
    seconds: float = 30.0
    seed: int = 0

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "stations", check_int("stations", self.stations, 1, MAX_STATIONS))
        put(self, "standard", check_choice("standard", self.standard, WIFI_STANDARDS))
        put(self, "distance_m", check_float("distance_m", self.distance_m, 0.0, 1000.0))
        if self.distance_m == 0.0:
            raise ValueError("distance_m: expected a finite number > 0 and <= 1000, actual 0.0")
        put(self, "mobility", check_choice("mobility", self.mobility, MOBILITY))
        put(
            self,
            "background_mbps",
            check_float("background_mbps", self.background_mbps, 0.0, 1000.0),
        )
        put(self, "obs_bytes", check_int("obs_bytes", self.obs_bytes, 12, 65_000))
        put(self, "action_bytes", check_int("action_bytes", self.action_bytes, 12, 65_000))
        if self.step_ms is not None:
            put(self, "step_ms", check_float("step_ms", self.step_ms, 1.0, 10_000.0))
        put(self, "seconds", check_float("seconds", self.seconds, 1.0, MAX_SECONDS))
        put(self, "seed", check_int("seed", self.seed, 0, 2**31 - 1))

    def with_step(self, step_ms: float) -> WifiCell:
        """This cell at control period ``step_ms`` (itself if its ``step_ms`` is set)."""
        if self.step_ms is not None:
            return self
        return WifiCell(**{**asdict(self), "step_ms": float(step_ms)})

    def packets(self) -> int:
        """Control packets per station and direction in the simulated stretch."""
        if self.step_ms is None:
            raise ValueError("step_ms: expected a control period, actual None (use with_step)")
        return int(self.seconds * 1000.0 // self.step_ms)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data: ``{"type": "wifi", fields...}`` (:func:`cell_from_dict` reads it)."""
        return {"type": "wifi", **asdict(self)}

    def key(self) -> str:
        """A hex digest of the configuration: the cache name of its simulation."""
        text = json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def describe(self) -> str:
        """One line for listings."""
        load = f", {self.background_mbps:g} Mb/s up each" if self.background_mbps else ""
        return (
            f"ns-3 {self.standard} cell: {self.stations} station(s) at {self.distance_m:g} m "
            f"({self.mobility}){load}, {self.obs_bytes} B up / {self.action_bytes} B down "
            f"per period"
        )


def cell_from_dict(data: Any, where: str = "cell") -> WifiCell:
    """The cell a :meth:`WifiCell.to_dict` describes (``where`` prefixes messages).

    Example:
        >>> cell_from_dict({"type": "wifi", "stations": 4}).stations
        4

    Raises:
        TypeError, ValueError: For data that is not an object, an unknown type or key, or
            a value of the wrong type or out of range (the message names the key).
    """
    if not isinstance(data, dict):
        raise TypeError(f'{where}: expected an object with a "type", actual {quote(data)}')
    kind = data.get("type")
    if kind not in CELL_TYPES:
        raise ValueError(f"{where}.type: expected one of {list(CELL_TYPES)}, actual {quote(kind)}")
    names = [f.name for f in fields(WifiCell)]
    unknown = sorted(str(k) for k in data if k != "type" and k not in names)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}, expected some of {names}")
    kwargs = {k: v for k, v in data.items() if k != "type"}
    try:
        return WifiCell(**kwargs)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}.{exc}") from None
