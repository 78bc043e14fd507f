"""The predictive regimes of the CALF study: the causal ceiling, its variants and the oracle.

A regime's compensation (:data:`~fleetgym.experiments.calf.conditions.COMPENSATIONS`)
names the predictor and how it is used:

- ``predictive``: :class:`~fleetgym.wrappers.predictive.PredictiveObservation` with the
  env's true dynamics, the most likely schedule of the actions in flight and the applied
  action's id carried by the observation packet, predicting the current observation:
  the causal ceiling;
- ``predictive-dist``: the same averaged over 16 schedules drawn from the action ages seen;
- ``predictive-noid``: without the applied id (the agent assumes the network's median
  action age, the prior every predictive regime starts from: :func:`median_action_age`);
- ``predictive-ahead``: predicting further, to the tick the next action meets
  (``lookahead="action"``);
- ``predictive-ahead-dist``: both;
- ``predictive-best``: ``-ahead-dist`` with the prior action age
  :func:`~fleetgym.wrappers.make_robust_env` derives from the network (the most frequent
  age, not the study's median) and ``stall="predict"``: what a deployer gets from
  ``make_robust_env(compensation=PredictiveCompensation("true-dynamics",
  options={"lookahead": "action", "samples": 16}))``;
- ``learned``: the learned predictor of the layout (a world model fitted per seed), with
  the same variants (``learned-dist``, ``learned-ahead``, ...);
- ``oracle``: non-causal. The policy's input is the env's true current state
  (``info["true_obs"]``, which no remote agent has): what a perfect predictor of the
  current observation would give. It still cannot know when its next action will arrive.
"""

from __future__ import annotations

import functools
from typing import Any, SupportsFloat

import gymnasium as gym

from fleetgym.agents.world_model.predictor import WorldModelPredictor
from fleetgym.wrappers import (
    NetworkShimWrapper,
    PredictiveCompensation,
    ScheduledCompensation,
    action_delay_for_profile,
    make_robust_env,
)

__all__ = [
    "PolicySlot",
    "TrueStateObservation",
    "learned_predictor",
    "median_action_age",
    "predictive_env",
]


class PolicySlot:
    """The policy that makes the scheduled chunks' actions, set once it exists.

    The CALF study builds a regime's envs before its model (training) or from a layout
    (evaluation); the scheduled compensation's chunks are made by that model, which the
    trainer and the evaluator put here (``slot.model = model``). Deterministic actions:
    a chunk is a plan.

    Raises:
        RuntimeError: When called before a model is set.
    """

    def __init__(self) -> None:
        self.model: Any = None

    def __call__(self, obs: Any) -> Any:
        if self.model is None:
            raise RuntimeError("PolicySlot: no model set yet (slot.model = model)")
        return self.model.predict(obs, deterministic=True)[0]


