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
from pathlib import Path
from typing import Any

from fleetgym.agents.backends import RENAMED_BACKENDS
from fleetgym.agents.files import check_path
from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig
from fleetgym.agents.learners.asynchronous.moved import TOPOLOGY_KEYWORDS
from fleetgym.agents.learners.checkpoint import read_json_file
from fleetgym.agents.learners.lag import WeightRing
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


__all__ = [
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
