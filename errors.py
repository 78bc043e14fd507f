"""Typed exceptions raised by fleetgym.

Each subclasses the closest built-in (``ValueError``, ``ImportError``, ...) and
``gymnasium.error.Error``, so callers can catch either family.
"""

from __future__ import annotations

from gymnasium import error as gym_error

__all__ = [
    "CheckpointError",
    "DependencyNotInstalled",
    "EnvAPIError",
    "FleetError",
    "FleetgymError",
    "InvalidActionError",
    "MissingArgumentError",
    "ProtocolError",
    "RemoteEnvError",
    "TraceFormatError",
    "UnknownProfileError",
    "UnknownWorkloadError",
    "UnsupportedSpaceError",
]


class FleetgymError(gym_error.Error):
    """Base class of every fleetgym error."""


class UnknownProfileError(FleetgymError, ValueError):
    """A network profile name that is not registered."""


class TraceFormatError(FleetgymError, ValueError):
    """A trace file that cannot be parsed; the message names the file and the line.

    Args:
        path: The trace file's path (or name) as given to the reader; kept as ``.path``.
        line: The 1-based line number of the problem, or ``None`` when it concerns the
            whole file (unreadable, empty, not a regular file); kept as ``.line``.
        reason: What is wrong, shown after ``malformed trace file <path>:<line>:``; kept as
            ``.reason``.
    """

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


class CheckpointError(FleetgymError, ValueError):
    """A training checkpoint that cannot be resumed from: missing, truncated or corrupt, not
    a fleetgym train checkpoint, written by a newer fleetgym, or of another run (another
    workload, seed or configuration); the message names the file and what is wrong."""


class InvalidActionError(FleetgymError, ValueError):
    """An action that is not an element of the action space; the message names the step."""


class ProtocolError(FleetgymError, ValueError):
    """A network message that is malformed, oversized, truncated, of another protocol
    version or not authenticated (the remote env's wire format)."""


class RemoteEnvError(FleetgymError, ConnectionError):
    """A remote env server that cannot be reached, stopped answering or refused a request."""


class DependencyNotInstalled(FleetgymError, ImportError):
    """A feature used without the optional extra it needs; the message names the
    package that is missing and the ``pip install "fleetgym[<extra>]"`` that adds it.

    Args:
        feature: What the user tried to use, the subject of the message (e.g. the lazily
            imported name ``"fleetgym.agents.learners.PPOLearner"``); kept as ``.feature``.
        package: The distribution that is missing (its pip name, e.g. ``"ale-py"``); also
            the exception's ``.name`` (as :class:`ImportError` has it) and ``.package``.
        extra: The fleetgym extra that installs it (e.g. ``"atari"``), shown in the
            ``pip install "fleetgym[<extra>]"`` hint; kept as ``.extra``.
    """

    def __init__(self, feature: str, package: str, extra: str) -> None:
        super().__init__(
            f'{feature} needs {package}, which is not installed: pip install "fleetgym[{extra}]"',
            name=package,
        )
        self.feature = feature
        self.package = package
        self.extra = extra


class EnvAPIError(FleetgymError, ValueError):
    """An env that does not follow the Gymnasium API: its ``reset`` or ``step`` returns
    the wrong number of values, or observations of another shape than its observation
    space's; the message names the env and what is wrong."""
