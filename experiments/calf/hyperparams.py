"""The training algorithms of ``fleetgym calf`` and their hyperparameters.

``--algo`` takes SB3's PPO, SAC and TD3 and sb3-contrib's RecurrentPPO. For the envs the
docs use, the hyperparameters are RL Baselines3 Zoo's tuned ones
(``hyperparams/<algo>.yml`` of DLR-RM/rl-baselines3-zoo; :data:`ZOO`), copied as plain
values; for any other env the algorithm's SB3 defaults apply. Two things of the Zoo's
recipes are not carried over, and the report says which apply: its ``normalize``
(VecNormalize of observations and rewards; the shim's observations are not normalised here)
and its training budgets (``n_timesteps``; ``--timesteps`` sets the budget). The
RecurrentPPO entries of CartPole, Pendulum and MountainCarContinuous are the Zoo's for the
velocity-free variants of those envs (``CartPoleNoVel-v1``, ...), the closest it has.

A value ``("lin", x)`` is a linear schedule from ``x`` to 0 (the Zoo's ``lin_x``); an
``action_noise`` ``("normal", s)`` / ``("ornstein-uhlenbeck", s)`` is the Zoo's
``noise_type`` / ``noise_std``, built for the action space at training time;
``activation_fn`` ``"relu"`` is ``torch.nn.ReLU``.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import gymnasium as gym

__all__ = ["ALGOS", "CONTINUOUS_ALGOS", "ZOO", "check_algo_fits", "zoo_hyperparams"]

#: The training algorithms: SB3 PPO, SAC, TD3 and sb3-contrib's RecurrentPPO.
ALGOS: tuple[str, ...] = ("ppo", "sac", "td3", "recurrent-ppo")
#: The algorithms that need a continuous (Box) action space.
CONTINUOUS_ALGOS: tuple[str, ...] = ("sac", "td3")

_HOPPER_PPO: dict[str, Any] = {
    "n_envs": 1,
    "batch_size": 32,
    "n_steps": 512,
    "gamma": 0.999,
    "learning_rate": 9.80828e-05,
    "ent_coef": 0.00229519,
    "clip_range": 0.2,
    "n_epochs": 5,
    "gae_lambda": 0.99,
    "max_grad_norm": 0.7,
    "vf_coef": 0.835671,
    "policy_kwargs": {
        "log_std_init": -2,
        "ortho_init": False,
        "activation_fn": "relu",
        "net_arch": {"pi": [256, 256], "vf": [256, 256]},
    },
}
_LSTM_KWARGS: dict[str, Any] = {
    "ortho_init": False,
    "activation_fn": "relu",
    "lstm_hidden_size": 64,
    "enable_critic_lstm": True,
    "net_arch": {"pi": [64], "vf": [64]},
}

#: (algo, env name without version) -> (the Zoo's entry it comes from, its values, whether
#: the Zoo normalises the env). Values are keyword arguments of the SB3 class, plus
#: ``n_envs`` (parallel envs) and ``action_noise``.
ZOO: dict[tuple[str, str], tuple[str, dict[str, Any], bool]] = {
    ("ppo", "CartPole"): (
        "ppo.yml CartPole-v1",
        {
            "n_envs": 8,
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": ("lin", 1e-3),
            "clip_range": ("lin", 0.2),
        },
        False,
    ),
    ("ppo", "Pendulum"): (
        "ppo.yml Pendulum-v1",
        {
            "n_envs": 4,
            "n_steps": 1024,
            "gae_lambda": 0.95,
            "gamma": 0.9,
            "n_epochs": 10,
            "ent_coef": 0.0,
            "learning_rate": 1e-3,
            "clip_range": 0.2,
            "use_sde": True,
            "sde_sample_freq": 4,
        },
        False,
    ),
    ("ppo", "MountainCarContinuous"): (
        "ppo.yml MountainCarContinuous-v0",
        {
            "n_envs": 1,
            "batch_size": 256,
            "n_steps": 8,
            "gamma": 0.9999,
            "learning_rate": 7.77e-05,
            "ent_coef": 0.00429,
            "clip_range": 0.1,
            "n_epochs": 10,
            "gae_lambda": 0.9,
            "max_grad_norm": 5,
            "vf_coef": 0.19,
            "use_sde": True,
            "policy_kwargs": {"log_std_init": -3.29, "ortho_init": False},
        },
        True,
    ),
    ("ppo", "Hopper"): ("ppo.yml Hopper-v4", _HOPPER_PPO, True),
    ("sac", "Pendulum"): ("sac.yml Pendulum-v1", {"n_envs": 1, "learning_rate": 1e-3}, False),
    ("sac", "MountainCarContinuous"): (
        "sac.yml MountainCarContinuous-v0",
        {
            "n_envs": 1,
            "learning_rate": 3e-4,
            "buffer_size": 50_000,
            "batch_size": 512,
            "ent_coef": 0.1,
            "train_freq": 32,
            "gradient_steps": 32,
            "gamma": 0.9999,
            "tau": 0.01,
            "learning_starts": 0,
            "use_sde": True,
            "policy_kwargs": {"log_std_init": -3.67, "net_arch": [64, 64]},
        },
        False,
    ),
    ("sac", "Hopper"): ("sac.yml Hopper-v3", {"n_envs": 1, "learning_starts": 10_000}, False),
    ("td3", "Pendulum"): (
        "td3.yml Pendulum-v0",
        {
            "n_envs": 1,
            "gamma": 0.98,
            "buffer_size": 200_000,
            "learning_starts": 10_000,
            "action_noise": ("normal", 0.1),
            "gradient_steps": -1,
            "train_freq": (1, "episode"),
            "learning_rate": 1e-3,
            "policy_kwargs": {"net_arch": [400, 300]},
        },
        False,
    ),
    ("td3", "MountainCarContinuous"): (
        "td3.yml MountainCarContinuous-v0",
        {"n_envs": 1, "action_noise": ("ornstein-uhlenbeck", 0.5)},
        False,
    ),
    ("recurrent-ppo", "CartPole"): (
        "ppo_lstm.yml CartPoleNoVel-v1",
        {
            "n_envs": 8,
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": ("lin", 1e-3),
            "clip_range": ("lin", 0.2),
            "policy_kwargs": _LSTM_KWARGS,
        },
        True,
    ),
    ("recurrent-ppo", "Pendulum"): (
        "ppo_lstm.yml PendulumNoVel-v1",
        {
            "n_envs": 4,
            "n_steps": 1024,
            "gae_lambda": 0.95,
            "gamma": 0.9,
            "n_epochs": 10,
            "ent_coef": 0.0,
            "learning_rate": 1e-3,
            "clip_range": 0.2,
            "use_sde": True,
            "sde_sample_freq": 4,
            "policy_kwargs": _LSTM_KWARGS,
        },
        True,
    ),
    ("recurrent-ppo", "MountainCarContinuous"): (
        "ppo_lstm.yml MountainCarContinuousNoVel-v0",
        {
            "n_envs": 8,
            "batch_size": 256,
            "n_steps": 1024,
            "gamma": 0.9999,
            "learning_rate": 7.77e-05,
            "ent_coef": 0.00429,
            "clip_range": 0.1,
            "n_epochs": 10,
            "gae_lambda": 0.9,
            "max_grad_norm": 5,
            "vf_coef": 0.19,
            "use_sde": True,
            "sde_sample_freq": 8,
            "policy_kwargs": {
                "log_std_init": 0.0,
                "ortho_init": False,
                "lstm_hidden_size": 32,
                "enable_critic_lstm": True,
                "net_arch": {"pi": [64], "vf": [64]},
            },
        },
        True,
    ),
    ("recurrent-ppo", "Hopper"): ("ppo_lstm.yml Hopper-v3", _HOPPER_PPO, True),
}

#: Parallel envs when the Zoo gives none: 8 for the on-policy algorithms (the study's),
#: 1 for SAC and TD3 (SB3's one-env default).
DEFAULT_N_ENVS: dict[str, int] = {"ppo": 8, "recurrent-ppo": 8, "sac": 1, "td3": 1}


def _env_name(env_id: str) -> str:
    """``Hopper-v5`` -> ``Hopper``; ``ALE/Pong-v5`` -> ``ALE/Pong``."""
    return re.sub(r"-v\d+$", "", env_id)


def zoo_hyperparams(algo: str, env_id: str) -> tuple[dict[str, Any], int, str]:
    """``(keyword arguments, n_envs, source)`` of ``algo`` on ``env_id``.

    The source says where the values come from: ``"RL Zoo <file> <entry>"`` (plus
    ``"; without its VecNormalize"`` where the Zoo normalises), or ``"SB3 defaults"``.

    Example:
        >>> kwargs, n_envs, source = zoo_hyperparams("sac", "Pendulum-v1")
        >>> kwargs, n_envs, source
        ({'learning_rate': 0.001}, 1, 'RL Zoo sac.yml Pendulum-v1')
        >>> zoo_hyperparams("td3", "Hopper-v5")[2]
        'SB3 defaults'
    """
    entry = ZOO.get((algo, _env_name(env_id)))
    if entry is None:
        return {}, DEFAULT_N_ENVS[algo], "SB3 defaults"
    where, values, normalized = entry
    kwargs = copy.deepcopy(values)
    n_envs = int(kwargs.pop("n_envs", DEFAULT_N_ENVS[algo]))
    source = f"RL Zoo {where}" + ("; without its VecNormalize" if normalized else "")
    return kwargs, n_envs, source


def check_algo_fits(algo: str, action_space: gym.Space[Any], env_id: str) -> None:
    """Raise ValueError when ``algo`` cannot act in ``action_space`` (SAC on Discrete)."""
    if algo in CONTINUOUS_ALGOS and not isinstance(action_space, gym.spaces.Box):
        raise ValueError(
            f"algo: expected ppo or recurrent-ppo for {env_id}'s "
            f"{type(action_space).__name__} action space ({algo} needs a continuous Box "
            f"action space), actual {algo!r}"
        )


def build_kwargs(params: dict[str, Any], action_space: gym.Space[Any]) -> dict[str, Any]:
    """The SB3 keyword arguments of a table entry: schedules, action noise and activation
    functions turned into objects."""
    import numpy as np

    out = copy.deepcopy(params)
    for key in ("learning_rate", "clip_range"):
        value = out.get(key)
        if isinstance(value, tuple) and value[0] == "lin":
            out[key] = _linear(float(value[1]))
    noise = out.pop("action_noise", None)
    if noise is not None:
        from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

        kind, std = noise
        dims = int(np.prod(action_space.shape or (1,)))
        cls = NormalActionNoise if kind == "normal" else OrnsteinUhlenbeckActionNoise
        out["action_noise"] = cls(np.zeros(dims), float(std) * np.ones(dims))
    policy_kwargs = out.get("policy_kwargs")
    if isinstance(policy_kwargs, dict) and policy_kwargs.get("activation_fn") == "relu":
        import torch

        out["policy_kwargs"] = {**policy_kwargs, "activation_fn": torch.nn.ReLU}
    return out


def _linear(initial: float) -> Any:
    # Written out rather than SB3's get_linear_fn, which computes the same value with a
    # different sequence of float operations (and so moves the seeded results).
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule
