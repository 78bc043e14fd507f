"""What a simulated cell is: :class:`WifiCell` and :class:`LteCell`, frozen, plain data.

A cell is one access point (or LTE base station) and ``stations`` robots around it. Every station runs the
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
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from fleetgym.validation import check_choice, check_float, check_int, quote

__all__ = [
    "CELL_TYPES",
    "LTE_BANDWIDTHS_RB",
    "MOBILITY",
    "WIFI_STANDARDS",
    "Cell",
    "LteCell",
    "WifiCell",
    "cell_from_dict",
]

#: The 802.11 standards a cell may run (ns-3's ``WifiStandard`` of the same name).
WIFI_STANDARDS = ("802.11a", "802.11g", "802.11n", "802.11ac", "802.11ax")
#: How stations move: ``"static"`` (evenly spaced on a circle of radius ``distance_m``) or
#: ``"walk"`` (a random walk at 1 m/s inside the square of half-side ``distance_m``).
MOBILITY = ("static", "walk")
#: The ``"type"`` values of a cell's plain-data form: a Wi-Fi or an LTE cell.
CELL_TYPES = ("wifi", "lte")
#: The LTE channel bandwidths, in resource blocks (1.4, 3, 5, 10, 15 and 20 MHz).
LTE_BANDWIDTHS_RB = (6, 15, 25, 50, 75, 100)
#: Most stations one cell simulates (ns-3's cost grows with the square of contention).
MAX_STATIONS = 128
#: Longest stretch simulated (seconds): one cell's schedule, replayed with wrap-around.
MAX_SECONDS = 3600.0


class _CellMethods:
    """What both cell kinds share: the control period, the packet count, plain data, key."""

    TYPE = ""
    step_ms: float | None
    seconds: float

    def _check_common(self, max_distance_m: float) -> None:
        put = object.__setattr__
        cell: Any = self
        put(self, "stations", check_int("stations", cell.stations, 1, MAX_STATIONS))
        put(self, "distance_m", check_float("distance_m", cell.distance_m, 0.0, max_distance_m))
        if self.distance_m == 0.0:  # type: ignore[attr-defined]
            raise ValueError(
                f"distance_m: expected a finite number > 0 and <= {max_distance_m:g}, actual 0.0"
            )
        put(self, "mobility", check_choice("mobility", cell.mobility, MOBILITY))
        put(
            self,
            "background_mbps",
            check_float("background_mbps", cell.background_mbps, 0.0, 1000.0),
        )
        put(self, "obs_bytes", check_int("obs_bytes", cell.obs_bytes, 12, 65_000))
        put(self, "action_bytes", check_int("action_bytes", cell.action_bytes, 12, 65_000))
        if self.step_ms is not None:
            put(self, "step_ms", check_float("step_ms", self.step_ms, 1.0, 10_000.0))
        put(self, "seconds", check_float("seconds", self.seconds, 1.0, MAX_SECONDS))
        put(self, "seed", check_int("seed", cell.seed, 0, 2**31 - 1))

    def with_step(self, step_ms: float) -> Any:
        """This cell at control period ``step_ms`` (itself if its ``step_ms`` is set)."""
        if self.step_ms is not None:
            return self
        return replace(self, step_ms=float(step_ms))  # type: ignore[type-var]

    def packets(self) -> int:
        """Control packets per station and direction in the simulated stretch."""
        if self.step_ms is None:
            raise ValueError("step_ms: expected a control period, actual None (use with_step)")
        return int(self.seconds * 1000.0 // self.step_ms)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data: ``{"type": ..., fields...}`` (:func:`cell_from_dict` reads it)."""
        return {"type": self.TYPE, **asdict(self)}  # type: ignore[call-overload]

    def key(self) -> str:
        """A hex digest of the configuration: the cache name of its simulation."""
        text = json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def _load(self) -> str:
        cell: Any = self
        return f", {cell.background_mbps:g} Mb/s up each" if cell.background_mbps else ""


