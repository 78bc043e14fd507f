"""Compensations as objects, with one registry: what :func:`~fleetgym.wrappers.make_robust_env`
puts around the shim.

A :class:`Compensation` says what it needs from the shim (:meth:`Compensation.shim_kwargs`:
the scheduled one needs a playout buffer) and builds its stack around the networked env
(:meth:`Compensation.build`), given the facts of the network (:class:`NetworkContext`). The
four the project ships are registered under their names:

========== ====================================================================
name        the policy's input
========== ====================================================================
history     k delivered frames with their ages, then m sent actions
augmented   the same with k = 1 (the augmented state of delayed RL)
predictive  the freshest observation rolled forward to the tick the next action
            meets (the env applies what arrived last)
scheduled   the state at the tick the action is stamped for; packets of k actions
            applied from a playout buffer (:mod:`fleetgym.wrappers.playout`)
========== ====================================================================

A new compensation is a subclass with a ``name``, registered with
:func:`register_compensation`; ``make_robust_env(env, profile, compensation=MyComp(...))``
takes an instance, and ``compensation="my-name"`` the registered class with its default
options (and ``make_robust_env``'s ``predictor``, when the class has that field).

Example:
    >>> sorted(COMPENSATION_REGISTRY)
    ['augmented', 'history', 'predictive', 'scheduled']
    >>> ScheduledCompensation("true-dynamics", delay=3, chunk=1).shim_kwargs()["playout"].start
    'wait'
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym

from fleetgym.validation import check_bool, check_float, check_int, quote
from fleetgym.wrappers.chunking import Schedule, ScheduledChunks, choose_schedule
from fleetgym.wrappers.delay_features import cap_length, check_length, compensate
from fleetgym.wrappers.playout import Playout
from fleetgym.wrappers.predictive import MAX_AGE, PredictiveObservation
from fleetgym.wrappers.staleness import (
    HISTORY_CAP,
    MAX_HISTORY,
    action_delay_for_profile,
    history_length_for_profile,
)

__all__ = [
    "COMPENSATION_REGISTRY",
    "AugmentedCompensation",
    "Compensation",
    "HistoryCompensation",
    "NetworkContext",
    "PredictiveCompensation",
    "ScheduledCompensation",
    "register_compensation",
    "resolve_compensation",
]


@dataclass(frozen=True)
class NetworkContext:
    """What a compensation knows of the network it is built for.

    Attributes:
        profile: The shim's profile argument (a name, a profile, a sequence, or None with
            explicit channels in ``measured``).
        step_ms: The control period.
        measured: The shim's other arguments that shape the network (channels, delivery,
            timing, ...), for measuring it.
        stall: ``"hold"``, ``"safe"`` or ``"predict"`` (the action of
            :func:`make_robust_env`'s ``stall`` rule).
        stall_steps: Ticks without a fresh packet that make a stall.
        start_action: The shim's start action (None: its default).
        safe_action: The watchdog's safe action (``stall="safe"``), else None.
    """

    profile: Any
    step_ms: float
    measured: Mapping[str, Any] = field(default_factory=dict)
    stall: str = "hold"
    stall_steps: int = 16
    start_action: Any = None
    safe_action: Any = None

    @property
    def name(self) -> str:
        profile = self.profile
        if profile is None:
            return "of the given uplink/downlink channels"
        if isinstance(profile, str) or hasattr(profile, "name"):
            return quote(getattr(profile, "name", profile))
        return quote([getattr(p, "name", p) for p in profile])


class Compensation:
    """The base of the compensations: a name, what the shim needs, and the stack.

    Subclasses set ``name`` and implement :meth:`build`; :meth:`from_options` builds one
    from keyword options, keeping those that are its fields (``make_robust_env`` passes
    ``predictor``).
    """

    name: ClassVar[str] = ""
    #: Whether its observation is the env's own (a clean-trained policy runs on it).
    keeps_observation: ClassVar[bool] = False

    def shim_kwargs(self) -> dict[str, Any]:
        """Extra :class:`~fleetgym.wrappers.NetworkShimWrapper` arguments it needs."""
        return {}

    def build(self, env: gym.Env[Any, Any], network: NetworkContext) -> gym.Env[Any, Any]:
        """The compensated env around ``env`` (the shim, or the shim and a watchdog).

        Args:
            env: The networked env: the :class:`~fleetgym.wrappers.NetworkShimWrapper`,
                or a :class:`~fleetgym.wrappers.StallWatchdog` around it (``stall="safe"``).
            network: The facts of the network ``env`` simulates (profile, period, stall
                rule), to size the stack from.
        """
        raise NotImplementedError

    @classmethod
    def from_options(cls, **options: Any) -> Compensation:
        """An instance from the options of its own fields (a dataclass), others left out.

        Args:
            **options: Field values by name; names that are not fields of the class are
                dropped (all of them, for a class that is not a dataclass).
        """
        if dataclasses.is_dataclass(cls):
            names = {f.name for f in dataclasses.fields(cls)}
            options = {k: v for k, v in options.items() if k in names}
        else:
            options = {}
        return cls(**options)


#: Every compensation by name (:func:`register_compensation` adds one).
COMPENSATION_REGISTRY: dict[str, type[Compensation]] = {}


def register_compensation(cls: type[Compensation]) -> type[Compensation]:
    """Register ``cls`` under ``cls.name`` (usable as a class decorator).

    Raises:
        TypeError: If ``cls`` is not a Compensation subclass with a name.
        ValueError: If the name is taken by another class.
    """
    if not (isinstance(cls, type) and issubclass(cls, Compensation)) or not cls.name:
        raise TypeError(f"expected a Compensation subclass with a name, actual {quote(cls)}")
    if COMPENSATION_REGISTRY.get(cls.name, cls) is not cls:
        raise ValueError(f"compensation {cls.name!r}: the name is registered already")
    COMPENSATION_REGISTRY[cls.name] = cls
    return cls


@register_compensation
@dataclass(frozen=True)
class HistoryCompensation(Compensation):
    """k delivered frames (with their ages) and m sent actions, flattened
    (:func:`~fleetgym.wrappers.compensate`); lengths from the network when None.

    Args:
        history_length: k, the delivered frames stacked (1 to 10,000). None (default): the
            network's observation-age ``quantile`` in ticks + 1, capped at ``max_history``.
        action_history_length: m, the sent actions appended (0 to 10,000; 0: none). None
            (default): the round trip's age ``quantile`` in ticks + 1, capped likewise.
        age_features: Append each frame's age and new-packet flag
            (:class:`~fleetgym.wrappers.ObservationAgeFeatures`); default True.
        quantile: The share of ticks, in (0, 1], the automatic k and m cover (default
            0.99: the k frames hold the frame a network-free agent would see in 99% of
            the ticks).
        max_age_steps: Age in ticks at which the age feature saturates at 1; None
            (default): max(k, 2).
        max_history: Cap on an automatic k or m (default 16; a longer need warns and is
            cut); a length given explicitly is not capped.
        stall_features: Append the stall flag (set once the observation is the network
            context's ``stall_steps`` ticks old); None (default): only when an automatic
            length was capped. True needs ``age_features``.
    """

    name: ClassVar[str] = "history"
    history_length: int | None = None
    action_history_length: int | None = None
    age_features: bool = True
    quantile: float = 0.99
    max_age_steps: int | None = None
    max_history: int = HISTORY_CAP
    stall_features: bool | None = None

    def __post_init__(self) -> None:
        if self.history_length is not None:
            check_length("history_length", self.history_length)
        if self.action_history_length is not None:
            check_int("action_history_length", self.action_history_length, 0, MAX_HISTORY)
        check_bool("age_features", self.age_features)
        check_float("quantile", self.quantile, 0.0, 1.0)
        if self.max_age_steps is not None:
            check_length("max_age_steps", self.max_age_steps)
        check_length("max_history", self.max_history)
        if self.stall_features is not None:
            check_bool("stall_features", self.stall_features)
            if self.stall_features and not self.age_features:
                raise ValueError(
                    "stall_features: expected False or None when age_features is False (the "
                    "stall flag is one of the age features), actual True"
                )

    def _k(self) -> int | None:
        return self.history_length

    def build(self, env: gym.Env[Any, Any], network: NetworkContext) -> gym.Env[Any, Any]:
        check_bool("age_features", self.age_features)
        cap = check_length("max_history", self.max_history)
        period, measured = network.step_ms, dict(network.measured)
        capped = False
        k = self._k()
        if k is None:
            wanted = history_length_for_profile(network.profile, period, self.quantile, **measured)
            k = cap_length("history_length", wanted, cap, "frames", network.name)
            capped = k < wanted
        else:
            k = check_length("history_length", k)
        if self.action_history_length is None:
            wanted = history_length_for_profile(
                network.profile, period, self.quantile, path="round_trip", **measured
            )
            m = cap_length("action_history_length", wanted, cap, "sent actions", network.name)
            capped = capped or m < wanted
        else:
            m = check_int("action_history_length", self.action_history_length, 0, MAX_HISTORY)
        flag = capped if self.stall_features is None else self.stall_features
        return compensate(
            env,
            k,
            m,
            age_features=self.age_features,
            max_age_steps=self.max_age_steps,
            stall_steps=network.stall_steps if flag and self.age_features else None,
        )


@register_compensation
@dataclass(frozen=True)
class AugmentedCompensation(HistoryCompensation):
    """The augmented state: the delivered observation, its age and m sent actions (k = 1
    unless given).

    The fields are :class:`HistoryCompensation`'s; only ``history_length``'s default
    differs.

    Args:
        history_length: k, the delivered frames stacked; None (default): 1.
        action_history_length: m, the sent actions appended (0: none); None (default): the
            round trip's age ``quantile`` in ticks + 1, capped at ``max_history``.
        age_features: Append the frame's age and new-packet flag; default True.
        quantile: The share of ticks, in (0, 1], an automatic m covers (default 0.99).
        max_age_steps: Age in ticks at which the age feature saturates at 1; None
            (default): max(k, 2), so 2 with k = 1.
        max_history: Cap on an automatic m (default 16; a longer need warns and is cut).
        stall_features: Append the stall flag (set once the observation is the network
            context's ``stall_steps`` ticks old); None (default): only when m was capped.
            True needs ``age_features``.
    """

    name: ClassVar[str] = "augmented"

    def _k(self) -> int | None:
        return 1 if self.history_length is None else self.history_length


@register_compensation
@dataclass(frozen=True)
class PredictiveCompensation(Compensation):
    """:class:`~fleetgym.wrappers.PredictiveObservation` with ``predictor`` and ``options``;
    its prior action age is the network's unless ``options`` sets ``action_delay``.

    Args:
        predictor: ``"true-dynamics"`` (the env's own equations) or a
            :class:`~fleetgym.wrappers.predictive.Predictor`; required by ``build``.
        options: More :class:`~fleetgym.wrappers.PredictiveObservation` keyword arguments
            (``lookahead``, ``samples``, ...); they override what the network sets:
            ``start_action``, ``max_horizon``, ``stall_steps``, ``safe_action``,
            ``action_delay`` (default: none).
    """

    name: ClassVar[str] = "predictive"
    keeps_observation: ClassVar[bool] = True
    predictor: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def build(self, env: gym.Env[Any, Any], network: NetworkContext) -> gym.Env[Any, Any]:
        kwargs: dict[str, Any] = {"start_action": network.start_action}
        if network.stall != "predict":
            kwargs["max_horizon"] = network.stall_steps
        if network.stall == "safe":
            kwargs.update(stall_steps=network.stall_steps, safe_action=network.safe_action)
        kwargs.update(self.options)
        if kwargs.get("action_delay") is None:
            prior = action_delay_for_profile(network.profile, network.step_ms, **network.measured)
            kwargs["action_delay"] = min(prior, MAX_AGE)
        return PredictiveObservation(env, self.predictor, **kwargs)


@register_compensation
@dataclass(frozen=True)
class ScheduledCompensation(Compensation):
    """Scheduled action chunks (:class:`~fleetgym.wrappers.ScheduledChunks`) over a shim
    with a playout buffer; ``D`` and ``k`` from :func:`~fleetgym.wrappers.choose_schedule`
    on the network unless given.

    Args:
        predictor: The predictor (``"true-dynamics"`` or a
            :class:`~fleetgym.wrappers.predictive.Predictor`).
        policy: What makes a chunk's actions after the first; None with ``chunk`` 1, or to
            be set later with ``env.get_wrapper_attr("set_policy")(model)`` (training: the
            model being trained).
        delay: D in ticks (None: chosen).
        chunk: k (None: chosen; 1 when no policy is given).
        playout: The env side's rules.
        quantile: The share of arrived packets D covers when chosen.
    """

    name: ClassVar[str] = "scheduled"
    keeps_observation: ClassVar[bool] = True
    predictor: Any = None
    policy: Any = None
    delay: int | None = None
    chunk: int | None = None
    playout: Playout = field(default_factory=Playout)
    quantile: float = 0.99

    def shim_kwargs(self) -> dict[str, Any]:
        return {"playout": self.playout}

    def build(self, env: gym.Env[Any, Any], network: NetworkContext) -> gym.Env[Any, Any]:
        if network.stall == "safe":
            raise ValueError(
                "stall: expected 'hold' or 'predict' with compensation='scheduled' "
                "(its playout buffer has its own gap rule: Playout(underrun='safe')), "
                "actual 'safe'"
            )
        delay, chunk = self.delay, self.chunk
        if chunk is None and (self.policy is None or network.profile is None):
            chunk = 1  # no policy to plan a chunk with, or no profile to size it from
        if delay is None and network.profile is None:
            raise ValueError(
                "delay: expected D with explicit channels (no profile to choose it from), "
                "actual None"
            )
        if delay is None or chunk is None:
            measured = network.measured
            chosen = _chosen_schedule(
                network.profile,
                network.step_ms,
                self.quantile,
                measured.get("timing", "loop"),
                measured.get("uplink_share", 0.5),
                measured.get("delivery", "fifo"),
            )
            delay = chosen.delay if delay is None else delay
            chunk = chosen.chunk if chunk is None else chunk
        return ScheduledChunks(env, self.predictor, delay=delay, chunk=chunk, policy=self.policy)


@functools.lru_cache(maxsize=32)
def _cached_schedule(*args: Any) -> Schedule:
    profile, step_ms, quantile, timing, uplink_share, delivery = args
    return choose_schedule(
        profile,
        step_ms,
        quantile=quantile,
        timing=timing,
        uplink_share=uplink_share,
        delivery=delivery,
    )


def _chosen_schedule(*args: Any) -> Schedule:
    """:func:`choose_schedule` for a network, measured once per network (a vector of envs
    behind one profile asks for it once per env)."""
    try:
        return _cached_schedule(*args)
    except TypeError:  # an unhashable profile (a list, a trace's arrays): measure it
        return _cached_schedule.__wrapped__(*args)


def resolve_compensation(compensation: Any, **options: Any) -> Compensation:
    """A Compensation instance as is, or the registered class of a name built from
    ``options`` (None values left out).

    Raises:
        ValueError: For an unknown name.
        TypeError: For anything else.
    """
    if isinstance(compensation, Compensation):
        return compensation
    if not isinstance(compensation, str):
        raise TypeError(
            f"compensation: expected a name or a Compensation, actual {quote(compensation)}"
        )
    cls = COMPENSATION_REGISTRY.get(compensation)
    if cls is None:
        raise ValueError(
            f"compensation: expected one of {sorted(COMPENSATION_REGISTRY)}, "
            f"actual {compensation!r}"
        )
    return cls.from_options(**{k: v for k, v in options.items() if v is not None})
