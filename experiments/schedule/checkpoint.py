"""The learned scheduler's checkpoint: an SB3 PPO zip that carries its training metadata.

Everything a run needs to continue is in its checkpoint: the SB3 zip stores the model and
optimiser, and the attribute :data:`META_ATTR` (saved inside the zip with the rest of the
model's attributes) records the environment ID and keyword arguments, the episodes done,
the seed, the PPO configuration and the fleetgym version and git commit that wrote it.
:func:`load_scheduler` is the one place a checkpoint is loaded;
:func:`read_scheduler_meta` reads (and checks) the metadata without loading torch.

Every zip is written atomically (:func:`save_scheduler`, with the checkpoint store's
:func:`~fleetgym.agents.learners.checkpoint_store.atomic_write`: a temporary file in the
same folder, fsync, rename), so a crash never leaves a half-written zip under a
checkpoint's name. The periodic checkpoints of a run, ``checkpoints/scheduler_epNNNN.zip``
(:data:`CHECKPOINT_NAME`), are pruned to the newest few (:func:`prune_checkpoints`);
:func:`read_resume_checkpoint` finds the one to resume from (a file, or the newest of a
folder) and refuses a truncated, corrupt, foreign or newer one with a
:class:`~fleetgym.errors.CheckpointError` naming the file.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import zipfile
import zlib
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fleetgym.agents.learners.checkpoint_store import atomic_write, check_fleetgym_version
from fleetgym.agents.schedulers.actions import MappedScheduler
from fleetgym.errors import CheckpointError
from fleetgym.validation import check_int

if TYPE_CHECKING:
    from stable_baselines3 import PPO

__all__ = [
    "CHECKPOINT_NAME",
    "META_ATTR",
    "SHIPPED_SCHEDULER",
    "checkpoint_path",
    "export_scheduler",
    "find_scheduler_checkpoint",
    "load_learned_scheduler",
    "load_scheduler",
    "prune_checkpoints",
    "read_resume_checkpoint",
    "read_scheduler_meta",
    "save_scheduler",
    "scheduler_checkpoints",
    "shipped_scheduler_path",
]

logger = logging.getLogger(__name__)

#: The small scheduler shipped with the package, used by ``fleetgym reproduce``.
SHIPPED_SCHEDULER = "learned_scheduler_cartpole.zip"
#: Name of the attribute that a saved scheduler carries its training metadata in.
META_ATTR = "fleetgym_meta"
#: A periodic checkpoint's file name: ``scheduler_ep`` + the episodes done + ``.zip``.
CHECKPOINT_NAME = re.compile(r"^scheduler_ep(\d+)\.zip$")
#: What a zip that is not a scheduler checkpoint is told it should be.
_EXPECTED = "expected a fleetgym scheduler checkpoint (an SB3 zip with fleetgym metadata)"


def _existing(path: str | Path) -> Path:
    """``path``, or ``path`` with ``.zip`` added, whichever is a file (SB3 adds it too)."""
    path = Path(path)
    candidates = [path] if path.suffix == ".zip" else [path, path.with_suffix(".zip")]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise FileNotFoundError(
            f"scheduler checkpoint: expected an existing file, actual no file {path}"
        )
    return found


def save_scheduler(model: PPO, path: Path, meta: dict[str, Any], episodes: int) -> Path:
    """Save ``model`` to ``path`` atomically, with ``meta`` plus its episode and timestep
    counts and the fleetgym version and commit writing it.

    Args:
        model: The SB3 PPO model.
        path: The zip to write (``.zip`` is added to a name without a suffix, as SB3
            does); its folder is created.
        meta: The training metadata (env ID and keyword arguments, seed, config, ...).
        episodes: The episodes the model has seen.

    Returns:
        The path written.
    """
    from fleetgym import __version__
    from fleetgym.agents.learners.run_config import package_commit

    meta = dict(
        meta,
        episodes=int(episodes),
        timesteps=int(model.num_timesteps),
        fleetgym_version=__version__,
        commit=package_commit(),
    )
    setattr(model, META_ATTR, meta)
    path = Path(path)
    if path.suffix == "":
        path = path.with_name(path.name + ".zip")
    path.parent.mkdir(parents=True, exist_ok=True)
    # The TensorBoard folder is a path of the machine that trained: a shipped or shared
    # checkpoint should not carry it (a resumed run passes its own).
    # The file atomic_write opens is a BufferedWriter, which SB3 writes its zip into.
    atomic_write(
        path, lambda file: model.save(cast(io.BufferedIOBase, file), exclude=["tensorboard_log"])
    )
    return path


def read_scheduler_meta(path: str | Path) -> dict[str, Any]:
    """The training metadata stored in a saved scheduler zip (without loading torch).

    The whole zip is checked (every member's CRC), so a truncated or corrupt file is
    refused here rather than half-way through a load.

    Args:
        path: an SB3 zip written by
            :func:`~fleetgym.experiments.schedule.train.train_scheduler`.

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: naming the file (a ``ValueError``): not a zip, truncated or
            corrupt, or a zip without fleetgym metadata.
    """
    path = _existing(path)
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            # A zip written here starts at byte 0; a truncated one loses its directory, and
            # what zipfile then finds is a zip stored inside it (SB3's policy.pth).
            start = min((info.header_offset for info in infos), default=0)
            broken = archive.testzip() if start == 0 else None
            names = archive.namelist()
            ok = start == 0 and broken is None and "data" in names
            raw = archive.read("data") if ok else None
        data = None if raw is None else json.loads(raw.decode("utf-8"))
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError) as exc:
        raise CheckpointError(
            f"{path}: {_EXPECTED}, actual a truncated or corrupt file ({type(exc).__name__}: {exc})"
        ) from None
    if start != 0:
        raise CheckpointError(
            f"{path}: {_EXPECTED}, actual a truncated or corrupt file (its zip directory is "
            f"missing; a zip found inside starts at byte {start})"
        )
    if broken is not None:
        raise CheckpointError(
            f"{path}: {_EXPECTED}, actual a corrupt zip (its member {broken!r} fails its CRC)"
        )
    if not isinstance(data, dict):
        raise CheckpointError(
            f"{path}: {_EXPECTED}, actual a zip without SB3's 'data' (members {names[:8]})"
        )
    meta = data.get(META_ATTR)
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: {_EXPECTED}, actual no {META_ATTR}")
    return meta


def read_resume_checkpoint(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """The checkpoint a run resumes from and its metadata, checked before any work.

    Args:
        path: a scheduler zip (``.zip`` may be left out), or a folder: its newest periodic
            checkpoint, else the newest in its ``checkpoints/`` (a run's output folder).

    Returns:
        ``(file, metadata)``.

    Raises:
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
        FileNotFoundError: nothing at ``path``.
        CheckpointError: naming the file or folder: a folder without checkpoints, a
            truncated, corrupt or foreign file, metadata without an episode count, or one
            written by a newer fleetgym.
    """
    file = find_scheduler_checkpoint(path)
    meta = read_scheduler_meta(file)
    episodes = meta.get("episodes", 0)
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 0:
        raise CheckpointError(f"{file}: episodes: expected an int >= 0, actual {episodes!r}")
    if "fleetgym_version" in meta:  # zips written before it was recorded do not say
        check_fleetgym_version(file, meta["fleetgym_version"])
    return file, meta


def checkpoint_path(folder: Path, episodes: int) -> Path:
    """The periodic checkpoint of ``folder`` after ``episodes`` episodes.

    Args:
        folder: The checkpoint folder.
        episodes: The episodes done (an int >= 0).
    """
    return Path(folder) / f"scheduler_ep{check_int('episodes', episodes, 0):04d}.zip"


def scheduler_checkpoints(folder: str | os.PathLike[str]) -> list[Path]:
    """The periodic checkpoints in ``folder``, fewest episodes first (temporary files and
    other zips are ignored).

    Args:
        folder: The checkpoint folder (missing: none).
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [
        (int(match[1]), entry.name, entry)
        for entry in folder.iterdir()
        if (match := CHECKPOINT_NAME.match(entry.name)) and entry.is_file()
    ]
    return [path for _, _, path in sorted(found)]


def prune_checkpoints(folder: str | os.PathLike[str], keep: int, newest: Path) -> list[Path]:
    """Delete all but the newest ``keep`` periodic checkpoints up to ``newest``.

    Checkpoints of more episodes than ``newest`` (the one just written) are of an
    abandoned run in the same folder (a fresh run, or a run resumed from an earlier
    checkpoint, writes fewer episodes than they hold): they are deleted too, so that the
    folder's newest checkpoint is always this run's.

    Args:
        folder: The checkpoint folder.
        keep: How many to keep (an int >= 1).
        newest: The checkpoint just written.

    Returns:
        The deleted files.
    """
    keep = check_int("keep", keep, 1)
    match = CHECKPOINT_NAME.match(newest.name)
    limit = int(match[1]) if match else None
    found = scheduler_checkpoints(folder)
    stale = [p for p in found if limit is not None and _episodes(p) > limit]
    current = [p for p in found if p not in stale]
    if stale:
        logger.warning(
            "%s: deleting checkpoints of another run (more episodes than %s): %s",
            folder,
            newest.name,
            ", ".join(p.name for p in stale),
        )
    deleted = stale + current[:-keep]
    for path in deleted:
        path.unlink(missing_ok=True)
    return deleted


def _episodes(path: Path) -> int:
    match = CHECKPOINT_NAME.match(path.name)
    return int(match[1]) if match else -1


def find_scheduler_checkpoint(path: str | os.PathLike[str]) -> Path:
    """The scheduler zip ``path`` names: the file itself, or the newest of a folder.

    Args:
        path: a zip (``.zip`` may be left out), a folder of periodic checkpoints, or a
            run's output folder holding ``checkpoints/``.

    Raises:
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
        FileNotFoundError: nothing at ``path``.
        CheckpointError: naming the folder, if it holds no periodic checkpoint.
    """
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"resume: expected a str or os.PathLike, actual {type(path).__name__}")
    given = Path(path)
    if not given.is_dir():
        return _existing(given)
    for folder in (given, given / "checkpoints"):
        found = scheduler_checkpoints(folder)
        if found:
            return found[-1]
    raise CheckpointError(
        f"{given}: expected a scheduler checkpoint (scheduler_epNNNN.zip, or a checkpoints/ "
        "folder of them), actual none in this folder"
    )


def load_scheduler(path: str | Path, env: Any = None, **kwargs: Any) -> PPO:
    """Load a saved scheduler (an SB3 PPO zip) on the CPU, as the SB3 model.

    Args:
        path: the zip (``.zip`` may be left out).
        env: optional env to attach (needed to continue learning).
        **kwargs: passed to ``PPO.load``.

    Raises:
        FileNotFoundError: no such file.
    """
    from stable_baselines3 import PPO

    return PPO.load(str(_existing(path)), env=env, device="cpu", **kwargs)


def load_learned_scheduler(path: str | Path) -> Any:
    """A saved scheduler ready to act on the scheduling env's own ``Discrete`` actions.

    A scheduler trained in another action parametrisation (``pow2``, ``log2``, ``step``) is wrapped
    in :class:`~fleetgym.agents.schedulers.actions.MappedScheduler`, which maps its
    actions back.

    Raises:
        FileNotFoundError: no such file.
    """
    model = load_scheduler(path)
    meta = getattr(model, META_ATTR, None) or {}
    config = meta.get("config", {})
    mode = config.get("actions", "discrete")
    if mode == "discrete":
        return model
    max_actors = int(meta.get("env_kwargs", {}).get("max_actors", 32))
    return MappedScheduler(
        model, mode, max_actors=max_actors, start_actors=config.get("start_actors")
    )


def export_scheduler(src: str | Path, dst: str | Path) -> Path:
    """Copy a trained scheduler to ``dst`` without paths of the machine that trained it.

    Used to ship a scheduler with the package; the model, optimiser and metadata are kept.

    Raises:
        FileNotFoundError: ``src`` does not exist.
        ValueError: ``src`` is not a fleetgym scheduler checkpoint.
    """
    meta = read_scheduler_meta(src)
    meta.pop("resumed_from", None)
    model = load_scheduler(src)
    episodes = int(meta.pop("episodes", 0))
    meta.pop("timesteps", None)
    return save_scheduler(model, Path(dst), meta, episodes)


def shipped_scheduler_path() -> Path:
    """Path of the small trained scheduler shipped with the package.

    Raises:
        FileNotFoundError: the package was installed without it.
    """
    path = Path(str(resources.files("fleetgym.experiments.schedule").joinpath(SHIPPED_SCHEDULER)))
    if not path.is_file():
        raise FileNotFoundError(
            f"shipped scheduler: expected {SHIPPED_SCHEDULER} in "
            "fleetgym.experiments.schedule, actual missing"
        )
    return path
