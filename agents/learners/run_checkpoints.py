"""Checkpoints of a :func:`~fleetgym.agents.learners.training.train` run: periodic, atomic,
and resumable after a crash (torch is imported when a checkpoint is written or read).

A checkpoint is one file per saved round boundary, ``<folder>/ckpt-00000012.pt`` after 12
rounds: a ``torch.save`` of tensors and plain Python values only (it loads with
``torch.load(weights_only=True)``), holding a header (``format``, ``format_version``, the
fleetgym version and git commit that wrote it, when), the run's configuration, its
counters, the :class:`~fleetgym.agents.learners.training.TrainingHistory` rounds so far
and the learner's :meth:`~fleetgym.agents.learners.ppo.PPOLearner.state`.

An :class:`~fleetgym.agents.fleet.InProcessFleet` also saves its actors (each slot's env
object, random generator, current observation and episode counters) in
``ckpt-00000012.actors.pkl``, whose sha256 the main file records. **That file is a
pickle**: it is only ever read from the folder a user passes to resume (their own run's
checkpoints), never from a network. Fleets that cannot save their actors (the process and
Ray backends) record that their actors' episodes restart on resume.

Every file is written atomically: into a temporary file of the same folder, flushed and
``fsync``-ed, renamed onto its final name with ``os.replace``, and the folder ``fsync``-ed;
the actors file before the main file, so a main file that exists is complete. A crash
mid-write leaves a ``.ckpt-*.tmp`` file, which is ignored. The store keeps the newest
``keep`` checkpoints and deletes older ones once the new one is in place.

* :class:`CheckpointConfig` -- where and how often :func:`train` writes them;
* :class:`CheckpointStore` -- the folder: atomic writes, pruning, :meth:`~CheckpointStore.latest`;
* :func:`read_checkpoint` -- one checkpoint, read and checked (:class:`TrainCheckpoint`);
* :func:`run_config`, :func:`config_differences`, :func:`check_config` -- is a checkpoint
  of this run?
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import logging
import math
import numbers
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from fleetgym.agents.files import check_folder_path, load_torch_file
from fleetgym.errors import CheckpointError
from fleetgym.validation import check_float, check_int, quote

logger = logging.getLogger(__name__)

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
#: Seconds ``git rev-parse HEAD`` may take when a checkpoint records the commit.
GIT_TIMEOUT_S = 5.0
#: Fields of :func:`run_config` a resumed run must share with its checkpoint (the others,
#: ``max_rounds``, ``target`` and ``max_steps``, may change: e.g. to extend a run).
MATCHED_FIELDS = (
    "workload",
    "seed",
    "fleet_seed",
    "num_actors",
    "steps_per_actor",
    "backend",
    "learner",
    "imagination",
    "hyperparameters",
)
#: What the header says when the fleet's actors are not in the checkpoint.
RESTART_NOTE = (
    "the actors' episodes restart on resume: a resumed run is not bit-identical to an "
    "uninterrupted one (the episodes in flight at the checkpoint are cut; the rest follows "
    "a different random stream)"
)


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
    """Where the checkpoint ``path`` (``ckpt-N.pt``) keeps its actors: ``ckpt-N.actors.pkl``."""
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


# -- what a checkpoint holds ------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def package_commit() -> str | None:
    """The git commit of the fleetgym package folder when it is a git checkout, else ``None``.

    Asks ``git rev-parse HEAD`` (at most :data:`GIT_TIMEOUT_S` seconds), once per process.
    """
    folder = Path(__file__).resolve().parents[2]
    if not (folder / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", commit) else None


def _version_tuple(text: str) -> tuple[int, int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)", text)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def run_config(
    workload: str,
    learner: Any,
    fleet_seed: int | None,
    backend: str,
    num_actors: int | str,
    steps_per_actor: int,
    max_rounds: int,
    target: float,
    max_steps: int | None,
) -> dict[str, Any]:
    """The configuration a checkpoint records (plain values).

    Args:
        workload: The workload's name.
        learner: The learner (its class, seed, hyperparameters as its ``state()`` lists
            them and whether it has imagination are recorded).
        fleet_seed: The fleet's seed (``None`` for a fleet without one).
        backend: The fleet's class name (e.g. ``"InProcessFleet"``).
        num_actors: Actors per round, or ``"schedule"`` for a schedule function.
        steps_per_actor: Env steps per actor per round.
        max_rounds: The round budget.
        target: The target mean return.
        max_steps: The env-step budget (``None``: none).

    Returns:
        A dict with :data:`MATCHED_FIELDS` and ``max_rounds``, ``target``, ``max_steps``.
    """
    # The learner's own record of its hyperparameters (a PPOLearner's state() shares its
    # tensors: cheap).
    state = learner.state() if callable(getattr(learner, "state", None)) else {}
    meta = state.get("meta") if isinstance(state, dict) else None
    hyperparameters = dict(meta.get("hyperparameters", {})) if isinstance(meta, dict) else {}
    seed = getattr(learner, "seed", None)
    return {
        "workload": str(workload),
        "seed": None if seed is None else int(seed),
        "fleet_seed": None if fleet_seed is None else int(fleet_seed),
        "num_actors": num_actors,
        "steps_per_actor": int(steps_per_actor),
        "backend": str(backend),
        "learner": type(learner).__name__,
        "imagination": getattr(learner, "imagination", None) is not None,
        "hyperparameters": hyperparameters,
        "max_rounds": int(max_rounds),
        "target": float(target),
        "max_steps": None if max_steps is None else int(max_steps),
    }


def config_differences(
    saved: dict[str, Any],
    current: dict[str, Any],
    fields: tuple[str, ...] = MATCHED_FIELDS,
) -> list[tuple[str, Any, Any]]:
    """The ``fields`` where a checkpoint's config and this run's differ.

    Args:
        saved: The checkpoint's ``config``.
        current: This run's :func:`run_config` (or another config of plain values).
        fields: The fields that must match (default :data:`MATCHED_FIELDS`; an async
            checkpoint passes its own).

    Returns:
        ``(field, checkpoint's value, this run's value)`` per difference; a value inside a
        dict field is named ``<field>.<name>`` (e.g. ``hyperparameters.lr``,
        ``topology.n_actors``); ``hyperparameters`` are not listed when the workloads
        differ (another workload's defaults: its name says it all).
    """
    out: list[tuple[str, Any, Any]] = []
    other_workload = not _same(saved.get("workload"), current.get("workload"))
    for field in fields:
        if field == "hyperparameters" and other_workload:
            continue
        _differences(field, saved.get(field), current.get(field), out)
    return out


def _differences(name: str, old: Any, new: Any, out: list[tuple[str, Any, Any]]) -> None:
    """Append the differences of two values; dicts are compared key by key (dotted names)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            _differences(f"{name}.{key}", old.get(key), new.get(key), out)
    elif not _same(old, new):
        out.append((name, old, new))


def _same(a: Any, b: Any) -> bool:
    """Equal values, a bool never equal to a number, a tuple equal to a list of its items."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # e.g. arrays: never in a config
        return False


def check_config(
    path: Path | str,
    saved: dict[str, Any],
    current: dict[str, Any],
    fields: tuple[str, ...] = MATCHED_FIELDS,
) -> None:
    """Refuse a checkpoint of another run.

    Args:
        path: The checkpoint file (named in the error).
        saved: Its ``config``.
        current: This run's :func:`run_config`.
        fields: The fields that must match (see :func:`config_differences`).

    Raises:
        CheckpointError: Naming the file, each field that differs and both values.
    """
    differences = config_differences(saved, current, fields)
    if differences:
        what = "; ".join(
            f"{field}: the checkpoint has {quote(old)}, this run {quote(new)}"
            for field, old, new in differences
        )
        raise CheckpointError(f"{path}: a checkpoint of another run ({what})")


def check_folder_free(store: CheckpointStore, resume: Path | None) -> None:
    """Refuse to write a run's checkpoints among those of another run.

    A fresh run (or one resumed from elsewhere) in a folder that already holds
    checkpoints would mix two runs: pruning keeps the highest round numbers, and a later
    resume would pick the other run's newest.

    Args:
        store: The folder the run writes into.
        resume: The checkpoint the run resumes from (``None``: a fresh run); one in the
            store's own folder continues its run there.

    Raises:
        CheckpointError: Naming the folder and its newest checkpoint.
    """
    newest = store.latest()
    if newest is None:
        return
    if resume is not None and resume.resolve().parent == store.folder.resolve():
        return
    raise CheckpointError(
        f"{store.folder}: expected a folder without checkpoints of another run, actual "
        f"{newest.name} there: resume from it, remove them or write into another folder"
    )


@dataclasses.dataclass
class TrainCheckpoint:
    """One train checkpoint, read and checked by :func:`read_checkpoint`.

    Args:
        path: The checkpoint file.
        header: ``format``, ``format_version``, ``fleetgym_version``, ``commit`` and
            ``created`` (seconds since the epoch).
        config: The run's :func:`run_config`.
        counters: ``rounds`` (done), ``total_steps``, ``episodes``, ``policy_version``.
        history: The rounds so far, as plain dicts (``dataclasses.asdict`` of each
            :class:`~fleetgym.agents.learners.training.RoundRecord`).
        stats_type: The qualified name of the rounds' stats class.
        learner: The learner's :meth:`~fleetgym.agents.learners.ppo.PPOLearner.state`.
        world_model: The world model's state of a learner with imagination, else ``None``.
        incarnations: The fleet's incarnation number per slot.
        actors: The fleet's pickled actors (checked against the recorded sha256), or
            ``None`` when they were not saved.
        actors_note: Why the actors were not saved (``""`` when they were).
    """

    path: Path
    header: dict[str, Any]
    config: dict[str, Any]
    counters: dict[str, int]
    history: list[dict[str, Any]]
    stats_type: str
    learner: dict[str, Any]
    world_model: dict[str, Any] | None
    incarnations: dict[int, int]
    actors: bytes | None
    actors_note: str

    @property
    def rounds(self) -> int:
        """Rounds done before the checkpoint; a resumed run continues with this round index."""
        return self.counters["rounds"]


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


def _field(path: Path, state: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = state.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise CheckpointError(f"{path}: {key}: expected a {names}, actual {quote(value)}")
    return value


def _count(path: Path, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise CheckpointError(f"{path}: {name}: expected an int >= 0, actual {quote(value)}")
    return int(value)


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
    written_by = state.get("fleetgym_version")
    saved_version = _version_tuple(written_by) if isinstance(written_by, str) else None
    if saved_version is None:
        raise CheckpointError(
            f"{file}: fleetgym_version: expected a version such as '2.0.0', actual "
            f"{quote(written_by)}"
        )
    installed = _version_tuple(__version__)
    if installed is not None and saved_version > installed:
        raise CheckpointError(
            f"{file}: written by fleetgym {written_by}, newer than the installed fleetgym "
            f"{__version__}: upgrade fleetgym to resume it"
        )
    config = _field(file, state, "config", dict)
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
    return _count(path, name, value)


def dict_field(path: Path, state: dict[str, Any], key: str) -> dict[str, Any]:
    """``state[key]`` if it is a dict, else a CheckpointError naming ``path`` and ``key``.

    Args:
        path: The checkpoint file (named in the error).
        state: The checkpoint's dict.
        key: The entry to read.
    """
    value: dict[str, Any] = _field(path, state, key, dict)
    return value


def read_checkpoint(path: str | os.PathLike[str]) -> TrainCheckpoint:
    """Read and check a train checkpoint (``torch.load(weights_only=True)``).

    The actors file is read and its sha256 checked, but not unpickled (the fleet does
    that when it restores them).

    Args:
        path: A checkpoint file, a folder of them (the newest is read) or a run's output
            folder holding ``checkpoints/``.

    Returns:
        The :class:`TrainCheckpoint`.

    Raises:
        TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
        CheckpointError: Naming the file and what is wrong: nothing there, a truncated or
            corrupt file, a file that is not a fleetgym train checkpoint, a
            ``format_version`` or ``fleetgym_version`` newer than this fleetgym, a missing
            value, a missing actors file or one whose sha256 does not match.
    """
    file, state, header = read_checkpoint_state(path, FORMAT, MATCHED_FIELDS)
    config = state["config"]
    counters_in = _field(file, state, "counters", dict)
    counters = {
        key: _count(file, f"counters {key}", counters_in.get(key))
        for key in ("rounds", "total_steps", "episodes", "policy_version")
    }
    history = _field(file, state, "history", list)
    if len(history) != counters["rounds"] or not all(isinstance(r, dict) for r in history):
        raise CheckpointError(
            f"{file}: history: expected {counters['rounds']} round records, actual "
            f"{len(history)} entries"
        )
    stats_type = _field(file, state, "stats_type", str)
    learner = _field(file, state, "learner", dict)
    world_model = state.get("world_model")
    if world_model is not None and not isinstance(world_model, dict):
        raise CheckpointError(f"{file}: world_model: expected a dict or None")
    raw_incarnations = _field(file, state, "incarnations", dict)
    incarnations = {
        _count(file, "incarnations slot", slot): _count(file, "incarnations", number)
        for slot, number in raw_incarnations.items()
    }
    actors_entry = _field(file, state, "actors", dict)
    actors, note = _read_actors(file, actors_entry)
    return TrainCheckpoint(
        path=file,
        header=header,
        config=config,
        counters=counters,
        history=history,
        stats_type=stats_type,
        learner=learner,
        world_model=world_model,
        incarnations=incarnations,
        actors=actors,
        actors_note=note,
    )


def _read_actors(file: Path, entry: dict[str, Any]) -> tuple[bytes | None, str]:
    """The actors file's bytes (sha256 checked), or ``None`` and why they were not saved."""
    if entry.get("saved") is not True:
        reason = entry.get("reason")
        return None, reason if isinstance(reason, str) else RESTART_NOTE
    extra = actors_path(file)
    digest = entry.get("sha256")
    if not isinstance(digest, str):
        raise CheckpointError(f"{file}: actors: expected the actors file's sha256")
    try:
        data = extra.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(
            f"{extra}: expected the actors file of the checkpoint {file.name}, actual missing"
        ) from None
    except OSError as exc:
        raise CheckpointError(f"{extra}: cannot be read ({exc.strerror})") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise CheckpointError(
            f"{extra}: expected the actors file the checkpoint {file.name} recorded (sha256 "
            f"{digest[:12]}…), actual another content ({len(data)} bytes): truncated, "
            "corrupt or of another checkpoint"
        )
    return data, ""


# -- writing and restoring ------------------------------------------------------------------
def checkpoint_header(fmt: str) -> dict[str, Any]:
    """The header every checkpoint starts with: ``format``, ``format_version``, the
    ``fleetgym_version`` and git ``commit`` writing it and when (``created``).

    Args:
        fmt: The checkpoint's format (:data:`FORMAT` or :data:`ASYNC_FORMAT`).
    """
    from fleetgym import __version__

    return {
        "format": fmt,
        "format_version": FORMAT_VERSION,
        "fleetgym_version": __version__,
        "commit": package_commit(),
        "created": time.time(),
    }


def checkpoint_state(
    config: dict[str, Any],
    counters: dict[str, int],
    history: list[dict[str, Any]],
    stats_type: str,
    learner: Any,
    fleet: Any,
) -> tuple[dict[str, Any], bytes | None]:
    """The checkpoint's dict and the fleet's pickled actors (``None``: not saveable).

    Args:
        config: The run's :func:`run_config`.
        counters: ``rounds``, ``total_steps``, ``episodes``, ``policy_version``.
        history: The rounds so far as plain dicts.
        stats_type: The qualified name of the rounds' stats class.
        learner: The learner (its ``state()``; a world model's ``state()`` too).
        fleet: The fleet (its ``actor_state()`` where it has one, its ``incarnations``).
    """
    capture = getattr(fleet, "actor_state", None)
    actors = capture() if callable(capture) else None
    imagination = getattr(learner, "imagination", None)
    incarnations = getattr(fleet, "incarnations", None)
    state = {
        **checkpoint_header(FORMAT),
        "config": config,
        "counters": dict(counters),
        "history": history,
        "stats_type": stats_type,
        "incarnations": {
            int(k): int(v)
            for k, v in (incarnations.items() if isinstance(incarnations, dict) else ())
        },
        "actors": {"saved": False, "reason": RESTART_NOTE},
        "learner": learner.state(),
        "world_model": None if imagination is None else imagination.model.state(),
    }
    return state, actors


def restore_run(checkpoint: TrainCheckpoint, learner: Any, fleet: Any) -> bool:
    """Put the learner and the fleet's actors back as the checkpoint saved them.

    The learner's state is checked whole before it is applied; if the fleet then refuses
    its actors, the learner is put back as it was.

    Args:
        checkpoint: What :func:`read_checkpoint` returned.
        learner: The learner (restored with
            :func:`~fleetgym.agents.learners.checkpoint.restore_learner`).
        fleet: The fleet, before its first round: its actors are restored
            (``restore_actor_state``) when the checkpoint has them, else its incarnation
            numbers are, so that every slot restarts on a fresh random stream.

    Returns:
        Whether the actors were restored (``False``: their episodes restart).

    Raises:
        CheckpointError: Naming the file, if the learner's state or the actors do not fit.
    """
    from fleetgym.agents.learners.checkpoint import restore_learner  # imports torch

    file = checkpoint.path
    before = restore_learner_state(file, learner, checkpoint.learner, checkpoint.world_model)
    restore = getattr(fleet, "restore_actor_state", None)
    try:
        if checkpoint.actors is not None:
            if not callable(restore):
                raise ValueError(
                    f"expected a fleet that restores its actors, actual {type(fleet).__name__}"
                )
            restore(checkpoint.actors)
            return True
        if isinstance(getattr(fleet, "incarnations", None), dict):
            fleet.incarnations = dict(checkpoint.incarnations)
    except (TypeError, ValueError) as exc:
        restore_learner(learner, before, "the learner's state before the resume")
        raise CheckpointError(_named(actors_path(file), exc)) from None
    return False


def restore_learner_state(
    file: Path, learner: Any, state: dict[str, Any], world_model: dict[str, Any] | None
) -> dict[str, Any]:
    """Restore a learner from a checkpoint's ``learner`` (and ``world_model``) entries.

    Args:
        file: The checkpoint file (named in every error).
        learner: The learner (a :class:`~fleetgym.agents.learners.ppo.PPOLearner`).
        state: Its saved ``state()``.
        world_model: The world model's saved state (``None``: left as it is).

    Returns:
        A copy of the learner's state before the restore (to put it back with
        :func:`~fleetgym.agents.learners.checkpoint.restore_learner`).

    Raises:
        CheckpointError: Naming the file, if the state does not fit the learner (the
            learner is then unchanged).
    """
    from fleetgym.agents.learners.checkpoint import restore_learner  # imports torch

    before: dict[str, Any] = copy.deepcopy(learner.state())  # state() shares the live tensors
    loader = None
    if world_model is not None:
        model = world_model
        loader = lambda: (model, f"{file}: world_model")  # noqa: E731
    try:
        restore_learner(learner, state, file, world_model=loader)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(_named(file, exc)) from None
    return before


def _named(path: Path, exc: Exception) -> str:
    message = str(exc)
    return message if message.startswith(str(path)) else f"{path}: {message}"


__all__ = [
    "ASYNC_FORMAT",
    "CHECKPOINT_NAME",
    "FORMAT",
    "FORMAT_NAMES",
    "FORMAT_VERSION",
    "GIT_TIMEOUT_S",
    "MATCHED_FIELDS",
    "RESTART_NOTE",
    "CheckpointConfig",
    "CheckpointStore",
    "TrainCheckpoint",
    "actors_path",
    "atomic_write",
    "check_config",
    "check_folder_free",
    "checkpoint_header",
    "checkpoint_state",
    "config_differences",
    "count_field",
    "dict_field",
    "find_checkpoint",
    "package_commit",
    "read_checkpoint",
    "read_checkpoint_state",
    "restore_learner_state",
    "restore_run",
    "run_config",
]
