"""The flat keyword arguments of ``gym.make("fleetgym/ActorScheduling-v0", ...)``.

Gymnasium passes an ID's keyword arguments as they are given, stores them in
``env.spec.kwargs`` and rebuilds the env from them (``gym.make(env.spec)``, also after
``EnvSpec.to_json``/``from_json``). So the registered IDs take plain, JSON-able flat keyword
arguments -- each field of the :mod:`~fleetgym.meta_env.scheduling_config` configs under
its own name (:data:`FLAT_KWARGS`) -- and :func:`make_actor_scheduling_env` builds the
configs of :class:`~fleetgym.meta_env.ActorSchedulingEnv` from them.

Example:
    >>> env = make_actor_scheduling_env("CartPole-v1", timing="modeled", max_actors=4,
    ...                                 steps_per_actor=16, prewarm=False)
    >>> env.fleet_config.max_actors, env.cost_config.time_model
    (4, {'prewarm': False})
    >>> env.close()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetgym.meta_env.actor_scheduling import ActorSchedulingEnv
from fleetgym.meta_env.scheduling_config import (
    CostConfig,
    EpisodeConfig,
    FleetConfig,
    TrainingConfig,
)
from fleetgym.meta_env.time_model import TimeModel
from fleetgym.validation import quote

__all__ = ["ENV_KWARGS", "FLAT_KWARGS", "configs_from_kwargs", "make_actor_scheduling_env"]

#: The env's own keyword arguments, passed through as they are.
ENV_KWARGS = ("preset", "timing", "normalize_obs", "fleet_factory", "learner_factory")
#: Flat keyword argument -> the ``(section, field)`` it sets; ``section`` is the env's
#: argument (``training``, ``fleet``, ``costs``, ``episode``). ``fleet_kwargs`` sets the
#: fleet's backend, inference and options, and each field of the TimeModel (besides
#: ``time_model`` itself) sets that field of ``costs.time_model``.
FLAT_KWARGS: dict[str, tuple[str, str]] = {
    "steps_per_actor": ("training", "steps_per_actor"),
    "compute": ("training", "compute"),
    "learner_overrides": ("training", "learner_overrides"),
    "max_actors": ("fleet", "max_actors"),
    "fleet_kwargs": ("fleet", "options"),
    "pricing": ("costs", "pricing"),
    "pricing_overrides": ("costs", "pricing_overrides"),
    "billing": ("costs", "billing"),
    "server_actors": ("costs", "server_actors"),
    "time_model": ("costs", "time_model"),
    **{name: ("costs", "time_model") for name in TimeModel.__dataclass_fields__},
    "target_return": ("episode", "target_return"),
    "max_rounds": ("episode", "max_rounds"),
    "budget": ("episode", "budget"),
    "beta": ("episode", "beta"),
    "penalty_scale": ("episode", "penalty_scale"),
    "cost_weight": ("episode", "cost_weight"),
}


def _time_model(time_model: Any, fields: dict[str, Any]) -> Any:
    """``time_model`` or the TimeModel fields given flat (not both)."""
    if time_model is None:
        return fields or None
    if fields:
        raise ValueError(
            "time_model: expected either a TimeModel or its fields as keyword arguments, "
            f"actual both (time_model and {sorted(fields)})"
        )
    return time_model


def _fleet(fields: dict[str, Any]) -> dict[str, Any]:
    """The FleetConfig fields of ``max_actors`` and ``fleet_kwargs``."""
    options = fields.pop("options", None)
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"fleet_kwargs: expected a mapping or None, actual {quote(options)}")
    options = dict(options or {})
    for name in ("backend", "inference"):
        if name in options:
            fields[name] = options.pop(name)
    return {**fields, "options": options}


def configs_from_kwargs(**kwargs: Any) -> dict[str, Any]:
    """The env's keyword arguments (its configs built) from the flat ones.

    A flat argument given as None keeps the default, as before the configs existed.

    Args:
        **kwargs: names of :data:`FLAT_KWARGS` and :data:`ENV_KWARGS`.

    Example:
        >>> configs = configs_from_kwargs(max_actors=4, fleet_kwargs={"backend": "process"},
        ...                               latency_s=0.01, budget=None, timing="modeled")
        >>> configs["fleet"]
        FleetConfig(max_actors=4, backend='process', inference=None, options={})
        >>> configs["costs"].time_model, configs["episode"].budget, configs["timing"]
        ({'latency_s': 0.01}, None, 'modeled')

    Raises:
        TypeError: an unknown keyword (the message lists the known ones), or a value of the
            wrong type.
        ValueError: a value out of range, or ``time_model`` with its fields.
    """
    unknown = sorted(set(kwargs) - set(FLAT_KWARGS) - set(ENV_KWARGS))
    if unknown:
        raise TypeError(
            f"ActorScheduling: expected keyword arguments of {sorted([*ENV_KWARGS, *FLAT_KWARGS])}, "
            f"actual unknown {unknown}"
        )
    sections: dict[str, dict[str, Any]] = {"training": {}, "fleet": {}, "costs": {}, "episode": {}}
    time_fields: dict[str, Any] = {}
    for name, value in kwargs.items():
        if name in ENV_KWARGS:
            continue
        section, field = FLAT_KWARGS[name]
        if field == "time_model" and name != "time_model":
            if value is not None:
                time_fields[name] = value
        elif value is not None or (name == "budget"):
            sections[section][field] = value  # budget=None: unlimited, not the default
    time_model = _time_model(sections["costs"].pop("time_model", None), time_fields)
    if time_model is not None:
        sections["costs"]["time_model"] = time_model
    configs: dict[str, Any] = {name: kwargs[name] for name in ENV_KWARGS if name in kwargs}
    configs["training"] = TrainingConfig.from_dict(sections["training"])
    configs["fleet"] = FleetConfig.from_dict(_fleet(sections["fleet"]))
    configs["costs"] = CostConfig.from_dict(sections["costs"])
    configs["episode"] = EpisodeConfig.from_dict(sections["episode"])
    return configs


def make_actor_scheduling_env(workload: Any = "CartPole-v1", **kwargs: Any) -> ActorSchedulingEnv:
    """The entry point of ``fleetgym/ActorScheduling-v0``: the env from flat keyword arguments.

    Args:
        workload: as :class:`~fleetgym.meta_env.ActorSchedulingEnv` takes it.
        **kwargs: names of :data:`FLAT_KWARGS` (each config field under its own name, the
            TimeModel's fields included; ``fleet_kwargs``: the fleet's ``backend``,
            ``inference`` and other options) and :data:`ENV_KWARGS`.

    Raises:
        TypeError, ValueError: as :func:`configs_from_kwargs` and the env.
    """
    return ActorSchedulingEnv(workload, **configs_from_kwargs(**kwargs))