@dataclass(frozen=True)
class WifiCell(_CellMethods):
    """One 802.11 access point with ``stations`` robots, each running the control loop.

    Args:
        stations: Robots on the access point, 1 to 128 (default 1); each sends an
            observation and receives an action every control period, so they contend with
            each other. A shim replays station 0; a vector shim's sub-env ``i`` replays
            station ``i mod stations``.
        standard: The 802.11 standard (:data:`WIFI_STANDARDS`; default ``"802.11n"``).
        distance_m: Distance of the stations from the access point in metres, in (0, 1000]
            (default 10); the radius of a ``"walk"``.
        mobility: ``"static"`` or ``"walk"`` (:data:`MOBILITY`; default ``"static"``).
        background_mbps: Other traffic each station streams up, Mb/s, in [0, 1000]
            (default 0): constant-rate UDP of 1,400-byte packets.
        obs_bytes: Observation packet size in bytes (UDP payload), 12 to 65,000 (default 200).
        action_bytes: Action packet size in bytes, 12 to 65,000 (default 64).
        step_ms: The control period the packets are sent at, in ms, in [1, 10000]; None
            (default): the period of the shim that replays the cell (the cell is simulated
            per period).
        seconds: Simulated stretch in seconds, in [1, 3600] (default 30); replays wrap.
        seed: ns-3's run number (``RngSeedManager::SetRun``), an int >= 0 (default 0):
            the same configuration and seed give the same packets.

    Example:
        >>> cell = WifiCell(stations=8, background_mbps=2.0)
        >>> cell.stations, cell.standard, cell.key() == WifiCell(8, background_mbps=2.0).key()
        (8, '802.11n', True)

    Raises:
        TypeError: For an argument of the wrong type.
        ValueError: For a value out of its range or an unknown choice.
    """

    TYPE = "wifi"

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
        self._check_common(1000.0)
        object.__setattr__(
            self, "standard", check_choice("standard", self.standard, WIFI_STANDARDS)
        )

    def describe(self) -> str:
        """One line for listings."""
        return (
            f"ns-3 {self.standard} cell: {self.stations} station(s) at {self.distance_m:g} m "
            f"({self.mobility}){self._load()}, {self.obs_bytes} B up / {self.action_bytes} B "
            "down per period"
        )


@dataclass(frozen=True)
class LteCell(_CellMethods):
    """One LTE base station (ns-3's LTE and EPC models) with ``stations`` robots as UEs.

    The agent sits behind the core: a server linked to the packet gateway by a 10 Gb/s
    link of ``backhaul_ms`` one way. Every robot sends its observation up and receives its
    action down once per control period, on the default bearer, and may stream background
    traffic up beside it. The fields and their ranges are :class:`WifiCell`'s, but for:

    Args:
        stations: Robots (UEs) on the base station, 1 to 128 (default 1).
        bandwidth_rb: Resource blocks of the uplink and of the downlink, one of
            :data:`LTE_BANDWIDTHS_RB` (default 25, i.e. 5 MHz).
        backhaul_ms: One-way delay from the gateway to the server in ms, in [0, 1000]
            (default 1).
        distance_m: Distance from the base station in metres, in (0, 10000] (default 200).
        mobility: ``"static"`` or ``"walk"`` (default ``"static"``).
        background_mbps: Other traffic each UE streams up, Mb/s, in [0, 1000] (default 0).
        obs_bytes: Observation packet size in bytes, 12 to 65,000 (default 200).
        action_bytes: Action packet size in bytes, 12 to 65,000 (default 64).
        step_ms: The control period in ms, or None (default): the shim's.
        seconds: Simulated stretch in seconds, in [1, 3600] (default 30).
        seed: ns-3's run number, an int >= 0 (default 0).

    Example:
        >>> LteCell(stations=4).describe()
        'ns-3 LTE cell (25 RB): 4 UE(s) at 200 m (static), 200 B up / 64 B down per period'
    """

    TYPE = "lte"

    stations: int = 1
    bandwidth_rb: int = 25
    backhaul_ms: float = 1.0
    distance_m: float = 200.0
    mobility: str = "static"
    background_mbps: float = 0.0
    obs_bytes: int = 200
    action_bytes: int = 64
    step_ms: float | None = None
    seconds: float = 30.0
    seed: int = 0

    def __post_init__(self) -> None:
        self._check_common(10_000.0)
        if isinstance(self.bandwidth_rb, bool) or self.bandwidth_rb not in LTE_BANDWIDTHS_RB:
            raise (TypeError if not isinstance(self.bandwidth_rb, int) else ValueError)(
                f"bandwidth_rb: expected one of {LTE_BANDWIDTHS_RB}, actual "
                f"{quote(self.bandwidth_rb)}"
            )
        object.__setattr__(self, "bandwidth_rb", int(self.bandwidth_rb))
        object.__setattr__(
            self, "backhaul_ms", check_float("backhaul_ms", self.backhaul_ms, 0.0, 1000.0)
        )

    def describe(self) -> str:
        """One line for listings."""
        return (
            f"ns-3 LTE cell ({self.bandwidth_rb} RB): {self.stations} UE(s) at "
            f"{self.distance_m:g} m ({self.mobility}){self._load()}, {self.obs_bytes} B up / "
            f"{self.action_bytes} B down per period"
        )


#: Either kind of cell.
Cell = WifiCell | LteCell
_KINDS: dict[str, type[WifiCell] | type[LteCell]] = {"wifi": WifiCell, "lte": LteCell}


def cell_from_dict(data: Any, where: str = "cell") -> Cell:
    """The cell a ``to_dict`` describes.

    Args:
        data: The plain data: ``{"type": "wifi" | "lte", fields...}``.
        where: What the data is, prefixing error messages (default ``"cell"``).

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
    cls = _KINDS[kind]
    names = [f.name for f in fields(cls)]
    unknown = sorted(str(k) for k in data if k != "type" and k not in names)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}, expected some of {names}")
    kwargs = {k: v for k, v in data.items() if k != "type"}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}.{exc}") from None
