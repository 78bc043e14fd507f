"""The configuration of :class:`~fleetgym.meta_env.ActorSchedulingEnv`, one dataclass per part.

The env's arguments follow the parts of its MDP:

* :class:`TrainingConfig` -- one round's training: rollout length, the modelled compute and
  the learner's hyperparameters;
* :class:`FleetConfig` -- the actor fleet: ``I_max`` (the action space), the backend, the
  inference mode and any other fleet option;
* :class:`CostConfig` -- how a round becomes seconds and dollars: the pricing, the billing
  and the :class:`~fleetgym.meta_env.time_model.TimeModel` (cold starts, pre-warming,
  transfers);
* :class:`EpisodeConfig` -- the episode's limits and reward: ``J``, ``K``, the budget and
  the reward scales.

A field left None takes the per-workload default of the preset
(:func:`~fleetgym.meta_env.presets.scheduling_defaults`). Every config is frozen,
validated on construction, and round-trips through JSON: ``Config.from_dict(json.loads(
json.dumps(config.to_dict())))`` equals ``config`` (objects such as a ``TimeModel`` are
written as the dict of their fields and read back as the same object).

Example:
    >>> import json
    >>> costs = CostConfig(billing="server", time_model={"latency_s": 0.01})
    >>> CostConfig.from_dict(json.loads(json.dumps(costs.to_dict()))) == costs
    True
    >>> EpisodeConfig(max_rounds=0)
    Traceback (most recent call last):
    ...
    ValueError: max_rounds: expected an int in [1, 10000000], actual 0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from fleetgym.agents.fleet.base import MAX_ACTORS_LIMIT, MAX_STEPS_PER_ACTOR
from fleetgym.meta_env.cost_model import BILLINGS
from fleetgym.meta_env.presets import MAX_ROUNDS, MAX_SCALE, MIN_PENALTY_SCALE
from fleetgym.meta_env.pricing import PricingPreset, get_pricing
from fleetgym.meta_env.time_model import ComputeCostModel, TimeModel
from fleetgym.validation import check_choice, check_float, check_int, quote

__all__ = ["CostConfig", "EpisodeConfig", "FleetConfig", "TrainingConfig"]

_Config = TypeVar("_Config", bound="_ConfigBase")


def _options(name: str, value: Any) -> dict[str, Any]:
    """``value`` (a mapping with string keys, or None) as a new dict."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TypeError(
            f"{name}: expected a mapping with string keys or None, actual {quote(value)}"
        )
    return dict(value)


def _field_names(cls: type[Any]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _model_or_fields(name: str, value: Any, cls: type[Any], filler: Mapping[str, Any]) -> Any:
    """``value`` (a dict of some of ``cls``'s fields) as a ``cls`` when it gives every field,
    else as the dict, its values validated by building a ``cls`` with ``filler`` for the
    other fields (the preset fills them in later)."""
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{name}: expected a {cls.__name__}, a dict of its fields or None, "
            f"actual {type(value).__name__}"
        )
    _check_fields(name, value, cls)
    given = dict(value)
    if set(given) == set(_field_names(cls)):
        return cls(**given)  # every field: the model itself
    cls(**{**filler, **given})  # validates the given values
    return given


def _check_fields(name: str, given: Mapping[str, Any], cls: type[Any]) -> None:
    """Raise for keys of ``given`` that are not fields of ``cls``."""
    names = _field_names(cls)
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(
            f"{name}: expected fields of {cls.__name__} {names}, actual unknown {unknown}"
        )


def _optional_float(name: str, value: Any, low: float, high: float) -> float | None:
    return None if value is None else check_float(name, value, low=low, high=high)


class _ConfigBase:
    """The dict and JSON forms every config shares."""

    def to_dict(self) -> dict[str, Any]:
        """The config as plain, JSON-able values (nested objects as dicts of their fields)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]

    @classmethod
    def from_dict(cls: type[_Config], data: Mapping[str, Any]) -> _Config:
        """The config of :meth:`to_dict`'s form (also any mapping of some of its fields).

        Raises:
            TypeError: ``data`` is not a mapping, or a field of the wrong type.
            ValueError: an unknown field, or a field out of range.
        """
        if not isinstance(data, Mapping):
            raise TypeError(
                f"{cls.__name__}: expected a mapping of its fields, actual {type(data).__name__}"
            )
        _check_fields(cls.__name__, data, cls)
        return cls(**dict(data))

    @classmethod
    def coerce(cls: type[_Config], value: Any, name: str = "config") -> _Config:
        """``value`` as this config: the config itself, a dict of its fields, or None (defaults).

        Args:
            value: The config, a mapping of some of its fields, or None.
            name: The argument's name, for the error message.

        Raises:
            TypeError: ``value`` of another type, or a field of the wrong type.
            ValueError: an unknown field, or a field out of range.
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        raise TypeError(
            f"{name}: expected a {cls.__name__}, a dict of its fields or None, "
            f"actual {type(value).__name__}"
        )


