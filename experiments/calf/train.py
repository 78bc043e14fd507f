"""Training one CALF policy under a regime's network: SB3 PPO, SAC or TD3, or sb3-contrib's
RecurrentPPO; and the clean policies other commands reuse (:func:`clean_policy`, cached)."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgym.experiments.calf.conditions import Regime, regime_by_name, resolve_condition
from fleetgym.experiments.calf.hyperparams import build_kwargs
from fleetgym.experiments.calf.predict import learned_predictor
from fleetgym.experiments.calf.setup import EnvSetup, InputLayout, layout_for, vec_env
from fleetgym.validation import check_int

__all__ = [
    "CLEAN_POLICY_CACHE",
    "TrainedPolicy",
    "algo_class",
    "clean_policy",
    "policy_layout",
    "train_regime",
]

#: Where :func:`clean_policy` keeps the clean policies it trained (one zip per env,
#: algorithm, seed and budget).
CLEAN_POLICY_CACHE = Path("fleetgym-out/calf/policies")


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


def algo_class(algo: str) -> Any:
    """The SB3 / sb3-contrib class of ``algo`` (``ppo``, ``sac``, ``td3``, ``recurrent-ppo``)."""
    if algo == "recurrent-ppo":
        from sb3_contrib import RecurrentPPO

        return RecurrentPPO
    import stable_baselines3

    return {
        "ppo": stable_baselines3.PPO,
        "sac": stable_baselines3.SAC,
        "td3": stable_baselines3.TD3,
    }[algo]


def policy_layout(
    setup: EnvSetup, regime: Regime, seed: int, quantile: float = 0.99
) -> InputLayout:
    """:func:`layout_for`, with the learned predictor of ``+predict`` fitted for ``seed``."""
    layout = layout_for(regime, setup, quantile)
    if layout.compensation.startswith("learned") or layout.compensation == "scheduled-learned":
        layout = dataclasses.replace(layout, predictor=learned_predictor(setup, seed))
    return layout


def train_regime(
    setup: EnvSetup,
    regime: Regime,
    seed: int,
    total_timesteps: int,
    *,
    n_envs: int | None = None,
    quantile: float = 0.99,
    device: str = "cpu",
) -> TrainedPolicy:
    """Trains one policy in one regime.

    Args:
        setup: The task.
        regime: The regime.
        seed: Seed of the model and of the envs' reset (hence of the packet schedules).
        total_timesteps: Environment steps.
        n_envs: Parallel envs (in-process DummyVecEnv: the shim's cost is per step);
            default the setup's (RL Zoo's, else 8 on-policy and 1 off-policy).
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
    count = setup.n_envs if n_envs is None else check_int("n_envs", n_envs, low=1)
    vec = vec_env(setup, condition, layout, count, seed=seed * 1000)
    params = build_kwargs(setup.hyperparams, vec.action_space)
    policy = "MlpLstmPolicy" if setup.algo == "recurrent-ppo" else "MlpPolicy"
    model: Any = algo_class(setup.algo)(policy, vec, seed=seed, device=device, verbose=0, **params)
    if layout.policy_slot is not None:  # the scheduled chunks are the model's own plans
        layout.policy_slot.model = model
    # No outputs: SB3's default logger would create a dated folder in the temp dir per run.
    model.set_logger(Logger(folder=None, output_formats=[]))
    start = time.perf_counter()
    model.learn(total_timesteps=total_timesteps)
    wall = time.perf_counter() - start
    vec.close()
    return TrainedPolicy(regime, seed, layout, model, int(model.num_timesteps), wall)


def clean_policy(
    setup: EnvSetup,
    seed: int,
    total_timesteps: int,
    *,
    cache: str | os.PathLike[str] | None = CLEAN_POLICY_CACHE,
) -> tuple[Any, bool]:
    """The clean baseline of ``setup`` (trained without a network, regime ``baseline``),
    loaded from ``cache`` when trained before; returns ``(model, loaded)``.

    The file is ``<cache>/<env>_<algo>_seed<S>_<steps>.zip``; ``cache=None`` trains
    without keeping it.
    """
    path = None
    if cache is not None:
        name = setup.env_id.replace("/", "-")
        path = Path(cache) / f"{name}_{setup.algo}_seed{seed}_{total_timesteps}.zip"
        if path.exists():
            return algo_class(setup.algo).load(path, device="cpu"), True
    trained = train_regime(setup, regime_by_name("baseline"), seed, total_timesteps)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        trained.model.save(path)
    return trained.model, False
