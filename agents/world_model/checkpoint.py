"""World model files: written with ``torch.save``, read back with ``weights_only=True``, checked.

A refused file (another format, another model's spaces or sizes, NaN weights, bad elites)
raises a :class:`ValueError` naming it, and the model it was loaded into is unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgym.agents.files import check_path, load_torch_file
from fleetgym.validation import quote

__all__ = ["FORMAT", "apply_state", "check_state", "model_state", "read_model"]

FORMAT = "fleetgym.world_model/1"
_KEYS = (
    "format",
    "config",
    "net",
    "optimizer",
    "normaliser",
    "elites",
    "version",
    "generator",
    "rng",
)


def _config(state: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        config = json.loads(state["config"])
    except (TypeError, ValueError, RecursionError):
        raise ValueError(
            f"{where}: config: expected a JSON object, actual {quote(state['config'])}"
        ) from None
    if not isinstance(config, dict):
        raise ValueError(f"{where}: config: expected a JSON object, actual {quote(config)}")
    return config


def _keys(state: Any, where: str) -> dict[str, Any]:
    if not isinstance(state, dict):
        raise ValueError(
            f"{where}: expected a world model state (dict), actual {type(state).__name__}"
        )
    if state.get("format") != FORMAT:
        raise ValueError(
            f"{where}: expected format {FORMAT!r}, actual {quote(state.get('format'))}"
        )
    missing = [k for k in _KEYS if k not in state]
    if missing:
        raise ValueError(f"{where}: expected the keys {list(_KEYS)}, actual missing {missing}")
    return state


def model_state(model: Any) -> dict[str, Any]:
    """What :meth:`WorldModel.state` returns: tensors and plain values only."""
    return {
        "format": FORMAT,
        "config": json.dumps(model.config(), sort_keys=True),
        "net": {k: v.detach().clone() for k, v in model.net.state_dict().items()},
        "optimizer": model.optimizer.state_dict(),
        "normaliser": {
            k: torch.from_numpy(getattr(model, k).copy())
            for k in ("in_mean", "in_std", "out_mean", "out_std")
        },
        "elites": list(model.elites),
        "version": int(model.version),
        "generator": model.generator.get_state(),
        "rng": json.dumps(model.rng.bit_generator.state),
    }


def apply_state(model: Any, checked: dict[str, Any]) -> None:
    """Give ``model`` the parts :func:`check_state` returned."""
    model.net.load_state_dict(checked["net"])
    model.optimizer.load_state_dict(checked["optimizer"])
    for k, v in checked["normaliser"].items():
        setattr(model, k, v)
    model.elites = checked["elites"]
    model.version = checked["version"]
    model.generator.set_state(checked["generator"])
    model.rng.bit_generator.state = checked["rng"]


def check_state(model: Any, state: Any, where: str) -> dict[str, Any]:
    """The parts of ``state`` ready for ``model`` to take, or a ValueError naming ``where``."""
    state = _keys(state, where)
    config = _config(state, where)
    mine = model.config()
    for key in (
        "observation_space",
        "action_space",
        "ensemble_size",
        "hidden_sizes",
        "obs_dim",
        "action_dim",
    ):
        if config.get(key) != mine[key]:
            raise ValueError(
                f"{where}: {key}: expected {quote(mine[key])} (this model's), actual "
                f"{quote(config.get(key))}: a world model of another env or size"
            )
    own = model.net.state_dict()
    net = state["net"]
    if not isinstance(net, dict) or set(net) != set(own):
        raise ValueError(
            f"{where}: net: expected the tensors {sorted(own)}, actual {quote(sorted(net) if isinstance(net, dict) else net)}"
        )
    for key, value in net.items():
        if not isinstance(value, torch.Tensor) or value.shape != own[key].shape:
            raise ValueError(
                f"{where}: net[{key!r}]: expected a tensor of shape {tuple(own[key].shape)}"
            )
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{where}: net[{key!r}]: expected finite values, actual NaN or inf")
    normaliser = state["normaliser"]
    out: dict[str, np.ndarray] = {}
    for key in ("in_mean", "in_std", "out_mean", "out_std"):
        value = normaliser.get(key) if isinstance(normaliser, dict) else None
        want = getattr(model, key).shape
        if (
            not isinstance(value, torch.Tensor)
            or tuple(value.shape) != want
            or not bool(torch.isfinite(value).all())
        ):
            raise ValueError(
                f"{where}: normaliser[{key!r}]: expected finite values of shape {want}"
            )
        out[key] = value.numpy().astype(np.float32).copy()
    if (out["in_std"] <= 0).any() or (out["out_std"] <= 0).any():
        raise ValueError(f"{where}: normaliser: expected positive standard deviations")
    elites = state["elites"]
    if (
        not isinstance(elites, list)
        or len(elites) != model.num_elites
        or len(set(elites)) != len(elites)
        or not all(isinstance(i, int) and 0 <= i < model.ensemble_size for i in elites)
    ):
        raise ValueError(
            f"{where}: elites: expected {model.num_elites} distinct member indices, actual {quote(elites)}"
        )
    version = state["version"]
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= 2**63 - 1:
        raise ValueError(
            f"{where}: version: expected an int in [0, 2**63 - 1], actual {quote(version)}"
        )
    try:
        rng = json.loads(state["rng"])
        np.random.default_rng().bit_generator.state = rng
        torch.Generator().set_state(state["generator"])
        torch.optim.Adam(model.net.parameters()).load_state_dict(state["optimizer"])
    except (TypeError, ValueError, KeyError, RuntimeError) as exc:
        raise ValueError(
            f"{where}: expected a random state and optimiser of this model, actual {type(exc).__name__}"
        ) from None
    return {
        "net": net,
        "optimizer": state["optimizer"],
        "normaliser": out,
        "elites": list(elites),
        "version": version,
        "generator": state["generator"],
        "rng": rng,
    }


def read_model(cls: Any, path: Any) -> Any:
    """A model of class ``cls`` rebuilt from the file ``path`` (its config, then its state)."""
    path = check_path("path", path)
    state = _keys(load_torch_file(path, "a fleetgym world model"), str(path))
    config = _config(state, str(path))
    import gymnasium as gym  # noqa: F401  (spaces are rebuilt from their config below)

    from fleetgym.agents.world_model.spaces import spaces_from_config

    try:
        observation_space, action_space = spaces_from_config(config)
        model = cls(
            observation_space,
            action_space,
            ensemble_size=config["ensemble_size"],
            elites=config["elites"],
            hidden_sizes=config["hidden_sizes"],
            lr=config["lr"],
            weight_decay=config["weight_decay"],
            learn_termination=config["learn_termination"],
            # Files written before 1.0 have no max_grad_norm: the default.
            **({"max_grad_norm": config["max_grad_norm"]} if "max_grad_norm" in config else {}),
            seed=config["seed"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{path}: config: expected a world model's settings, actual {exc}"
        ) from None
    model.load_state(state, str(Path(path)))
    return model
