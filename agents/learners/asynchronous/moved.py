"""Where the 1.x keywords of the asynchronous trainers went in 2.0, and config arguments.

fleetgym 1.x took every setting of ``AsyncPPO`` and ``TokenAsyncPPO`` as a keyword; 2.0
groups them into an algorithm config and a topology
(:mod:`~fleetgym.agents.learners.asynchronous.config`). A 1.x keyword fails with a
TypeError naming its 2.0 place (:func:`moved_error`, tables :data:`ASYNC_MOVED` and
:data:`TOKEN_MOVED`), as ``make_robust_env`` does for its own.

Example:
    >>> raise moved_error("AsyncPPO", {"n_actors": 2}, ASYNC_MOVED)
    Traceback (most recent call last):
    ...
    TypeError: AsyncPPO: the keyword 'n_actors' moved in fleetgym 2.0: pass topology=AsyncTopology(n_actors=...)
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
from fleetgym.agents.learners.ppo import HYPERPARAMETERS
from fleetgym.agents.learners.token_config import TokenPPOConfig
from fleetgym.validation import quote

_Config = TypeVar("_Config")

#: The 1.x keywords that went into the topology (both trainers): its fields.
TOPOLOGY_KEYWORDS = tuple(f.name for f in dataclasses.fields(AsyncTopology))
_TOPOLOGY = "topology=AsyncTopology({key}=...)"
#: Keywords of fleetgym 1.x's ``AsyncPPO`` and where each went in 2.0.
ASYNC_MOVED: dict[str, str] = {
    **dict.fromkeys(
        (f.name for f in dataclasses.fields(AsyncPPOConfig) if f.name != "hyperparameters"),
        "algo=AsyncPPOConfig({key}=...)",
    ),
    **dict.fromkeys(HYPERPARAMETERS, "algo=AsyncPPOConfig(hyperparameters={{{key!r}: ...}})"),
    **dict.fromkeys(TOPOLOGY_KEYWORDS, _TOPOLOGY),
    "actors": "topology=AsyncTopology(backend=...) (1.x 'thread' is 'inprocess')",
}
#: Keywords of fleetgym 1.x's ``TokenAsyncPPO`` and where each went in 2.0.
TOKEN_MOVED: dict[str, str] = {
    **dict.fromkeys(
        (f.name for f in dataclasses.fields(TokenPPOConfig)),
        "algo=TokenAsyncPPOConfig(token=TokenPPOConfig({key}=...))",
    ),
    "target_kl": "algo=TokenAsyncPPOConfig(token=TokenPPOConfig(target_kl=...)) (None: the "
    "loss's default, as 1.x 'auto'; 0: none, as 1.x None)",
    "token_config": "algo=TokenAsyncPPOConfig(token=...)",
    **dict.fromkeys(
        ("max_policy_lag", "batch_trajectories", "lag_injection", "learner_device"),
        "algo=TokenAsyncPPOConfig({key}=...)",
    ),
    **dict.fromkeys(TOPOLOGY_KEYWORDS, _TOPOLOGY),
}


def moved_error(owner: str, moved: dict[str, Any], table: dict[str, str]) -> TypeError:
    """The TypeError for keywords a constructor no longer takes (the first, sorted).

    Args:
        owner: The constructor's name, for the message.
        moved: The keywords given.
        table: Where each 1.x keyword went (:data:`ASYNC_MOVED`, :data:`TOKEN_MOVED`).

    Returns:
        A TypeError naming the keyword's 2.0 place, or, for a keyword 1.x had neither,
        naming the constructor's keywords.
    """
    key = sorted(moved)[0]
    where = table.get(key)
    if where is None:
        return TypeError(
            f"{owner}: expected keywords among algo, topology, seed, verbose, tensorboard_log"
            f"{', actor_factory' if owner == 'AsyncPPO' else ''}, actual unknown {key!r}"
        )
    return TypeError(
        f"{owner}: the keyword {key!r} moved in fleetgym 2.0: pass " + where.format(key=key)
    )


def as_config(cls: type[_Config], value: Any, name: str) -> _Config:
    """``value`` as a ``cls`` config: itself, ``cls(**value)`` for a dict, ``cls()`` for None.

    Raises:
        TypeError: For another type (a config of another class included) or a dict with
            unknown fields.
    """
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, dict):
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(value) - known)
        if unknown:
            raise TypeError(
                f"{name}: expected fields of {cls.__name__} among {sorted(known)}, actual "
                f"unknown {unknown}"
            )
        return cls(**value)
    raise TypeError(
        f"{name}: expected a {cls.__name__}, a dict of its fields or None, actual {quote(value)}"
    )


__all__ = ["ASYNC_MOVED", "TOKEN_MOVED", "TOPOLOGY_KEYWORDS", "as_config", "moved_error"]
