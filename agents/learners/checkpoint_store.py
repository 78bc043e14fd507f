"""The checkpoint folder the trainers write: atomic files, the newest kept, read back checked
(torch is imported when a checkpoint is written or read).

A checkpoint is one file per saved boundary, ``<folder>/ckpt-00000012.pt`` after 12
rounds: a ``torch.save`` of tensors and plain Python values only (it loads with
``torch.load(weights_only=True)``) that starts with a header
(:func:`~fleetgym.agents.learners.run_config.checkpoint_header`:
``format``, ``format_version``, the fleetgym version and git commit that wrote it, when)
and holds the run's ``config``. The rest is its format's: the synchronous trainer's
(:mod:`~fleetgym.agents.learners.run_checkpoints`, :data:`FORMAT`) or the asynchronous
trainer's (:data:`ASYNC_FORMAT`).

Every file is written atomically (:func:`atomic_write`): into a temporary file of the
same folder, flushed and ``fsync``-ed, renamed onto its final name with ``os.replace``,
and the folder ``fsync``-ed; a checkpoint's actors file (``ckpt-N.actors.pkl``) before
its main file, so a main file that exists is complete. A crash mid-write leaves a
``.ckpt-*.tmp`` file, which is ignored. The store keeps the newest ``keep`` checkpoints
and deletes older ones once the new one is in place.

* :class:`CheckpointConfig` -- where and how often a trainer writes them;
* :class:`CheckpointStore` -- the folder: atomic writes, pruning, :meth:`~CheckpointStore.latest`;
* :func:`find_checkpoint`, :func:`read_checkpoint_state`, :func:`check_fleetgym_version`
  -- one checkpoint found, read and its header checked (a truncated, corrupt, foreign or
  newer file is a :class:`~fleetgym.errors.CheckpointError` naming it);
* :func:`atomic_write` -- any file written atomically (the scheduler's zips use it too).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from fleetgym.agents.files import check_folder_path, load_torch_file
from fleetgym.errors import CheckpointError
from fleetgym.validation import check_float, check_int, quote

#: The ``format`` field of every train checkpoint.
FORMAT = "fleetgym-train-checkpoint"
#: The ``format`` field of every checkpoint of the asynchronous trainer
#: (:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`), which writes its
#: checkpoints with this module's store and reads them with :func:`read_checkpoint_state`.
ASYNC_FORMAT = "fleetgym-async-checkpoint"
#: The newest ``format_version`` this code writes and reads (both formats).
FORMAT_VERSION = 1
#: What each ``format`` is, for error messages.
FORMAT_NAMES = {
    FORMAT: "a fleetgym train checkpoint (fleetgym train --mode sync)",
    ASYNC_FORMAT: "a fleetgym async checkpoint (AsyncPPO, fleetgym train --mode async)",
}
#: A complete checkpoint's file name: ``ckpt-`` + 8 digits (rounds done) + ``.pt``.
CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{8})\.pt$")
_ACTORS_NAME = re.compile(r"^ckpt-(\d{8})\.actors\.pkl$")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """Where and how often :func:`~fleetgym.agents.learners.training.train` saves the run.

    A checkpoint is written at a round boundary (never inside a round) once
    ``every_rounds`` rounds or ``every_minutes`` minutes have passed since the last one
    (or since training started), whichever comes first.

    Args:
        folder: The checkpoint folder (``str`` or ``os.PathLike``); created with the first
            checkpoint, not before.
        every_rounds: Write one every this many rounds (an int >= 1), or ``None``.
        every_minutes: Write one once this many minutes have passed (a finite number
            > 0), or ``None``.
        keep: How many of the newest checkpoints to keep (an int >= 1); older ones are
            deleted once a new one is in place.

    Example:
        >>> CheckpointConfig("runs/a/checkpoints", every_rounds=5).due(5, 0.0)
        True

    Raises:
        TypeError: If ``folder`` is not a path, or a count or the minutes are not numbers.
        ValueError: If ``folder`` is empty, a count is < 1, the minutes are not finite
            and > 0, or both triggers are ``None``.
    """

    folder: str | os.PathLike[str]
    every_rounds: int | None = None
    every_minutes: float | None = 10.0
    keep: int = 3

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", check_folder_path("folder", self.folder))
        if self.every_rounds is not None:
            object.__setattr__(
                self, "every_rounds", check_int("every_rounds", self.every_rounds, 1)
            )
        if self.every_minutes is not None:
            object.__setattr__(
                self,
                "every_minutes",
                check_float("every_minutes", self.every_minutes, 0.0, strict=True),
            )
        object.__setattr__(self, "keep", check_int("keep", self.keep, 1))
        if self.every_rounds is None and self.every_minutes is None:
            raise ValueError(
                "every_rounds, every_minutes: expected at least one of them, actual both None"
            )

    def due(self, rounds: int, seconds: float) -> bool:
        """Whether a checkpoint is due after ``rounds`` rounds and ``seconds`` seconds.

        Args:
            rounds: Rounds completed since the last checkpoint (or the start).
            seconds: Seconds passed since then.
        """
        if self.every_rounds is not None and rounds >= self.every_rounds:
            return True
        return self.every_minutes is not None and seconds >= 60.0 * self.every_minutes


def actors_path(path: Path) -> Path:
    """Where the checkpoint ``path`` (``ckpt-N.pt``) keeps its actors: ``ckpt-N.actors.pkl``.

    Args:
        path: The checkpoint file.
    """
    return path.with_name(path.name.removesuffix(".pt") + ".actors.pkl")


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a folder
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write ``path`` atomically: a temporary file beside it, fsync, rename, fsync the folder.

    A reader sees either the old file or the whole new one; a crash leaves at most a
    ``.<name>.*.tmp`` file in the folder.

    Args:
        path: The file to write (its folder must exist).
        write: Writes the content into the binary file object it is given.
    """
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    _fsync_folder(path.parent)


class CheckpointStore:
    """A checkpoint folder: atomic writes of ``ckpt-NNNNNNNN.pt``, the newest ``keep`` kept.

    Args:
        folder: The folder (``str`` or ``os.PathLike``); created by the first :meth:`write`.
        keep: How many of the newest checkpoints :meth:`write` keeps (an int >= 1).

    Example:
        >>> CheckpointStore("runs/a/checkpoints").path_for(12).name
        'ckpt-00000012.pt'

    Raises:
        TypeError: If ``folder`` is not a path or ``keep`` not an int.
        ValueError: If ``folder`` is empty or an existing file, or ``keep`` < 1.
    """

    def __init__(self, folder: str | os.PathLike[str], keep: int = 3) -> None:
        self.folder = check_folder_path("folder", folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(
                f"folder: expected a folder, actual the file {quote(os.fspath(folder))}"
            )
        self.keep = check_int("keep", keep, 1)

    def path_for(self, rounds: int) -> Path:
        """The checkpoint file after ``rounds`` rounds.

        Args:
            rounds: Rounds done (an int in ``[0, 99_999_999]``).
        """
        rounds = check_int("rounds", rounds, 0, 10**8 - 1)
        return self.folder / f"ckpt-{rounds:08d}.pt"

    def checkpoints(self) -> list[Path]:
        """The complete checkpoints, oldest first (temporary files are ignored)."""
        if not self.folder.is_dir():
            return []
        found = [
            (int(match[1]), entry)
            for entry in self.folder.iterdir()
            if (match := CHECKPOINT_NAME.match(entry.name)) and entry.is_file()
        ]
        return [path for _, path in sorted(found)]

    def latest(self) -> Path | None:
        """The newest complete checkpoint, ``None`` if there is none."""
        found = self.checkpoints()
        return found[-1] if found else None

    def write(self, rounds: int, state: dict[str, Any], actors: bytes | None = None) -> Path:
        """Write the checkpoint after ``rounds`` rounds, then delete all but the newest ``keep``.

        Args:
            rounds: Rounds done (names the file).
            state: The checkpoint's dict (tensors and plain values only).
            actors: The fleet's pickled actors, written first to ``ckpt-N.actors.pkl``,
                whose name, size and sha256 go into the main file's ``actors`` entry;
                ``None``: ``state["actors"]`` says why there are none.

        Returns:
            The checkpoint's path.
        """
        import torch

        path = self.path_for(rounds)
        self.folder.mkdir(parents=True, exist_ok=True)
        extra = actors_path(path)
        if actors is not None:
            atomic_write(extra, lambda file: file.write(actors))
            state = {
                **state,
                "actors": {
                    "saved": True,
                    "file": extra.name,
                    "bytes": len(actors),
                    "sha256": hashlib.sha256(actors).hexdigest(),
                },
            }
        atomic_write(path, lambda file: torch.save(state, file))
        if actors is None:
            extra.unlink(missing_ok=True)  # one of an earlier run of this round
        self.prune()
        return path

    def prune(self) -> None:
        """Delete all but the newest ``keep`` checkpoints, and actors files left without one."""
        complete = self.checkpoints()
        for path in complete[: -self.keep]:
            path.unlink(missing_ok=True)  # the main file first: a checkpoint disappears whole
            actors_path(path).unlink(missing_ok=True)
        if not complete:
            return
        newest = int(CHECKPOINT_NAME.match(complete[-1].name)[1])  # type: ignore[index]
        kept = {path.name for path in complete[-self.keep :]}
        for entry in self.folder.iterdir():
            match = _ACTORS_NAME.match(entry.name)
            if match and int(match[1]) < newest and f"ckpt-{match[1]}.pt" not in kept:
                entry.unlink(missing_ok=True)


def _version_tuple(text: str) -> tuple[int, int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)", text)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def check_fleetgym_version(path: Path, written_by: Any) -> str:
    """The fleetgym version a checkpoint says wrote it, refused if newer than this fleetgym.

    Args:
        path: The checkpoint file (named in the error).
        written_by: Its ``fleetgym_version`` value.

    Returns:
        ``written_by``.

    Raises:
        CheckpointError: Naming ``path``, if ``written_by`` is not a version such as
            ``'2.0.0'``, or is newer than the installed fleetgym ("upgrade fleetgym").
    """
    from fleetgym import __version__

    saved = _version_tuple(written_by) if isinstance(written_by, str) else None
    if saved is None:
        raise CheckpointError(
            f"{path}: fleetgym_version: expected a version such as '2.0.0', actual "
            f"{quote(written_by)}"
        )
    installed = _version_tuple(__version__)
    if installed is not None and saved > installed:
        raise CheckpointError(
            f"{path}: written by fleetgym {written_by}, newer than the installed fleetgym "
            f"{__version__}: upgrade fleetgym to resume it"
        )
    return str(written_by)


def find_checkpoint(path: str | os.PathLike[str]) -> Path:
    """The checkpoint file ``path`` names: the file itself, or the newest in a folder.

    A folder may hold the checkpoints (``ckpt-*.pt``) or be a run's output folder with a
    ``checkpoints/`` folder of them.

    Args:
        path: A checkpoint file, a checkpoint folder or a run's output folder.

    Raises:
        TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
        CheckpointError: Naming ``path``, if it does not exist or holds no checkpoint.
    """
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"resume: expected a str or os.PathLike, actual {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise CheckpointError(f"resume: expected a checkpoint file or folder, actual {quote(text)}")
    given = Path(text)
    if given.is_file():
        return given
    if not given.exists():
        raise CheckpointError(
            f"{given}: expected a checkpoint file or folder, actual nothing there"
        )
    if not given.is_dir():
        raise CheckpointError(f"{given}: expected a checkpoint file or folder")
    for folder in (given, given / "checkpoints"):
        newest = CheckpointStore(folder).latest() if folder.is_dir() else None
        if newest is not None:
            return newest
    raise CheckpointError(
        f"{given}: expected a checkpoint (ckpt-NNNNNNNN.pt, or a checkpoints/ folder of "
        "them), actual none in this folder"
    )


def checked_field(
    path: Path, state: dict[str, Any], key: str, kind: type | tuple[type, ...]
) -> Any:
    """``state[key]`` if it is a ``kind`` (never a bool for another kind), else a
    CheckpointError naming ``path`` and ``key``.

    Args:
        path: The checkpoint file (named in the error).
        state: The checkpoint's dict.
        key: The entry to read.
        kind: The type (or types) it must have.
    """
    value = state.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise CheckpointError(f"{path}: {key}: expected a {names}, actual {quote(value)}")
    return value


def read_checkpoint_state(
    path: str | os.PathLike[str], fmt: str, fields: tuple[str, ...]
) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """Find, load (``torch.load(weights_only=True)``) and check a checkpoint's header.

    What every checkpoint format shares: the file is found (:func:`find_checkpoint`), read,
    of the ``fmt`` format, of a ``format_version`` and ``fleetgym_version`` this fleetgym
    reads, and its ``config`` holds ``fields``. The rest is the format's reader's.

    Args:
        path: A checkpoint file, a folder of them (the newest is read) or a run's output
            folder holding ``checkpoints/``.
        fmt: The ``format`` expected (:data:`FORMAT` or :data:`ASYNC_FORMAT`).
        fields: The fields the checkpoint's ``config`` must have.

    Returns:
        ``(file, state, header)``: the file read, its whole dict, and its header
        (``format``, ``format_version``, ``fleetgym_version``, ``commit``, ``created``).

    Raises:
        TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
        CheckpointError: Naming the file and what is wrong: nothing there, a truncated or
            corrupt file, a file of another format (another fleetgym checkpoint named),
            a ``format_version`` or ``fleetgym_version`` newer than this fleetgym, a
            ``config`` without one of ``fields``.
    """
    from fleetgym import __version__

    what = FORMAT_NAMES.get(fmt, f"a {fmt} file")
    file = find_checkpoint(path)
    try:
        state = load_torch_file(file, what)
    except (OSError, ValueError) as exc:
        message = str(exc)
        if not message.startswith(str(file)):
            message = f"{file}: {message}"
        raise CheckpointError(message) from None
    if state.get("format") != fmt:
        found = state.get("format", "no format field")
        if found in FORMAT_NAMES:
            raise CheckpointError(
                f"{file}: expected {what} (format {fmt!r}), actual {FORMAT_NAMES[found]} "
                f"(format {found!r})"
            )
        keys = sorted(str(k) for k in state)[:8]
        raise CheckpointError(
            f"{file}: expected {what} (format {fmt!r}), actual another torch file "
            f"({quote(found)}, keys {keys})"
        )
    version = state.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CheckpointError(
            f"{file}: format_version: expected an int >= 1, actual {quote(version)}"
        )
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{file}: written in checkpoint format_version {version}, newer than this "
            f"fleetgym {__version__} reads ({FORMAT_VERSION}): upgrade fleetgym to resume it"
        )
    written_by = check_fleetgym_version(file, state.get("fleetgym_version"))
    config = checked_field(file, state, "config", dict)
    for key in fields:
        if key not in config:
            raise CheckpointError(f"{file}: config: expected the field {key!r}, actual missing")
    created = state.get("created")
    header = {
        "format": fmt,
        "format_version": version,
        "fleetgym_version": written_by,
        "commit": state.get("commit") if isinstance(state.get("commit"), str) else None,
        "created": float(created) if isinstance(created, (int, float)) else math.nan,
    }
    return file, state, header


def count_field(path: Path, name: str, value: Any) -> int:
    """``value`` as an int >= 0, else a CheckpointError naming ``path`` and ``name``.

    Args:
        path: The checkpoint file (named in the error).
        name: The value's name (named in the error).
        value: The value read.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise CheckpointError(f"{path}: {name}: expected an int >= 0, actual {quote(value)}")
    return int(value)


def dict_field(path: Path, state: dict[str, Any], key: str) -> dict[str, Any]:
    """``state[key]`` if it is a dict, else a CheckpointError naming ``path`` and ``key``.

    Args:
        path: The checkpoint file (named in the error).
        state: The checkpoint's dict.
        key: The entry to read.
    """
    value: dict[str, Any] = checked_field(path, state, key, dict)
    return value


__all__ = [
    "ASYNC_FORMAT",
    "CHECKPOINT_NAME",
    "FORMAT",
    "FORMAT_NAMES",
    "FORMAT_VERSION",
    "CheckpointConfig",
    "CheckpointStore",
    "actors_path",
    "atomic_write",
    "check_fleetgym_version",
    "checked_field",
    "count_field",
    "dict_field",
    "find_checkpoint",
    "read_checkpoint_state",
]
