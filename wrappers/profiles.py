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
:func:`register_profile`.

Example:
    >>> from fleetgym.wrappers.profiles import get_profile, list_profiles
    >>> list_profiles()[:4]
    ['perfect', 'ethernet', 'wifi-normal', 'wifi-degraded']
    >>> get_profile("wifi-normal").uplink
    GaussianChannel(mean_ms=30.0, std_ms=10.0, loss=0.02, correlation=0.0)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetgym.errors import UnknownProfileError
from fleetgym.traces.loaders import list_traces, trace_path
from fleetgym.validation import check_bool, quote
from fleetgym.wrappers.channels import Channel, GaussianChannel, TraceChannel

__all__ = ["NetworkProfile", "get_profile", "list_profiles", "register_profile"]


@dataclass(frozen=True)
class NetworkProfile:
    """A named pair of independent channels: uplink (observations), downlink (actions).

    Example:
        >>> p = NetworkProfile("lab", GaussianChannel(5, 1), GaussianChannel(5, 1), "a lab LAN")
        >>> p.name, p.uplink.mean_ms
        ('lab', 5.0)

    Args:
        name: The profile's name.
        uplink: Channel carrying observations from the env to the agent.
        downlink: Channel carrying actions from the agent to the env.
        description: One line for listings.

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


def get_profile(name: str | NetworkProfile) -> NetworkProfile:
    """The profile registered under ``name`` (a :class:`NetworkProfile` is returned as is).

    Use ``get_profile(name).uplink`` / ``.downlink`` to get the channels as objects.

    Raises:
        UnknownProfileError: If no profile has that name (the message lists the known ones).
        TypeError: If ``name`` is neither a str nor a NetworkProfile.
    """
    if isinstance(name, NetworkProfile):
        return name
    if not isinstance(name, str):
        raise TypeError(
            f"profile: expected a name (str) or NetworkProfile, actual {type(name).__name__}"
        )
    with _LOCK:
        entry = _REGISTRY.get(name)
        if entry is None:
            raise UnknownProfileError(
                f"profile: expected one of {list(_REGISTRY)}, actual {quote(name)} (unknown)"
            )
        if not isinstance(entry, NetworkProfile):
            entry = entry()
            _REGISTRY[name] = entry
        return entry


def register_profile(
    name: str,
    uplink: Channel,
    downlink: Channel | None = None,
    description: str = "",
    *,
    overwrite: bool = False,
) -> NetworkProfile:
    """Register a profile under ``name`` (``downlink`` defaults to the uplink channel).

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