@dataclasses.dataclass(frozen=True)
class TrainingConfig(_ConfigBase):
    """What one round trains: rollout length, the modelled compute, PPO's hyperparameters.

    Args:
        steps_per_actor: Environment steps per actor per round, in [1, the fleet's bound];
            None: the preset's.
        compute: The modelled compute of ``timing="modeled"`` (and of the observation's
            reference times): a :class:`~fleetgym.meta_env.time_model.ComputeCostModel`,
            taken as is, or a dict of some of its fields, replacing the preset's; None:
            the preset's (with modelled timing, a workload without a shipped model is
            calibrated, see :mod:`~fleetgym.meta_env.calibration`).
        learner_overrides: PPO hyperparameters replacing the workload's (and the preset's).

    Raises:
        TypeError: A field of the wrong type.
        ValueError: A field out of range, or an unknown field of ``compute``.
    """

    steps_per_actor: int | None = None
    compute: ComputeCostModel | Mapping[str, Any] | None = None
    learner_overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.steps_per_actor is not None:
            steps = check_int("steps_per_actor", self.steps_per_actor, 1, MAX_STEPS_PER_ACTOR)
            object.__setattr__(self, "steps_per_actor", steps)
        compute = self.compute
        if compute is not None and not isinstance(compute, ComputeCostModel):
            zeros = dict.fromkeys(_field_names(ComputeCostModel), 0.0)
            compute = _model_or_fields("compute", compute, ComputeCostModel, zeros)
        object.__setattr__(self, "compute", compute)
        overrides = _options("learner_overrides", self.learner_overrides)
        object.__setattr__(self, "learner_overrides", overrides)


