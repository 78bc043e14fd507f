"""Named network profiles: an uplink and a downlink channel under one name.

Built in (from the CALF paper, one-way, both directions independent):

============================  ==============================================
``perfect``                   no delay, no loss (bit-identical to the bare env)
``ethernet``                  2 ± 0.5 ms, no loss
``wifi-normal``               30 ± 10 ms, 2 % loss
``wifi-degraded``             80 ± 40 ms, 10 % loss
``wifi-degraded-uplink``      80 ± 40 ms, 10 % loss on observations only, actions local
``trace-wifi-office``         replay of the shipped ``wifi-office.csv`` trace
============================  ==============================================

Every shipped trace file also gets a profile ``trace-<file stem>`` (both directions replay
the file from independent random offsets). Register your own with
:func:`register_profile`, or write it to a profile file (:func:`save_profile_file`; what
``fleetgym profiles fit`` writes): wherever a profile is accepted, a path that ends with
``.json`` and names an existing file (or any ``os.PathLike``) is read with
:func:`load_profile_file` (plain JSON data, never code).

Example:
    >>> from fleetgym.wrappers.profiles import get_profile, list_profiles
    >>> list_profiles()[:4]
    ['perfect', 'ethernet', 'wifi-normal', 'wifi-degraded']
    >>> get_profile("wifi-normal").uplink
    GaussianChannel(mean_ms=30.0, std_ms=10.0, loss=0.02, correlation=0.0)
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgym.errors import FleetgymError, UnknownProfileError
from fleetgym.traces.loaders import list_traces, trace_path
from fleetgym.validation import check_bool, quote
from fleetgym.wrappers.cells.channel import CellChannel
from fleetgym.wrappers.cells.config import Cell, LteCell, WifiCell, cell_from_dict
from fleetgym.wrappers.channel_base import Channel
from fleetgym.wrappers.channels import GaussianChannel
from fleetgym.wrappers.fitted_channels import channel_from_dict, channel_to_dict
from fleetgym.wrappers.trace_channel import TraceChannel

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILE_FILE_VERSION",
    "NetworkProfile",
    "cell_profile",
    "ProfileFileError",
    "get_profile",
    "list_profiles",
    "load_profile_file",
    "register_profile",
    "save_profile_file",
]


#: The profile every shim, ``gym.make("fleetgym/NetShim-v0")`` and
#: :func:`~fleetgym.wrappers.make_robust_env` use when none is given: a Wi-Fi link under
#: load (80 ± 40 ms each way, 10 % loss), on which delay visibly costs an agent trained
#: without a network, so that the default shows what the library is for. Pass
#: ``profile="wifi-normal"`` (or ``"perfect"``) for a milder link.
DEFAULT_PROFILE = "wifi-degraded"


@dataclass(frozen=True)
class NetworkProfile:
    """A named pair of independent channels: uplink (observations), downlink (actions).

    Args:
        name: The profile's name.
        uplink: Channel carrying observations from the env to the agent.
        downlink: Channel carrying actions from the agent to the env.
        description: One line for listings.

    Example:
        >>> p = NetworkProfile("lab", GaussianChannel(5, 1), GaussianChannel(5, 1), "a lab LAN")
        >>> p.name, p.uplink.mean_ms
        ('lab', 5.0)

    Raises:
        TypeError: If a channel is not a :class:`~fleetgym.wrappers.channels.Channel` or
            the name/description not a string.
    """

    name: str
    uplink: Channel
    downlink: Channel
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name: expected a non-empty str, actual {quote(self.name)}")
        for direction in ("uplink", "downlink"):
            channel = getattr(self, direction)
            if not isinstance(channel, Channel):
                raise TypeError(
                    f"{direction}: expected a fleetgym Channel, actual {type(channel).__name__}"
                )
        if not isinstance(self.description, str):
            raise TypeError(
                f"description: expected a str, actual {type(self.description).__name__}"
            )


_LOCK = threading.Lock()
# Values are profiles, or factories for those that read files (loaded on first use).
_REGISTRY: dict[str, NetworkProfile | Callable[[], NetworkProfile]] = {}


def _builtin() -> None:
    def both(name: str, channel: Channel, description: str) -> None:
        _REGISTRY[name] = NetworkProfile(name, channel, channel, description)

    both(
        "perfect",
        GaussianChannel(0.0, 0.0, 0.0),
        "no delay, no loss: bit-identical to the bare env",
    )
    both("ethernet", GaussianChannel(2.0, 0.5, 0.0), "wired LAN: 2 ± 0.5 ms, no loss")
    both("wifi-normal", GaussianChannel(30.0, 10.0, 0.02), "Wi-Fi: 30 ± 10 ms, 2 % loss")
    both("wifi-degraded", GaussianChannel(80.0, 40.0, 0.10), "poor Wi-Fi: 80 ± 40 ms, 10 % loss")
    # Sensing over poor Wi-Fi, actuation local: the variant of wifi-degraded under which
    # the CALF experiment finds the paper's pattern (docs/calf.md).
    _REGISTRY["wifi-degraded-uplink"] = NetworkProfile(
        "wifi-degraded-uplink",
        GaussianChannel(80.0, 40.0, 0.10),
        GaussianChannel(0.0, 0.0, 0.0),
        "poor Wi-Fi on observations only (80 ± 40 ms, 10 % loss), actions local",
    )
    for file_name in list_traces():
        stem = Path(file_name).stem
        name = f"trace-{stem}"

        def load(file_name: str = file_name, name: str = name) -> NetworkProfile:
            channel = TraceChannel.from_file(trace_path(file_name))
            return NetworkProfile(
                name, channel, channel, f"replay of shipped trace {file_name} (independent offsets)"
            )

        _REGISTRY[name] = load


_builtin()


def list_profiles() -> list[str]:
    """Every registered profile name, built-ins first, in registration order."""
    with _LOCK:
        return list(_REGISTRY)


def get_profile(name: str | os.PathLike[str] | NetworkProfile) -> NetworkProfile:
    """The profile registered under ``name`` (a :class:`NetworkProfile` is returned as is).

    A ``str`` that is no registered name, ends with ``.json`` and names an existing file,
    or any ``os.PathLike``, is a profile file: read (again on every call) with
    :func:`load_profile_file`. Use ``get_profile(name).uplink`` / ``.downlink`` to get the
    channels as objects.

    Args:
        name: A registered name (:func:`list_profiles`; a registered name wins over a file
            of that name), a profile file's path, or a :class:`NetworkProfile`.

    Raises:
        UnknownProfileError: If no profile has that name (the message lists the known ones).
        ProfileFileError: If the profile file cannot be read or is malformed.
        TypeError: If ``name`` is neither a str, an os.PathLike nor a NetworkProfile.
    """
    if isinstance(name, NetworkProfile):
        return name
    if isinstance(name, os.PathLike):
        return load_profile_file(name)
    if not isinstance(name, str):
        raise TypeError(
            "profile: expected a name (str), a .json profile file or a NetworkProfile, "
            f"actual {type(name).__name__}"
        )
    with _LOCK:
        entry = _REGISTRY.get(name)
        known = list(_REGISTRY)
        if entry is not None and not isinstance(entry, NetworkProfile):
            entry = entry()
            _REGISTRY[name] = entry
    if entry is not None:
        return entry
    if name.lower().endswith(".json"):
        if os.path.isfile(name):
            return load_profile_file(name)
        raise UnknownProfileError(
            f"profile: expected one of {known} or an existing .json profile file, actual "
            f"{quote(name)} (no such file)"
        )
    raise UnknownProfileError(f"profile: expected one of {known}, actual {quote(name)} (unknown)")


def register_profile(
    name: str,
    uplink: Channel,
    downlink: Channel | None = None,
    description: str = "",
    *,
    overwrite: bool = False,
) -> NetworkProfile:
    """Register a profile under ``name`` (``downlink`` defaults to the uplink channel).

    Args:
        name: The name to register it under (then usable wherever a profile is accepted).
        uplink: The channel carrying observations from the env to the agent.
        downlink: The channel carrying actions; None (default): the ``uplink`` channel
            (the same model; each direction still draws its own delays).
        description: One line for listings (``fleetgym profiles``); default empty.
        overwrite: Replace a profile already registered under ``name`` (built-ins
            included); default False, which raises instead.

    Raises:
        ValueError: If ``name`` is taken and ``overwrite`` is False.
        TypeError: If an argument has the wrong type (``overwrite`` must be a bool).
    """
    overwrite = check_bool("overwrite", overwrite)
    profile = NetworkProfile(name, uplink, uplink if downlink is None else downlink, description)
    with _LOCK:
        if name in _REGISTRY and not overwrite:
            raise ValueError(
                f"name: expected a new profile name, actual {quote(name)} is registered "
                "(pass overwrite=True)"
            )
        _REGISTRY[name] = profile
    return profile


# --------------------------------------------------------------------------------------
# Profile files: plain JSON data describing both channels (never pickle, never code)
# --------------------------------------------------------------------------------------
#: Value of the ``"fleetgym_profile"`` key that marks a profile file (its format version).
PROFILE_FILE_VERSION = 1
#: Largest profile file read (an empirical table of 10 000 rows per direction is ~0.5 MB).
_MAX_PROFILE_BYTES = 16 * 1024 * 1024
_FILE_KEYS = ("fleetgym_profile", "name", "description", "uplink", "downlink", "cell", "fit")


class ProfileFileError(FleetgymError, ValueError):
    """A profile file that cannot be read or is malformed; the message names the file.

    Args:
        path: The file's path, as given; kept as the ``path`` attribute.
        reason: What is wrong with it, in words; kept as the ``reason`` attribute.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"malformed profile file {path}: {reason}")
        self.path = path
        self.reason = reason


