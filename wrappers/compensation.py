"""Compensation for a network between agent and environment: the whole stack, built for a
profile.

:func:`make_robust_env` wraps any env in the shim and a compensation (the
:class:`~fleetgym.wrappers.Compensation` objects: the delay-robust inputs, a predictive
model, or scheduled action chunks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.validation import quote
from fleetgym.wrappers.compensations import Compensation, NetworkContext, resolve_compensation
from fleetgym.wrappers.network_shim import NetworkShimWrapper
from fleetgym.wrappers.profiles import DEFAULT_PROFILE
from fleetgym.wrappers.stall import STALL_ACTIONS, StallRule, StallWatchdog

#: The stacks of :func:`make_robust_env` (the names of
#: :data:`~fleetgym.wrappers.COMPENSATION_REGISTRY`).
COMPENSATIONS = ("history", "augmented", "predictive", "scheduled")

__all__ = ["COMPENSATIONS", "make_robust_env"]


#: Keywords of fleetgym 1.x's ``make_robust_env`` and where each went in 2.0.
_MOVED = {
    **dict.fromkeys(
        (
            "history_length",
            "action_history_length",
            "age_features",
            "quantile",
            "max_age_steps",
            "max_history",
            "stall_features",
        ),
        "compensation=HistoryCompensation({key}=...) (or AugmentedCompensation)",
    ),
    "predict_kwargs": "compensation=PredictiveCompensation(predictor, options={{...}}) or "
    "ScheduledCompensation(predictor, policy=..., delay=..., chunk=...)",
    "stall_action": "stall=StallRule(action=...) (or stall='hold' / 'safe' / 'predict')",
    "stall_steps": "stall=StallRule(steps=...)",
    "safe_action": "stall=StallRule('safe', safe_action=...)",
}


def make_robust_env(
    env: str | gym.Env[Any, Any],
    profile: Any = DEFAULT_PROFILE,
    *,
    compensation: str | Compensation = "history",
    predictor: Any = None,
    stall: StallRule | str | None = None,
    step_ms: float | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    shim: Mapping[str, Any] | None = None,
    **moved: Any,
) -> gym.Env[np.ndarray, Any]:
    """Builds shim + compensation around an env: the input a delay-robust policy sees.

    The stack is ``NetworkShimWrapper(env, profile, **shim)`` (with a
    :class:`~fleetgym.wrappers.StallWatchdog` for ``stall="safe"``) and the compensation on
    top. ``compensation`` is a :class:`~fleetgym.wrappers.Compensation` (its fields are its
    options) or the name of one in :data:`~fleetgym.wrappers.COMPENSATION_REGISTRY` with
    default options:

    - ``"history"`` (:class:`~fleetgym.wrappers.HistoryCompensation`):
      :class:`ObservationAgeFeatures` (optional) → :class:`ObservationHistory` (k frames) →
      flatten → :class:`SentActionHistory` (m actions). A flat float32 Box observation, fit
      for SB3's ``MlpPolicy`` and ``RecurrentPPO``'s ``MlpLstmPolicy``. The automatic k
      and m are the network's staleness quantile + 1, **capped at** ``max_history`` (16):
      a network that asks for more has stalls, and the age features gain the stall flag.
      To evaluate one policy under another network, build the same stack with the same
      compensation object and another ``profile``: the layout depends only on it.
    - ``"augmented"`` (:class:`~fleetgym.wrappers.AugmentedCompensation`): the augmented
      state of the delayed-RL literature (``"history"`` with k = 1).
    - ``"predictive"`` (:class:`~fleetgym.wrappers.PredictiveCompensation`, needs
      ``predictor``): :class:`~fleetgym.wrappers.PredictiveObservation`; the observation is
      the env's own (a clean-trained policy runs on it unchanged); its prior action age is
      the network's (:func:`~fleetgym.wrappers.action_delay_for_profile`) unless its
      ``options`` set ``action_delay``.
    - ``"scheduled"`` (:class:`~fleetgym.wrappers.ScheduledCompensation`, needs
      ``predictor``): a shim with a playout buffer and
      :class:`~fleetgym.wrappers.ScheduledChunks`; D and k chosen from the network unless
      given, k = 1 without a policy. Its observation is the env's own too.

    ``stall`` (a :class:`~fleetgym.wrappers.StallRule`, or its action's name) states what
    the loop does once ``steps`` ticks pass without a fresh action at the env: hold the
    last action, apply a safe one, or (predictive and scheduled) keep predicting.

    Args:
        env: A registered env ID or an env instance (observation space must be a Box;
            flatten Dict observations first, e.g. MiniGrid's ``ImgObsWrapper``).
        profile: Profile name, profile file, NetworkProfile, or a sequence of them drawn
            per episode (default :data:`~fleetgym.wrappers.profiles.DEFAULT_PROFILE`);
            ``None`` with explicit ``uplink``/``downlink`` channels in ``shim``.
        compensation: A Compensation, or a registered name (default options).
        predictor: The predictor of ``compensation="predictive"`` or ``"scheduled"`` given
            by name (required there, refused elsewhere; an object carries its own).
        stall: The stall rule (default ``StallRule()``: the compensation's own default).
        step_ms: Control period; ``None`` takes the env's ``dt`` / ``tau`` (see the shim).
        env_kwargs: Keyword arguments of ``gym.make`` when ``env`` is an ID.
        shim: More :class:`NetworkShimWrapper` arguments (``uplink``/``downlink``,
            ``delivery``, ``start_action``, ``timing``, ...).
        **moved: fleetgym 1.x keywords: each raises a TypeError that names its 2.0 place
            (see ``CHANGELOG.md``).

    Example:
        >>> from fleetgym.wrappers import HistoryCompensation, PredictiveCompensation
        >>> env = make_robust_env("CartPole-v1", "wifi-normal",
        ...     compensation=HistoryCompensation(history_length=3, action_history_length=4))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape  # 3 frames x (4 + 2 age features) + 4 one-hot actions x 2
        (26,)
        >>> env = make_robust_env("CartPole-v1", "wifi-normal", compensation=PredictiveCompensation(
        ...     "true-dynamics", options={"lookahead": "action", "samples": 16}))
        >>> env.action_delay  # wifi-normal's median action age at 20 ms
        1

    Returns:
        The wrapped env.

    Raises:
        TypeError, ValueError: On a bad argument (also the shim's and the compensation's
            own validation).
    """
    if moved:
        key = sorted(moved)[0]
        where = _MOVED.get(key, "shim={{{key!r}: ...}} (a NetworkShimWrapper argument)")
        raise TypeError(
            f"make_robust_env: the keyword {key!r} moved in fleetgym 2.0: pass "
            + where.format(key=key)
        )
    comp = _compensation(compensation, predictor)
    rule = _stall_rule(stall, comp)
    base = _base_env(env, env_kwargs)
    if shim is not None and not isinstance(shim, Mapping):
        raise TypeError(f"shim: expected a mapping of shim arguments, actual {quote(shim)}")
    shim_args = dict(shim or {})
    if step_ms is not None:
        shim_args["step_ms"] = step_ms
    shim_args.update(comp.shim_kwargs())
    network_shim = NetworkShimWrapper(base, profile=profile, **shim_args)
    robust: gym.Env[Any, Any] = network_shim
    if rule.action == "safe":
        robust = StallWatchdog(network_shim, rule.steps, rule.safe_action)
    network = NetworkContext(
        profile=profile,
        step_ms=float(network_shim.step_ms),
        measured={k: v for k, v in (shim or {}).items() if k != "start_action"},
        stall=rule.action or "hold",
        stall_steps=rule.steps,
        start_action=(shim or {}).get("start_action"),
        safe_action=robust.safe_action if isinstance(robust, StallWatchdog) else None,
    )
    return comp.build(robust, network)


def _compensation(compensation: Any, predictor: Any) -> Compensation:
    """The compensation object of ``make_robust_env``'s first two options."""
    if isinstance(compensation, Compensation):
        if predictor is not None:
            raise ValueError(
                "predictor: expected None with a Compensation object (it carries its own), "
                f"actual {quote(predictor)}"
            )
        return compensation
    if not isinstance(compensation, str):
        raise TypeError(
            f"compensation: expected a name or a Compensation, actual {quote(compensation)}"
        )
    comp = resolve_compensation(compensation, predictor=predictor)
    needs = (
        "predictor" in {f.name for f in dataclasses.fields(comp)}
        if dataclasses.is_dataclass(comp)
        else False
    )
    if needs and predictor is None:
        raise ValueError(
            f"predictor: expected a predictor with compensation={compensation!r} (e.g. "
            "'true-dynamics'), actual None"
        )
    if predictor is not None and not needs:
        raise ValueError(
            f"predictor: expected None with compensation={compensation!r} (only a model-based "
            f"compensation takes one), actual {quote(predictor)}"
        )
    return comp


def _stall_rule(stall: Any, comp: Compensation) -> StallRule:
    """``stall`` as a StallRule whose action is settled for ``comp``."""
    if stall is None:
        rule = StallRule()
    elif isinstance(stall, str):
        rule = StallRule(stall)
    elif isinstance(stall, StallRule):
        rule = stall
    else:
        raise TypeError(
            f"stall: expected a StallRule, one of {STALL_ACTIONS} or None, actual {quote(stall)}"
        )
    model_based = comp.keeps_observation
    if rule.action is None:
        return dataclasses.replace(rule, action="predict" if model_based else "hold")
    if rule.action == "predict" and not model_based:
        raise ValueError(
            "stall: expected 'hold' or 'safe' with compensation="
            f"{comp.name!r} ('predict' keeps a model-based compensation's rollout going "
            "through a stall: it needs compensation='predictive' or 'scheduled'), "
            "actual 'predict'"
        )
    return rule


def _base_env(env: Any, env_kwargs: Mapping[str, Any] | None) -> gym.Env[Any, Any]:
    if isinstance(env, str):
        from fleetgym.wrappers.shim_env import _ensure_registered

        _ensure_registered(env)  # MiniGrid and ALE IDs, or the extra they need
        return gym.make(env, **(env_kwargs or {}))
    if isinstance(env, gym.Env):
        if env_kwargs:
            raise ValueError(
                f"env_kwargs: expected None when env is an instance, actual {quote(env_kwargs)}"
            )
        return env
    raise TypeError(f"env: expected an env ID or a gymnasium.Env, actual {quote(env)}")
