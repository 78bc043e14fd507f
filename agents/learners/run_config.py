"""Is a checkpoint of this run? The run configuration a checkpoint records, and its differences.

A train checkpoint records the run's configuration as plain values (:func:`run_config`);
a resumed run must share its :data:`MATCHED_FIELDS` (the workload, the seeds, the fleet,
the learner and its hyperparameters): :func:`config_differences` lists each field that
differs (a dict field key by key, ``hyperparameters.lr``), :func:`check_config` refuses
them as a :class:`~fleetgym.errors.CheckpointError`. The asynchronous trainer's
checkpoints use the same two with their own fields.

:func:`check_folder_free` keeps two runs' checkpoints out of one folder.
"""

from __future__ import annotations

import functools
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from fleetgym.agents.learners.checkpoint_store import FORMAT_VERSION, CheckpointStore
from fleetgym.errors import CheckpointError
from fleetgym.validation import quote

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
    "world_size",
)
#: Fields of :data:`MATCHED_FIELDS` a checkpoint of an earlier fleetgym may not hold (read
#: as ``None``, what a one-process learner records).
OPTIONAL_FIELDS = ("world_size",)


# -- who wrote it ------------------------------------------------------------------
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


# -- the run
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
            them, whether it has imagination and, of a data-parallel learner such as
            :class:`~fleetgym.agents.learners.data_parallel.group.DataParallelPPO`, its
            ``world_size`` are recorded).
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
    world_size = getattr(learner, "world_size", None)
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
        "world_size": None if world_size is None else int(world_size),
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


__all__ = [
    "GIT_TIMEOUT_S",
    "MATCHED_FIELDS",
    "OPTIONAL_FIELDS",
    "check_config",
    "check_folder_free",
    "checkpoint_header",
    "config_differences",
    "package_commit",
    "run_config",
]