class TrueStateObservation(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """The oracle's input: the env's true current observation in place of the delivered one.

    Reads ``info["true_obs"]`` of a shim built with ``info="full"`` and reports the
    observation's age as 0 (the applied action's age is left as is). Non-causal: for
    reference figures only, never for a deployed agent.

    Raises:
        KeyError: From ``reset``/``step`` when ``info`` has no ``true_obs``.
    """

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    @staticmethod
    def _true(info: dict[str, Any]) -> Any:
        if "true_obs" not in info:
            raise KeyError("TrueStateObservation: expected info['true_obs'] (info='full')")
        info["obs_age_steps"] = 0
        return info["true_obs"].copy()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        _, info = self.env.reset(seed=seed, options=options)
        return self._true(info), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        _, reward, terminated, truncated, info = self.env.step(action)
        return self._true(info), reward, terminated, truncated, info


def median_action_age(shim_kwargs: dict[str, Any]) -> int:
    """The network's median action age in ticks: the library's
    :func:`~fleetgym.wrappers.action_delay_for_profile` of the shim's arguments (profile
    or channels, ``step_ms`` (default 20), ...) with ``statistic="median"`` (median round
    trip minus median observation age). The study's tables were measured with this prior;
    ``make_robust_env``'s default is the most frequent age instead, the same on every
    network of the study but ``trace-wifi-office`` (median 1, mode 0), ``jitter-only``,
    ``degraded-latest`` and ``degraded-rtt``."""
    kwargs = dict(shim_kwargs)
    profile = kwargs.pop("profile", None)
    step_ms = float(kwargs.pop("step_ms", 20.0))
    return action_delay_for_profile(profile, step_ms, statistic="median", **kwargs)


#: A predictive compensation's variant (the part after ``predictive-`` / ``learned-``) ->
#: the :class:`~fleetgym.wrappers.predictive.PredictiveObservation` options it sets.
VARIANT_OPTIONS: dict[str, dict[str, Any]] = {
    "": {},
    "dist": {"samples": 16},
    "noid": {"applied_ids": False},
    "ahead": {"lookahead": "action"},
    "ahead-dist": {"lookahead": "action", "samples": 16},
    "best": {"lookahead": "action", "samples": 16},
}


def predictive_env(
    base: gym.Env[Any, Any], shim_kwargs: dict[str, Any], layout: Any
) -> gym.Env[Any, Any]:
    """The shim around ``base`` with ``layout.compensation``'s predictive input.

    Args:
        base: The task's env.
        shim_kwargs: The shim's arguments (profile or channels, step_ms, ...).
        layout: The policy's :class:`~fleetgym.experiments.calf.setup.InputLayout`.

    Raises:
        ValueError: For a compensation this module does not build, or ``learned``
            without a predictor.
    """
    comp = layout.compensation
    kwargs = dict(shim_kwargs)
    if comp.startswith("scheduled"):
        predictor: Any = "true-dynamics"
        if comp == "scheduled-learned":
            if layout.predictor is None:
                raise ValueError("layout.predictor: expected a learned predictor, actual None")
            predictor = layout.predictor
        profile = kwargs.pop("profile", None)
        step_ms = kwargs.pop("step_ms", None)
        return make_robust_env(
            base,
            profile,
            compensation=ScheduledCompensation(predictor, policy=layout.policy_slot),
            step_ms=step_ms,
            shim=kwargs,
        )
    if comp == "oracle":
        return TrueStateObservation(NetworkShimWrapper(base, **{**kwargs, "info": "full"}))
    base_comp, _, variant = comp.partition("-")
    if base_comp not in ("predictive", "learned") or variant not in VARIANT_OPTIONS:
        raise ValueError(f"compensation: expected a predictive one, actual {comp!r}")
    # The prior of the action age: the network's median, which a deployer knows from
    # its profile (the applied ids refine it as packets arrive). make_robust_env would
    # derive the most frequent age; the study keeps the median its tables were measured
    # with.
    options: dict[str, Any] = (
        {} if variant == "best" else {"action_delay": median_action_age(kwargs)}
    )
    options.update(VARIANT_OPTIONS[variant])
    predictor = "true-dynamics"
    if base_comp == "learned":
        if layout.predictor is None:
            raise ValueError("layout.predictor: expected a learned predictor, actual None")
        predictor = layout.predictor
    profile = kwargs.pop("profile", None)
    step_ms = kwargs.pop("step_ms", None)
    return make_robust_env(
        base,
        profile,
        compensation=PredictiveCompensation(predictor, options=options),
        stall="predict" if variant == "best" else None,
        step_ms=step_ms,
        shim=kwargs,
    )


#: The learned predictor's budget: Mode 1 transitions (random actions) and model size.
LEARNED_STEPS = 20_000
LEARNED_MODEL: dict[str, Any] = {"ensemble_size": 5, "elites": 3, "hidden_sizes": (64, 64)}


@functools.lru_cache(maxsize=16)
def _fit_world_model(env_id: str, seed: int, steps: int) -> Any:
    import torch

    from fleetgym.agents.world_model import WorldModel, collect_transitions

    torch.set_num_threads(1)
    data = collect_transitions(env_id, steps, seed=seed)
    env = gym.make(env_id)
    try:
        model = WorldModel(env.observation_space, env.action_space, seed=seed, **LEARNED_MODEL)
    finally:
        env.close()
    model.fit(data)
    return model


def learned_predictor(setup: Any, seed: int, steps: int = LEARNED_STEPS) -> WorldModelPredictor:
    """The ``+predict`` regime's predictor: a world model fitted on ``steps`` Mode 1
    (undelayed, random-action) transitions of the task, seeded by ``seed`` (cached)."""
    return WorldModelPredictor(_fit_world_model(setup.env_id, int(seed), int(steps)))