def _no_constant(text: str) -> Any:
    raise ValueError(f"expected finite numbers, actual {text}")


def _read_json(name: str) -> Any:
    try:
        if not stat.S_ISREG(os.stat(name).st_mode):
            raise ProfileFileError(name, "expected a regular file, actual not one")
        with open(name, "rb") as handle:
            raw = handle.read(_MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise ProfileFileError(name, f"cannot read the file: {exc.strerror or exc}") from None
    if len(raw) > _MAX_PROFILE_BYTES:
        raise ProfileFileError(name, f"expected at most {_MAX_PROFILE_BYTES} bytes, actual more")
    try:
        return json.loads(raw.decode("utf-8-sig"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise ProfileFileError(name, "expected UTF-8 JSON text, actual binary data") from None
    except json.JSONDecodeError as exc:
        raise ProfileFileError(
            name, f"not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ProfileFileError(name, f"not valid JSON: {exc}") from None


def load_profile_file(path: str | os.PathLike[str]) -> NetworkProfile:
    """Read a profile file written by :func:`save_profile_file` (or by hand).

    The file is a JSON object: ``"fleetgym_profile": 1``, ``"uplink"`` (a channel:
    ``{"type": "gaussian" | "gilbert_elliott" | "lognormal" | "empirical", parameters}``,
    see :func:`fleetgym.wrappers.fitted_channels.channel_from_dict`), optionally
    ``"downlink"`` (default: the uplink's channel), ``"name"`` (default: the file's stem),
    ``"description"`` and ``"fit"`` (the fit's report, not read). Instead of the channels,
    ``"cell"``: a simulated cell (``{"type": "wifi" | "lte", ...}``, the fields of
    :class:`~fleetgym.wrappers.cells.WifiCell` or :class:`~fleetgym.wrappers.cells.LteCell`), replayed as :func:`cell_profile` does
    (needs the ``ns3`` extra).

    Args:
        path: The file's path (a str or an ``os.PathLike``); read on every call, at most
            16 MiB, UTF-8 JSON.

    Raises:
        ProfileFileError: If the file cannot be read, is not JSON, or any key or value is
            wrong (the message names the file and the key).
        DependencyNotInstalled: For a ``"cell"`` without the ``ns3`` extra installed.
        TypeError: If ``path`` is not a str or os.PathLike.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a str or os.PathLike, actual {type(path).__name__}")
    name = os.fspath(path)
    data = _read_json(name)
    if not isinstance(data, dict):
        raise ProfileFileError(name, f"expected a JSON object, actual {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in _FILE_KEYS)
    if unknown:
        raise ProfileFileError(name, f"unknown keys {unknown}, expected some of {list(_FILE_KEYS)}")
    version = data.get("fleetgym_profile")
    if version != PROFILE_FILE_VERSION or isinstance(version, bool):
        raise ProfileFileError(
            name,
            f'expected "fleetgym_profile": {PROFILE_FILE_VERSION} (a fleetgym profile file), '
            f"actual {quote(version)}",
        )
    if "cell" in data and ("uplink" in data or "downlink" in data):
        raise ProfileFileError(
            name, 'expected either a "cell" or "uplink"/"downlink" channels, actual both'
        )
    if "uplink" not in data and "cell" not in data:
        raise ProfileFileError(name, 'expected an "uplink" channel or a "cell", actual neither')
    try:
        if "cell" in data:
            cell = cell_from_dict(data["cell"], "cell")
            uplink: Channel = CellChannel(cell, "uplink")
            downlink: Channel = CellChannel(cell, "downlink")
        else:
            uplink = channel_from_dict(data["uplink"], "uplink")
            downlink = (
                channel_from_dict(data["downlink"], "downlink") if "downlink" in data else uplink
            )
        title = data.get("name", Path(name).stem)
        description = data.get("description", f"profile file {name}")
        if not isinstance(title, str) or not title.strip() or len(title) > 200:
            raise ValueError(
                f"name: expected a non-empty str of at most 200 characters, actual {quote(title)}"
            )
        if not isinstance(description, str):
            raise ValueError(f"description: expected a str, actual {quote(description)}")
        return NetworkProfile(title, uplink, downlink, description)
    except (TypeError, ValueError) as exc:
        raise ProfileFileError(name, str(exc)) from None


def save_profile_file(
    profile: NetworkProfile, path: str | os.PathLike[str], *, fit: dict[str, Any] | None = None
) -> Path:
    """Write ``profile`` as a profile file that :func:`load_profile_file` reads back equal.

    Args:
        profile: The profile; its channels must be Gaussian, Gilbert-Elliott, log-normal or
            empirical (a trace replay has no plain-data form).
        path: The file to write (replaced atomically); a ``.json`` name is what
            ``profile=`` recognises as a file.
        fit: Plain JSON data stored under ``"fit"`` (the fit's report), or None.

    Returns:
        The path written.

    Raises:
        TypeError: If a channel has no plain-data form.
        OSError: If the file cannot be written.
    """
    if not isinstance(profile, NetworkProfile):
        raise TypeError(f"profile: expected a NetworkProfile, actual {type(profile).__name__}")
    data: dict[str, Any] = {
        "fleetgym_profile": PROFILE_FILE_VERSION,
        "name": profile.name,
        "description": profile.description,
    }
    up, down = profile.uplink, profile.downlink
    if isinstance(up, CellChannel) and isinstance(down, CellChannel):
        if (up.direction, down.direction, up.station, down.station) != (
            "uplink",
            "downlink",
            0,
            0,
        ) or up.cell != down.cell:
            raise TypeError(
                "profile: expected a cell's uplink and downlink of station 0 (cell_profile), "
                "actual another pairing of cell channels"
            )
        data["cell"] = up.cell.to_dict()
    else:
        data["uplink"] = channel_to_dict(up)
        data["downlink"] = channel_to_dict(down)
    if fit is not None:
        data["fit"] = fit
    text = json.dumps(data, indent=2, allow_nan=False) + "\n"
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    return out


def cell_profile(cell: Cell, name: str = "", description: str = "") -> NetworkProfile:
    """A profile replaying ``cell``'s station 0 both ways, from one offset per episode.

    What a profile file with a ``"cell"`` holds; a vector shim's sub-env ``i`` replays
    station ``i mod cell.stations`` (:class:`~fleetgym.wrappers.cells.CellChannel`).

    Args:
        cell: The simulated cell (:class:`~fleetgym.wrappers.cells.WifiCell` or
            :class:`~fleetgym.wrappers.cells.LteCell`).
        name: The profile's name (default ``"ns3-wifi-"`` or ``"ns3-lte-"`` and the start of
            the cell's key).
        description: One line for listings (default: the cell's own).

    Example:
        >>> from fleetgym.wrappers.cells import WifiCell
        >>> cell_profile(WifiCell(stations=4)).uplink.direction  # doctest: +SKIP
        'uplink'

    Raises:
        TypeError: If ``cell`` is not a WifiCell.
        DependencyNotInstalled: If the ``ns3`` extra is not installed.
    """
    if not isinstance(cell, (WifiCell, LteCell)):
        raise TypeError(f"cell: expected a WifiCell or LteCell, actual {type(cell).__name__}")
    return NetworkProfile(
        name or f"ns3-{cell.TYPE}-{cell.key()[:8]}",
        CellChannel(cell, "uplink"),
        CellChannel(cell, "downlink"),
        description or cell.describe(),
    )
