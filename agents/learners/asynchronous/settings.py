"""The settings file of an asynchronous trainer (``AsyncPPO``, ``TokenAsyncPPO``).

:meth:`AsyncPPO.save` writes the learner's checkpoint (see
:mod:`fleetgym.agents.learners.checkpoint`) and, next to it, ``<stem>.json``: the workload,
the algorithm config and the topology (``dataclasses.asdict`` of each, see
:mod:`~fleetgym.agents.learners.asynchronous.config`), the seed and the env steps trained
so far. :func:`read_settings` reads that file back for :meth:`AsyncPPO.load`, checking
everything a constructor cannot (that it is JSON, an object, of this class, with known keys
and a count of steps >= 0); the configs then check each value. Files of fleetgym 1.x and
of 2.0's first drafts (every setting a top-level key) are migrated
(:func:`migrate_settings`, :func:`migrate_token_settings`). :func:`save_trainer` and
:func:`load_trainer` are what :meth:`AsyncPPO.save` and :meth:`AsyncPPO.load` do.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from fleetgym.agents.backends import RENAMED_BACKENDS
from fleetgym.agents.files import check_path
from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig
from fleetgym.agents.learners.asynchronous.moved import TOPOLOGY_KEYWORDS
from fleetgym.agents.learners.asynchronous.records import (
    UpdateRecord,
    record_dict,
    record_from_dict,
)
from fleetgym.agents.learners.checkpoint import read_json_file
from fleetgym.agents.learners.checkpoint_store import (
    ASYNC_FORMAT,
    count_field,
    dict_field,
    read_checkpoint_state,
)
from fleetgym.agents.learners.lag import WeightRing
from fleetgym.agents.learners.run_checkpoints import restore_learner_state
from fleetgym.agents.learners.run_config import check_config, checkpoint_header
from fleetgym.errors import CheckpointError
from fleetgym.validation import check_int, quote

#: What a settings file says it is (``"format"``); files without it are read too.
SETTINGS_FORMAT = "fleetgym.AsyncPPO"
#: What a TokenAsyncPPO settings file says it is.
TOKEN_SETTINGS_FORMAT = "fleetgym.TokenAsyncPPO"
#: The version of the settings files this module writes (files without it are flat, 1.x).
SETTINGS_VERSION = 2
#: The constructor arguments a settings file holds.
SETTINGS_KEYS = ("workload", "algo", "topology", "seed")
#: Flat keys of a 1.x AsyncPPO settings file that went into the algorithm config.
FLAT_ALGO_KEYS = tuple(f.name for f in dataclasses.fields(AsyncPPOConfig))
#: Flat keys of a 1.x TokenAsyncPPO settings file that went into its TokenPPOConfig.
FLAT_TOKEN_KEYS = ("ratio_level", "loss", "sigma", "target_kl")
#: Where neither the file nor a config keeps them (a cluster of the run that saved it).
UNSAVED_TOPOLOGY = ("address", "ray_actor_options")


def trainer_settings(model: Any) -> dict[str, Any]:
    """What ``<stem>.json`` holds for ``model`` (plain JSON values)."""
    algo = model.algo.as_dict()
    imagination = getattr(model.learner, "imagination", None)
    if "imagination" in algo:  # the learner's, seed resolved
        algo["imagination"] = None if imagination is None else imagination.config.as_dict()
    topology = model.topology.as_dict()
    for key in UNSAVED_TOPOLOGY:
        topology[key] = None
    return {
        "format": model.SETTINGS_FORMAT,
        "version": SETTINGS_VERSION,
        "workload": model.workload.name,
        "algo": algo,
        "topology": topology,
        "seed": model.seed,
        "num_timesteps": model.num_timesteps,
    }


def _split_flat(settings: dict[str, Any], algo_keys: tuple[str, ...]) -> tuple[dict, dict]:
    """Pop the flat keys of a 1.x file into an algorithm dict and a topology dict."""
    if "actors" in settings and "backend" not in settings:
        old = settings.pop("actors")
        settings["backend"] = RENAMED_BACKENDS.get(old, old) if isinstance(old, str) else old
    algo = {key: settings.pop(key) for key in algo_keys if key in settings}
    topology = {key: settings.pop(key) for key in TOPOLOGY_KEYWORDS if key in settings}
    return algo, topology


def migrate_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Bring an AsyncPPO settings file of fleetgym 1.x up to 2.0, in place.

    1.x saved every constructor argument as a top-level key and where the actors ran as
    ``"actors"`` (``"thread"``, ``"process"``, ``"ray"``); 2.0 saves ``"algo"`` and
    ``"topology"`` (with ``"backend"``, :mod:`fleetgym.agents.backends`), so an old file
    still loads.

    Example:
        >>> migrate_settings({"workload": "CartPole-v1", "actors": "thread", "loss": "gipo"})
        {'workload': 'CartPole-v1', 'algo': {'loss': 'gipo'}, 'topology': {'backend': 'inprocess'}}
    """
    if "algo" in settings or "topology" in settings:
        return settings
    settings["algo"], settings["topology"] = _split_flat(settings, FLAT_ALGO_KEYS)
    return settings


