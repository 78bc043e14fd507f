"""The settings file of an :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`.

:meth:`AsyncPPO.save` writes the learner's checkpoint (see
:mod:`fleetgym.agents.learners.checkpoint`) and, next to it, ``<stem>.json``: the
constructor's arguments, the PPO hyperparameters and the env steps trained so far.
:func:`read_settings` reads that file back for :meth:`AsyncPPO.load`, checking everything
a constructor cannot (that it is JSON, an object, of this class, with known keys and a
count of steps >= 0); the constructor then checks each value. :func:`save_trainer` and
:func:`load_trainer` are what :meth:`AsyncPPO.save` and :meth:`AsyncPPO.load` do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleetgym.agents.backends import RENAMED_BACKENDS
from fleetgym.agents.files import check_path
from fleetgym.agents.learners.checkpoint import read_json_file
from fleetgym.agents.learners.lag import WeightRing
from fleetgym.validation import check_int, quote

#: What a settings file says it is (``"format"``); files without it are read too.
SETTINGS_FORMAT = "fleetgym.AsyncPPO"
#: The constructor arguments a settings file holds.
SETTINGS_KEYS = (
    "workload",
    "loss",
    "sigma",
    "max_policy_lag",
    "n_actors",
    "steps_per_actor",
    "batch_trajectories",
    "recompute_values",
    "global_advantage_norm",
    "target_kl",
    "proximal_clip",
    "lag_injection",
    "concurrent",
    "inference",
    "backend",
    "seed",
    "imagination",
    "envs_per_actor",
    "load_balancing",
)


def trainer_settings(model: Any) -> dict[str, Any]:
    """What ``<stem>.json`` holds for ``model`` (plain JSON values)."""
    return {
        "format": SETTINGS_FORMAT,
        "workload": model.workload.name,
        "loss": model.config.loss,
        "sigma": model.config.sigma,
        "max_policy_lag": model.max_policy_lag,
        "n_actors": model.n_actors,
        "steps_per_actor": model.steps_per_actor,
        "batch_trajectories": model.batch_trajectories,
        "recompute_values": model.config.recompute_values,
        "global_advantage_norm": model.config.global_advantage_norm,
        "target_kl": model.config.target_kl,
        "proximal_clip": model.config.proximal_clip,
        "lag_injection": model.lag_injection,
        "concurrent": model.concurrent,
        "inference": model.inference,
        "backend": model.backend,
        "seed": model.seed,
        "imagination": (
            None
            if model.learner.imagination is None
            else model.learner.imagination.config.as_dict()
        ),
        "envs_per_actor": model.envs_per_actor,
        "load_balancing": model.load_balancing,
        "hyperparameters": model.hyperparameters,
        "num_timesteps": model.num_timesteps,
    }


def migrate_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Bring a settings file of fleetgym 1.x up to 2.0, in place.

    1.x saved where the actors ran as ``"actors"`` (``"thread"``, ``"process"``,
    ``"ray"``); 2.0 saves ``"backend"`` (:mod:`fleetgym.agents.backends`), so an old file
    still loads.

    Example:
        >>> migrate_settings({"workload": "CartPole-v1", "actors": "thread"})
        {'workload': 'CartPole-v1', 'backend': 'inprocess'}
    """
    if "actors" in settings and "backend" not in settings:
        old = settings.pop("actors")
        settings["backend"] = RENAMED_BACKENDS.get(old, old) if isinstance(old, str) else old
    return settings


def read_settings(path: Path) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The constructor arguments, hyperparameters and env steps of a settings file.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: Naming the file, if it is not JSON, not an object, another class's
            file, lacks ``workload``, has unknown keys, hyperparameters that are not an
            object, or ``num_timesteps`` that is not an int >= 0.
    """
    settings = read_json_file(path, "the AsyncPPO settings file")
    kind = settings.pop("format", SETTINGS_FORMAT)
    if kind != SETTINGS_FORMAT:
        raise ValueError(f"{path}: expected {SETTINGS_FORMAT!r} settings, actual {quote(kind)}")
    if "workload" not in settings:
        raise ValueError(
            f"{path}: expected AsyncPPO settings with a workload, actual keys "
            f"{quote(sorted(settings))}"
        )
    migrate_settings(settings)
    hyperparameters = settings.pop("hyperparameters", {})
    if not isinstance(hyperparameters, dict):
        raise ValueError(
            f"{path}: hyperparameters: expected a JSON object, actual {quote(hyperparameters)}"
        )
    try:
        num_timesteps = check_int("num_timesteps", settings.pop("num_timesteps", 0), low=0)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    unknown = sorted(set(settings) - set(SETTINGS_KEYS))
    if unknown:
        raise ValueError(
            f"{path}: expected AsyncPPO settings among {list(SETTINGS_KEYS)}, actual unknown "
            f"{quote(unknown)}"
        )
    return settings, hyperparameters, num_timesteps


def save_trainer(model: Any, path: Any) -> Path:
    """What :meth:`AsyncPPO.save` does: the learner's checkpoint and ``<stem>.json``."""
    path = check_path("path", path)
    saved: Path = model.learner.save(path)
    saved.with_suffix(".json").write_text(json.dumps(trainer_settings(model), indent=1))
    return saved


def load_trainer(cls: Any, path: Any, overrides: dict[str, Any]) -> Any:
    """What :meth:`AsyncPPO.load` does: settings, then a trainer, then the learner's state."""
    path = check_path("path", path)
    settings_path = path.with_suffix(".json")
    if not settings_path.is_file():
        raise FileNotFoundError(f"expected the settings file, actual missing {settings_path}")
    settings, hyperparameters, num_timesteps = read_settings(settings_path)
    settings.update(overrides)
    try:
        model = cls(**settings, **hyperparameters)
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
    "SETTINGS_FORMAT",
    "SETTINGS_KEYS",
    "load_trainer",
    "migrate_settings",
    "read_settings",
    "restore_trainer",
    "save_trainer",
    "trainer_settings",
]
