"""How the CALF experiment builds its envs: the task, the network, the policy's input.

Every task but MiniGrid trains with SB3 PPO by default (``algo``: also SAC, TD3 and
sb3-contrib's RecurrentPPO), with RL Zoo's tuned hyperparameters where the Zoo has them
(:mod:`fleetgym.experiments.calf.hyperparams`) and SB3's defaults elsewhere; MiniGrid
trains with RecurrentPPO (LSTM). MiniGrid has no physical time step: its control
period is an explicit ``step_ms`` (20 ms by default, the same as CartPole's, so a
profile means the same staleness in steps in both).

"Compensated" policies see :func:`~fleetgym.wrappers.compensation.make_robust_env`'s
input (k delivered observations with their ages, plus the actions sent), with k and the
action-history length measured from the training network (at most the library's
``HISTORY_CAP``, 16, with the stall flag when capped); plain policies see the
delivered observation only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import FlattenObservation

from fleetgym.experiments.calf.conditions import NetworkCondition, Regime, resolve_condition
from fleetgym.experiments.calf.hyperparams import ALGOS, check_algo_fits, zoo_hyperparams
from fleetgym.experiments.calf.predict import predictive_env
from fleetgym.validation import check_choice, check_float
from fleetgym.wrappers import (
    HISTORY_CAP,
    HistoryCompensation,
    history_length_for_profile,
    make_robust_env,
)
from fleetgym.wrappers.network_shim import NetworkShimWrapper
from fleetgym.wrappers.timeline import TIMINGS

__all__ = [
    "EnvSetup",
    "InputLayout",
    "env_setup",
    "layout_for",
    "make_condition_env",
    "vec_env",
]


# --------------------------------------------------------------------------------------
def _minigrid_base(env_id: str) -> gym.Env[Any, Any]:
    # minigrid is imported only for MiniGrid tasks (it registers their IDs on import).
    import minigrid  # noqa: F401
    from minigrid.wrappers import ImgObsWrapper

    # The egocentric 7x7x3 view, flattened: a Box that SB3 does not mistake for an image
    # (its values are object/colour/state indices 0..10, not pixels to scale by 1/255).
    return FlattenObservation(ImgObsWrapper(gym.make(env_id)))


@dataclass(frozen=True)
class EnvSetup:
    """How one task is built and trained.

    Args:
        env_id: Gymnasium ID.
        algo: ``"ppo"`` (SB3) or ``"recurrent-ppo"`` (sb3-contrib, LSTM).
        step_ms: Control period in ms (``None`` = the env's ``dt``/``tau``).
        shim_kwargs: Extra shim arguments (e.g. MiniGrid's no-op start action).
        hyperparams: Algorithm keyword arguments.
        total_timesteps: Full training budget.
        quick_timesteps: ``--quick`` training budget.
        n_envs: Parallel training envs.
        hyperparams_source: Where ``hyperparams`` come from (for the report).
    """

    env_id: str
    algo: str
    step_ms: float | None
    shim_kwargs: dict[str, Any] = field(default_factory=dict)
    hyperparams: dict[str, Any] = field(default_factory=dict)
    total_timesteps: int = 100_000
    quick_timesteps: int = 30_000
    n_envs: int = 8
    hyperparams_source: str = ""

    def base_env(self) -> gym.Env[Any, Any]:
        """A fresh instance of the task (before any network)."""
        if self.env_id.startswith("MiniGrid"):
            return _minigrid_base(self.env_id)
        return gym.make(self.env_id)

    @property
    def period_ms(self) -> float:
        """The control period in ms."""
        if self.step_ms is not None:
            return float(self.step_ms)
        env = self.base_env()
        try:
            dt = getattr(env.unwrapped, "dt", None) or getattr(env.unwrapped, "tau", None)
        finally:
            env.close()
        if dt is None:
            raise ValueError(f"{self.env_id}: expected step_ms for an env without dt/tau")
        return float(dt) * 1000.0


def _zoo_setup(env_id: str, algo: str) -> EnvSetup:
    # RL Zoo's tuned hyperparameters where it has them (CartPole-v1's PPO: 500 within
    # ~1e5 steps), SB3's defaults elsewhere; schedules and noise are built in train_regime.
    params, n_envs, source = zoo_hyperparams(algo, env_id)
    return EnvSetup(
        env_id=env_id,
        algo=algo,
        step_ms=None,
        hyperparams=params,
        total_timesteps=100_000,
        quick_timesteps=40_000,
        n_envs=n_envs,
        hyperparams_source=source,
    )


def _minigrid_setup(env_id: str) -> EnvSetup:
    return EnvSetup(
        env_id=env_id,
        algo="recurrent-ppo",
        step_ms=20.0,
        # 6 = "done", a no-op in navigation tasks: what the env does before the first
        # action packet of an episode arrives.
        shim_kwargs={"start_action": 6},
        hyperparams={
            "n_steps": 128,
            "batch_size": 256,
            "gae_lambda": 0.95,
            "gamma": 0.99,
            "n_epochs": 4,
            "ent_coef": 0.01,
            "learning_rate": 7e-4,
            "clip_range": 0.2,
            "policy_kwargs": {"lstm_hidden_size": 64, "net_arch": [64]},
        },
        total_timesteps=100_000,
        quick_timesteps=30_000,
        hyperparams_source="the study's own (RL Zoo has no RecurrentPPO MiniGrid entry)",
    )


def env_setup(
    env_id: str,
    *,
    algo: str | None = None,
    step_ms: float | None = None,
    timing: str | None = None,
) -> EnvSetup:
    """The :class:`EnvSetup` of a task (RL Zoo's hyperparameters where it has them).

    Args:
        env_id: A Gymnasium ID.
        algo: Override the algorithm (one of :data:`~fleetgym.experiments.calf.hyperparams.ALGOS`; default ``"recurrent-ppo"``
            for MiniGrid IDs, else ``"ppo"``). SAC and TD3 need a Box action space.
        step_ms: Override the control period.
        timing: The shims' timeline (:data:`~fleetgym.wrappers.timeline.TIMINGS`; default
            the shim's, ``"loop"``), for training, evaluation and the measured k and m.

    Raises:
        ValueError, TypeError: on a bad argument.
    """
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id: expected a Gymnasium ID, actual {env_id!r}")
    if algo is not None:
        check_choice("algo", algo, ALGOS)
    if step_ms is not None:
        step_ms = check_float("step_ms", step_ms, low=0.0, strict=True)
    if timing is not None:
        check_choice("timing", timing, TIMINGS)
    if env_id.startswith("MiniGrid") and algo in (None, "recurrent-ppo"):
        setup = _minigrid_setup(env_id)
    else:
        if not env_id.startswith("MiniGrid") and env_id not in gym.registry:
            raise ValueError(f"env_id: expected a registered Gymnasium ID, actual {env_id!r}")
        setup = _zoo_setup(env_id, algo or "ppo")
        if env_id.startswith("MiniGrid"):
            grid = _minigrid_setup(env_id)
            setup = dataclasses.replace(
                setup, step_ms=grid.step_ms, shim_kwargs=dict(grid.shim_kwargs)
            )
    if setup.algo in ("sac", "td3"):
        probe = setup.base_env()
        try:
            check_algo_fits(setup.algo, probe.action_space, env_id)
        finally:
            probe.close()
    changes: dict[str, Any] = {}
    if step_ms is not None:
        changes["step_ms"] = float(step_ms)
    if timing is not None:
        changes["shim_kwargs"] = {**setup.shim_kwargs, "timing": timing}
    return dataclasses.replace(setup, **changes) if changes else setup


@dataclass(frozen=True)
class InputLayout:
    """The policy's input: plain delivered observation, or the compensation stack.

    Args:
        compensated: Whether to build the compensation stack.
        history_length: k frames.
        action_history_length: m sent actions.
        compensation: Which stack (a value of
            :data:`~fleetgym.experiments.calf.conditions.COMPENSATIONS`).
        predictor: The learned predictor of ``"learned"`` (built per training seed).
        stall_features: Whether the age features carry the stall flag (k or m measured
            above :data:`~fleetgym.wrappers.HISTORY_CAP`, and capped to it).
        policy_slot: For the scheduled chunks: the
            :class:`~fleetgym.experiments.calf.predict.PolicySlot` through which the chunks
            are made by the policy trained or evaluated on this layout.
    """

    compensated: bool
    history_length: int = 1
    action_history_length: int = 0
    compensation: str = "history"
    predictor: Any = field(default=None, compare=False)
    stall_features: bool = False
    policy_slot: Any = field(default=None, compare=False)


def layout_for(regime: Regime, setup: EnvSetup, quantile: float = 0.99) -> InputLayout:
    """The input layout of a regime: k and m measured from its training network."""
    if not regime.compensated:
        return InputLayout(False)
    if regime.compensation.startswith("scheduled"):
        from fleetgym.experiments.calf.predict import PolicySlot

        return InputLayout(True, compensation=regime.compensation, policy_slot=PolicySlot())
    if regime.compensation not in ("history", "augmented"):
        return InputLayout(True, compensation=regime.compensation)
    cond = resolve_condition(regime.train_condition)
    period = cond.step_ms or setup.period_ms
    timing = {k: v for k, v in setup.shim_kwargs.items() if k == "timing"}
    kwargs = {**cond.shim_kwargs(), **timing}
    profile = kwargs.pop("profile", None)
    k = history_length_for_profile(profile, period, quantile, **kwargs)
    kwargs = {**cond.shim_kwargs(), **timing}
    profile = kwargs.pop("profile", None)
    m = history_length_for_profile(profile, period, quantile, path="round_trip", **kwargs)
    if regime.compensation == "augmented":
        k = 1
    # The library's cap (make_robust_env): a network that asks for more has stalls, and
    # the age features gain the stall flag instead.
    stall = k > HISTORY_CAP or m > HISTORY_CAP
    return InputLayout(
        True, min(k, HISTORY_CAP), min(m, HISTORY_CAP), regime.compensation, stall_features=stall
    )


def make_condition_env(
    setup: EnvSetup, condition: NetworkCondition, layout: InputLayout
) -> gym.Env[Any, Any]:
    """One env: the task behind ``condition``'s network, with ``layout``'s input stack."""
    from stable_baselines3.common.monitor import Monitor

    kwargs = dict(setup.shim_kwargs)
    kwargs.update(condition.shim_kwargs())
    kwargs["step_ms"] = condition.step_ms or setup.period_ms
    base = setup.base_env()
    if layout.compensated and layout.compensation not in ("history", "augmented"):
        env: gym.Env[Any, Any] = predictive_env(base, kwargs, layout)
    elif layout.compensated:
        profile = kwargs.pop("profile", None)
        step_ms = kwargs.pop("step_ms")
        env = make_robust_env(
            base,
            profile,
            compensation=HistoryCompensation(
                history_length=layout.history_length,
                action_history_length=layout.action_history_length,
                stall_features=layout.stall_features,
            ),
            step_ms=step_ms,
            shim=kwargs,
        )
    else:
        env = NetworkShimWrapper(base, **kwargs)
    return Monitor(env)


def vec_env(
    setup: EnvSetup, condition: NetworkCondition, layout: InputLayout, n_envs: int, seed: int
) -> Any:
    """``n_envs`` of :func:`make_condition_env` in an SB3 ``DummyVecEnv`` seeded with ``seed``."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    fns: list[Callable[[], gym.Env[Any, Any]]] = [
        (lambda: make_condition_env(setup, condition, layout)) for _ in range(n_envs)
    ]
    vec = DummyVecEnv(fns)
    vec.seed(seed)
    return vec