def migrate_token_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Bring a TokenAsyncPPO settings file of fleetgym 1.x up to 2.0, in place.

    The ratio level, loss, ``sigma``, ``target_kl`` (1.x ``"auto"``: ``None``; 1.x
    ``None``: ``0``) and ``token_hyperparameters`` become the algorithm's
    ``TokenPPOConfig``.

    Example:
        >>> migrate_token_settings({"workload": "CartPole-v1", "loss": "gipo",
        ...     "target_kl": "auto", "n_actors": 2, "token_hyperparameters": {"chunk": 2}})
        {'workload': 'CartPole-v1', 'algo': {'token': {'chunk': 2, 'loss': 'gipo', 'target_kl': None}}, 'topology': {'n_actors': 2}}
    """
    if "algo" in settings or "topology" in settings:
        return settings
    lag_keys = ("max_policy_lag", "batch_trajectories", "lag_injection", "learner_device")
    algo, topology = _split_flat(settings, lag_keys)
    token = settings.pop("token_hyperparameters", {})
    if isinstance(token, dict):
        token = dict(token)
        for key in FLAT_TOKEN_KEYS:
            if key in settings:
                token[key] = settings.pop(key)
        if "target_kl" in token:
            kl = token["target_kl"]
            token["target_kl"] = None if kl == "auto" else (0.0 if kl is None else kl)
    settings["algo"], settings["topology"] = {"token": token, **algo}, topology
    return settings


def read_settings(path: Path, fmt: str = SETTINGS_FORMAT) -> tuple[dict[str, Any], int]:
    """The constructor arguments and env steps of a settings file (1.x files migrated).

    Args:
        path: The ``<stem>.json`` file.
        fmt: The format expected (:data:`SETTINGS_FORMAT` or :data:`TOKEN_SETTINGS_FORMAT`).

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: Naming the file, if it is not JSON, not an object, another class's
            file, lacks ``workload``, has unknown keys, configs that are not objects, or
            ``num_timesteps`` that is not an int >= 0.
    """
    owner = fmt.rsplit(".", 1)[-1]
    settings = read_json_file(path, f"the {owner} settings file")
    kind = settings.pop("format", fmt)
    if kind != fmt:
        raise ValueError(f"{path}: expected {fmt!r} settings, actual {quote(kind)}")
    if "workload" not in settings:
        raise ValueError(
            f"{path}: expected {owner} settings with a workload, actual keys "
            f"{quote(sorted(settings))}"
        )
    version = settings.pop("version", 1)
    if version not in (1, SETTINGS_VERSION):
        raise ValueError(
            f"{path}: expected settings version 1 or {SETTINGS_VERSION}, actual {quote(version)}"
        )
    (migrate_token_settings if fmt == TOKEN_SETTINGS_FORMAT else migrate_settings)(settings)
    try:
        num_timesteps = check_int("num_timesteps", settings.pop("num_timesteps", 0), low=0)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    unknown = sorted(set(settings) - set(SETTINGS_KEYS))
    if unknown:
        raise ValueError(
            f"{path}: expected {owner} settings among {list(SETTINGS_KEYS)}, actual unknown "
            f"{quote(unknown)}"
        )
    for key in ("algo", "topology"):
        if not isinstance(settings.get(key, {}), dict):
            raise ValueError(
                f"{path}: {key}: expected a JSON object, actual {quote(settings[key])}"
            )
    return settings, num_timesteps


def save_trainer(model: Any, path: Any) -> Path:
    """What :meth:`AsyncPPO.save` does: the learner's checkpoint and ``<stem>.json``."""
    path = check_path("path", path)
    saved: Path = model.learner.save(path)
    saved.with_suffix(".json").write_text(json.dumps(trainer_settings(model), indent=1))
    return saved


