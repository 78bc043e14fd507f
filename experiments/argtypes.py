"""``argparse`` types shared by the subcommands: bad values end in one clear line."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetgym.errors import FleetgymError

__all__ = [
    "MAX_COUNT",
    "MAX_SEED",
    "UsageError",
    "check_input_file",
    "check_output_dir",
    "check_output_file",
    "discount",
    "env_kwarg",
    "host_port",
    "int_in",
    "learning_rate",
    "non_negative_float",
    "non_negative_int",
    "output_folder",
    "output_path",
    "positive_float",
    "positive_int",
    "remote_step_ms",
    "seed_range",
    "step_ms",
    "unit_interval",
]


class UsageError(FleetgymError, ValueError):
    """A command-line value that cannot work, found before any work starts.

    ``fleetgym`` prints it as one line on stderr and exits with status 2, like an
    ``argparse`` error.
    """


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer >= {minimum}, actual {text!r}"
        ) from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, actual {value}")
    return value


#: Largest count any integer option takes (a guard against typos such as 10**23).
MAX_COUNT = 10**9


def positive_int(text: str) -> int:
    """An integer in [1, 10**9].

    Example:
        >>> positive_int("3")
        3
    """
    return int_in(1, MAX_COUNT)(text)


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An ``argparse`` type: an integer in ``[low, high]``.

    Example:
        >>> int_in(1, 4)("4")
        4
    """

    def parse(text: str) -> int:
        value = _int_at_least(text, low)
        if value > high:
            raise argparse.ArgumentTypeError(
                f"expected an integer in [{low}, {high}], actual {value}"
            )
        return value

    parse.__name__ = "int"  # argparse names the type in its messages
    return parse


#: Largest seed (numpy and SB3 take seeds below 2**32).
MAX_SEED = 2**32 - 1


def non_negative_int(text: str) -> int:
    """An integer in [0, 2**32 - 1] (a seed, a count).

    Example:
        >>> non_negative_int("0")
        0
    """
    return int_in(0, MAX_SEED)(text)


def seed_range(first: int, count: int, flags: str = "--first-seed/--seeds") -> range:
    """The seeds ``first .. first + count - 1`` of ``--first-seed F --seeds N``.

    Example:
        >>> list(seed_range(3, 2))
        [3, 4]

    Raises:
        UsageError: The last seed would exceed :data:`MAX_SEED`.
    """
    if first + count - 1 > MAX_SEED:
        raise UsageError(
            f"{flags}: expected seeds up to {MAX_SEED}, actual {first}..{first + count - 1}"
        )
    return range(first, first + count)


def env_kwarg(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``, the value parsed as JSON when it can be (else kept as a string).

    Example:
        >>> env_kwarg("budget=0.01"), env_kwarg("pricing=lambda")
        (('budget', 0.01), ('pricing', 'lambda'))
    """
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, actual {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value  # a bare string such as pricing=lambda


def _float(text: str, what: str, ok: Any) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, actual {text!r}") from None
    if not math.isfinite(value) or not ok(value):
        raise argparse.ArgumentTypeError(f"expected {what}, actual {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0.

    Example:
        >>> positive_float("3e-4")
        0.0003
    """
    return _float(text, "a finite number > 0", lambda v: v > 0.0)


def learning_rate(text: str) -> float:
    """A learning rate: a number in (0, 1].

    Example:
        >>> learning_rate("3e-4")
        0.0003
    """
    return _float(text, "a number in (0, 1]", lambda v: 0.0 < v <= 1.0)


def non_negative_float(text: str) -> float:
    """A finite number >= 0.

    Example:
        >>> non_negative_float("0")
        0.0
    """
    return _float(text, "a finite number >= 0", lambda v: v >= 0.0)


def step_ms(text: str) -> float:
    """A control period in ms, in the range every channel and shim accepts.

    Example:
        >>> step_ms("20")
        20.0
    """
    from fleetgym.wrappers.channel_base import MAX_STEP_MS, MIN_STEP_MS

    return _float(
        text,
        f"a number of ms in [{MIN_STEP_MS:g}, {MAX_STEP_MS:g}]",
        lambda v: MIN_STEP_MS <= v <= MAX_STEP_MS,
    )


def discount(text: str) -> float:
    """A discount factor in (0, 1].

    Example:
        >>> discount("0.99")
        0.99
    """
    return _float(text, "a number in (0, 1]", lambda v: 0.0 < v <= 1.0)


def unit_interval(text: str) -> float:
    """A number in [0, 1] (e.g. GAE's lambda).

    Example:
        >>> unit_interval("0.9")
        0.9
    """
    return _float(text, "a number in [0, 1]", lambda v: 0.0 <= v <= 1.0)


def remote_step_ms(text: str) -> float:
    """A remote env server's control period in ms, in the range it accepts.

    Example:
        >>> remote_step_ms("20")
        20.0
    """
    from fleetgym.wrappers.remote.session import MAX_SERVER_STEP_MS, MIN_SERVER_STEP_MS

    return _float(
        text,
        f"a number of ms in [{MIN_SERVER_STEP_MS:g}, {MAX_SERVER_STEP_MS:g}]",
        lambda v: MIN_SERVER_STEP_MS <= v <= MAX_SERVER_STEP_MS,
    )


def host_port(text: str) -> str:
    """A ``HOST:PORT`` address (port 0: a free one), checked as the remote env checks it.

    Example:
        >>> host_port("127.0.0.1:0")
        '127.0.0.1:0'
    """
    from fleetgym.wrappers.remote.addresses import parse_address

    try:
        parse_address(text, "address")
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("address: ")) from None
    return text


def output_path(text: str) -> str:
    """A non-empty output path (``--out ''`` would write into the working directory).

    Example:
        >>> output_path("runs/a")
        'runs/a'
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a non-empty path, actual {text!r}")
    return text


def output_folder(text: str) -> Path:
    """:func:`output_path` as a :class:`~pathlib.Path`.

    Example:
        >>> output_folder("runs/a").name
        'a'
    """
    return Path(output_path(text))


def check_output_dir(flag: str, path: str | os.PathLike[str]) -> Path:
    """Create the folder ``path`` (and parents) and check it is writable, before any work.

    Raises:
        UsageError: If it cannot be created or written into.
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"{flag}: expected a writable folder, actual {str(folder)!r} ({error.strerror})"
        ) from None
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: expected a writable folder, actual {str(folder)!r}")
    return folder


def check_output_file(flag: str, path: str | os.PathLike[str]) -> Path:
    """Check the file ``path`` can be written (its folder is created), before any work.

    Raises:
        UsageError: If it is a folder or its folder cannot be created or written into.
    """
    file = Path(path)
    if not str(path).strip() or file.is_dir():
        raise UsageError(f"{flag}: expected a writable file path, actual {str(path)!r}")
    check_output_dir(flag, file.parent)
    if file.exists() and not os.access(file, os.W_OK):
        raise UsageError(f"{flag}: expected a writable file path, actual {str(file)!r}")
    return file


def check_input_file(flag: str, path: str | os.PathLike[str], *suffixes: str) -> Path:
    """``path`` (or ``path`` plus one of ``suffixes``) as an existing regular file.

    Raises:
        UsageError: If no such file exists.
    """
    for candidate in (Path(path), *(Path(f"{path}{suffix}") for suffix in suffixes)):
        if candidate.is_file():
            return candidate
    raise UsageError(f"{flag}: expected an existing file, actual {str(path)!r} (no such file)")
