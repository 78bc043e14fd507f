"""Checkpoint files of the learners: written with ``torch.save`` and JSON, read back checked.

A checkpoint holds tensors and plain values only, so it loads with
``torch.load(weights_only=True)``; nothing in it is ever unpickled as an object. Reading is
strict and atomic: every value is checked before the learner takes any of it, and any
file that is not a fleetgym checkpoint (random bytes, a pickle of objects, a truncated
archive, another class's file, missing keys, a negative version or count, NaN weights)
raises a :class:`ValueError` naming the file, never a torch or pickle message (torch's
advises ``weights_only=False``, which would run the file's code).

* :func:`learner_state`, :func:`save_learner`, :func:`load_learner` -- what
  :class:`~fleetgym.agents.learners.ppo.PPOLearner`'s ``state``, ``save`` and ``load`` do;
  :func:`restore_learner` -- ``load`` from a state already read (a train checkpoint's);
* :func:`load_torch_file`, :func:`read_json_file` -- one file, read safely;
* :func:`parse_learner_meta` -- the plain values of a learner checkpoint, each checked.
"""

from __future__ import annotations

import collections
import copy
import json
import math
import numbers
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fleetgym.agents.files import check_path, load_torch_file
from fleetgym.agents.learners.checks import MAX_SEED, MAX_VERSION
from fleetgym.agents.types import Weights
from fleetgym.validation import check_int, quote

#: Largest settings file read (a JSON of a few hundred bytes when written here).
MAX_SETTINGS_BYTES = 1 << 20


def learner_state(learner: Any, hyperparameters: tuple[str, ...]) -> dict[str, Any]:
    """Everything a learner checkpoint holds, as tensors and plain Python values."""
    return {
        "policy": {k: v.detach().cpu() for k, v in learner.policy.state_dict().items()},
        "optimizer": learner.optimizer.state_dict(),
        "generator": learner.generator.get_state(),
        "meta": {
            "workload": learner.workload.name,
            "seed": learner.seed,
            "policy_version": learner.policy_version,
            "recent_returns": list(learner.recent_returns),
            "episodes_seen": learner.episodes_seen,
            "samples_seen": learner.samples_seen,
            "return_stats": [
                float(learner.return_stats.mean),
                float(learner.return_stats.var),
                float(learner.return_stats.count),
            ],
            "discounted": {str(k): float(v) for k, v in learner._discounted.items()},
            "hyperparameters": {h: getattr(learner.workload, h) for h in hyperparameters},
        },
    }