def load_trainer(cls: Any, path: Any, overrides: dict[str, Any]) -> Any:
    """What :meth:`AsyncPPO.load` does: settings, then a trainer, then the learner's state.

    ``overrides`` are constructor keywords; a dict for ``algo`` or ``topology`` replaces
    only the saved fields it names (a config replaces them all).
    """
    path = check_path("path", path)
    settings_path = path.with_suffix(".json")
    if not settings_path.is_file():
        raise FileNotFoundError(f"expected the settings file, actual missing {settings_path}")
    settings, num_timesteps = read_settings(settings_path, cls.SETTINGS_FORMAT)
    for key in ("algo", "topology"):  # a dict overrides the saved fields it names
        if isinstance(overrides.get(key), dict):
            overrides = {**overrides, key: {**settings.get(key, {}), **overrides[key]}}
    settings.update(overrides)
    try:
        model = cls(**settings)
    except (TypeError, ValueError) as exc:
        if not overrides:  # the file's own values: a malformed file
            raise ValueError(f"{settings_path}: {exc}") from exc
        # The caller's overrides may be what is wrong: same type, both named.
        kind = TypeError if isinstance(exc, TypeError) else ValueError
        raise kind(f"{exc} (settings {settings_path} with overrides {sorted(overrides)})") from exc
    return restore_trainer(model, path, num_timesteps)


def restore_trainer(model: Any, path: Path, num_timesteps: int) -> Any:
    """Load the learner's state saved at ``path`` into a freshly built trainer and
    publish its weights (the trainer is closed if that fails)."""
    try:
        model.learner.load(path)
    except BaseException:
        model.close()
        raise
    model.num_timesteps = num_timesteps
    model.ring = WeightRing(model.lag_injection + 1)  # the constructor's weights are stale
    model._publish()
    return model


# -- periodic checkpoints of learn() ------------------------------------------------------------
#: Topology fields a resumed run may change: where a Ray cluster runs, how the inference
#: server batches and where it computes, how long a rollout may take (the run's data does
#: not depend on them).
UNMATCHED_TOPOLOGY = (
    "address",
    "ray_actor_options",
    "server_batch",
    "server_wait_ms",
    "server_device",
    "actor_timeout",
)
#: Fields of :func:`async_run_config` a resumed run must share with its checkpoint (the
#: others, ``total_timesteps`` and ``target``, may change: e.g. to extend a run).
ASYNC_MATCHED_FIELDS = ("workload", "seed", "trainer", "algo", "topology")
#: The counters an async checkpoint holds (all ints >= 0).
ASYNC_COUNTERS = (
    "updates",
    "num_timesteps",
    "collected_steps",
    "call_steps",
    "call_updates",
    "policy_version",
    "episodes_seen",
    "dropped_samples_total",
    "policy_stops",
    "actor_failures",
    "max_outstanding",
)
#: Why a resumed asynchronous run is not bit-identical to an uninterrupted one.
ASYNC_RESTART_NOTE = (
    "the actors' episodes restart on resume (fresh seed streams); the trajectories "
    "collected but not yet consumed at the checkpoint are dropped and not counted: "
    "asynchronous actors are not deterministic, so a resumed run is not bit-identical"
)


def async_run_config(model: Any, total_timesteps: int, target: float | None) -> dict[str, Any]:
    """The configuration an async checkpoint records (plain values).

    Args:
        model: The trainer (its class, workload, seed, :attr:`algo` and :attr:`topology`
            as :meth:`AsyncPPO.save` writes them).
        total_timesteps: The ``learn`` call's env-step budget.
        target: Its target mean return (``None``: none).

    Returns:
        A dict with :data:`ASYNC_MATCHED_FIELDS` (the topology without
        :data:`UNMATCHED_TOPOLOGY`), ``total_timesteps`` and ``target``.
    """
    settings = trainer_settings(model)
    topology = {k: v for k, v in settings["topology"].items() if k not in UNMATCHED_TOPOLOGY}
    return {
        "workload": settings["workload"],
        "seed": int(settings["seed"]),
        "trainer": type(model).__name__,
        "algo": settings["algo"],
        "topology": topology,
        "total_timesteps": int(total_timesteps),
        "target": None if target is None else float(target),
    }


