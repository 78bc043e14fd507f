"""``fleetgym/NetShim-v0``: any Gymnasium ID under a :class:`NetworkShimWrapper`.

The entry point builds the inner env from its ID (registering ALE and MiniGrid IDs on first
use) and tells the shim which facts of the inner env's spec ``gym.make`` overwrites; the
shim itself is in :mod:`fleetgym.wrappers.network_shim`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from fleetgym.errors import MissingArgumentError
from fleetgym.extras import require
from fleetgym.validation import quote
from fleetgym.wrappers.network_shim import NetworkShimWrapper
from fleetgym.wrappers.profiles import NetworkProfile

__all__ = ["SHIM_ENV_ARGUMENTS", "make_network_shim_env"]

#: The arguments of ``fleetgym/NetShim-v0`` (for its missing-argument error and docs).
SHIM_ENV_ARGUMENTS = (
    "env_id (required: the Gymnasium ID to wrap, e.g. 'CartPole-v1' or 'ALE/Pong-v5')",
    "profile='wifi-degraded' (the default; a name from `fleetgym profiles`, a NetworkProfile "
    "or a list)",
    "env_kwargs=None (keywords for gym.make(env_id))",
    "step_ms=None (control period; inferred from dt/tau, ALE frameskip or render_fps)",
    "delivery='fifo'",
    "start_action=None",
    "uplink=None, downlink=None (explicit channels instead of a profile)",
    "copy_observations=False",
    "block_size=512",
    "timing='loop' (one period for the round trip; 'per-direction': a whole period each way)",
    "uplink_share=0.5 (the agent's phase: the share of the period left for the observation)",
    "info='train' (ages and profile only; 'full' adds true_obs, applied_action, counters)",
    "render_mode=None (passed to the inner env)",
)


def _ensure_registered(env_id: str) -> None:
    """Register the ALE (Atari) or MiniGrid IDs on first use, so ``import fleetgym`` stays
    light and a fresh process needs no ``import ale_py`` / ``import minigrid`` first."""
    if ":" in env_id or env_id in gym.registry:
        return  # gym.make imports the module of "module:ID" itself
    if env_id.startswith(("MiniGrid-", "BabyAI-")):
        require("minigrid", f"the env {env_id!r}")  # registers its IDs on import
        return
    if env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        gym.register_envs(require("ale_py", f"the env {env_id!r}"))


def make_network_shim_env(
    env_id: str | None = None,
    profile: str | NetworkProfile | Sequence[str | NetworkProfile] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    **wrapper_kwargs: Any,
) -> NetworkShimWrapper:
    """Entry point of ``fleetgym/NetShim-v0``: ``gym.make(env_id, **env_kwargs)`` under a shim.

    ``render_mode`` goes to the inner env; every other keyword goes to
    :class:`NetworkShimWrapper`. ``profile`` defaults to
    :data:`~fleetgym.wrappers.profiles.DEFAULT_PROFILE` (``"wifi-degraded"``) unless
    ``uplink``/``downlink`` channels are given instead. ALE (Atari) and MiniGrid IDs need no
    ``import ale_py`` / ``import minigrid`` first.

    Args:
        env_id: The Gymnasium ID of the env to wrap (required; ``None`` raises the
            missing-argument error that lists these arguments).
        profile: A profile name, a NetworkProfile, or a sequence of them (one drawn per
            episode); None: the default profile, as above.
        env_kwargs: Keyword arguments of ``gym.make(env_id, ...)`` (default none).
        **wrapper_kwargs: :class:`NetworkShimWrapper` keyword arguments (``step_ms``,
            ``delivery``, ``uplink``, ...), and ``render_mode``, which goes to the inner
            env.

    Example:
        >>> import gymnasium as gym, fleetgym
        >>> env = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile="ethernet")
        >>> obs, info = env.reset(seed=0)
        >>> info["profile"], obs.shape, env.spec.reward_threshold, env.spec.max_episode_steps
        ('ethernet', (4,), 475.0, 500)

    Raises:
        MissingArgumentError: If ``env_id`` is not given (the message lists the arguments).
        TypeError: If ``env_id`` is not a str or ``env_kwargs`` not a dict.
    """
    if env_id is None:
        listing = "\n  ".join(SHIM_ENV_ARGUMENTS)
        raise MissingArgumentError(
            "env_id: expected the Gymnasium ID of the env to wrap, actual none given. "
            "fleetgym/NetShim-v0 takes:\n  "
            f"{listing}\n"
            "e.g. gym.make('fleetgym/NetShim-v0', env_id='CartPole-v1', profile='wifi-normal'). "
            "For tools that make envs from an ID alone (the RL Zoo's evaluation env), "
            "fleetgym.register_shim_env(env_id, profile) registers an ID that needs no arguments"
        )
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id: expected a non-empty str, actual {quote(env_id)}")
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise TypeError(f"env_kwargs: expected a dict or None, actual {type(env_kwargs).__name__}")
    inner_kwargs = dict(env_kwargs or {})
    if "render_mode" in wrapper_kwargs:
        inner_kwargs["render_mode"] = wrapper_kwargs.pop("render_mode")
    _ensure_registered(env_id)
    env = gym.make(env_id, **inner_kwargs)
    # Read before gym.make replaces the inner spec with the shim's (and without touching
    # env.spec, which wrappers cache).
    inner_spec = env.unwrapped.spec
    shim = NetworkShimWrapper(env, profile=profile, **wrapper_kwargs)
    shim._inner_env_from_entry_point = True
    shim._inner_reward_threshold = None if inner_spec is None else inner_spec.reward_threshold
    layer: Any = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, gym.wrappers.TimeLimit):
            shim._inner_max_episode_steps = layer._max_episode_steps
            break
        layer = layer.env
    return shim
