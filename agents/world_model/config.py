"""How a learner imagines: :class:`ImaginationConfig`, its schedules and its CLI spec.

Plain data and checks only; :mod:`fleetgym.agents.world_model.imagination` does the
imagining. Re-exported there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from fleetgym.agents.world_model.imagined_env import check_horizon
from fleetgym.validation import check_choice, check_float, check_int, quote

__all__ = [
    "MAX_IMAGINED_MULTIPLE",
    "SCHEDULES",
    "ImaginationConfig",
    "linear_schedule",
    "parse_imagination_spec",
    "validation_schedule",
]

#: Most imagined samples per real sample in one update (share -> 1 is capped here).
MAX_IMAGINED_MULTIPLE = 20
#: The horizon rules ``horizon="auto"`` can follow (:attr:`ImaginationConfig.schedule`).
SCHEDULES = ("error", "validation", "linear")
#: Where an update's extra samples come from (:attr:`ImaginationConfig.source`).
SOURCES = ("model", "replay")


def linear_schedule(start: float, end: float, first: int, last: int) -> Callable[[int, Any], int]:
    """A horizon (or any int) rising linearly from ``start`` at update ``first`` to ``end`` at ``last``.

    The returned callable takes ``(update, imagination)`` (the second is ignored) and
    returns the rounded value, held at ``start`` before ``first`` and at ``end`` after ``last``.

    Args:
        start, end: The values at ``first`` and from ``last`` on (``end < start`` falls).
        first, last: The updates (or any step count, such as MBPO's real steps) where the
            rise begins and ends (``last > first`` for a gradual rise).

    Example:
        >>> mbpo = linear_schedule(1, 15, 0, 100)  # MBPO's horizon 1 -> 15
        >>> mbpo(0, None), mbpo(50, None), mbpo(400, None)
        (1, 8, 15)
    """

    def schedule(update: int, _imagination: Any) -> int:
        frac = min(1.0, max(0.0, (update - first) / max(1, last - first)))
        return int(round(start + frac * (end - start)))

    return schedule


def validation_schedule(
    start: int = 5, end: int = 50, target: float = 1e-3
) -> Callable[[int, Any], int]:
    """AcceRL's horizon: ``start`` rising to ``end`` as the model's held-out loss falls.

    The horizon interpolates in log-loss between the first fit's observation loss (gives
    ``start``) and ``target`` (gives ``end``), using the newest fit's loss. Between fits
    (``model_every > 1``) the newest fit's loss is still the one used, so the horizon
    holds its value until the next fit.

    Args:
        start: Horizon in steps before the loss falls (and before any fit), an int in
            ``[1, 100000]``.
        end: Horizon in steps once the observation loss reaches ``target`` (same range).
        target: Held-out observation loss (> 0) at which the horizon reaches ``end``.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> sched = validation_schedule(5, 50, target=1e-3)
        >>> im = NS(history=[NS(validation={"obs": 1e-1})], last=NS(validation={"obs": 1e-2}))
        >>> sched(0, im)  # half-way down in log-loss: half-way up from 5 to 50
        27
    """
    start, end = check_horizon("start", start), check_horizon("end", end)
    target = check_float("target", target, 0.0, strict=True)

    def schedule(_update: int, imagination: Any) -> int:
        losses = [r.validation.get("obs") for r in imagination.history if r.validation]
        current = imagination.last.validation.get("obs") if imagination.last.validation else None
        if current is None:
            # No fit this update: the newest fit's loss holds (the horizon keeps its value).
            current = losses[-1] if losses else None
        first = losses[0] if losses else current
        if first is None or current is None or first <= target:
            return start if current is None or current > target else end
        frac = (math.log(first) - math.log(max(current, 1e-30))) / (
            math.log(first) - math.log(target)
        )
        return int(round(start + min(1.0, max(0.0, frac)) * (end - start)))

    return schedule


@dataclass(frozen=True)
class ImaginationConfig:
    """How a learner imagines. Every field is checked when the config is built.

    Attributes:
        share: Imagined share of each update's samples, in ``[0, 1]`` (``1``: the policy
            learns from imagined samples only, at most 20 per real one); ``"auto"``:
            ``max_share * min(1, error_tolerance / e(1))``, ``e(1)`` the measured one-step
            error; or a callable ``(update, imagination) -> share``.
        max_share: The ceiling of ``"auto"``.
        horizon: Steps per imagined episode: an int, ``"auto"`` (the longest ``h`` in
            ``[min_horizon, max_horizon]`` with measured ``e(h) <= error_tolerance``), or a
            callable ``(update, imagination) -> int`` (e.g. :func:`linear_schedule`, MBPO's,
            or :func:`validation_schedule`, AcceRL's).
        schedule: The rule ``horizon="auto"`` follows: ``"error"`` (the measured error
            above), ``"validation"`` (:func:`validation_schedule` from ``min_horizon`` to
            ``max_horizon`` as the model's held-out loss falls to ``validation_target``) or
            ``"linear"`` (:func:`linear_schedule` from ``min_horizon`` to ``max_horizon``
            over ``schedule_updates`` updates). The ``--imagination`` spec chooses it with
            ``schedule=validation``.
        validation_target: The held-out observation loss at which ``"validation"``
            reaches ``max_horizon``.
        schedule_updates: Updates over which ``"linear"`` rises.
        min_horizon, max_horizon: The range of ``"auto"``.
        error_tolerance: Normalised mean squared ``h``-step error (per observation
            dimension, in units of its variance in B_real) the automatic rules accept.
        model_every: Fit the model every N updates.
        warmup: Real transitions in B_real before the first fit (no imagination before).
        ensemble_size, elites, hidden_sizes, model_lr: The world model (the defaults
            are what docs/imagination.md measured on CartPole; MBPO's are 7, 5 and four
            layers of 200).
        max_fit_updates: Gradient steps per fit (warm-started; ``None``: until the
            held-out loss stalls).
        max_uncertainty: Truncate an imagined episode where the ensemble disagreement
            exceeds it (``None``: never).
        reward: ``"regression"`` (the model's reward head) or ``"success"`` (AcceRL's
            success classifier: ``r = M(o') - M(o)``, for sparse success tasks).
        capacity: Most transitions B_real keeps.
        success_share: Share of B_real's capacity kept for successful episodes (a
            rewarded termination) when rows are evicted, in ``[0, 1]`` (AcceRL keeps about
            0.3; ``0``: plain first-in first-out).
        max_imagination_lag: Keep B_img between updates: a sample is dropped once the
            model that imagined it is more than this many fits behind the newest, and
            each update uses B_img's kept samples first (newest first) and imagines only
            the shortfall (``0``: only the newest model's samples are reused, e.g.
            between fits with ``model_every > 1``). ``None`` (the default): every update
            imagines afresh, as before 1.0.
        source: ``"model"`` (imagine in the world model) or ``"replay"``: a no-model
            control that draws the same number of extra samples per update from earlier
            real trajectories instead (PPO's clipped ratio corrects for their older
            policy); needs a numeric ``share``.
        recent_starts: Draw start states from the newest N transitions (``None``: all).
        sample: Imagined steps sample the member's Gaussian (``False``: its mean).
        updates_per_round: Passes of the PPO epochs per learner update: the first on the
            mixed real + imagined batch, each further one on freshly imagined samples only
            (as many as the first pass had), so a round of real data buys several policy
            improvements (MBPO and ME-TRPO take many policy steps per real step). One
            update is still one policy version.
        seed: Seeds the model, the start states and the member draws.
    """

    share: float | str | Callable[[int, Any], float] = 0.75
    max_share: float = 0.9
    horizon: int | str | Callable[[int, Any], int] = "auto"
    schedule: str = "error"
    validation_target: float = 1e-3
    schedule_updates: int = 100
    min_horizon: int = 1
    max_horizon: int = 30
    error_tolerance: float = 0.05
    model_every: int = 1
    warmup: int = 500
    ensemble_size: int = 5
    elites: int = 3
    hidden_sizes: tuple[int, ...] = (128, 128)
    model_lr: float = 1e-3
    max_fit_updates: int | None = 200
    max_uncertainty: float | None = None
    reward: str = "regression"
    capacity: int = 1_000_000
    success_share: float = 0.0
    max_imagination_lag: int | None = None
    source: str = "model"
    recent_starts: int | None = None
    sample: bool = True
    updates_per_round: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.share, str) and self.share != "auto":
            raise ValueError(
                f"share: expected a number in [0, 1], 'auto' or a callable, actual {quote(self.share)}"
            )
        if isinstance(self.share, str):
            pass
        elif not callable(self.share):
            check_float("share", self.share, 0.0, 1.0)
        check_float("max_share", self.max_share, 0.0, 1.0)
        if isinstance(self.horizon, str) and self.horizon != "auto":
            raise ValueError(
                f"horizon: expected an int in [1, 100000], 'auto' or a callable, actual "
                f"{quote(self.horizon)}"
            )
        if isinstance(self.horizon, str):
            pass
        elif not callable(self.horizon):
            check_horizon("horizon", self.horizon)
        low = check_horizon("min_horizon", self.min_horizon)
        high = check_horizon("max_horizon", self.max_horizon)
        if low > high:
            raise ValueError(f"min_horizon: expected at most max_horizon={high}, actual {low}")
        check_choice("schedule", self.schedule, SCHEDULES)
        check_float("validation_target", self.validation_target, 0.0, strict=True)
        check_int("schedule_updates", self.schedule_updates, 1)
        check_float("error_tolerance", self.error_tolerance, 0.0, strict=True)
        check_int("model_every", self.model_every, 1)
        check_int("warmup", self.warmup, 10)
        check_int("ensemble_size", self.ensemble_size, 1, 64)
        check_int("elites", self.elites, 1, self.ensemble_size)
        check_float("model_lr", self.model_lr, 0.0, strict=True)
        if self.max_fit_updates is not None:
            check_int("max_fit_updates", self.max_fit_updates, 1)
        if self.max_uncertainty is not None:
            check_float("max_uncertainty", self.max_uncertainty, 0.0)
        check_choice("reward", self.reward, ("regression", "success"))
        check_int("capacity", self.capacity, 10)
        check_float("success_share", self.success_share, 0.0, 1.0)
        if self.max_imagination_lag is not None:
            check_int("max_imagination_lag", self.max_imagination_lag, 0)
        check_choice("source", self.source, SOURCES)
        if self.source == "replay" and (isinstance(self.share, str) or callable(self.share)):
            raise ValueError(
                f"share: expected a number in [0, 1] with source='replay' (no model error "
                f"to choose it from), actual {quote(self.share)}"
            )
        if self.recent_starts is not None:
            check_int("recent_starts", self.recent_starts, 1)
        check_int("updates_per_round", self.updates_per_round, 1, 100)
        check_int("seed", self.seed, 0, 2**63 - 1)

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON values (a callable share or horizon is written as ``"auto"``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("share", "horizon"):
            if callable(out[name]):
                out[name] = "auto"
        out["hidden_sizes"] = list(out["hidden_sizes"])
        return out

    @classmethod
    def from_value(cls, value: Any, seed: int = 0) -> ImaginationConfig | None:
        """A config from ``None``, a config, ``True``, or a dict of its fields.

        Args:
            value: None or False (no imagination: returns None), an
                :class:`ImaginationConfig` (returned as is), True (the defaults) or a dict
                of field values (the others take their defaults).
            seed: The config's ``seed`` for True or a dict without a ``seed`` key.

        Raises:
            TypeError: For another type or an unknown field.
        """
        if value is None or value is False:
            return None
        if isinstance(value, ImaginationConfig):
            return value
        if value is True:
            return cls(seed=seed)
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise TypeError(
                    f"imagination: expected fields among {sorted(known)}, actual {unknown}"
                )
            if "hidden_sizes" in value:
                value = {**value, "hidden_sizes": tuple(value["hidden_sizes"])}
            return cls(**{"seed": seed, **value})
        raise TypeError(
            "imagination: expected None, True, an ImaginationConfig or a dict of its fields, "
            f"actual {quote(value)}"
        )


def _spec_value(name: str, text: str) -> Any:
    """A spec item's value: ints, floats, None, booleans, ``AxB`` widths, else the text."""
    if name == "hidden_sizes":
        return tuple(int(part) for part in text.replace("x", ",").split(",") if part)
    if text in ("None", "none"):
        return None
    if text in ("true", "True", "false", "False"):
        return text in ("true", "True")
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text  # a name ("auto", "success"): the config checks it


def parse_imagination_spec(text: str, seed: int = 0) -> ImaginationConfig:
    """An :class:`ImaginationConfig` from ``"share=0.75,horizon=auto,hidden_sizes=128x128"``.

    An empty string gives the defaults.

    Example:
        >>> parse_imagination_spec("share=0.5,horizon=8").horizon
        8

    Raises:
        ValueError: For an item that is not ``name=value``, an unknown name or a bad value.
    """
    values: dict[str, Any] = {}
    known = {f.name for f in fields(ImaginationConfig)}
    for item in filter(None, (part.strip() for part in str(text).split(","))):
        if "=" not in item:
            raise ValueError(f"imagination: expected name=value items, actual {quote(item)}")
        name, raw = (part.strip() for part in item.split("=", 1))
        if name not in known:
            raise ValueError(
                f"imagination: expected names among {sorted(known)}, actual {quote(name)}"
            )
        try:
            values[name] = _spec_value(name, raw)
        except ValueError:
            raise ValueError(
                f"imagination: {name}: expected a number, actual {quote(raw)}"
            ) from None
    try:
        return ImaginationConfig(**{"seed": seed, **values})
    except TypeError as error:
        raise ValueError(f"imagination: {error}") from None