def _rng_state() -> dict[str, Any]:
    """torch's global generator (the trainer draws nothing from numpy's: its generators
    are seeded per use, the learner's own is in its state)."""
    import torch

    return {"torch": torch.get_rng_state()}


def async_checkpoint_state(
    model: Any, config: dict[str, Any], counters: dict[str, int]
) -> dict[str, Any]:
    """The checkpoint's dict of an :class:`AsyncPPO` run (tensors and plain values only).

    Args:
        model: The trainer.
        config: Its :func:`async_run_config`.
        counters: :data:`ASYNC_COUNTERS`.
    """
    imagination = getattr(model.learner, "imagination", None)
    return {
        **checkpoint_header(ASYNC_FORMAT),
        "config": config,
        "counters": {key: int(counters[key]) for key in ASYNC_COUNTERS},
        "history": [record_dict(r) for r in model.history],  # the newest, bounded
        "learner": model.learner.state(),
        "world_model": None if imagination is None else imagination.model.state(),
        "rng": _rng_state(),
        "incarnations": {int(k): int(v) for k, v in model.slots._incarnations.items()},
        "actors": {"saved": False, "reason": ASYNC_RESTART_NOTE},
    }


@dataclasses.dataclass
class AsyncCheckpoint:
    """One async checkpoint, read and checked by :func:`read_async_checkpoint`.

    Args:
        path: The checkpoint file.
        header: ``format``, ``format_version``, ``fleetgym_version``, ``commit``, ``created``.
        config: The run's :func:`async_run_config`.
        counters: :data:`ASYNC_COUNTERS`.
        history: The newest update records (the trainer's ``history``: at most its
            ``history_limit``), the last one the checkpoint's update.
        learner: The learner's ``state()``.
        world_model: The world model's state of a learner with imagination, else ``None``.
        rng: torch's global generator state (``torch``).
        incarnations: Each actor slot's incarnation at the checkpoint.
    """

    path: Path
    header: dict[str, Any]
    config: dict[str, Any]
    counters: dict[str, int]
    history: list[UpdateRecord]
    learner: dict[str, Any]
    world_model: dict[str, Any] | None
    rng: dict[str, Any]
    incarnations: dict[int, int]


def read_async_checkpoint(path: str | os.PathLike[str]) -> AsyncCheckpoint:
    """Read and check an async checkpoint (``torch.load(weights_only=True)``).

    Args:
        path: A checkpoint file, a folder of them (the newest is read) or a run's output
            folder holding ``checkpoints/``.

    Raises:
        TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
        CheckpointError: Naming the file and what is wrong: nothing there, a truncated or
            corrupt file, another file (a sync checkpoint, a learner file), a newer format
            or fleetgym version, a missing or impossible value, update records that do not
            add up to the counters.
    """
    file, state, header = read_checkpoint_state(path, ASYNC_FORMAT, ASYNC_MATCHED_FIELDS)
    raw = dict_field(file, state, "counters")
    counters = {key: count_field(file, f"counters {key}", raw.get(key)) for key in ASYNC_COUNTERS}
    entries = state.get("history")
    updates = counters["updates"]
    if not isinstance(entries, list) or len(entries) > updates or (updates and not entries):
        found = len(entries) if isinstance(entries, list) else quote(entries)
        raise CheckpointError(
            f"{file}: history: expected between 1 and {updates} update records (the newest), "
            f"actual {found}"
        )
    try:
        history = [record_from_dict(d, f"history[{i}]") for i, d in enumerate(entries)]
    except ValueError as exc:
        raise CheckpointError(f"{file}: {exc}") from None
    first = updates - len(history)
    for i, record in enumerate(history):
        if record.update != first + i:
            raise CheckpointError(
                f"{file}: history[{i}]: expected update {first + i}, actual {record.update}"
            )
    last = history[-1].total_steps if history else 0
    if history and last != counters["num_timesteps"]:
        raise CheckpointError(
            f"{file}: counters num_timesteps: expected the last update's total_steps "
            f"{last}, actual {counters['num_timesteps']}"
        )
    if counters["call_steps"] > counters["num_timesteps"] or (
        counters["call_updates"] > counters["updates"]
    ):
        raise CheckpointError(
            f"{file}: counters call_steps, call_updates: expected at most num_timesteps and "
            f"updates, actual {counters['call_steps']}, {counters['call_updates']}"
        )
    world_model = state.get("world_model")
    if world_model is not None and not isinstance(world_model, dict):
        raise CheckpointError(f"{file}: world_model: expected a dict or None")
    rng = dict_field(file, state, "rng")
    incarnations = {
        count_field(file, "incarnations slot", k): count_field(file, "incarnations", v)
        for k, v in dict_field(file, state, "incarnations").items()
    }
    return AsyncCheckpoint(
        path=file,
        header=header,
        config=state["config"],
        counters=counters,
        history=history,
        learner=dict_field(file, state, "learner"),
        world_model=world_model,
        rng=rng,
        incarnations=incarnations,
    )


