"""Compensation for a network between agent and environment: the whole stack, built for a
profile.

:func:`make_robust_env` wraps any env in the shim and the delay-robust inputs of
:mod:`fleetgym.wrappers.delay_features` (:class:`ObservationAgeFeatures`,
:class:`ObservationHistory`, :class:`SentActionHistory`, re-exported here), with the
history lengths taken from the network's own staleness distribution
(:func:`history_length_for_profile`), or with a predictive model instead of the history
(``compensation="predictive"``); :func:`compensate` does the same for an env that is
already behind a shim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.validation import check_bool, check_choice, quote
from fleetgym.wrappers.compensations import (
    COMPENSATION_REGISTRY,
    Compensation,
    NetworkContext,
    resolve_compensation,
)
from fleetgym.wrappers.delay_features import (
    ObservationAgeFeatures,
    ObservationHistory,
    SentActionHistory,
    check_length,
    compensate,
)
from fleetgym.wrappers.network_shim import NetworkShimWrapper
from fleetgym.wrappers.staleness import (
    HISTORY_CAP,
    action_delay_for_profile,
    history_length_for_env,
    history_length_for_profile,
    staleness_quantile,
)
from fleetgym.wrappers.stall import STALL_ACTIONS, STALL_STEPS, StallWatchdog

#: The stacks of :func:`make_robust_env` (the names of
#: :data:`~fleetgym.wrappers.COMPENSATION_REGISTRY`).
COMPENSATIONS = ("history", "augmented", "predictive", "scheduled")

__all__ = [
    "COMPENSATIONS",
    "HISTORY_CAP",
    "STALL_ACTIONS",
    "ObservationAgeFeatures",
    "ObservationHistory",
    "SentActionHistory",
    "action_delay_for_profile",
    "compensate",
    "history_length_for_env",
    "history_length_for_profile",
    "make_robust_env",
    "staleness_quantile",
]


def make_robust_env(
    env: str | gym.Env[Any, Any],
    profile: str | Sequence[str] | None = "wifi-normal",
    *,
    step_ms: float | None = None,
    history_length: int | None = None,
    action_history_length: int | None = None,
    age_features: bool = True,
    quantile: float = 0.99,
    max_age_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    compensation: str | Compensation = "history",
    predictor: Any = None,
    predict_kwargs: dict[str, Any] | None = None,
    max_history: int = HISTORY_CAP,
    stall_features: bool | None = None,
    stall_action: str | None = None,
    stall_steps: int = STALL_STEPS,
    safe_action: Any = None,
    **shim_kwargs: Any,
) -> gym.Env[np.ndarray, Any]:
    """Builds shim + compensation around an env: the input a delay-robust policy sees.

    Stack (inside out): ``NetworkShimWrapper(env, profile, ...)`` →
    :class:`ObservationAgeFeatures` (optional) → :class:`ObservationHistory` (k frames) →
    flatten → :class:`SentActionHistory` (m actions; ``0`` disables it). The result has a
    flat float32 Box observation, fit for SB3's ``MlpPolicy`` and
    ``RecurrentPPO``'s ``MlpLstmPolicy``. To evaluate one policy under another network,
    build the same stack with the same ``history_length`` / ``action_history_length`` /
    ``stall_features`` and another ``profile``: the observation layout only depends on
    those.

    The automatic k and m are the network's staleness quantile + 1, **capped at**
    ``max_history`` (16: :data:`~fleetgym.wrappers.staleness.HISTORY_CAP`). A network that
    asks for more has stalls (a Wi-Fi link that buffers for seconds gives k in the
    hundreds, an input PPO cannot learn from): the cap applies with a ``UserWarning``,
    and the age features gain the stall flag (``stall_features``), set when the delivered
    observation is ``stall_steps`` ticks old or more.

    ``compensation`` picks the stack, by name (one of
    :data:`~fleetgym.wrappers.COMPENSATION_REGISTRY`) or as a
    :class:`~fleetgym.wrappers.Compensation` object: ``"history"`` (above),
    ``"augmented"`` (the augmented state of the delayed-RL literature: the delivered
    observation with its age and the last m sent actions, i.e. ``"history"`` with k = 1;
    with the age the policy can tell which of the m actions are still in flight),
    ``"predictive"``: the shim and :class:`~fleetgym.wrappers.PredictiveObservation` with
    ``predictor`` (``"true-dynamics"`` for CartPole's own equations) and
    ``predict_kwargs``, whose observation is the env's own (a clean-trained policy runs on
    it unchanged; its prior action age ``action_delay`` is the network's, from
    :func:`~fleetgym.wrappers.action_delay_for_profile`, unless ``predict_kwargs`` sets
    it), or ``"scheduled"``: a shim with a playout buffer and
    :class:`~fleetgym.wrappers.ScheduledChunks` with ``predictor``; ``predict_kwargs``
    then holds :class:`~fleetgym.wrappers.ScheduledCompensation`'s options
    (``policy``, ``delay``, ``chunk``, ``playout``; D and k chosen from the network when
    not given, and k = 1 without a policy). Its observation is the env's own too.

    ``stall_action`` states what the loop does in a stall, i.e. once ``stall_steps`` ticks
    pass without a fresh action at the env (or a fresh observation at the agent):

    - ``"hold"`` (default of ``"history"`` and ``"augmented"``): the env keeps applying the
      last action that arrived (the shim's rule); the predictive compensation predicts at
      most ``stall_steps`` ticks past its freshest observation, then its estimate stops
      moving.
    - ``"safe"``: as ``"hold"``, but the env applies ``safe_action`` (default the shim's
      start action) after ``stall_steps`` ticks without a fresh action, until one arrives
      (:class:`~fleetgym.wrappers.StallWatchdog`: an actuator's command timeout); the
      predictive compensation's rollout follows that rule.
    - ``"predict"`` (default of ``"predictive"``, which it needs): the env holds; the
      agent keeps predicting through the stall, however long.

    Example:
        >>> env = make_robust_env("CartPole-v1", "wifi-normal", history_length=3, action_history_length=4)
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape  # 3 frames x (4 + 2 age features) + 4 one-hot actions x 2
        (26,)
        >>> env = make_robust_env(
        ...     "CartPole-v1", "wifi-normal", compensation="predictive", predictor="true-dynamics",
        ...     predict_kwargs={"lookahead": "action", "samples": 16})
        >>> env.action_delay  # wifi-normal's median action age at 20 ms
        1

    Args:
        env: A registered env ID or an env instance (observation space must be a Box;
            flatten Dict observations first, e.g. MiniGrid's ``ImgObsWrapper``).
        profile: Profile name, sequence of names drawn per episode, or ``None`` with
            explicit ``uplink``/``downlink`` channels in ``shim_kwargs``.
        step_ms: Control period; ``None`` takes the env's ``dt`` / ``tau`` (see the shim).
        history_length: k; ``None`` = :func:`history_length_for_profile` (``quantile``),
            at most ``max_history``.
        action_history_length: m; ``None`` = the round-trip staleness quantile + 1, at most
            ``max_history``; ``0`` = no action history.
        age_features: Append :class:`ObservationAgeFeatures`.
        quantile: Quantile used for the automatic lengths.
        max_age_steps: Saturation of the age feature; ``None`` = max(k, 2).
        env_kwargs: Keyword arguments of ``gym.make`` when ``env`` is an ID.
        compensation: ``"history"``, ``"augmented"``, ``"predictive"``, ``"scheduled"``, or
            a :class:`~fleetgym.wrappers.Compensation` (then the options of
            the named ones are not used).
        predictor: The predictor of ``"predictive"`` and ``"scheduled"`` (required there,
            refused elsewhere).
        predict_kwargs: More :class:`~fleetgym.wrappers.PredictiveObservation` arguments
            (``lookahead``, ``applied_ids``, ``action_delay``, ``samples``, ...); an
            ``action_delay`` given here overrides the profile's median action age.
        max_history: Cap of the automatic k and m (explicit lengths are not capped).
        stall_features: Append the stall flag to the age features; ``None`` = exactly
            when an automatic length was capped.
        stall_action: ``"hold"``, ``"safe"`` or ``"predict"`` (above); ``None`` = the
            compensation's default.
        stall_steps: Ticks without a fresh packet that make a stall (>= 1; default 16).
        safe_action: The env's action in a stall with ``stall_action="safe"``.
        **shim_kwargs: More :class:`NetworkShimWrapper` arguments (channels,
            ``delivery``, ``start_action``, ...).

    Returns:
        The wrapped env.

    Raises:
        TypeError, ValueError: on a bad argument (also the shim's own validation).
    """
    check_bool("age_features", age_features)
    model_based = ("predictive", "scheduled")
    if isinstance(compensation, str):
        check_choice("compensation", compensation, tuple(COMPENSATION_REGISTRY))
        if compensation in COMPENSATIONS:
            if (predictor is None) == (compensation in model_based):
                raise ValueError(
                    "predictor: expected a predictor exactly when compensation is "
                    f"'predictive' or 'scheduled', actual {quote(predictor)} with "
                    f"compensation={compensation!r}"
                )
    elif not isinstance(compensation, Compensation):
        raise TypeError(
            f"compensation: expected a name or a Compensation, actual {quote(compensation)}"
        )
    name = compensation if isinstance(compensation, str) else compensation.name
    cap = check_length("max_history", max_history)
    stall_steps = check_length("stall_steps", stall_steps)
    if stall_action is None:
        stall = "predict" if name in model_based else "hold"
    else:
        stall = check_choice("stall_action", stall_action, STALL_ACTIONS)
    if stall == "predict" and name not in model_based:
        raise ValueError(
            "stall_action: expected 'hold' or 'safe' with compensation="
            f"{name!r} ('predict' keeps the predictive compensation's rollout "
            "going through a stall: it needs compensation='predictive'), actual 'predict'"
        )
    if safe_action is not None and stall != "safe":
        raise ValueError(
            f"safe_action: expected None unless stall_action='safe', actual "
            f"{quote(safe_action)} with stall_action={stall!r}"
        )
    if stall_features is not None:
        check_bool("stall_features", stall_features)
        if name in model_based:
            raise ValueError(
                f"stall_features: expected None with compensation={name!r} (its "
                f"observation is the env's own, without age features), actual {stall_features}"
            )
        if stall_features and not age_features:
            raise ValueError(
                "stall_features: expected False or None when age_features is False (the "
                "stall flag is one of the age features), actual True"
            )
    if isinstance(compensation, str):
        if compensation == "scheduled":
            options: dict[str, Any] = {"predictor": predictor, **(predict_kwargs or {})}
        else:  # the other names: each class takes the options of its own fields
            options = {
                "predictor": predictor,
                "options": dict(predict_kwargs or {}),
                "history_length": history_length,
                "action_history_length": action_history_length,
                "age_features": age_features,
                "quantile": quantile,
                "max_age_steps": max_age_steps,
                "max_history": cap,
                "stall_features": stall_features,
            }
        comp = resolve_compensation(compensation, **options)
    else:
        comp = compensation
    if isinstance(env, str):
        from fleetgym.wrappers.shim_env import _ensure_registered

        _ensure_registered(env)  # MiniGrid and ALE IDs, or the extra they need
        base: gym.Env[Any, Any] = gym.make(env, **(env_kwargs or {}))
    elif isinstance(env, gym.Env):
        if env_kwargs:
            raise ValueError(
                f"env_kwargs: expected None when env is an instance, actual {quote(env_kwargs)}"
            )
        base = env
    else:
        raise TypeError(f"env: expected an env ID or a gymnasium.Env, actual {quote(env)}")
    shim_args = dict(shim_kwargs)
    if step_ms is not None:
        shim_args["step_ms"] = step_ms
    shim_args.update(comp.shim_kwargs())
    shim = NetworkShimWrapper(base, profile=profile, **shim_args)
    robust: gym.Env[Any, Any] = shim
    if stall == "safe":
        robust = StallWatchdog(shim, stall_steps, safe_action)
    network = NetworkContext(
        profile=profile,
        step_ms=float(shim.step_ms),
        measured={k: v for k, v in shim_kwargs.items() if k not in ("start_action",)},
        stall=stall,
        stall_steps=stall_steps,
        start_action=shim_kwargs.get("start_action"),
        safe_action=robust.safe_action if isinstance(robust, StallWatchdog) else None,
    )
    return comp.build(robust, network)