@dataclasses.dataclass(frozen=True)
class FleetConfig(_ConfigBase):
    """The actor fleet: its largest size (the action space) and how it runs.

    Args:
        max_actors: I_max, the size of the action space, in [1, 4096] (the fleet's bound).
        backend: The fleet backend (:func:`~fleetgym.agents.fleet.make_fleet` names and
            checks it); None: the in-process fleet (batched with modelled timing).
        inference: The fleet's inference mode (``make_fleet``'s ``inference``); None: its
            default.
        options: Other keyword arguments of the fleet factory (backend options).

    Raises:
        TypeError: A field of the wrong type.
        ValueError: ``max_actors`` out of range, an empty backend or inference name, or an
            option that a field above (or the env: ``seed``) sets.
    """

    max_actors: int = 32
    backend: str | None = None
    inference: str | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    #: Fleet-factory keywords the env or the fields above set (never in ``options``).
    RESERVED: ClassVar[tuple[str, ...]] = ("backend", "inference", "max_actors", "seed")

    def __post_init__(self) -> None:
        # The fleet's own bound (a guard against typos): larger fleets could not be run.
        max_actors = check_int("max_actors", self.max_actors, low=1, high=MAX_ACTORS_LIMIT)
        object.__setattr__(self, "max_actors", max_actors)
        for name in ("backend", "inference"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError(
                    f"{name}: expected a non-empty string or None, actual {quote(value)}"
                )
        options = _options("options", self.options)
        reserved = sorted(set(options) & set(self.RESERVED))
        if reserved:
            raise ValueError(
                f"options: expected no keys of {list(self.RESERVED)} (FleetConfig's fields and "
                f"the env set them), actual {reserved}"
            )
        object.__setattr__(self, "options", options)

    def factory_kwargs(self, default_backend: str) -> dict[str, Any]:
        """The fleet factory's keyword arguments (``default_backend`` when none is set).

        Args:
            default_backend: The backend name used when :attr:`backend` is ``None`` (the
                scheduling env passes ``"inprocess"``).
        """
        kwargs: dict[str, Any] = {"backend": self.backend or default_backend}
        if self.inference is not None:
            kwargs["inference"] = self.inference
        return {**kwargs, **self.options}


@dataclasses.dataclass(frozen=True)
class CostConfig(_ConfigBase):
    """How a round becomes seconds and dollars: prices, billing and the time model.

    Args:
        pricing: A :class:`~fleetgym.meta_env.pricing.PricingPreset` (or a dict of all its
            fields), or a name of :data:`~fleetgym.meta_env.pricing.PRICING_PRESETS`; None:
            the preset's (``"aci-cpu"``, a CPU learner, for CartPole and MuJoCo; ``"aci"``,
            MinionsRL's V100 learner, for Atari).
        pricing_overrides: With a preset name (or None), fields of the pricing to replace.
        billing: ``"serverless"`` or ``"server"`` (the VM cluster, idle included).
        server_actors: Actor cores of the server cluster (``billing="server"``), >= 1;
            None: ``max_actors``.
        time_model: A :class:`~fleetgym.meta_env.time_model.TimeModel` (cold starts,
            pre-warming and keep-alive, transfers, the learner's speed), taken as is, or a
            dict of some of its fields; a missing field is TimeModel's default, or the
            preset's for ``prewarm`` (True: MinionsRL pre-warms its functions),
            ``keep_alive_s`` (1 s) and ``learner_speed_factor``. None: all defaults.

    Raises:
        TypeError: A field of the wrong type.
        ValueError: An unknown pricing or billing, a field out of range (negative prices,
            ``server_actors`` < 1, ...), an unknown field of the time model or the
            pricing, or ``pricing_overrides`` with a PricingPreset object.
    """

    pricing: str | PricingPreset | None = None
    pricing_overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    billing: str = "serverless"
    server_actors: int | None = None
    time_model: TimeModel | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        pricing = self.pricing
        if isinstance(pricing, Mapping):
            _check_fields("pricing", pricing, PricingPreset)
            pricing = PricingPreset(**dict(pricing))
        overrides = _options("pricing_overrides", self.pricing_overrides)
        if isinstance(pricing, PricingPreset) and overrides:
            raise ValueError(
                "pricing_overrides: expected None with a PricingPreset object (set its fields "
                f"with get_pricing), actual {quote(overrides)}"
            )
        # Validates the name, the fields and the prices (any preset checks the overrides).
        get_pricing("aci" if pricing is None else pricing, **overrides)
        object.__setattr__(self, "pricing", pricing)
        object.__setattr__(self, "pricing_overrides", overrides)
        check_choice("billing", self.billing, BILLINGS)
        if self.server_actors is not None:
            actors = check_int("server_actors", self.server_actors, low=1)
            object.__setattr__(self, "server_actors", actors)
        time_model = self.time_model
        if time_model is not None and not isinstance(time_model, TimeModel):
            time_model = _model_or_fields("time_model", time_model, TimeModel, {})
        object.__setattr__(self, "time_model", time_model)


@dataclasses.dataclass(frozen=True)
class EpisodeConfig(_ConfigBase):
    """When an episode ends and what it pays: ``J``, ``K``, the budget, the reward scales.

    Args:
        target_return: J, the mean return that ends the run, ``|J| <= MAX_SCALE``
            (required for a workload whose env has no reward threshold); None: the
            preset's.
        max_rounds: K, rounds before truncation, in [1, MAX_ROUNDS]; None: the preset's.
        budget: $ per run, in [0, MAX_SCALE]; None: unlimited; ``"default"``: the preset's.
        beta: Reward per second of round time, in [0, MAX_SCALE]; None: the preset's.
        penalty_scale: Divisor of the terminal ``max R_bar - J`` term (1: the paper's), in
            [MIN_PENALTY_SCALE, MAX_SCALE]; None: the preset's.
        cost_weight: Reward per dollar of round cost (0: the paper's, time only), in
            [0, MAX_SCALE].

    Raises:
        TypeError: A field of the wrong type.
        ValueError: A field out of range, or a budget string other than ``"default"``.
    """

    target_return: float | None = None
    max_rounds: int | None = None
    budget: float | str | None = "default"
    beta: float | None = None
    penalty_scale: float | None = None
    cost_weight: float = 0.0

    def __post_init__(self) -> None:
        checked: dict[str, Any] = {
            "target_return": _optional_float(
                "target_return", self.target_return, -MAX_SCALE, MAX_SCALE
            ),
            "max_rounds": None
            if self.max_rounds is None
            else check_int("max_rounds", self.max_rounds, low=1, high=MAX_ROUNDS),
            "beta": _optional_float("beta", self.beta, 0.0, MAX_SCALE),
            "penalty_scale": _optional_float(
                "penalty_scale", self.penalty_scale, MIN_PENALTY_SCALE, MAX_SCALE
            ),
            "cost_weight": check_float("cost_weight", self.cost_weight, low=0.0, high=MAX_SCALE),
        }
        budget = self.budget
        if isinstance(budget, str):
            if budget != "default":
                raise ValueError(
                    f"budget: expected a number >= 0, None or 'default', actual {quote(budget)}"
                )
            checked["budget"] = budget
        else:
            checked["budget"] = _optional_float("budget", budget, 0.0, MAX_SCALE)
        for name, value in checked.items():
            object.__setattr__(self, name, value)  # frozen: store the Python numbers

    def preset_changes(self) -> dict[str, Any]:
        """The fields that :meth:`SchedulingDefaults.override
        <fleetgym.meta_env.presets.SchedulingDefaults.override>` takes (all but the cost weight)."""
        return {
            "target_return": self.target_return,
            "max_rounds": self.max_rounds,
            "budget": self.budget,
            "beta": self.beta,
            "penalty_scale": self.penalty_scale,
        }