def restore_async(model: Any, checkpoint: AsyncCheckpoint, config: dict[str, Any]) -> None:
    """Put a freshly built trainer back where the checkpoint saved its run.

    The checkpoint must be of this run (``config``); the learner's state is checked whole
    before anything is applied. The trainer's counters, update records and RNG streams are
    restored; each actor slot gets the next incarnation (a fresh seed stream: its episodes
    restart) and the restored weights are published.

    Args:
        model: The trainer, before its first update (no actor started yet).
        checkpoint: What :func:`read_async_checkpoint` returned.
        config: This run's :func:`async_run_config`.

    Raises:
        CheckpointError: Naming the file: a checkpoint of another run (each differing
            field with both values), or a learner state that does not fit.
    """
    import torch

    file = checkpoint.path
    check_config(file, checkpoint.config, config, ASYNC_MATCHED_FIELDS)
    torch_state = checkpoint.rng.get("torch")
    if not isinstance(torch_state, torch.Tensor):
        raise CheckpointError(f"{file}: rng torch: expected torch's generator state")
    before = restore_learner_state(file, model.learner, checkpoint.learner, checkpoint.world_model)
    try:
        torch.set_rng_state(torch_state)
    except (TypeError, ValueError, RuntimeError) as exc:
        from fleetgym.agents.learners.checkpoint import restore_learner

        restore_learner(model.learner, before, "the learner's state before the resume")
        raise CheckpointError(f"{file}: rng: {exc}") from None
    counters = checkpoint.counters
    model.learner.dropped_samples_total = counters["dropped_samples_total"]
    model.learner.policy_stops = counters["policy_stops"]
    model.num_timesteps = counters["num_timesteps"]
    model.updates = counters["updates"]
    limit = model.history_limit
    model.history = list(checkpoint.history if limit is None else checkpoint.history[-limit:])
    model.max_outstanding = counters["max_outstanding"]
    slots = model.slots
    slots.actor_failures = counters["actor_failures"]
    for slot in set(range(slots.n_instances)) | set(checkpoint.incarnations):
        slots._incarnations[slot] = checkpoint.incarnations.get(slot, 0) + 1
    model.ring = WeightRing(model.lag_injection + 1)  # the constructor's weights are stale
    model._publish()


__all__ = [
    "ASYNC_COUNTERS",
    "ASYNC_MATCHED_FIELDS",
    "ASYNC_RESTART_NOTE",
    "UNMATCHED_TOPOLOGY",
    "AsyncCheckpoint",
    "async_checkpoint_state",
    "async_run_config",
    "read_async_checkpoint",
    "restore_async",
    "FLAT_ALGO_KEYS",
    "FLAT_TOKEN_KEYS",
    "SETTINGS_FORMAT",
    "SETTINGS_KEYS",
    "SETTINGS_VERSION",
    "TOKEN_SETTINGS_FORMAT",
    "UNSAVED_TOPOLOGY",
    "load_trainer",
    "migrate_settings",
    "migrate_token_settings",
    "read_settings",
    "restore_trainer",
    "save_trainer",
    "trainer_settings",
]
