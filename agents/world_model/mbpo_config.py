"""The settings of :class:`~fleetgym.agents.world_model.mbpo.MBPO`, frozen and validated once.

:class:`MBPOConfig` holds the data flow (updates per real step, the real share of a batch,
the rollouts and their length schedule); :class:`MBPOModelConfig` the world model and its
fits. SB3's SAC settings stay keywords of ``MBPO`` itself. Both round-trip through
``dataclasses.asdict`` and JSON (:meth:`MBPOConfig.from_dict`).

Example:
    >>> import dataclasses, json
    >>> config = MBPOConfig(rollout_length=3, model=MBPOModelConfig(every=100, elites=1))
    >>> config.rollout_interval, config.model_buffer_rows
    (100, 4800)
    >>> MBPOConfig.from_dict(json.loads(json.dumps(dataclasses.asdict(config)))) == config
    True
    >>> MBPOConfig(real_ratio=1.5)
    Traceback (most recent call last):
    ...
    ValueError: real_ratio: expected a finite number >= 0 and <= 1, actual 1.5
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetgym.validation import check_bool, check_choice, check_float, check_int, quote

__all__ = [
    "MAX_ROLLOUT",
    "ROLLOUT_SCHEDULES",
    "MBPOConfig",
    "MBPOModelConfig",
    "config_from_1x",
]

#: Rollout-length schedules by name (or give an int).
ROLLOUT_SCHEDULES = ("linear", "error")
#: Longest rollout accepted.
MAX_ROLLOUT = 1000


def _ints(name: str, values: Any, low: int, high: int | None = None) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name}: expected a sequence of ints, actual {quote(values)}")
    return tuple(check_int(f"{name}[{i}]", v, low, high) for i, v in enumerate(values))


@dataclass(frozen=True)
class MBPOModelConfig:
    """The world model of :class:`MBPO` and how it is fit.

    Args:
        every: Real steps between fits (MBPO: 250).
        ensemble_size: Members of the ensemble (1 to 64).
        elites: Members rollouts follow (1 to ``ensemble_size``).
        hidden_sizes: Each member's hidden layers (1 to 4096 units each).
        lr: The members' Adam learning rate (> 0).
        max_epochs: Bound on the epochs of one fit (early stopping on the held-out loss
            before it).
        max_updates: Bound on the gradient steps of one fit (``None``: none).
        learn_termination: Learn the termination head (``False`` for envs that do not end).

    Raises:
        TypeError / ValueError: For a value of the wrong type or out of its range, naming it.
    """

    every: int = 250
    ensemble_size: int = 7
    elites: int = 5
    hidden_sizes: tuple[int, ...] = (200, 200, 200, 200)
    lr: float = 1e-3
    max_epochs: int = 20
    max_updates: int | None = None
    learn_termination: bool = True

    def __post_init__(self) -> None:
        check_int("every", self.every, 1)
        check_int("ensemble_size", self.ensemble_size, 1, 64)
        check_int("elites", self.elites, 1, self.ensemble_size)
        object.__setattr__(self, "hidden_sizes", _ints("hidden_sizes", self.hidden_sizes, 1, 4096))
        object.__setattr__(self, "lr", check_float("lr", self.lr, 0.0, strict=True))
        check_int("max_epochs", self.max_epochs, 1, 10_000)
        if self.max_updates is not None:
            check_int("max_updates", self.max_updates, 1)
        check_bool("learn_termination", self.learn_termination)

    def world_model_kwargs(self) -> dict[str, Any]:
        """The keywords of :class:`~fleetgym.agents.world_model.model.WorldModel`."""
        return {
            "ensemble_size": self.ensemble_size,
            "elites": self.elites,
            "hidden_sizes": list(self.hidden_sizes),
            "lr": self.lr,
            "learn_termination": self.learn_termination,
        }


@dataclass(frozen=True)
class MBPOConfig:
    """What :class:`MBPO` adds to SAC: the batch mix, the rollouts and the world model.

    Args:
        updates_per_step: SAC gradient steps per real step (MBPO: 20; 1 to 10000).
        real_ratio: Share of each batch that is real data, in ``[0, 1]`` (MBPO: 0.05).
        rollout_every: Real steps between rollouts (``None``: ``model.every``).
        rollout_batch: Rollouts branched from real states each time.
        rollout_length: ``"linear"`` (MBPO), ``"error"`` (measured error) or an int.
        min_rollout_length: The shortest ``k`` of the schedules.
        max_rollout_length: The longest ``k`` of the schedules (MBPO Hopper: 15).
        rollout_schedule_steps: Real steps where ``"linear"`` leaves its minimum and
            reaches its maximum (MBPO Hopper: 20k and 100k).
        error_tolerance: The normalised open-loop error ``"error"`` accepts (> 0).
        model_buffer_size: Imagined transitions kept (``None``: four rollouts' worth at
            the longest ``k``).
        model: The world model and its fits (:class:`MBPOModelConfig`).

    Raises:
        TypeError / ValueError: For a value of the wrong type or out of its range, naming it.
    """

    updates_per_step: int = 20
    real_ratio: float = 0.05
    rollout_every: int | None = None
    rollout_batch: int = 400
    rollout_length: int | str = "linear"
    min_rollout_length: int = 1
    max_rollout_length: int = 15
    rollout_schedule_steps: tuple[int, ...] = (20_000, 100_000)
    error_tolerance: float = 0.05
    model_buffer_size: int | None = None
    model: MBPOModelConfig = dataclasses.field(default_factory=MBPOModelConfig)

    def __post_init__(self) -> None:
        check_int("updates_per_step", self.updates_per_step, 1, 10_000)
        object.__setattr__(self, "real_ratio", check_float("real_ratio", self.real_ratio, 0.0, 1.0))
        if self.rollout_every is not None:
            check_int("rollout_every", self.rollout_every, 1)
        check_int("rollout_batch", self.rollout_batch, 1, 10_000_000)
        if isinstance(self.rollout_length, str):
            check_choice("rollout_length", self.rollout_length, ROLLOUT_SCHEDULES)
        else:
            check_int("rollout_length", self.rollout_length, 1, MAX_ROLLOUT)
        check_int("min_rollout_length", self.min_rollout_length, 1, MAX_ROLLOUT)
        check_int(
            "max_rollout_length", self.max_rollout_length, self.min_rollout_length, MAX_ROLLOUT
        )
        steps = _ints("rollout_schedule_steps", self.rollout_schedule_steps, 0)
        if len(steps) != 2:
            raise ValueError(
                f"rollout_schedule_steps: expected (first, last), actual {quote(steps)}"
            )
        check_int("rollout_schedule_steps[1]", steps[1], steps[0])
        object.__setattr__(self, "rollout_schedule_steps", steps)
        object.__setattr__(
            self,
            "error_tolerance",
            check_float("error_tolerance", self.error_tolerance, 0.0, strict=True),
        )
        if self.model_buffer_size is not None:
            check_int("model_buffer_size", self.model_buffer_size, 1, 100_000_000)
        if not isinstance(self.model, MBPOModelConfig):
            raise TypeError(f"model: expected an MBPOModelConfig, actual {quote(self.model)}")

    @property
    def rollout_interval(self) -> int:
        """Real steps between rollouts: ``rollout_every`` or the model's fit interval."""
        return self.model.every if self.rollout_every is None else self.rollout_every

    @property
    def model_buffer_rows(self) -> int:
        """Imagined transitions kept: ``model_buffer_size`` or four rollouts' worth."""
        if self.model_buffer_size is not None:
            return self.model_buffer_size
        longest = (
            self.rollout_length if isinstance(self.rollout_length, int) else self.max_rollout_length
        )
        return 4 * self.rollout_batch * longest

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MBPOConfig:
        """The config ``dataclasses.asdict`` gave (after a JSON round trip too).

        Args:
            data: Field name -> value, as ``dataclasses.asdict(config)`` gives it; a missing
                key takes the field's default, ``model`` may be a mapping of
                :class:`MBPOModelConfig` fields, and lists are accepted for tuples.

        Raises:
            TypeError: For a key that is not a field, or a value of the wrong type.
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"data: expected a mapping, actual {quote(data)}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise TypeError(f"data: expected keys among {sorted(fields)}, actual {unknown}")
        values = dict(data)
        model = values.get("model")
        if isinstance(model, Mapping):
            known = {f.name for f in dataclasses.fields(MBPOModelConfig)}
            extra = sorted(set(model) - known)
            if extra:
                raise TypeError(
                    f"data['model']: expected keys among {sorted(known)}, actual {extra}"
                )
            values["model"] = MBPOModelConfig(**model)
        return cls(**values)


#: The attributes a model saved by fleetgym 1.x holds instead of a config.
_1X_KEYS = (
    "updates_per_step",
    "real_ratio",
    "rollout_every",
    "rollout_batch",
    "rollout_length",
    "min_rollout_length",
    "max_rollout_length",
    "rollout_schedule_steps",
    "error_tolerance",
    "model_buffer_size",
    "model_every",
    "model_kwargs",
    "model_max_epochs",
    "model_max_updates",
)


def config_from_1x(saved: dict[str, Any]) -> MBPOConfig | None:
    """The config of an MBPO model saved by fleetgym 1.x, whose settings were flat
    attributes (``saved``: the loaded attributes; the 1.x keys are removed from it), or
    None when ``saved`` is not such a model's."""
    if "model_kwargs" not in saved:
        return None
    flat = {key: saved.pop(key) for key in _1X_KEYS if key in saved}
    kwargs = flat.pop("model_kwargs")
    model = MBPOModelConfig(
        every=flat.pop("model_every"),
        ensemble_size=kwargs["ensemble_size"],
        elites=kwargs["elites"],
        hidden_sizes=tuple(kwargs["hidden_sizes"]),
        lr=kwargs["lr"],
        max_epochs=flat.pop("model_max_epochs"),
        max_updates=flat.pop("model_max_updates"),
        learn_termination=kwargs["learn_termination"],
    )
    flat["rollout_schedule_steps"] = tuple(flat["rollout_schedule_steps"])
    return MBPOConfig(**flat, model=model)