def save_learner(learner: Any, path: Any) -> Path:
    """Write ``learner.state()`` to ``path`` and its policy to ``<stem>.policy.pt``.

    A learner with imagination also writes its world model to ``<stem>.world_model.pt``
    (B_real, the real transitions, is not saved: after a load the model keeps imagining
    from the new real data as it arrives).

    Raises:
        TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
        ValueError: If it is empty or a folder.
    """
    path = check_path("path", path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(learner.state(), path)
    learner.policy.save(path.with_name(path.stem + ".policy.pt"))
    imagination = getattr(learner, "imagination", None)
    if imagination is not None:
        imagination.model.save(world_model_path(path))
    return path


def world_model_path(path: Path) -> Path:
    """Where a learner checkpoint at ``path`` keeps its world model: ``<stem>.world_model.pt``."""
    return path.with_name(path.stem + ".world_model.pt")


def load_learner(learner: Any, path: Any) -> None:
    """Restore ``learner`` from a file :func:`save_learner` wrote; refused files change nothing.

    Raises:
        TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
        FileNotFoundError: If it does not exist.
        ValueError: Naming the file, if it is not a checkpoint of this learner's workload
            and policy, or holds an impossible value.
    """
    path = check_path("path", path)
    state = load_torch_file(path, "a PPOLearner file")

    def world_model() -> tuple[Any, str]:
        model_path = world_model_path(path)
        return load_torch_file(model_path, "the learner's world model"), str(model_path)

    restore_learner(learner, state, path, world_model=world_model)


def restore_learner(
    learner: Any,
    state: Any,
    where: Path | str,
    *,
    world_model: Callable[[], tuple[Any, str]] | None = None,
) -> None:
    """Restore ``learner`` from a :func:`learner_state` dict; a refused state changes nothing.

    Every value is checked before the learner takes any of it.

    Args:
        learner: The learner to restore (a :class:`~fleetgym.agents.learners.ppo.PPOLearner`).
        state: What :func:`learner_state` returned (as ``torch.load`` read it back).
        where: Where ``state`` came from (a file), named in every error message.
        world_model: For a learner with imagination: returns its world model's state and
            where that came from (called after the learner's own values are checked);
            ``None`` leaves the world model as it is.

    Raises:
        ValueError: Naming ``where``, if ``state`` is not a state of this learner's
            workload and policy, or holds an impossible value.
    """
    path = Path(where)
    if not isinstance(state, dict) or not {"policy", "optimizer", "meta"} <= set(state):
        keys = list(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{path}: expected a PPOLearner file, actual keys {quote(keys)}")
    meta = parse_learner_meta(path, state["meta"])
    if meta["workload"] != learner.workload.name:
        raise ValueError(
            f"{path}: expected a learner for {learner.workload.name!r}, "
            f"actual {quote(meta['workload'])}"
        )
    weights = _checked_weights(path, state["policy"], learner.policy.state_dict())
    _check_optimizer(path, state["optimizer"], learner.optimizer)
    imagination = getattr(learner, "imagination", None)
    model_state, model_where = None, ""
    if imagination is not None and world_model is not None:
        from fleetgym.agents.world_model.checkpoint import check_state

        model_state, model_where = world_model()
        check_state(imagination.model, model_state, model_where)
    if "generator" in state:
        own = learner.generator.get_state()
        generator = state["generator"]
        if not isinstance(generator, torch.Tensor) or (generator.dtype, generator.shape) != (
            own.dtype,
            own.shape,
        ):
            raise ValueError(f"{path}: generator: expected a torch generator state")
    saved = copy.deepcopy(
        (learner.policy.state_dict(), learner.optimizer.state_dict(), learner.generator.get_state())
    )
    try:
        learner.policy.load_weights(weights)
        learner.optimizer.load_state_dict(state["optimizer"])
        if "generator" in state:
            learner.generator.set_state(state["generator"])
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
        learner.policy.load_state_dict(saved[0])
        learner.optimizer.load_state_dict(saved[1])
        learner.generator.set_state(saved[2])
        # torch's message is not ours to show (it may quote the file's values at length).
        raise ValueError(
            f"{path}: expected the optimiser and generator state of this learner, actual "
            f"state torch refused ({type(exc).__name__})"
        ) from None
    learner.policy_version = meta["policy_version"]
    learner.recent_returns = collections.deque(
        meta["recent_returns"], maxlen=learner.recent_returns.maxlen
    )
    learner.episodes_seen = meta["episodes_seen"]
    learner.samples_seen = meta["samples_seen"]
    stats = learner.return_stats
    stats.mean, stats.var, stats.count = meta["return_stats"]
    learner._discounted = meta["discounted"]
    if model_state is not None and imagination is not None:
        imagination.model.load_state(model_state, model_where)


def _check_optimizer(path: Path, saved: Any, optimizer: torch.optim.Optimizer) -> None:
    """Refuse optimiser state that does not fit ``optimizer``'s parameters or is not finite."""
    shapes = [tuple(p.shape) for group in optimizer.param_groups for p in group["params"]]
    own_groups = optimizer.state_dict()["param_groups"]
    if not isinstance(saved, dict) or not isinstance(saved.get("param_groups"), list):
        raise ValueError(f"{path}: optimizer: expected an optimiser state_dict")
    groups, state = saved["param_groups"], saved.get("state")
    if len(groups) != len(own_groups) or not isinstance(state, dict):
        raise ValueError(
            f"{path}: optimizer: expected {len(own_groups)} parameter groups and a state, "
            f"actual {len(groups)} groups"
        )
    for i, (group, own) in enumerate(zip(groups, own_groups, strict=True)):
        if not isinstance(group, dict) or group.get("params") != own["params"]:
            raise ValueError(f"{path}: optimizer: expected group {i} of this policy's parameters")
        for key in own:
            value = group.get(key, own[key])
            numbers_ = value if isinstance(value, (list, tuple)) else [value]
            for number in numbers_:
                if isinstance(number, numbers.Real) and not math.isfinite(number):
                    raise ValueError(f"{path}: optimizer {key}: expected finite, actual {number}")
    for index, entry in state.items():
        if (
            not isinstance(index, int)
            or not 0 <= index < len(shapes)
            or not isinstance(entry, dict)
        ):
            raise ValueError(
                f"{path}: optimizer: expected the state of parameters 0..{len(shapes) - 1}"
            )
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                if not value.is_floating_point() or not bool(torch.isfinite(value).all()):
                    raise ValueError(f"{path}: optimizer {key}: expected finite float values")
                if key != "step" and tuple(value.shape) != shapes[index]:
                    raise ValueError(
                        f"{path}: optimizer {key}: expected shape {shapes[index]}, "
                        f"actual {tuple(value.shape)}"
                    )
            elif isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"{path}: optimizer {key}: expected a tensor or a number")


def _checked_weights(path: Path, tensors: Any, own: dict[str, torch.Tensor]) -> Weights:
    """A checkpoint's policy tensors as numpy, with ``own``'s keys and shapes, finite."""
    if not isinstance(tensors, dict) or set(tensors) != set(own):
        keys = list(tensors) if isinstance(tensors, dict) else type(tensors).__name__
        raise ValueError(f"{path}: expected the weights of this policy, actual keys {quote(keys)}")
    weights: Weights = {}
    for key, tensor in own.items():
        value = tensors[key]
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(tensor.shape):
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(
                f"{path}: policy[{key!r}]: expected a tensor of shape {tuple(tensor.shape)}, "
                f"actual {got}"
            )
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{path}: policy[{key!r}]: expected finite values, actual NaN or inf")
        weights[key] = value.to(tensor.dtype).numpy()
    return weights


def read_json_file(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path`` (at most :data:`MAX_SETTINGS_BYTES`).

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If it is too large, not UTF-8, not JSON or not a JSON object.
    """
    if not path.is_file():
        raise FileNotFoundError(f"expected {what}, actual missing {path}")
    if path.stat().st_size > MAX_SETTINGS_BYTES:
        raise ValueError(
            f"{path}: expected {what} of at most {MAX_SETTINGS_BYTES} bytes, "
            f"actual {path.stat().st_size}"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: expected {what} (JSON), actual {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected {what} (a JSON object), actual {quote(data)}")
    return data


def _finite(path: Path, name: str, value: Any, low: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{path}: {name}: expected a number, actual {quote(value)}")
    value = float(value)
    if not math.isfinite(value) or (low is not None and value < low):
        bound = "" if low is None else f" >= {low:g}"
        raise ValueError(f"{path}: {name}: expected a finite number{bound}, actual {value!r}")
    return value


def _count(path: Path, name: str, value: Any, high: int = MAX_VERSION) -> int:
    try:
        return check_int(name, value, 0, high)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


#: The plain values of a learner checkpoint (``meta``) and what each must be.
META_KEYS = (
    "workload",
    "seed",
    "policy_version",
    "recent_returns",
    "episodes_seen",
    "samples_seen",
    "return_stats",
    "discounted",
)


def parse_learner_meta(path: Path, meta: Any) -> dict[str, Any]:
    """The ``meta`` of a learner checkpoint, each value checked (nothing is applied).

    Returns:
        ``workload`` (str), ``policy_version``, ``episodes_seen``, ``samples_seen``
        (ints >= 0), ``recent_returns`` (finite floats), ``return_stats`` (mean,
        variance >= 0, count >= 0) and ``discounted`` (slot -> finite float).

    Raises:
        ValueError: Naming the file and the value, for any missing or bad value.
    """
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: meta: expected a dict, actual {type(meta).__name__}")
    missing = [key for key in META_KEYS if key not in meta]
    if missing:
        raise ValueError(f"{path}: meta: expected keys {list(META_KEYS)}, actual missing {missing}")
    if not isinstance(meta["workload"], str):
        raise ValueError(f"{path}: meta workload: expected a str, actual {quote(meta['workload'])}")
    returns = meta["recent_returns"]
    if not isinstance(returns, (list, tuple)):
        raise ValueError(f"{path}: recent_returns: expected a list, actual {quote(returns)}")
    stats = meta["return_stats"]
    if not isinstance(stats, (list, tuple)) or len(stats) != 3:
        raise ValueError(f"{path}: return_stats: expected 3 numbers, actual {quote(stats)}")
    discounted = meta["discounted"]
    if not isinstance(discounted, dict):
        raise ValueError(f"{path}: discounted: expected a dict, actual {quote(discounted)}")
    slots: dict[int, float] = {}
    for key, value in discounted.items():
        if not isinstance(key, str) or not key.isdigit() or len(key) > 19:
            raise ValueError(f"{path}: discounted: expected slot numbers, actual key {quote(key)}")
        slots[_count(path, "discounted slot", int(key))] = _finite(path, "discounted", value)
    return {
        "workload": meta["workload"],
        "seed": _count(path, "seed", meta["seed"], MAX_SEED),
        "policy_version": _count(path, "policy_version", meta["policy_version"]),
        "episodes_seen": _count(path, "episodes_seen", meta["episodes_seen"]),
        "samples_seen": _count(path, "samples_seen", meta["samples_seen"]),
        "recent_returns": [_finite(path, "recent_returns", r) for r in returns],
        "return_stats": (
            _finite(path, "return_stats mean", stats[0]),
            _finite(path, "return_stats var", stats[1], low=0.0),
            _finite(path, "return_stats count", stats[2], low=0.0),
        ),
        "discounted": slots,
    }


__all__ = [
    "MAX_SETTINGS_BYTES",
    "learner_state",
    "load_learner",
    "parse_learner_meta",
    "read_json_file",
    "restore_learner",
    "save_learner",
]
