"""Checkpoints of a :func:`~fleetgym.agents.learners.training.train` run: periodic, atomic,
and resumable after a crash (torch is imported when a checkpoint is written or read).

A train checkpoint is a file of the checkpoint store
(:mod:`~fleetgym.agents.learners.checkpoint_store`: ``<folder>/ckpt-00000012.pt`` after
12 rounds, written atomically, the newest ``keep`` kept) of the :data:`FORMAT` format:
after the header, the run's configuration
(:func:`~fleetgym.agents.learners.run_config.run_config`), its counters, the
:class:`~fleetgym.agents.learners.training.TrainingHistory` rounds so far and the
learner's state (a :class:`~fleetgym.agents.learners.ppo.PPOLearner`'s
:meth:`~fleetgym.agents.learners.ppo.PPOLearner.state`, or a learner that restores
itself, such as :class:`~fleetgym.agents.learners.data_parallel.group.DataParallelPPO`).

An :class:`~fleetgym.agents.fleet.InProcessFleet` also saves its actors (each slot's env
object, random generator, current observation and episode counters) in
``ckpt-00000012.actors.pkl``, whose sha256 the main file records. **That file is a
pickle**: it is only ever read from the folder a user passes to resume (their own run's
checkpoints), never from a network. Fleets that cannot save their actors (the process and
Ray backends) record that their actors' episodes restart on resume.

* :func:`read_checkpoint` -- one train checkpoint, read and checked (:class:`TrainCheckpoint`);
* :func:`checkpoint_state`, :func:`restore_run` -- what :func:`train` saves and puts back;
* the store and the run configuration live in
  :mod:`~fleetgym.agents.learners.checkpoint_store` and
  :mod:`~fleetgym.agents.learners.run_config` (import their names from there).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

from fleetgym.agents.learners.checkpoint_store import (
    FORMAT,
    actors_path,
    checked_field,
    count_field,
    read_checkpoint_state,
)
from fleetgym.agents.learners.run_config import (
    MATCHED_FIELDS,
    OPTIONAL_FIELDS,
    checkpoint_header,
)
from fleetgym.errors import CheckpointError

#: What the header says when the fleet's actors are not in the checkpoint.
RESTART_NOTE = (
    "the actors' episodes restart on resume: a resumed run is not bit-identical to an "
    "uninterrupted one (the episodes in flight at the checkpoint are cut; the rest follows "
    "a different random stream)"
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
    required = tuple(field for field in MATCHED_FIELDS if field not in OPTIONAL_FIELDS)
    file, state, header = read_checkpoint_state(path, FORMAT, required)
    config = state["config"]
    counters_in = checked_field(file, state, "counters", dict)
    counters = {
        key: count_field(file, f"counters {key}", counters_in.get(key))
        for key in ("rounds", "total_steps", "episodes", "policy_version")
    }
    history = checked_field(file, state, "history", list)
    if len(history) != counters["rounds"] or not all(isinstance(r, dict) for r in history):
        raise CheckpointError(
            f"{file}: history: expected {counters['rounds']} round records, actual "
            f"{len(history)} entries"
        )
    stats_type = checked_field(file, state, "stats_type", str)
    learner = checked_field(file, state, "learner", dict)
    world_model = state.get("world_model")
    if world_model is not None and not isinstance(world_model, dict):
        raise CheckpointError(f"{file}: world_model: expected a dict or None")
    raw_incarnations = checked_field(file, state, "incarnations", dict)
    incarnations = {
        count_field(file, "incarnations slot", slot): count_field(file, "incarnations", number)
        for slot, number in raw_incarnations.items()
    }
    actors_entry = checked_field(file, state, "actors", dict)
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
        learner: The learner (restored as :func:`restore_learner_state` does).
        fleet: The fleet, before its first round: its actors are restored
            (``restore_actor_state``) when the checkpoint has them, else its incarnation
            numbers are, so that every slot restarts on a fresh random stream.

    Returns:
        Whether the actors were restored (``False``: their episodes restart).

    Raises:
        CheckpointError: Naming the file, if the learner's state or the actors do not fit.
    """
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
        _restore(learner, before, "the learner's state before the resume")
        raise CheckpointError(_named(actors_path(file), exc)) from None
    return False


def restore_learner_state(
    file: Path, learner: Any, state: dict[str, Any], world_model: dict[str, Any] | None
) -> dict[str, Any]:
    """Restore a learner from a checkpoint's ``learner`` (and ``world_model``) entries.

    A learner with a ``restore_state(state, where)`` method restores itself (a
    :class:`~fleetgym.agents.learners.data_parallel.group.DataParallelPPO`: every rank);
    any other is restored with :func:`~fleetgym.agents.learners.checkpoint.restore_learner`.

    Args:
        file: The checkpoint file (named in every error).
        learner: The learner (a :class:`~fleetgym.agents.learners.ppo.PPOLearner`, or one
            with ``state()`` and ``restore_state()``).
        state: Its saved ``state()``.
        world_model: The world model's saved state (``None``: left as it is).

    Returns:
        A copy of the learner's state before the restore (to put it back the same way).

    Raises:
        CheckpointError: Naming the file, if the state does not fit the learner (the
            learner is then unchanged).
    """
    before: dict[str, Any] = copy.deepcopy(learner.state())  # state() shares the live tensors
    try:
        _restore(learner, state, file, world_model)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(_named(file, exc)) from None
    return before


def _restore(
    learner: Any, state: dict[str, Any], where: Path | str, world_model: Any = None
) -> None:
    """``learner.restore_state`` where the learner has one, else ``restore_learner``."""
    own = getattr(learner, "restore_state", None)
    if callable(own):
        own(state, where)
        return
    from fleetgym.agents.learners.checkpoint import restore_learner  # imports torch

    loader = None
    if world_model is not None:
        model = world_model
        loader = lambda: (model, f"{where}: world_model")  # noqa: E731
    restore_learner(learner, state, where, world_model=loader)


def _named(path: Path, exc: Exception) -> str:
    message = str(exc)
    return message if message.startswith(str(path)) else f"{path}: {message}"


__all__ = [
    "RESTART_NOTE",
    "TrainCheckpoint",
    "checkpoint_state",
    "read_checkpoint",
    "restore_learner_state",
    "restore_run",
]
