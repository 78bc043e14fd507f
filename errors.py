"""Typed exceptions raised by fleetgym.

Each subclasses the closest built-in (``ValueError``) and, where it fits, a
``gymnasium.error.Error`` so callers can catch either family.
"""

from __future__ import annotations

from gymnasium import error as gym_error


class FleetgymError(gym_error.Error):
    """Base class of every fleetgym error."""


class UnknownProfileError(FleetgymError, ValueError):
    """A network profile name that is not registered."""


class TraceFormatError(FleetgymError, ValueError):
    """A trace file that cannot be parsed; the message names the file and the line."""

    def __init__(self, path: str, line: int | None, reason: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"malformed trace file {where}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class UnsupportedSpaceError(FleetgymError, TypeError):
    """A Gymnasium space a wrapper cannot handle."""


class MissingArgumentError(FleetgymError, TypeError):
    """A required argument that was not given; the message lists the accepted arguments."""


class UnknownWorkloadError(FleetgymError, ValueError):
    """A workload name that is not registered."""


class FleetError(FleetgymError, RuntimeError):
    """An actor fleet that cannot complete a round."""


class InvalidActionError(FleetgymError, ValueError):
    """An action that is not an element of the action space; the message names the step."""


class ProtocolError(FleetgymError, ValueError):
    """A network message that is malformed, oversized, truncated, of another protocol
    version or not authenticated (the remote env's wire format)."""


class RemoteEnvError(FleetgymError, ConnectionError):
    """A remote env server that cannot be reached, stopped answering or refused a request."""
