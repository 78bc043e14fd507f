"""The learned scheduler's checkpoint: an SB3 PPO zip that carries its training metadata.

Everything a run needs to continue is in its checkpoint: the SB3 zip stores the model and
optimiser, and the attribute :data:`META_ATTR` (saved inside the zip with the rest of the
model's attributes) records the environment ID and keyword arguments, the episodes done,
the seed and the PPO configuration. :func:`load_scheduler` is the one place a checkpoint
is loaded; :func:`read_scheduler_meta` reads the metadata without loading torch.
"""

from __future__ import annotations

import json
import zipfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetgym.agents.schedulers.actions import MappedScheduler

if TYPE_CHECKING:
    from stable_baselines3 import PPO

__all__ = [
    "META_ATTR",
    "SHIPPED_SCHEDULER",
    "export_scheduler",
    "load_learned_scheduler",
    "load_scheduler",
    "read_scheduler_meta",
    "save_scheduler",
    "shipped_scheduler_path",
]

#: The small scheduler shipped with the package, used by ``fleetgym reproduce``.
SHIPPED_SCHEDULER = "learned_scheduler_cartpole.zip"
#: Name of the attribute that a saved scheduler carries its training metadata in.
META_ATTR = "fleetgym_meta"


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


def save_scheduler(model: PPO, path: Path, meta: dict[str, Any], episodes: int) -> None:
    """Save ``model`` to ``path`` with ``meta`` plus its episode and timestep counts."""
    meta = dict(meta, episodes=int(episodes), timesteps=int(model.num_timesteps))
    setattr(model, META_ATTR, meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The TensorBoard folder is a path of the machine that trained: a shipped or shared
    # checkpoint should not carry it (a resumed run passes its own).
    model.save(str(path), exclude=["tensorboard_log"])


def read_scheduler_meta(path: str | Path) -> dict[str, Any]:
    """The training metadata stored in a saved scheduler zip (without loading torch).

    Args:
        path: an SB3 zip written by
            :func:`~fleetgym.experiments.schedule.train.train_scheduler`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the zip holds no fleetgym metadata.
    """
    path = _existing(path)
    with zipfile.ZipFile(path) as archive:
        data = json.loads(archive.read("data").decode("utf-8"))
    meta = data.get(META_ATTR)
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected a fleetgym scheduler checkpoint, actual no {META_ATTR}")
    return meta


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
    save_scheduler(model, Path(dst), meta, episodes)
    return Path(dst)


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
