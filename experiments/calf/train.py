"""Training one CALF policy: SB3 PPO or sb3-contrib RecurrentPPO under a regime's network."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetgym.experiments.calf.conditions import Regime, resolve_condition
from fleetgym.experiments.calf.predict import learned_predictor
from fleetgym.experiments.calf.setup import EnvSetup, InputLayout, layout_for, vec_env
from fleetgym.validation import check_int

__all__ = ["TrainedPolicy", "policy_layout", "train_regime"]


@dataclass
class TrainedPolicy:
    """A trained policy with everything needed to evaluate it.

    Args:
        regime: The regime it was trained in.
        seed: Training seed.
        layout: Its input layout.
        model: The SB3 / sb3-contrib model.
        timesteps: Environment steps trained.
        wall_s: Training wall time (noisy on a shared machine).
    """

    regime: Regime
    seed: int
    layout: InputLayout
    model: Any
    timesteps: int
    wall_s: float


def _linear(initial: float) -> Callable[[float], float]:
    # Written out rather than SB3's get_linear_fn, which computes the same value with a
    # different sequence of float operations (and so moves the seeded results).
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule


def policy_layout(
    setup: EnvSetup, regime: Regime, seed: int, quantile: float = 0.99
) -> InputLayout:
    """:func:`layout_for`, with the learned predictor of ``+predict`` fitted for ``seed``."""
    layout = layout_for(regime, setup, quantile)
    if layout.compensation.startswith("learned"):
        layout = dataclasses.replace(layout, predictor=learned_predictor(setup, seed))
    return layout


def train_regime(
    setup: EnvSetup,
    regime: Regime,
    seed: int,
    total_timesteps: int,
    *,
    n_envs: int = 8,
    quantile: float = 0.99,
    device: str = "cpu",
) -> TrainedPolicy:
    """Trains one policy in one regime.

    Args:
        setup: The task.
        regime: The regime.
        seed: Seed of the model and of the envs' reset (hence of the packet schedules).
        total_timesteps: Environment steps.
        n_envs: Parallel envs (in-process DummyVecEnv: the shim's cost is per step).
        quantile: Staleness quantile for the compensation lengths.
        device: Torch device.

    Returns:
        The trained policy.

    Raises:
        ValueError, TypeError: on a bad argument.
    """
    import torch
    from stable_baselines3.common.logger import Logger

    total_timesteps = check_int("total_timesteps", total_timesteps, low=1)
    seed = check_int("seed", seed, low=0)
    torch.set_num_threads(1)
    layout = policy_layout(setup, regime, seed, quantile)
    condition = resolve_condition(regime.train_condition)
    vec = vec_env(setup, condition, layout, n_envs, seed=seed * 1000)
    params = dict(setup.hyperparams)
    for key in ("learning_rate", "clip_range"):
        value = params.get(key)
        if isinstance(value, tuple) and value[0] == "lin":
            params[key] = _linear(float(value[1]))
    if setup.algo == "ppo":
        from stable_baselines3 import PPO

        model: Any = PPO("MlpPolicy", vec, seed=seed, device=device, verbose=0, **params)
    else:
        from sb3_contrib import RecurrentPPO

        model = RecurrentPPO("MlpLstmPolicy", vec, seed=seed, device=device, verbose=0, **params)
    # No outputs: SB3's default logger would create a dated folder in the temp dir per run.
    model.set_logger(Logger(folder=None, output_formats=[]))
    start = time.perf_counter()
    model.learn(total_timesteps=total_timesteps)
    wall = time.perf_counter() - start
    vec.close()
    return TrainedPolicy(regime, seed, layout, model, int(model.num_timesteps), wall)
